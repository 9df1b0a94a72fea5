// ctgraph/dist.hpp: data-parallel training across processes and machines with MPI (optional: link
// ctgraph::dist, which CMake defines when it finds MPI).
//
// Every process (rank) holds the whole model and trains on its own share of each global batch; the
// gradients are averaged by all-reduce before every optimizer step, so all ranks apply the same
// update to the same weights and stay identical. The pieces:
//
//   ctg::dist::environment env(argc, argv);      // MPI_Init_thread / MPI_Finalize (RAII)
//   ctg::dist::communicator comm = env.world();  // or communicator(an existing MPI_Comm)
//   ctg::dist::shard data(train_set, comm);      // rank r feeds samples r, r + size, ... of each batch
//   ctg::dist::data_parallel dp(comm, prog);     // checks the models agree, copies rank 0's weights
//   ctg::trainer fit(prog, opt, {.batch = 64, ...}, ctg::keep_lr{}, std::move(dp));
//   fit.fit(data);                               // rank 0 prints and writes the checkpoints
//
// Semantics. The trainer's `batch` is the global batch: every rank draws the same shuffled order (the
// same seed) and shard gives rank r the rows r, r + size, r + 2 size, ... of each batch, so N ranks
// with global batch N b see exactly the batches one process sees with batch N b. Each rank's loss is
// the mean over its own samples; its gradient is weighted by its share (n_r / n, n the global batch)
// before the sum, so the result is the gradient of the mean over the whole batch even when a last,
// partial batch does not divide evenly (a rank with no sample contributes zeros). This assumes the
// loss is a mean over samples of equal weight (fixed-length windows, no ignored labels).
//
// Overlap. data_parallel groups the gradient into buckets of about bucket_bytes, in the order in
// which backward completes them: program::for_each_final lists that order (whole parameters, and a
// repeat's stacked parameters row by row, layer L-1 first), so a bucket holds, say, the last layer's
// rows of every stacked parameter. program::backward_with tells it when each range is final; when
// all of a bucket's are, it starts a non-blocking all-reduce (MPI_Iallreduce, one per contiguous run
// of the bucket) while backward goes on with the earlier layers. Buckets start in that one fixed
// order on every rank, as MPI requires (made from a store alone: whole parameters, the last first).
// The optimizer updates each bucket's ranges as soon as its reductions are complete (without
// clipping; with clip_norm > 0, after all of them and the clip). overlap = false is the plain
// scheme, one blocking all-reduce of the whole gradient after backward.
//
// Bad input: ranks that build different models (names, shapes, layers, float/double) stop with
// ctg::dist::model_mismatch naming the first difference, when data_parallel (or
// broadcast_parameters) is made, before any step. Data sets of different sizes, or steps with
// different global batches, are errors too.
//
// Errors on one rank only: a rank that throws while the others wait in an all-reduce must leave
// without MPI_Finalize (which would wait for them): `return env.fail(2)` from the handler, or let the
// exception leave the environment's scope. mpirun then ends the whole job.
#pragma once
#include <mpi.h>

#include <algorithm>
#include <chrono>
#include <climits>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <exception>
#include <memory>
#include <numeric>
#include <span>
#include <string>
#include <type_traits>
#include <utility>
#include <vector>

#include "ctgraph/error.hpp"
#include "ctgraph/optim.hpp"
#include "ctgraph/params.hpp"
#include "ctgraph/tensor.hpp"
#include "ctgraph/train.hpp"

