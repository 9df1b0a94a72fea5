// ctgraph/checkpoint.hpp: training checkpoints that resume exactly.
//
// One .npz file holds everything a run needs to go on as if it had never stopped:
//   <name>                      every parameter, under its own name (so npz::load(store, path, true)
//                               and numpy.load read the weights of a checkpoint directly)
//   optim/<state>/<name>        the optimizer's state per parameter (sgd: momentum; adam: m, v)
//   meta/optimizer, meta/steps  the optimizer's kind (as text) and step count
//   run/...                     the run: step, epoch, batch within the epoch, the epoch's sample order,
//                               the shuffling generator's state, dropout's seed and pass count
//   counter/<name>              the caller's own numbers (the trainer keeps early stopping's here)
//
//   ctg::checkpoint::save(path, store, opt, run);     // atomic: a crash leaves the previous file
//   ctg::run_state run = ctg::checkpoint::load(path, store, opt);
//   ctg::checkpoint::load_weights(path, store);       // the parameters only (inference)
//
// save() writes through npz::write: a temporary file in the same directory, fsynced, renamed over
// the old one, so a process killed at any moment leaves either the previous checkpoint or the new
// one (tested by killing a writer with SIGKILL at many points). load() is all-or-nothing: every
// name, shape and dtype is checked and everything converted first; a checkpoint that disagrees with
// the store or the optimizer throws io_error naming the first difference and changes nothing.
#pragma once
#include <cstdint>
#include <cstring>
#include <map>
#include <sstream>
#include <string>
#include <string_view>
#include <vector>

#include "ctgraph/error.hpp"
#include "ctgraph/memory.hpp"
#include "ctgraph/npz.hpp"
#include "ctgraph/params.hpp"

namespace ctg {

/// The state of a training run besides its parameters and optimizer.
struct run_state {
    long step = 0;                      // steps taken (a schedule's position)
    long epoch = 0;                     // epochs begun
    long batch_in_epoch = 0;            // batches of the current epoch already trained
    std::vector<std::int64_t> order{};  // the current epoch's sample order
    std::string shuffle_rng{};          // the shuffling generator (std::mt19937_64 as text)
    std::uint64_t dropout_seed = 0, dropout_passes = 0;
    std::map<std::string, double> counters{};  // the caller's own
};

namespace checkpoint {

namespace detail {
inline constexpr std::string_view reserved[] = {"optim/", "meta/", "run/", "counter/"};
inline bool is_reserved(std::string_view name) {
    for (auto p : reserved)
        if (name.starts_with(p)) return true;
    return false;
}
inline npz::array text(std::string name, const std::string& s) {
    std::vector<std::int32_t> v(s.begin(), s.end());
    return npz::from_data(std::move(name), v.data(), {v.size()});
}
inline npz::array integers(std::string name, const std::vector<std::int64_t>& v) {
    return npz::from_data(std::move(name), v.data(), {v.size()});
}
inline std::int64_t as_int64(std::uint64_t v) {
    std::int64_t r;
    std::memcpy(&r, &v, sizeof r);
    return r;
}
inline std::uint64_t as_uint64(std::int64_t v) {
    std::uint64_t r;
    std::memcpy(&r, &v, sizeof r);
    return r;
}

/// The archive of a checkpoint with lookups that throw naming the file and the entry.
struct reader {
    std::string path;
    std::map<std::string, npz::array> file;

