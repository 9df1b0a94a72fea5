// ctgraph/checkpoint.hpp: training checkpoints that resume exactly.
//
// One .npz file holds everything a run needs to go on as if it had never stopped:
//   <name>                      every parameter, under its own name (so npz::load(store, path, true)
//                               and numpy.load read the weights of a checkpoint directly)
//   optim/<state>/<name>        the optimizer's state per parameter (sgd: momentum; adam: m, v)
//   meta/optimizer, meta/steps  the optimizer's kind (as text) and step count
//   run/position                step, epoch, batches done in the epoch (int64)
//   run/order, run/shuffle_rng  the epoch's sample order, the shuffling generator's state (as text)
//   run/dropout                 dropout's seed and pass count
//   run/flags                   evaluated after the last step; finished (every step done, or
//                               stopped); stopped (early stop, or the evaluation hook)
//   run/history                 the evaluations so far: (n, 6) float64 rows of step, epoch,
//                               training loss, metric, learning rate, seconds
//   run/progress                the training-loss sum and sample count since the last evaluation,
//                               samples trained, seconds elapsed (float64)
//   run/config/<field>          what defines the run (batch, epochs, schedule, data sizes, ...), as
//                               text; the trainer refuses to resume with a different value
//   counter/<name>              the caller's own numbers (the trainer keeps early stopping's here)
//
//   ctg::checkpoint::save(path, store, opt, run);     // atomic: a crash leaves the previous file
//   ctg::run_state run = ctg::checkpoint::load(path, store, opt);
//   auto s = ctg::checkpoint::read(path, store, opt); // check and stage: nothing changes yet
//   ctg::checkpoint::commit(s, store, opt);           // apply a staged checkpoint (cannot fail halfway)
//   ctg::checkpoint::load_weights(path, store);       // the parameters only (inference)
//   ctg::checkpoint::latest(dir, name);               // the newest checkpoint of a run, if any
//
// save() writes through npz::write: a temporary file in the same directory, fsynced, renamed over
// the old one, so a process killed at any moment leaves either the previous checkpoint or the new
// one (tested by killing a writer with SIGKILL at many points); it first removes the temporaries of
// the same file left by writers that were killed (binary_file::remove_stale_temporaries). load() is
// read() then commit(): read() checks every name, shape and dtype and converts everything; a
// checkpoint that disagrees with the store or the optimizer throws io_error naming the first
// difference and changes nothing. Files written before run/flags, run/history, run/progress and
// run/config existed load with those empty (not finished, no history, no configuration record);
// ctg::trainer refuses to resume them, since it cannot check their configuration.
//
// Step-numbered checkpoints (the trainer's keep_last): "<name>-step00000042.npz", eight digits or
// more, so names sort by step up to 99,999,999; latest() compares the numbers, not the names.
#pragma once
#include <algorithm>
#include <array>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <map>
#include <optional>
#include <sstream>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include <fcntl.h>
#include <unistd.h>

#include "ctgraph/binary_file.hpp"
#include "ctgraph/error.hpp"
#include "ctgraph/memory.hpp"
#include "ctgraph/npz.hpp"
#include "ctgraph/params.hpp"
#include "ctgraph/paths.hpp"