/// Data-parallel training over MPI (link ctgraph::dist): every rank holds the whole model, trains
/// on its own share of each batch, and the gradients are averaged across ranks.
namespace ctg::dist {

/// An MPI call that failed (only seen when the communicator's error handler returns errors).
struct mpi_error : error {
    using error::error;
};
/// The ranks hold different models (parameter names, shapes or scalar types).
struct model_mismatch : error {
    using error::error;
};

namespace detail {
inline void check(int rc, const char* what) {
    if (rc == MPI_SUCCESS) return;
    char text[MPI_MAX_ERROR_STRING];
    int len = 0;
    MPI_Error_string(rc, text, &len);
    throw mpi_error(std::string("ctg::dist: ") + what + " failed: " + std::string(text, std::size_t(len)));
}
template <class T>
MPI_Datatype mpi_type() {
    if constexpr (std::is_same_v<T, float>) return MPI_FLOAT;
    else if constexpr (std::is_same_v<T, double>) return MPI_DOUBLE;
    else if constexpr (std::is_same_v<T, std::uint64_t>) return MPI_UINT64_T;
    else if constexpr (std::is_same_v<T, char>) return MPI_CHAR;
    else static_assert(!sizeof(T), "ctg::dist: no MPI type for this scalar");
}
template <class T>
const char* type_name() {
    return std::is_same_v<T, float> ? "float32" : std::is_same_v<T, double> ? "float64" : "?";
}
inline std::uint64_t fnv1a(const void* data, std::size_t n, std::uint64_t h = 14695981039346656037ULL) {
    const auto* p = static_cast<const unsigned char*>(data);
    for (std::size_t i = 0; i < n; ++i) h = (h ^ p[i]) * 1099511628211ULL;
    return h;
}
constexpr std::size_t max_count = std::size_t(INT_MAX);
}  // namespace detail

/// A communicator (not owned): the ranks that train together. MPI must be initialised.
class communicator {
public:
    /// The ranks of `comm` (MPI_COMM_WORLD by default); throws ctg::dist::mpi_error if MPI fails.
    explicit communicator(MPI_Comm comm = MPI_COMM_WORLD) : comm_(comm) {
        detail::check(MPI_Comm_rank(comm_, &rank_), "MPI_Comm_rank");
        detail::check(MPI_Comm_size(comm_, &size_), "MPI_Comm_size");
    }
    int rank() const { return rank_; }  ///< this process's rank
    int size() const { return size_; }  ///< the number of ranks
    bool root() const { return rank_ == 0; }  ///< whether this is rank 0
    MPI_Comm get() const { return comm_; }  ///< the MPI communicator

