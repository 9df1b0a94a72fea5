// ctgraph/kernels/parallel.hpp: one persistent pool of threads for ctgraph's kernels.
//
// `ctg::set_num_threads(k)` sizes it (k - 1 workers; the calling thread is the k-th) and keeps
// OpenBLAS at one thread: every multi-threaded product is split by kernels::gemm into pieces that
// run as tasks here, so two pools never compete for the same cores.
//
// How a job runs: the caller publishes (function, task count) under a new epoch in one 64-bit word
// whose low half is the next unclaimed task. Anyone - the caller included - claims a task with a
// compare-exchange that also checks the epoch, so a worker that wakes late can never run a task of
// a job that has ended, and a job finishes even if no worker wakes at all (the caller claims what
// is left: no latency beyond the serial time when a worker is descheduled, and a forked child with
// no workers still computes). Workers spin for a while after each job (kernels come in bursts,
// as OpenBLAS's threads do) and then sleep on a futex (std::atomic::wait).
//
// Calls from inside a task, or from a second user thread while a job runs, run serially: no
// nesting, no deadlock. A task's exception reaches the caller of run() once the job has ended
// (the job's remaining tasks are skipped).
#pragma once
#include <algorithm>
#include <atomic>
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <exception>
#include <memory>
#include <mutex>
#include <thread>
#include <type_traits>
#include <utility>
#include <vector>

#include "ctgraph/memory.hpp"

#if defined(__x86_64__) || defined(__i386__)
#include <immintrin.h>
#endif

namespace ctg::kernels {

/// Scratch memory of the calling thread for kernels (a product's transposed panel, attention's
/// score gradient on a pool task), taken and given back in stack order through kernels::scratch.
/// A kernel's scratch never overlaps that of the kernel that called it, and steady-state calls
/// allocate nothing: each thread of the pool reserves `scratch_reserve_bytes` when it starts and a
/// caller when it submits a job, so which thread happens to claim a task with an edge case first
/// does not decide when memory is allocated (a per-thread buffer grown on first use did: a worker
/// that first met a product's column tail in the 15th step of a benchmark allocated there). A frame
/// that does not fit gets a block of its own; the smaller blocks are released when the stack is
/// empty again.
class scratch_stack {
public:
    static constexpr std::size_t scratch_reserve_bytes = std::size_t(1) << 20;
    static constexpr std::size_t align = 64;

    static scratch_stack& here() {
        thread_local scratch_stack stack;
        return stack;
    }

    /// Makes sure `bytes` fit without allocating (only while no frame is taken).
    void reserve(std::size_t bytes) {
        if (depth_ == 0 && (blocks_.empty() || blocks_.back().size < bytes)) {
            blocks_.clear();  // nothing is taken: the smaller block goes
            add_block(bytes);
        }
    }

    /// Bytes of its largest block: what the thread's kernel scratch holds between calls (the most
    /// any frames took at once, or the reserve). Tests read it to see what ops left to the kernels.
    std::size_t capacity() const { return blocks_.empty() ? 0 : blocks_.back().size; }

