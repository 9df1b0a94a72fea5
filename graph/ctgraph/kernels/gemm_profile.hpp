// ctgraph/kernels/gemm_profile.hpp: per-shape timing of every gemm() call, to find the products
// that run slowly inside a real step (where operands come from memory, not from a benchmark's
// warm caches). Off unless CTG_GEMM_PROFILE is defined for the whole program:
//
//   cmake -B build-prof -DCMAKE_BUILD_TYPE=Release "-DCMAKE_CXX_FLAGS=-DCTG_GEMM_PROFILE"
//   cmake --build build-prof --target ctg-bench && build-prof/bench/ctg-bench --workload gpt-s --threads 1
//
// prints, at exit, one line per (path, layout, M, N, K) above 0.5 % of all GEMM time: calls, share,
// microseconds per call, GFLOP/s. The path is the one-thread choice (register kernel or not): on
// a pool of two, gemm() splits large products and each half chooses again. Each call takes a
// mutex and may allocate (a map): a profiling build is not for allocation counts.
#pragma once
#if defined(CTG_GEMM_PROFILE)
#include <chrono>
#include <cstddef>
#include <cstdio>
#include <map>
#include <mutex>

namespace ctg::kernels::profile {

struct gemm_shape {
    bool register_kernel = false, trans_a = false, trans_b = false;
    std::size_t M = 0, N = 0, K = 0;
    auto operator<=>(const gemm_shape&) const = default;
};
struct gemm_stats {
    std::size_t calls = 0;
    double seconds = 0;
};

class gemm_table {
public:
    static gemm_table& instance() {
        static gemm_table table;
        return table;
    }
    void add(const gemm_shape& s, double seconds) {
        std::lock_guard<std::mutex> lock(mutex_);
        gemm_stats& e = rows_[s];
        ++e.calls;
        e.seconds += seconds;
    }
    std::map<gemm_shape, gemm_stats> snapshot() const {
        std::lock_guard<std::mutex> lock(mutex_);
        return rows_;
    }
    void clear() {
        std::lock_guard<std::mutex> lock(mutex_);
        rows_.clear();
    }
    /// The table (rows of at least `min_share` of all GEMM time), as described in the file comment.
    void print(std::FILE* out, double min_share = 0.005) const {
        const auto rows = snapshot();
        double total = 0;
        for (const auto& [s, e] : rows) total += e.seconds;
        if (total <= 0) return;
        std::fprintf(out, "gemm() calls by shape (CTG_GEMM_PROFILE), %.3f s in all:\n", total);
        for (const auto& [s, e] : rows) {
            if (e.seconds < min_share * total) continue;
            std::fprintf(out, "  %-8s %c%c %6zu %6zu %6zu  calls %8zu  %5.1f %%  %9.2f us/call  %6.1f GFLOP/s\n",
                         s.register_kernel ? "register" : "other", s.trans_a ? 'T' : 'N', s.trans_b ? 'T' : 'N', s.M,
                         s.N, s.K, e.calls, 100 * e.seconds / total, 1e6 * e.seconds / double(e.calls),
                         2.0 * double(s.M) * double(s.N) * double(s.K) * double(e.calls) / e.seconds / 1e9);
        }
    }
    ~gemm_table() { print(stderr); }

private:
    mutable std::mutex mutex_;
    std::map<gemm_shape, gemm_stats> rows_;
};

/// Times one gemm() call from construction to destruction.
class gemm_timer {
public:
    explicit gemm_timer(const gemm_shape& s) : shape_(s) {}
    ~gemm_timer() {
        gemm_table::instance().add(shape_, std::chrono::duration<double>(std::chrono::steady_clock::now() - start_).count());
    }
    gemm_timer(const gemm_timer&) = delete;
    gemm_timer& operator=(const gemm_timer&) = delete;

private:
    gemm_shape shape_;
    std::chrono::steady_clock::time_point start_ = std::chrono::steady_clock::now();
};

}  // namespace ctg::kernels::profile
#endif