    /// Waits until every rank has called it (collective).
    void barrier() const { detail::check(MPI_Barrier(comm_), "MPI_Barrier"); }
    /// In-place sum over all ranks (blocking), of any length.
    template <class T>
    void allreduce_sum(T* data, std::size_t n) const {
        for (std::size_t at = 0; at < n; at += detail::max_count)
            detail::check(MPI_Allreduce(MPI_IN_PLACE, data + at, int(std::min(detail::max_count, n - at)),
                                        detail::mpi_type<T>(), MPI_SUM, comm_),
                          "MPI_Allreduce");
    }
    /// Copies root's n elements to every rank (blocking), of any length.
    template <class T>
    void broadcast(T* data, std::size_t n, int root = 0) const {
        for (std::size_t at = 0; at < n; at += detail::max_count)
            detail::check(MPI_Bcast(data + at, int(std::min(detail::max_count, n - at)), detail::mpi_type<T>(), root, comm_),
                          "MPI_Bcast");
    }
    /// Whether every rank passed the same value.
    bool same_everywhere(std::uint64_t v) const {
        std::uint64_t m[2] = {v, ~v};  // max(v) and ~min(v) in one call
        detail::check(MPI_Allreduce(MPI_IN_PLACE, m, 2, MPI_UINT64_T, MPI_MAX, comm_), "MPI_Allreduce");
        return m[0] == ~m[1];
    }

private:
    MPI_Comm comm_;
    int rank_ = 0, size_ = 1;
};

/// MPI for the lifetime of this object: MPI_Init_thread (MPI_THREAD_FUNNELED: only the main thread
/// calls MPI) unless MPI is initialised already, MPI_Finalize at the end if it initialised it. When
/// the scope is left by an exception, or after fail(), it does not finalise: the process then exits
/// without MPI_Finalize and mpirun stops the other ranks, which may be waiting in an all-reduce.
class environment {
public:
    environment() : environment(nullptr, nullptr) {}
    /// Initialises MPI with the program's arguments.
    environment(int& argc, char**& argv) : environment(&argc, &argv) {}
    environment(const environment&) = delete;
    environment& operator=(const environment&) = delete;
    ~environment() {
        if (!owner_ || failed_ || std::uncaught_exceptions() > exceptions_) return;
        int done = 0;
        MPI_Finalized(&done);
        if (!done) MPI_Finalize();
    }
    /// Every rank of the run: MPI_COMM_WORLD.
    communicator world() const { return communicator(MPI_COMM_WORLD); }
    /// Marks the run as failed (no MPI_Finalize); returns `code`, for `return env.fail(2);`.
    int fail(int code) {
        failed_ = true;
        return code;
    }

private:
    environment(int* argc, char*** argv) : exceptions_(std::uncaught_exceptions()) {
        int initialised = 0;
        detail::check(MPI_Initialized(&initialised), "MPI_Initialized");
        if (initialised) return;
        int provided = 0;
        detail::check(MPI_Init_thread(argc, argv, MPI_THREAD_FUNNELED, &provided), "MPI_Init_thread");
        owner_ = true;
    }
    bool owner_ = false, failed_ = false;
    int exceptions_ = 0;
};

// ---------------------------------------------------------------------------------------- the model

/// One line per parameter: "'name' (shape) float32" (and "layered L" for a stacked parameter).
template <class T>
std::vector<std::string> model_table(const parameter_store<T>& store) {
    std::vector<std::string> t;
    for (const auto& e : store.entries()) {
        std::string line = "'" + e.name + "' " + to_string(e.shape) + " " + detail::type_name<T>();
        if (e.layer_axes) line += " (" + std::to_string(e.layer_axes) + " layer axes)";
        t.push_back(std::move(line));
    }
    return t;
}

/// Throws model_mismatch on every rank, naming the first difference from rank 0's model, unless all
/// ranks' stores have the same parameters (names, shapes, layer axes, scalar type) in the same order.
/// Collective: every rank calls it. One hash is compared; the tables are exchanged only when they differ.
template <class T>
void check_same_model(const communicator& comm, const parameter_store<T>& store) {
    const std::vector<std::string> mine = model_table(store);
    std::uint64_t h = detail::fnv1a(nullptr, 0);
    for (const auto& line : mine) h = detail::fnv1a(line.data(), line.size() + 1, h);  // with the '\0'
    if (comm.size() == 1 || comm.same_everywhere(h)) return;
    // Which rank differs first from rank 0?
    std::vector<std::uint64_t> all(std::size_t(comm.size()));
    detail::check(MPI_Allgather(&h, 1, MPI_UINT64_T, all.data(), 1, MPI_UINT64_T, comm.get()), "MPI_Allgather");
    int other = 1;
    while (other < comm.size() && all[std::size_t(other)] == all[0]) ++other;
    // Rank 0's table and that rank's, to everyone.
    auto table_of = [&](int root) {
        std::string text;
        if (comm.rank() == root)
            for (const auto& line : mine) text += line + '\n';
        std::uint64_t n = text.size();
        comm.broadcast(&n, 1, root);
        text.resize(n);
        comm.broadcast(text.data(), n, root);
        std::vector<std::string> lines;
        for (std::size_t at = 0; at < text.size();) {
            const std::size_t end = text.find('\n', at);
            lines.push_back(text.substr(at, end - at));
            at = end + 1;
        }
        return lines;
    };
    const std::vector<std::string> a = table_of(0), b = table_of(other);
    const std::string r = "rank " + std::to_string(other);
    std::string what;
    std::size_t i = 0;
    while (i < a.size() && i < b.size() && a[i] == b[i]) ++i;
    if (i < a.size() && i < b.size())
        what = "parameter " + std::to_string(i) + " is " + a[i] + " on rank 0 but " + b[i] + " on " + r;
    else if (i < b.size())
        what = "parameter " + std::to_string(i) + " " + b[i] + " exists only on " + r + " (rank 0 has " +
               std::to_string(a.size()) + " parameters, " + r + " has " + std::to_string(b.size()) + ")";
    else if (i < a.size())
        what = "parameter " + std::to_string(i) + " " + a[i] + " exists only on rank 0 (rank 0 has " +
               std::to_string(a.size()) + " parameters, " + r + " has " + std::to_string(b.size()) + ")";
    else
        what = "the tables are equal but their hashes are not";  // (cannot happen)
    throw model_mismatch("ctg::dist: the ranks build different models: " + what +
                         "; every rank must build the same model (stopped before any step)");
}

/// Copies rank `root`'s parameter values to every rank, after check_same_model. Collective.
template <class T>
void broadcast_parameters(const communicator& comm, parameter_store<T>& store, int root = 0) {
    check_same_model(comm, store);
    comm.broadcast(store.values().data(), store.values().size(), root);
}

/// Blocking gradient averaging: every rank's gradient times `weight` (by default 1 / size: the mean
/// of equal shares), summed over the ranks, in place in the store's flat gradient array. Collective.
template <class T>
void allreduce_gradients(const communicator& comm, parameter_store<T>& store) {
    allreduce_gradients(comm, store, 1.0 / comm.size());
}
/// The same with an explicit weight (e.g. this rank's share of the global batch divided by its size).
template <class T>
void allreduce_gradients(const communicator& comm, parameter_store<T>& store, double weight) {
    auto& g = store.grads();
    if (weight != 1)
        for (T& x : g) x *= T(weight);
    comm.allreduce_sum(g.data(), g.size());
}

/// Throws unless every rank holds bit-identical parameter values (one hash compared). Collective.
template <class T>
void check_in_sync(const communicator& comm, const parameter_store<T>& store) {
    const auto& v = store.values();
    if (!comm.same_everywhere(detail::fnv1a(v.data(), v.size() * sizeof(T))))
        throw error("ctg::dist: the ranks' parameter values differ");
}

// ---------------------------------------------------------------------------------------- the data

/// How many of a global batch of n samples rank `rank` of `size` trains on (rows rank, rank + size, ...).
constexpr std::size_t share(std::size_t n, int rank, int size) {
    return n > std::size_t(rank) ? (n - std::size_t(rank) + std::size_t(size) - 1) / std::size_t(size) : 0;
}

/// A batch source that gives each rank its share of every batch: the trainer picks a global batch
/// (the same rows on every rank: the same seed), and feed() passes rows rank, rank + size, ... of it
/// to the wrapped source (nothing when this rank's share is empty). size() is the whole data set's.
/// Holds a reference to `data`. The constructor checks that every rank's data has the same size
/// (collective).
template <class Data>
class shard {
public:
    /// Wraps `data` (held by reference). Collective; throws ctg::error when the ranks' data sizes differ.
    shard(Data& data, const communicator& comm) : data_(data), comm_(comm) {
        if (!comm_.same_everywhere(std::uint64_t(data_.size())))
            throw error("ctg::dist::shard: the ranks' data sets have different sizes (this rank's: " +
                        std::to_string(data_.size()) + " samples); every rank must read the same data");
    }
    std::size_t size() const { return data_.size(); }  ///< the whole data set's number of samples
    /// The wrapped source's tokens per sample (only when it has one).
    std::size_t tokens_per_sample() const
        requires requires(const Data& d) { d.tokens_per_sample(); }
    {
        return data_.tokens_per_sample();
    }
    /// The samples this rank fed last time.
    std::size_t last_share() const { return last_; }