    struct mark {
        std::size_t block, top;  // where the frame starts
    };
    std::byte* push(std::size_t bytes, mark& m) {
        bytes = (bytes + align - 1) / align * align;
        if (blocks_.empty() || top_ + bytes > blocks_.back().size)
            add_block(std::max({bytes, scratch_reserve_bytes, blocks_.empty() ? 0 : 2 * blocks_.back().size}));
        m = {blocks_.size() - 1, top_};
        top_ += bytes;
        ++depth_;
        return blocks_.back().data.get() + m.top;
    }
    void pop(const mark& m) {
        // Frames end in stack order: a frame in an older block means the current one is empty.
        top_ = m.block + 1 == blocks_.size() ? m.top : 0;
        if (--depth_ == 0 && blocks_.size() > 1) blocks_.erase(blocks_.begin(), blocks_.end() - 1);  // keep the largest
    }

private:
    struct block {
        struct release {
            void operator()(std::byte* p) const { std::free(p); }
        };
        std::unique_ptr<std::byte, release> data;
        std::size_t size;
    };
    void add_block(std::size_t bytes) {
        bytes = (bytes + align - 1) / align * align;
        auto* p = static_cast<std::byte*>(std::aligned_alloc(align, bytes));  // untouched pages cost no memory
        if (!p) throw std::bad_alloc();
        allocation_count().fetch_add(1, std::memory_order_relaxed);
        blocks_.push_back({std::unique_ptr<std::byte, block::release>(p), bytes});
        top_ = 0;
    }
    std::vector<block> blocks_;
    std::size_t top_ = 0, depth_ = 0;
};

/// n elements of T (64-byte aligned, uninitialised) of the calling thread's scratch_stack until
/// this object's scope ends; scopes nest. Or, given memory of `given_bytes` that holds them (what
/// the engine planned for an op's call: op_io::transient), that memory.
template <class T>
class scratch {
public:
    explicit scratch(std::size_t n) : p_(reinterpret_cast<T*>(scratch_stack::here().push(n * sizeof(T), mark_))) {}
    scratch(std::size_t n, void* given, std::size_t given_bytes)
        : own_(!given || n * sizeof(T) > given_bytes),
          p_(own_ ? reinterpret_cast<T*>(scratch_stack::here().push(n * sizeof(T), mark_)) : static_cast<T*>(given)) {}
    ~scratch() {
        if (own_) scratch_stack::here().pop(mark_);
    }
    scratch(const scratch&) = delete;
    scratch& operator=(const scratch&) = delete;
    T* data() const { return p_; }

private:
    scratch_stack::mark mark_{};
    bool own_ = true;
    T* p_;
};

class thread_pool {
public:
    /// The process's pool. Its initial size: CTG_NUM_THREADS, else OPENBLAS_NUM_THREADS, else the
    /// number of hardware threads.
    /// Never destroyed: its workers may outlive static destructors, and a forked child (which has
    /// none of them) must not join them at exit.
    static thread_pool& instance() {
        static thread_pool* pool = new thread_pool(initial_size());
        return *pool;
    }

    thread_pool(const thread_pool&) = delete;
    thread_pool& operator=(const thread_pool&) = delete;

    /// Threads that run a job, the caller included.
    int size() const { return size_; }
    /// Threads a job submitted from here would run on: 1 inside a task (a nested job runs on the
    /// task's thread), else size(). Kernels decide whether to split by this: a product split into
    /// pieces that then run one after another on one thread only pays the pieces' overhead.
    int threads_here() const { return in_task() ? 1 : size_; }

    /// Resizes the pool to k threads (k >= 1); waits for a running job to end.
    void resize(int k) {
        k = std::max(k, 1);
        std::lock_guard lock(job_mutex_);
        if (k == size_) return;
        stop_workers();
        size_ = k;
        start_workers();
    }

    /// Runs task(i) for every i < n on the pool and returns when all have run. Serial when the
    /// pool has one thread, n is 1, or the caller is itself a task or another job is running.
    template <class F>
    void run(std::size_t n, F&& task) {
        run_erased(n, [](void* ctx, std::size_t i) { (*static_cast<std::remove_reference_t<F>*>(ctx))(i); },
                   const_cast<void*>(static_cast<const void*>(&task)));
    }

    using task_fn = void (*)(void*, std::size_t);
    /// run() through a function pointer: the one body every kind of task shares (each element-wise
    /// loop is a task type of its own; compiling this per type cost 15 % of a large graph's build).
    void run_erased(std::size_t n, task_fn fn, void* ctx) {
        if (n == 0) return;
        std::unique_lock lock(job_mutex_, std::defer_lock);
        if (n == 1 || n >= publishing || size_ == 1 || in_task() || !lock.try_lock()) {  // (2^32 tasks: serial)
            for (std::size_t i = 0; i < n; ++i) fn(ctx, i);
            return;
        }
        scratch_stack::here().reserve(scratch_stack::scratch_reserve_bytes);  // see scratch_stack
        // Two stores of the state: the new epoch marked `publishing` first, so that no claim on the
        // last job's epoch can succeed once the new job's size is visible (a late worker that read
        // the new size and compared it with the last epoch's index claimed a task of the new job
        // under the old epoch: it ran twice, and the caller counted one task too many as done),
        // then the job's fields, then the epoch with its first task.
        const std::uint64_t epoch = (state_.load(std::memory_order_relaxed) >> 32) + 1;
        state_.store(epoch << 32 | publishing, std::memory_order_seq_cst);
        job_fn_ = fn;
        job_ctx_ = ctx;
        done_.store(0, std::memory_order_relaxed);
        job_size_.store(n, std::memory_order_release);  // read (acquire) after the publishing mark
        state_.store(epoch << 32, std::memory_order_release);  // publishes fn, ctx, size
        signal_.fetch_add(1, std::memory_order_seq_cst);
        if (sleepers_.load(std::memory_order_seq_cst) > 0) signal_.notify_all();
        in_task() = true;
        const std::size_t mine = claim_and_run(epoch);
        in_task() = false;
        // Wait for the tasks the workers claimed (they are running; spinning is the right wait).
        if (mine < n)
            while (done_.load(std::memory_order_acquire) < n - mine) pause();
        // A task that threw (a user's mask predicate, an allocation): every other task has run
        // or been skipped and no thread touches this job any more; the caller gets the exception.
        if (failed_.load(std::memory_order_acquire)) {
            std::exception_ptr e = std::exchange(error_, nullptr);
            failed_.store(false, std::memory_order_relaxed);
            std::rethrow_exception(e);
        }
    }

private:
    explicit thread_pool(int k) : size_(std::max(k, 1)) { start_workers(); }