namespace ctg {

/// One evaluation of a training run: the trainer's history and its `<name>_loss.csv` rows.
struct history_row {
    /// @{ the step and the epoch at the evaluation
    long step = 0, epoch = 0;
    /// @}
    /// @{ the mean training loss since the last evaluation, the validation metric, the learning
    /// rate, and the training time so far in seconds
    double train_loss = 0, metric = 0, lr = 0, seconds = 0;
    /// @}
    bool operator==(const history_row&) const = default;  ///< every field equal
};

/// The state of a training run besides its parameters and optimizer.
struct run_state {
    long step = 0;                      ///< steps taken (a schedule's position)
    long epoch = 0;                     ///< epochs begun
    long batch_in_epoch = 0;            ///< batches of the current epoch already trained
    std::vector<std::int64_t> order{};  ///< the current epoch's sample order
    std::string shuffle_rng{};          ///< the shuffling generator (std::mt19937_64 as text)
    /// @{ dropout's seed and the forward passes drawn from it (program::dropout_state)
    std::uint64_t dropout_seed = 0, dropout_passes = 0;
    /// @}
    std::map<std::string, double> counters{};  ///< the caller's own
    bool evaluated_last = false;        ///< the last step taken was followed by an evaluation
    bool finished = false;              ///< every step done, or stopped
    bool stopped = false;               ///< stopped before the last step (early stop, the hook)
    std::vector<history_row> history{};  ///< every evaluation so far
    /// @{ the training loss times samples, and the samples, since the last evaluation
    double loss_sum = 0, loss_samples = 0;
    /// @}
    double samples_done = 0;            ///< samples trained
    double seconds = 0;                 ///< training time so far
    std::map<std::string, std::string> config{};  ///< what defines the run, by field (run/config/...)
};

/// Training checkpoints: weights, optimizer state, the run's position, generators and history in
/// one `.npz` (docs/checkpoints.md).
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
    std::vector<double> reals(const std::string& name) const {
        const npz::array& a = get(name);
        if (a.descr != "<f8") fail("'" + name + "' has dtype " + a.descr + ", not <f8");
        return npz::to_vector<double>(a);
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
        if (!v.empty() && v.size() != store.grad_elements())
            throw error(std::string("ctg::checkpoint::save: the optimizer's state '") + state +
                        "' was sized for another parameter store (or other frozen parameters)");
        for (std::size_t s = 0; s < store.size(); ++s) {
            const auto& e = store.at(s);
            if (e.frozen) continue;  // (no state: a resume that trains it finds none and refuses)
            const T* data = nullptr;
            if (v.empty()) zeros.assign(e.shape.size(), T(0)), data = zeros.data();  // before the first step
            else data = v.data() + e.grad_offset;  // (not before: offset arithmetic on an empty vector's null is UB)
            arrays.push_back(npz::from_data("optim/" + std::string(state) + "/" + e.name, data, e.shape.to_vector()));
        }
    });
    arrays.push_back(detail::text("meta/optimizer", Optimizer::kind));
    if constexpr (requires { opt.groups_text(); })  // (optim::param_group: a resume must have the same)
        if (!opt.groups_text().empty()) arrays.push_back(detail::text("meta/param_groups", opt.groups_text()));
    arrays.push_back(detail::integers("meta/steps", {opt.steps()}));
    arrays.push_back(detail::integers("run/position", {run.step, run.epoch, run.batch_in_epoch}));
    arrays.push_back(detail::integers("run/order", run.order));
    arrays.push_back(detail::text("run/shuffle_rng", run.shuffle_rng));
    arrays.push_back(detail::integers("run/dropout", {detail::as_int64(run.dropout_seed), detail::as_int64(run.dropout_passes)}));
    arrays.push_back(detail::integers("run/flags", {run.evaluated_last, run.finished, run.stopped}));
    std::vector<double> rows;
    for (const history_row& h : run.history)
        rows.insert(rows.end(), {double(h.step), double(h.epoch), h.train_loss, h.metric, h.lr, h.seconds});
    arrays.push_back(npz::from_data("run/history", rows.data(), {run.history.size(), 6}));
    const double progress[] = {run.loss_sum, run.loss_samples, run.samples_done, run.seconds};
    arrays.push_back(npz::from_data("run/progress", progress, {4}));
    for (const auto& [field, value] : run.config) arrays.push_back(detail::text("run/config/" + field, value));
    for (const auto& [name, value] : run.counters) arrays.push_back(npz::from_data("counter/" + name, &value, {1}));
    binary_file::remove_stale_temporaries(paths::directory_of(path), paths::file_name_of(path));
    npz::write(path, arrays);
}

/// A checkpoint read and checked against a store and an optimizer, not applied yet (read()); commit()
/// applies it.
template <class T>
struct staged {
    std::string path;  ///< the file read
    std::vector<std::vector<T>> values;         ///< per parameter slot
    std::vector<aligned_vector<T>> states;      ///< per optimizer state, in for_each_state's order
    long steps = 0;                             ///< the optimizer's step count
    run_state run;  ///< the run's state
};