    /// Feeds this rank's rows of the global batch rows[0..n) to `p` (nothing when its share is empty).
    template <class Program>
    void feed(Program& p, const std::size_t* rows, std::size_t n) {
        rows_.clear();
        for (std::size_t k = std::size_t(comm_.rank()); k < n; k += std::size_t(comm_.size())) rows_.push_back(rows[k]);
        last_ = rows_.size();
        if (!rows_.empty()) data_.feed(p, rows_.data(), rows_.size());
    }

private:
    Data& data_;
    communicator comm_;
    std::vector<std::size_t> rows_;
    std::size_t last_ = 0;
};

/// A validation metric for ctg::trainer: the mean of the evaluation program's loss over all of `val`,
/// each rank evaluating its rows (rank, rank + size, ...) and the sums reduced; the same value on
/// every rank. Collective.
struct sharded_mean_loss {
    communicator comm;  ///< the ranks that evaluate together
    /// The mean loss of `eval` over all of `data`, in batches of `batch`. Collective; throws ctg::error for empty data.
    template <class Program, class Data>
    double operator()(Program& eval, Data& data, std::size_t batch) const {
        const std::size_t n = data.size();
        if (n == 0) throw error("ctg::dist::sharded_mean_loss: the data set is empty");
        std::vector<std::size_t> mine;
        for (std::size_t k = std::size_t(comm.rank()); k < n; k += std::size_t(comm.size())) mine.push_back(k);
        double sum = 0;
        for (std::size_t b = 0; b < mine.size(); b += batch) {
            const std::size_t m = std::min(batch, mine.size() - b);
            data.feed(eval, mine.data() + b, m);
            sum += double(eval.forward()) * double(m);
        }
        comm.allreduce_sum(&sum, 1);
        return sum / double(n);
    }
};

// ---------------------------------------------------------------------------------------- the step

/// How data_parallel reduces the gradients.
struct parallel_config {
    std::size_t bucket_bytes = std::size_t(1) << 20;  ///< gradient bytes per bucket (whole parameters or layers' rows)
    bool overlap = true;  ///< false: one blocking all-reduce of the whole gradient after backward; true: buckets reduced while backward runs
};

/// The data-parallel training step (see the file comment), and ctg::trainer's step policy. Made
/// collectively (it checks that the models agree and copies rank 0's weights to every rank), for one
/// parameter store; make it after every program over that store (a parameter added later is an error).
template <class T>
class data_parallel {
public:
    /// What the step has measured.
    struct stats {
        long steps = 0;  ///< steps run
        double wait_seconds = 0;  ///< spent waiting for reductions after backward: the communication not hidden
        /// spent inside the MPI calls that start and progress reductions during backward: where a
        /// rank's own core does the reduction's work (shared memory), this is not hidden either
        double start_seconds = 0;
    };