    [[noreturn]] void fail(const std::string& what) const {
        throw io_error("ctg::checkpoint::load: '" + path + "': " + what);
    }
    const npz::array& get(const std::string& name) const {
        const auto it = file.find(name);
        if (it == file.end()) fail("no array '" + name + "' (not a checkpoint of this run?)");
        return it->second;
    }
    std::vector<std::int64_t> integers(const std::string& name) const { return npz::to_vector<std::int64_t>(get(name)); }
    std::int64_t integer(const std::string& name) const {
        const auto v = integers(name);
        if (v.size() != 1) fail("'" + name + "' holds " + std::to_string(v.size()) + " values, not one");
        return v[0];
    }
    std::string text(const std::string& name) const {
        const auto v = npz::to_vector<std::int32_t>(get(name));
        std::string s;
        for (auto c : v) {
            if (c < 0 || c > 255) fail("'" + name + "' is not text");
            s += char(c);
        }
        return s;
    }
    /// The array `name` as T, after checking its dtype and shape against a parameter's.
    template <class T>
    std::vector<T> tensor(const std::string& name, const rshape& shape, const std::string& what) const {
        const npz::array& a = get(name);
        const char* want = std::is_same_v<T, float> ? "<f4" : "<f8";
        if (a.descr != want)
            fail(what + " '" + name + "' has dtype " + a.descr + " in the file but the store holds " + want);
        if (a.shape != shape.to_vector())
            fail(what + " '" + name + "' has shape " + npz::detail::shape_string(a.shape) + " in the file but " +
                 to_string(shape) + " in the store");
        return npz::to_vector<T>(a);
    }
    /// Every parameter of the store, converted (and no parameter the store lacks).
    template <class T>
    std::vector<std::vector<T>> parameters(const parameter_store<T>& store) const {
        std::vector<std::vector<T>> values(store.size());
        for (std::size_t s = 0; s < store.size(); ++s)
            values[s] = tensor<T>(store.at(s).name, store.at(s).shape, "parameter");
        for (const auto& [name, a] : file)
            if (!is_reserved(name) && store.find(name) < 0)
                fail("parameter '" + name + "' is in the file but not in the store");
        return values;
    }
};
}  // namespace detail

/// Saves the parameters, the optimizer's state and the run's state to `path` (atomically).
template <class T, class Optimizer>
void save(const std::string& path, const parameter_store<T>& store, Optimizer& opt, const run_state& run) {
    static_assert(std::is_same_v<T, float> || std::is_same_v<T, double>, "ctg::checkpoint::save: float or double store");
    std::vector<npz::array> arrays;
    std::vector<T> zeros;
    for (std::size_t s = 0; s < store.size(); ++s) {
        const auto& e = store.at(s);
        if (detail::is_reserved(e.name))
            throw error("ctg::checkpoint::save: parameter '" + e.name + "' has a name reserved for checkpoints");
        arrays.push_back(npz::from_data(e.name, store.value(s), e.shape.to_vector()));
    }
    opt.for_each_state([&](const char* state, const aligned_vector<T>& v) {
        if (!v.empty() && v.size() != store.values().size())
            throw error(std::string("ctg::checkpoint::save: the optimizer's state '") + state +
                        "' was sized for another parameter store");
        for (std::size_t s = 0; s < store.size(); ++s) {
            const auto& e = store.at(s);
            const T* data = v.data() + e.offset;
            if (v.empty()) zeros.assign(e.shape.size(), T(0)), data = zeros.data();  // before the first step
            arrays.push_back(npz::from_data("optim/" + std::string(state) + "/" + e.name, data, e.shape.to_vector()));
        }
    });
    arrays.push_back(detail::text("meta/optimizer", Optimizer::kind));
    arrays.push_back(detail::integers("meta/steps", {opt.steps()}));
    arrays.push_back(detail::integers("run/position", {run.step, run.epoch, run.batch_in_epoch}));
    arrays.push_back(detail::integers("run/order", run.order));
    arrays.push_back(detail::text("run/shuffle_rng", run.shuffle_rng));
    arrays.push_back(detail::integers("run/dropout", {detail::as_int64(run.dropout_seed), detail::as_int64(run.dropout_passes)}));
    for (const auto& [name, value] : run.counters) arrays.push_back(npz::from_data("counter/" + name, &value, {1}));
    npz::write(path, arrays);
}

/// Loads a checkpoint written by save() into the store and the optimizer; returns the run's state.
/// Every parameter of the store must be in the file with the same shape and dtype, and no other;
/// the optimizer must be of the same kind. All-or-nothing.
template <class T, class Optimizer>
run_state load(const std::string& path, parameter_store<T>& store, Optimizer& opt) {
    static_assert(std::is_same_v<T, float> || std::is_same_v<T, double>, "ctg::checkpoint::load: float or double store");
    detail::reader r{path, npz::read(path)};
    // Check and convert everything first.
    const auto values = r.template parameters<T>(store);
    const std::string kind = r.text("meta/optimizer");
    if (kind != Optimizer::kind)
        r.fail("the checkpoint's optimizer is '" + kind + "', this run's is '" + Optimizer::kind + "'");
    std::vector<std::pair<aligned_vector<T>*, aligned_vector<T>>> states;
    opt.for_each_state([&](const char* state, aligned_vector<T>& v) {
        aligned_vector<T> staged(store.values().size(), T(0));
        for (std::size_t s = 0; s < store.size(); ++s) {
            const auto& e = store.at(s);
            const auto t = r.template tensor<T>("optim/" + std::string(state) + "/" + e.name, e.shape, "optimizer state");
            std::copy(t.begin(), t.end(), staged.begin() + long(e.offset));
        }
        states.emplace_back(&v, std::move(staged));
    });
    const std::int64_t steps = r.integer("meta/steps");
    const auto position = r.integers("run/position");
    const auto dropout = r.integers("run/dropout");
    if (position.size() != 3 || dropout.size() != 2) r.fail("run/position or run/dropout has the wrong length");
    run_state run{position[0], position[1], position[2], r.integers("run/order"), r.text("run/shuffle_rng"),
                  detail::as_uint64(dropout[0]), detail::as_uint64(dropout[1]), {}};
    for (const auto& [name, a] : r.file)
        if (name.starts_with("counter/")) {
            const auto v = npz::to_vector<double>(a);
            if (v.size() != 1) r.fail("'" + name + "' holds " + std::to_string(v.size()) + " values, not one");
            run.counters[name.substr(8)] = v[0];
        }
    // Commit.
    for (std::size_t s = 0; s < store.size(); ++s) std::copy(values[s].begin(), values[s].end(), store.value(s));
    for (auto& [dst, staged] : states) *dst = std::move(staged);
    opt.set_steps(long(steps));
    return run;
}

/// Loads only the parameters of a checkpoint (or of any .npz of parameters), for inference: every
/// parameter of the store must be there with its shape and dtype, and no other parameter (the
/// optimizer's and the run's arrays are skipped). All-or-nothing.
template <class T>
void load_weights(const std::string& path, parameter_store<T>& store) {
    detail::reader r{path, npz::read(path)};
    const auto values = r.template parameters<T>(store);
    for (std::size_t s = 0; s < store.size(); ++s) std::copy(values[s].begin(), values[s].end(), store.value(s));
}

}  // namespace checkpoint
}  // namespace ctg