    static int initial_size() {
        for (const char* name : {"CTG_NUM_THREADS", "OPENBLAS_NUM_THREADS"})
            if (const char* v = std::getenv(name); v && std::atoi(v) > 0) return std::atoi(v);
        return int(std::max(1u, std::thread::hardware_concurrency()));
    }

    static bool& in_task() {
        thread_local bool flag = false;
        return flag;
    }

    static void pause() {
#if defined(__x86_64__) || defined(__i386__)
        _mm_pause();
#endif
    }

    // Claims and runs tasks of `epoch` until none is left; returns how many this thread ran.
    std::size_t claim_and_run(std::uint64_t epoch) {
        std::size_t ran = 0;
        std::uint64_t s = state_.load(std::memory_order_acquire);
        while ((s >> 32) == epoch) {
            const std::size_t i = std::size_t(s & 0xffffffffu);
            if (i == publishing) {  // the caller is writing the job's fields
                pause();
                s = state_.load(std::memory_order_acquire);
                continue;
            }
            // This epoch's size, or (read late) a newer job's: its release follows the newer
            // epoch's publishing mark, so the CAS below then fails.
            if (i >= job_size_.load(std::memory_order_acquire)) break;
            if (state_.compare_exchange_weak(s, s + 1, std::memory_order_acq_rel, std::memory_order_acquire)) {
                if (!failed_.load(std::memory_order_relaxed)) {  // after a failure the rest are skipped
                    try {
                        job_fn_(job_ctx_, i);  // the job cannot end before this task does
                    } catch (...) {
                        std::lock_guard lock(error_mutex_);
                        if (!failed_.load(std::memory_order_relaxed)) error_ = std::current_exception();
                        failed_.store(true, std::memory_order_release);
                    }
                }
                ++ran;
                s = state_.load(std::memory_order_acquire);
            }
        }
        return ran;
    }

    void worker() {
        in_task() = true;
        scratch_stack::here().reserve(scratch_stack::scratch_reserve_bytes);
        ready_.fetch_add(1, std::memory_order_release);
        ready_.notify_all();
        std::uint64_t seen = state_.load(std::memory_order_acquire) >> 32;
        // Spin this many pauses (~0.1-0.5 ms) for the next job before sleeping.
        constexpr int spin_limit = 1 << 13;
        while (true) {
            int spins = 0;
            std::uint64_t epoch;
            while ((epoch = state_.load(std::memory_order_acquire) >> 32) == seen && !stop_.load(std::memory_order_relaxed)) {
                if (++spins < spin_limit) {
                    pause();
                    continue;
                }
                const std::uint32_t v = signal_.load(std::memory_order_seq_cst);
                sleepers_.fetch_add(1, std::memory_order_seq_cst);
                if ((state_.load(std::memory_order_seq_cst) >> 32) == seen && !stop_.load(std::memory_order_seq_cst))
                    signal_.wait(v, std::memory_order_seq_cst);
                sleepers_.fetch_sub(1, std::memory_order_seq_cst);
                spins = 0;
            }
            if (stop_.load(std::memory_order_acquire)) return;
            seen = epoch;
            if (std::size_t ran = claim_and_run(epoch)) done_.fetch_add(ran, std::memory_order_release);
        }
    }

    // Returns once every new worker has reserved its scratch: one that did so later, on its own
    // schedule, would allocate inside whatever steps ran next (and a test counting allocations
    // per step would count it).
    void start_workers() {
        stop_.store(false);
        ready_.store(0, std::memory_order_relaxed);
        for (int t = 1; t < size_; ++t) workers_.emplace_back([this] { worker(); });
        for (int r; (r = ready_.load(std::memory_order_acquire)) < size_ - 1;) ready_.wait(r, std::memory_order_acquire);
    }