    /// For the parameters of `store`: checks that every rank has the same model (throws
    /// ctg::dist::model_mismatch naming the first difference) and copies rank 0's weights to every rank. Collective.
    /// Buckets of whole parameters, started from the last one down.
    data_parallel(communicator comm, std::shared_ptr<parameter_store<T>> store, parallel_config cfg = {})
        : comm_(comm), store_(std::move(store)), cfg_(cfg) {
        if (!store_) throw error("ctg::dist::data_parallel: no parameter store");
        broadcast_parameters(comm_, *store_);
        for (std::size_t s = store_->size(); s-- > 0;) pieces_.push_back({s, 0, store_->at(s).shape.size()});
        build_buckets();
    }
    /// For the parameters of `prog`'s store, in buckets of the ranges in the order `prog`'s backward
    /// completes them (program::for_each_final).
    template <class Program>
        requires requires(Program& p) { p.shared_params(); }
    data_parallel(communicator comm, Program& prog, parallel_config cfg = {})
        : comm_(comm), store_(prog.shared_params()), cfg_(cfg) {
        broadcast_parameters(comm_, *store_);
        prog.for_each_final([&](std::size_t slot, std::size_t first, std::size_t count) { pieces_.push_back({slot, first, count}); });
        build_buckets();
    }

    const communicator& comm() const { return comm_; }  ///< the ranks
    std::size_t buckets() const { return bucket_pieces_.size(); }  ///< the number of gradient buckets
    const stats& statistics() const { return stats_; }  ///< steps and time spent waiting
    /// Only rank 0 writes files and progress output (ctg::trainer asks).
    bool writes_output() const { return comm_.root(); }