/// Reads the checkpoint at `path` and checks it against the store and the optimizer: every parameter
/// of the store must be in the file with the same shape and dtype, and no other; the optimizer must
/// be of the same kind, with every state array. Changes nothing (throws io_error naming the first
/// difference); commit() applies the result.
template <class T, class Optimizer>
staged<T> read(const std::string& path, const parameter_store<T>& store, Optimizer& opt) {
    static_assert(std::is_same_v<T, float> || std::is_same_v<T, double>, "ctg::checkpoint::load: float or double store");
    detail::reader r{path, npz::read(path)};
    staged<T> s{path, r.template parameters<T>(store), {}, 0, {}};
    const std::string kind = r.text("meta/optimizer");
    if (kind != Optimizer::kind)
        r.fail("the checkpoint's optimizer is '" + kind + "', this run's is '" + Optimizer::kind + "'");
    if constexpr (requires { opt.groups_text(); }) {
        const std::string saved = r.file.count("meta/param_groups") ? r.text("meta/param_groups") : "";
        if (saved != opt.groups_text())
            r.fail("the checkpoint's parameter groups are [" + (saved.empty() ? std::string("none") : saved) +
                   "], this run's are [" + (opt.groups_text().empty() ? std::string("none") : opt.groups_text()) + "]");
    }
    opt.for_each_state([&](const char* state, const aligned_vector<T>&) {
        aligned_vector<T> v(store.grad_elements(), T(0));
        for (std::size_t k = 0; k < store.size(); ++k) {
            const auto& e = store.at(k);
            const std::string name = "optim/" + std::string(state) + "/" + e.name;
            if (e.frozen) {  // trained when the checkpoint was saved, frozen now: another run
                if (r.file.count(name))
                    r.fail("parameter '" + e.name + "' is frozen in this run (options::frozen) but trained in the checkpoint's");
                continue;
            }
            if (!r.file.count(name))
                r.fail("parameter '" + e.name + "' trains in this run but has no optimizer state '" + state +
                       "' in the checkpoint (frozen in the run that saved it? options::frozen)");
            const auto t = r.template tensor<T>(name, e.shape, "optimizer state");
            std::copy(t.begin(), t.end(), v.begin() + long(e.grad_offset));
        }
        s.states.push_back(std::move(v));
    });
    s.steps = long(r.integer("meta/steps"));
    const auto position = r.integers("run/position");
    const auto dropout = r.integers("run/dropout");
    if (position.size() != 3 || dropout.size() != 2) r.fail("run/position or run/dropout has the wrong length");
    run_state& run = s.run;
    run.step = position[0], run.epoch = position[1], run.batch_in_epoch = position[2];
    run.order = r.integers("run/order");
    run.shuffle_rng = r.text("run/shuffle_rng");
    run.dropout_seed = detail::as_uint64(dropout[0]), run.dropout_passes = detail::as_uint64(dropout[1]);
    if (r.file.count("run/flags")) {
        const auto flags = r.integers("run/flags");
        if (flags.size() != 3) r.fail("run/flags holds " + std::to_string(flags.size()) + " values, not 3");
        run.evaluated_last = flags[0] != 0, run.finished = flags[1] != 0, run.stopped = flags[2] != 0;
    }
    if (r.file.count("run/history")) {
        const npz::array& a = r.get("run/history");
        if (a.shape.size() != 2 || a.shape[1] != 6) r.fail("run/history has shape " + npz::detail::shape_string(a.shape) + ", not (n,6)");
        const auto v = r.reals("run/history");
        for (std::size_t i = 0; i < a.shape[0]; ++i) {
            const double* h = v.data() + 6 * i;
            run.history.push_back({long(h[0]), long(h[1]), h[2], h[3], h[4], h[5]});
        }
    }
    if (r.file.count("run/progress")) {
        const auto v = r.reals("run/progress");
        if (v.size() != 4) r.fail("run/progress holds " + std::to_string(v.size()) + " values, not 4");
        run.loss_sum = v[0], run.loss_samples = v[1], run.samples_done = v[2], run.seconds = v[3];
    }
    for (const auto& [name, a] : r.file) {
        if (name.starts_with("counter/")) {
            const auto v = npz::to_vector<double>(a);
            if (v.size() != 1) r.fail("'" + name + "' holds " + std::to_string(v.size()) + " values, not one");
            run.counters[name.substr(8)] = v[0];
        } else if (name.starts_with("run/config/")) {
            run.config[name.substr(11)] = r.text(name);
        }
    }
    return s;
}