    void stop_workers() {
        stop_.store(true, std::memory_order_seq_cst);
        signal_.fetch_add(1, std::memory_order_seq_cst);
        signal_.notify_all();
        for (auto& w : workers_) w.join();
        workers_.clear();
    }

    int size_;
    std::vector<std::thread> workers_;
    std::atomic<int> ready_{0};  // workers that have started and reserved their scratch
    std::mutex job_mutex_;  // one job at a time
    void (*job_fn_)(void*, std::size_t) = nullptr;
    void* job_ctx_ = nullptr;
    std::atomic<std::size_t> job_size_{0};
    static constexpr std::uint64_t publishing = 0xffffffffu;  // the next-task half while a job is being set up
    alignas(64) std::atomic<std::uint64_t> state_{0};  // epoch << 32 | next task
    alignas(64) std::atomic<std::size_t> done_{0};      // tasks the workers finished this epoch
    alignas(64) std::atomic<std::uint32_t> signal_{0};  // bumped per job; sleepers wait on it
    std::atomic<int> sleepers_{0};
    std::atomic<bool> failed_{false};  // a task of the current job threw; error_ holds the first
    std::exception_ptr error_;
    std::mutex error_mutex_;
    std::atomic<bool> stop_{false};
};

using range_fn = void (*)(void*, std::size_t, std::size_t);

/// The length of each of at most `pieces` ranges covering [0, n) whose bounds (but the last) are
/// multiples of `align`: ceil(n / step) ranges (parallel_ranges, kernels::gemm's cuts).
inline std::size_t range_step(std::size_t n, std::size_t pieces, std::size_t align) {
    pieces = std::max<std::size_t>(1, std::min(pieces, (n + align - 1) / align));
    return ((n + pieces - 1) / pieces + align - 1) / align * align;
}

/// parallel_ranges through a function pointer (one body for every caller).
inline void parallel_ranges_erased(std::size_t n, std::size_t pieces, std::size_t align, range_fn body, void* ctx) {
    const std::size_t step = range_step(n, pieces, align);
    struct job {
        std::size_t n, step;
        range_fn body;
        void* ctx;
    } j{n, step, body, ctx};
    thread_pool::instance().run_erased(
        (n + step - 1) / step,
        [](void* c, std::size_t p) {
            const job& jb = *static_cast<const job*>(c);
            jb.body(jb.ctx, p * jb.step, std::min(jb.n, (p + 1) * jb.step));
        },
        &j);
}

/// Splits [0, n) into at most `pieces` ranges whose bounds (but the last) are multiples of `align`,
/// and runs body(begin, end) for each on the pool.
template <class F>
inline void parallel_ranges(std::size_t n, std::size_t pieces, std::size_t align, F&& body) {
    parallel_ranges_erased(
        n, pieces, align,
        [](void* c, std::size_t b, std::size_t e) { (*static_cast<std::remove_reference_t<F>*>(c))(b, e); },
        const_cast<void*>(static_cast<const void*>(&body)));
}

/// body(begin, end) over [0, n): in one piece per pool thread (bounds on 64-byte lines of T) when n
/// is at least `min_size` and the pool has more than one thread, else in one call.
template <class T, class F>
inline void for_ranges(std::size_t n, std::size_t min_size, F&& body) {
    const std::size_t threads = std::size_t(thread_pool::instance().threads_here());
    if (n >= min_size && threads > 1)
        parallel_ranges(n, threads, 64 / sizeof(T), body);
    else
        body(std::size_t(0), n);
}

/// body(begin, end) over [0, count) independent items (the matrices of a batched product, the
/// heads of an attention, rows): one contiguous piece per pool thread when the items' total work
/// (any unit, against min_work in the same unit) is worth it and there are at least two items,
/// else one call. Kernels called inside a piece run on that piece's thread.
template <class F>
inline void for_items(std::size_t count, std::size_t total_work, std::size_t min_work, F&& body) {
    const std::size_t threads = std::size_t(thread_pool::instance().threads_here());
    if (threads > 1 && count > 1 && total_work >= min_work)
        parallel_ranges(count, threads, 1, body);
    else
        body(std::size_t(0), count);
}

}  // namespace ctg::kernels