    /// One training step on this rank's share of a global batch of `samples` (the program is fed
    /// with share(samples, rank, size) of them, or not at all when that is 0): zero_grad, forward,
    /// backward with the bucketed all-reduces, the optimizer (after clipping when clip_norm > 0).
    /// Returns the mean loss over the global batch (the same on every rank). Collective. One rank:
    /// exactly ctg::train_step.
    template <class Program, class Optimizer>
    T operator()(Program& prog, Optimizer& opt, double clip_norm, std::size_t samples) {
        return step(prog, opt, clip_norm, samples, std::span<const std::size_t>(), [](std::size_t) {});
    }
    /// The same over micro-batches (gradient accumulation, train_config::accumulate): feed(i) feeds
    /// this rank's share of micro-batch i, of samples[i] samples over all ranks. Each micro-batch's
    /// gradient is added locally with weight (its samples on this rank) / (the step's samples on all
    /// ranks), and the buckets are all-reduced once, during the last micro-batch's backward.
    template <class Program, class Optimizer, class Feed>
    T operator()(Program& prog, Optimizer& opt, double clip_norm, std::span<const std::size_t> samples, Feed&& feed) {
        std::size_t total = 0;
        for (std::size_t n : samples) total += n;
        return step(prog, opt, clip_norm, total, samples, feed);
    }

private:
    // One step of `samples` samples over all ranks: one batch already fed (micro empty), or the
    // micro-batches that feed(i) feeds.
    template <class Program, class Optimizer, class Feed>
    T step(Program& prog, Optimizer& opt, double clip_norm, std::size_t samples, std::span<const std::size_t> micro, Feed&& feed) {
        static_assert(std::is_same_v<typename Program::scalar, T>, "ctg::dist::data_parallel: the program's scalar type differs");
        if (&prog.params() != store_.get())
            throw error("ctg::dist::data_parallel: the program does not use the parameter store it was made for");
        if (samples == 0) throw error("ctg::dist::data_parallel: a step needs at least one sample");
        ++stats_.steps;
        if (comm_.size() == 1) return micro.empty() ? train_step(prog, opt, clip_norm) : train_step(prog, opt, micro, feed, clip_norm);
        if (store_->size() != slots_ || store_->grads().size() != elements_)
            throw error("ctg::dist::data_parallel: parameters were added to the store after data_parallel was made "
                        "(make it after every program over the store)");
        parameter_store<T>& ps = *store_;
        prog.zero_grad();
        double loss = 0;
        // Micro-batches but the last: their gradients added locally, weighted by their share of the
        // step; the last one's weight then seeds its backward, and the buckets are not scaled again.
        const std::size_t k = std::max<std::size_t>(1, micro.size());
        for (std::size_t i = 0; i + 1 < k; ++i) {
            feed(i);
            const std::size_t local_i = share(micro[i], comm_.rank(), comm_.size());
            if (local_i == 0) continue;
            const T w = T(double(local_i) / double(samples));
            loss += double(prog.forward()) * double(w);
            prog.backward(w);
        }
        feed(k - 1);
        const std::size_t local = share(micro.empty() ? samples : micro[k - 1], comm_.rank(), comm_.size());
        const T weight = T(double(local) / double(samples));
        const T seed = micro.empty() ? T(1) : weight, scale = micro.empty() ? weight : T(1);
        if (local > 0) loss += double(prog.forward()) * double(weight);
        // Loss and global batch summed over the ranks: started now, waited for at the end.
        reduced_[0] = loss;
        reduced_[1] = double(samples);
        const bool fused = clip_norm <= 0;  // the optimizer per bucket, as soon as it is reduced
        if (!cfg_.overlap) {
            if (local > 0) prog.backward(seed);
            const auto t0 = std::chrono::steady_clock::now();
            allreduce_gradients(comm_, ps, double(scale));
            comm_.allreduce_sum(reduced_.data(), 2);
            stats_.wait_seconds += std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
        } else {
            detail::check(MPI_Iallreduce(MPI_IN_PLACE, reduced_.data(), 2, MPI_DOUBLE, MPI_SUM, comm_.get(),
                                         &requests_[runs()]),
                          "MPI_Iallreduce");
            piece_pending_ = piece_count_;
            bucket_pending_ = bucket_pieces_;
            runs_pending_ = bucket_runs_;
            slot_pending_ = slot_pieces_;
            next_ = 0;
            if (fused) opt.begin_step(ps);
            auto on_final = [&](std::size_t slot, std::size_t first, std::size_t count) {
                ready(slot, first, count, scale);
                progress(opt, fused);
            };
            if (local > 0) prog.backward_with(on_final, seed);
            else
                for (const piece& p : pieces_) on_final(p.slot, p.first, p.count);  // zero gradients, same order of starts
            for (;;) {  // the rest, each bucket's update as soon as it is reduced
                const auto t0 = std::chrono::steady_clock::now();
                int k = MPI_UNDEFINED;
                detail::check(MPI_Waitany(int(requests_.size()), requests_.data(), &k, MPI_STATUS_IGNORE), "MPI_Waitany");
                stats_.wait_seconds += std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
                if (k == MPI_UNDEFINED) break;
                reduced(opt, fused, std::size_t(k));
            }
        }
        if (reduced_[1] != double(samples) * comm_.size())
            throw error("ctg::dist::data_parallel: the ranks' global batches differ (this rank's: " + std::to_string(samples) +
                        " samples); every rank must use the same batch size and data");
        if (!fused) {
            if (clip_norm > 0) optim::clip_grad_norm(ps, clip_norm);
            opt.step(ps);
        } else if (!cfg_.overlap) {
            opt.step(ps);
        }
        return T(reduced_[0]);
    }