/// Applies a checkpoint read() staged to the same store and optimizer: the parameters, the
/// optimizer's state and step count. Checks first that the store still has the layout read() saw
/// (else io_error, nothing changed); then only copies, which cannot fail.
template <class T, class Optimizer>
void commit(staged<T>& s, parameter_store<T>& store, Optimizer& opt) {
    bool same = s.values.size() == store.size();
    for (std::size_t k = 0; same && k < store.size(); ++k) same = s.values[k].size() == store.at(k).shape.size();
    std::size_t n = 0;
    opt.for_each_state([&](const char*, const aligned_vector<T>&) { ++n; });
    for (const auto& v : s.states) same = same && v.size() == store.grad_elements();
    if (!same || n != s.states.size())
        throw io_error("ctg::checkpoint::commit: '" + s.path + "' was read for another parameter store or optimizer");
    for (std::size_t k = 0; k < store.size(); ++k) std::copy(s.values[k].begin(), s.values[k].end(), store.value(k));
    std::size_t i = 0;
    opt.for_each_state([&](const char*, aligned_vector<T>& v) { v = std::move(s.states[i++]); });
    opt.set_steps(s.steps);
}

/// Loads a checkpoint written by save() into the store and the optimizer; returns the run's state.
/// read() then commit(): all-or-nothing.
template <class T, class Optimizer>
run_state load(const std::string& path, parameter_store<T>& store, Optimizer& opt) {
    staged<T> s = read(path, store, opt);
    commit(s, store, opt);
    return std::move(s.run);
}

/// The name of the step-numbered checkpoint of run `name` at `step`: "<name>-step00000042.npz".
inline std::string step_file_name(const std::string& name, long step) {
    char digits[32];
    std::snprintf(digits, sizeof digits, "%08ld", step);
    return name + "-step" + digits + ".npz";
}

/// The step of a step-numbered checkpoint file name of run `name`, or -1 when it is not one.
inline long step_of_file_name(std::string_view file, std::string_view name) {
    const std::string_view pre = "-step", post = ".npz";
    if (!file.starts_with(name) || !file.substr(name.size()).starts_with(pre) || !file.ends_with(post)) return -1;
    const std::string_view digits = file.substr(name.size() + pre.size(), file.size() - name.size() - pre.size() - post.size());
    if (digits.size() < 8 || digits.size() > 18) return -1;
    long step = 0;
    for (const char c : digits) {
        if (c < '0' || c > '9') return -1;
        step = step * 10 + (c - '0');
    }
    return step;
}

/// The step-numbered checkpoints of run `name` in `dir`, by step, oldest first.
inline std::vector<std::pair<long, std::string>> step_files(const std::string& dir, const std::string& name) {
    std::vector<std::pair<long, std::string>> found;
    for (const std::string& file : paths::entry_names(dir)) {
        const long step = step_of_file_name(file, name);
        if (step >= 0) found.emplace_back(step, paths::join(dir.empty() ? "." : dir, file));
    }
    std::sort(found.begin(), found.end());
    return found;
}

namespace detail {
/// A regular file that ends with the end record of a ZIP archive without a comment, as every .npz
/// save() writes does: a whole file, as far as can be told without reading it all.
inline bool looks_whole(const std::string& path) {
    const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
    if (fd < 0) return false;
    unsigned char end[22];
    const off_t size = ::lseek(fd, 0, SEEK_END);
    const bool ok = size >= 22 && ::pread(fd, end, 22, size - 22) == 22 && end[0] == 'P' && end[1] == 'K' &&
                    end[2] == 5 && end[3] == 6;
    ::close(fd);
    return ok;
}
}  // namespace detail

/// The newest checkpoint of run `name` in `dir`: the step-numbered one of the highest step that
/// looks whole (a regular file ending with a ZIP end record; a damaged one is passed over for the
/// one before), else "<dir>/<name>.npz" if it looks whole, else nothing.
inline std::optional<std::string> latest(const std::string& dir, const std::string& name) {
    auto files = step_files(dir, name);
    for (auto it = files.rbegin(); it != files.rend(); ++it)
        if (detail::looks_whole(it->second)) return it->second;
    const std::string single = paths::join(dir.empty() ? "." : dir, name + ".npz");
    if (detail::looks_whole(single)) return single;
    return std::nullopt;
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