    // A range of a slot that backward reports final at once (a whole parameter, or a layer's rows).
    struct piece {
        std::size_t slot, first, count;
    };
    std::size_t runs() const { return run_begin_.size(); }

    // Buckets: consecutive pieces in report order, about bucket_bytes each (a piece larger than that
    // is a bucket of its own); each bucket's memory as contiguous runs, one all-reduce each.
    void build_buckets() {
        const parameter_store<T>& ps = *store_;
        slots_ = ps.size();
        elements_ = ps.grads().size();
        const std::size_t per_bucket = std::max<std::size_t>(1, cfg_.bucket_bytes / sizeof(T));
        slot_pieces_.assign(slots_, 0);
        pieces_of_slot_.assign(slots_, {});
        std::vector<std::pair<std::size_t, std::size_t>> extents;  // of the current bucket
        auto close = [&] {
            bucket_first_run_.push_back(runs());
            std::sort(extents.begin(), extents.end());
            std::size_t runs = 0;
            for (std::size_t k = 0; k < extents.size(); ++k) {
                if (k > 0 && extents[k].first == run_end_.back() && extents[k].second - run_begin_.back() <= detail::max_count) {
                    run_end_.back() = extents[k].second;  // adjacent: one run
                    continue;
                }
                run_begin_.push_back(extents[k].first);
                run_end_.push_back(extents[k].second);
                run_bucket_.push_back(bucket_pieces_.size() - 1);
                ++runs;
            }
            bucket_runs_.push_back(runs);
            extents.clear();
        };
        std::size_t bucket_size = 0;
        std::erase_if(pieces_, [](const piece& p) { return p.count == 0; });  // (nothing to wait for)
        for (std::size_t k = 0; k < pieces_.size(); ++k) {
            const piece& p = pieces_[k];
            const auto& e = ps.at(p.slot);
            const std::size_t begin = e.grad_offset + p.first, size = e.shape.size();  // (in grads(): the parameters that train)
            // The last range of a parameter takes the padding up to the next one along (zeros), so that
            // neighbouring parameters of one bucket are one run.
            const std::size_t end = p.first + p.count < size ? begin + p.count
                                    : p.slot + 1 < slots_    ? ps.at(p.slot + 1).grad_offset
                                                             : elements_;
            if (end - begin > detail::max_count)
                throw error("ctg::dist::data_parallel: parameter '" + e.name + "' has a range of more than INT_MAX elements");
            if (bucket_pieces_.empty() || bucket_size + (end - begin) > per_bucket) {
                if (!bucket_pieces_.empty()) close();
                bucket_pieces_.push_back(0);
                bucket_first_piece_.push_back(k);
                bucket_size = 0;
            }
            bucket_size += end - begin;
            extents.emplace_back(begin, end);
            ++bucket_pieces_.back();
            piece_bucket_.push_back(bucket_pieces_.size() - 1);
            piece_count_.push_back(p.count);
            ++slot_pieces_[p.slot];
            pieces_of_slot_[p.slot].push_back(k);
        }
        if (!bucket_pieces_.empty()) close();
        bucket_first_piece_.push_back(pieces_.size());
        bucket_first_run_.push_back(runs());
        for (std::size_t s = 0; s < slots_; ++s)
            if (!slot_pieces_[s] && ps.at(s).shape.size() && !ps.frozen(s))
                throw error("ctg::dist::data_parallel: the program's backward does not report parameter '" + ps.at(s).name + "'");
        requests_.assign(runs() + 1, MPI_REQUEST_NULL);  // the runs', then the loss's
        done_.resize(runs() + 1);
    }
    // Elements [first, first + count) of slot are final: scale them; start the buckets that are
    // complete, in the fixed order.
    void ready(std::size_t slot, std::size_t first, std::size_t count, T weight) {
        if (weight != T(1)) {
            T* g = store_->grad(slot);
            for (std::size_t i = first; i < first + count; ++i) g[i] *= weight;
        }
        for (std::size_t k : pieces_of_slot_[slot]) {  // the pieces this range covers (all or part)
            const piece& p = pieces_[k];
            const std::size_t lo = std::max(first, p.first), hi = std::min(first + count, p.first + p.count);
            if (lo >= hi) continue;
            piece_pending_[k] -= hi - lo;
            if (piece_pending_[k] == 0) --bucket_pending_[piece_bucket_[k]];
        }
        const auto t0 = std::chrono::steady_clock::now();
        while (next_ < buckets() && bucket_pending_[next_] == 0) {
            for (std::size_t r = bucket_first_run_[next_]; r < bucket_first_run_[next_ + 1]; ++r)
                detail::check(MPI_Iallreduce(MPI_IN_PLACE, store_->grads().data() + run_begin_[r], int(run_end_[r] - run_begin_[r]),
                                             detail::mpi_type<T>(), MPI_SUM, comm_.get(), &requests_[r]),
                              "MPI_Iallreduce");
            ++next_;
        }
        stats_.start_seconds += std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    }
    // Lets MPI move the started reductions on (it progresses only inside MPI calls); applies the
    // optimizer to the buckets that are complete.
    template <class Optimizer>
    void progress(Optimizer& opt, bool fused) {
        int count = 0;
        const auto t0 = std::chrono::steady_clock::now();
        detail::check(MPI_Testsome(int(requests_.size()), requests_.data(), &count, done_.data(), MPI_STATUSES_IGNORE),
                      "MPI_Testsome");
        stats_.start_seconds += std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
        if (count == MPI_UNDEFINED) return;
        for (int i = 0; i < count; ++i) reduced(opt, fused, std::size_t(done_[std::size_t(i)]));
    }
    // Request k (a run, or the loss's) is complete: a bucket whose runs all are gets its update.
    template <class Optimizer>
    void reduced(Optimizer& opt, bool fused, std::size_t k) {
        if (k >= runs() || --runs_pending_[run_bucket_[k]] > 0 || !fused) return;
        const std::size_t b = run_bucket_[k];
        for (std::size_t i = bucket_first_piece_[b]; i < bucket_first_piece_[b + 1]; ++i) {
            const piece& p = pieces_[i];
            if constexpr (optim::range_optimizer_for<Optimizer, T>) opt.update(*store_, p.slot, p.first, p.count);
            else if (--slot_pending_[p.slot] == 0) opt.update(*store_, p.slot);  // once its last range is reduced
        }
    }

    communicator comm_;
    std::shared_ptr<parameter_store<T>> store_;
    parallel_config cfg_;
    std::size_t slots_ = 0, elements_ = 0;
    std::vector<piece> pieces_;  // in report order
    std::vector<std::vector<std::size_t>> pieces_of_slot_;
    std::vector<std::size_t> piece_bucket_, piece_count_, slot_pieces_;
    std::vector<std::size_t> bucket_pieces_, bucket_first_piece_, bucket_first_run_, bucket_runs_;
    std::vector<std::size_t> run_begin_, run_end_, run_bucket_;
    // this step's: elements of each piece not yet final, pieces of each bucket, runs of each bucket
    // not yet reduced, ranges of each slot not yet reduced (optimizers without range updates)
    std::vector<std::size_t> piece_pending_, bucket_pending_, runs_pending_, slot_pending_;
    std::size_t next_ = 0;  // buckets started, in order
    std::vector<MPI_Request> requests_;
    std::vector<int> done_;
    std::vector<double> reduced_ = std::vector<double>(2);
    stats stats_;
};

/// The scalar type from the program.
template <class Program>
data_parallel(communicator, Program&) -> data_parallel<typename Program::scalar>;
/// The scalar type from the program.
template <class Program>
data_parallel(communicator, Program&, parallel_config) -> data_parallel<typename Program::scalar>;

}  // namespace ctg::dist
