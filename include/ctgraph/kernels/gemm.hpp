// ctgraph/kernels/gemm.hpp: row-major matrix products.
//
// C = alpha * op(A) op(B) + beta * C, op = identity or transpose. One thread's product is
// OpenBLAS's cblas_?gemm or ctgraph's register kernel (kernels/register_gemm.hpp), as
// register_gemm_policy chooses: where OpenBLAS runs at the machine's full vector rate (Zen 4), its
// unpacked small-matrix kernels for small shapes and the register kernel from about a million
// multiply-adds on (where OpenBLAS packs its operands first); where it runs narrower vectors than
// the machine (its AVX2 kernels on a Zen 5), the register kernel for every float product. A single
// row times a matrix is kernels::combine_rows (a decoding step: OpenBLAS's call overhead was 2/3
// of a cached decoding step). More
// threads split a product on ctgraph's pool (kernels/parallel.hpp). `gemm_reference` is the plain
// triple loop the tests compare them with.
#pragma once
#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <stdexcept>
#include <string>
#include <string_view>
#include <type_traits>
#include <vector>

extern "C" {
#include <cblas.h>
// OpenBLAS's own (exported) shutdown of its thread server, as its fork handler uses it; weak, so
// a BLAS without it links too.
__attribute__((weak)) int blas_thread_shutdown_(void);
}

#include "ctgraph/kernels/gemm_profile.hpp"
#include "ctgraph/kernels/parallel.hpp"
#include "ctgraph/kernels/register_gemm.hpp"
#include "ctgraph/kernels/simd.hpp"
#include "ctgraph/memory.hpp"

namespace ctg::kernels {

/// Plain reference product, same contract as gemm().
template <class T>
inline void gemm_reference(bool trans_a, bool trans_b, std::size_t M, std::size_t N, std::size_t K, T alpha,
                           const T* A, std::size_t lda, const T* B, std::size_t ldb, T beta, T* C,
                           std::size_t ldc, const T* bias = nullptr) {
    for (std::size_t i = 0; i < M; ++i)
        for (std::size_t j = 0; j < N; ++j) {
            T acc = 0;
            for (std::size_t k = 0; k < K; ++k) {
                T a = trans_a ? A[k * lda + i] : A[i * lda + k];
                T b = trans_b ? B[j * ldb + k] : B[k * ldb + j];
                acc += a * b;
            }
            C[i * ldc + j] = alpha * acc + (bias ? bias[j] : T(0)) + (beta == T(0) ? T(0) : beta * C[i * ldc + j]);
        }
}

/// Floating-point operations (2 M N K per call) of every gemm() since the last reset: what
/// ctg-bench reports as the matrix-product work of a step (its "GEMM bound"). Atomic: ops call
/// gemm() from the pool's tasks (one per attention head, say).
inline std::atomic<std::uint64_t>& gemm_flop_counter() {
    static std::atomic<std::uint64_t> flops{0};
    return flops;
}

/// The pool ctgraph's kernels run on. OpenBLAS is kept at one thread from the first use on: a
/// product worth two threads is split by gemm() into single-threaded OpenBLAS calls on this pool.
/// OpenBLAS started its own threads when it was loaded (unless OPENBLAS_NUM_THREADS=1), and they
/// poll with sched_yield for about 0.1 s after their last work: measured, they took a core from
/// this pool in 1 run of 4 (mlp at 2 threads: 0.57 instead of 0.35 ms). They are stopped here
/// (OpenBLAS restarts them itself if it is ever asked for more than one thread again).
inline thread_pool& kernel_pool() {
    static thread_pool& pool = [] () -> thread_pool& {
        openblas_set_num_threads(1);
        if (blas_thread_shutdown_) blas_thread_shutdown_();
        return thread_pool::instance();
    }();
    return pool;
}

/// Where gemm() multiplies with the register kernel instead of OpenBLAS (float, optimised builds).
enum class register_gemm_policy {
    table,       ///< where register_gemm_faster says (measured where OpenBLAS runs at the machine's full vector rate)
    everywhere,  ///< every product it tiles (N of one vector or more): OpenBLAS runs narrower vectors than the machine
};

namespace detail {

// Times the register kernel against OpenBLAS on one product below the table's crossover (64^3: the
// table says OpenBLAS) and chooses `everywhere` when the register kernel is over 1.5x faster. What
// it detects: Debian's OpenBLAS 0.3.21 runs its Haswell (AVX2) kernels on a Zen 5 (it does not know
// the CPU), which executes AVX-512 at twice the AVX2 rate; there the register kernel won on every
// shape of bench/gemm-shapes but one (N of one vector: 1.0x), 1.2-2.9x (64^3: 2.1x). Where AVX-512
// runs at the AVX2 rate (Zen 4), or OpenBLAS has AVX-512 kernels of its own, the ratio is about 1
// or below (the Zen 4 table: 0.9-1.0 on 128 x 64 x 64, not timed at 64^3 there), far from the
// threshold, so the choice does not flip between processes (a resumed run must compute what the
// uninterrupted one did, bit for bit). Best of 7 rounds of 8 calls each, 0.4 ms once per
// process. CTG_REGISTER_GEMM=table|everywhere skips the measurement.
inline register_gemm_policy measure_register_gemm_policy() {
    if (const char* v = std::getenv("CTG_REGISTER_GEMM")) {
        const std::string_view choice(v);
        if (choice == "table") return register_gemm_policy::table;
        if (choice == "everywhere") return register_gemm_policy::everywhere;
        throw std::invalid_argument("CTG_REGISTER_GEMM='" + std::string(choice) + "': expected 'table' or 'everywhere'");
    }
    constexpr std::size_t n = 64, calls = 8;
    std::vector<float> a(n * n), b(n * n), c(n * n);
    for (std::size_t i = 0; i < n * n; ++i) {
        a[i] = float(i % 7) * 0.25f - 0.75f;
        b[i] = float(i % 5) * 0.5f - 1.0f;
    }
    const auto best_of = [&](auto&& product) {
        double best = 1e30;
        for (int round = 0; round < 7; ++round) {
            const auto t0 = std::chrono::steady_clock::now();
            for (std::size_t i = 0; i < calls; ++i) product();
            best = std::min(best, std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count());
        }
        return best;
    };
    const auto blas = [&] {
        cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, int(n), int(n), int(n), 1.0f, a.data(), int(n), b.data(),
                    int(n), 0.0f, c.data(), int(n));
    };
    const auto reg = [&] { register_gemm(false, false, n, n, n, 1.0f, a.data(), n, b.data(), n, 0.0f, c.data(), n); };
    blas(), reg();  // first touches, OpenBLAS's first-call set-up
    const double t_blas = best_of(blas), t_reg = best_of(reg);
    return t_blas > 1.5 * t_reg ? register_gemm_policy::everywhere : register_gemm_policy::table;
}

inline std::atomic<register_gemm_policy>& register_gemm_policy_slot() {
    static std::atomic<register_gemm_policy> slot{measure_register_gemm_policy()};
    return slot;
}

}  // namespace detail

/// This process's register_gemm_policy: measured at the first call (see
/// detail::measure_register_gemm_policy), or as set. Setting it is for tests and benchmarks of
/// both paths; results of the two differ in the last bits (sums in another order).
inline register_gemm_policy get_register_gemm_policy() { return detail::register_gemm_policy_slot().load(std::memory_order_relaxed); }
inline void set_register_gemm_policy(register_gemm_policy p) { detail::register_gemm_policy_slot().store(p, std::memory_order_relaxed); }

/// Whether gemm() multiplies op(A) (M x K) by op(B) (K x N) with the register kernel: float, in an
/// optimised build, where the policy says. A build without optimisation (Debug) compiles the
/// kernel's loops as written, tens of times slower than OpenBLAS (optimised whatever the build):
/// CI's Debug tests took 585 instead of 269 s.
template <class T>
inline bool use_register_gemm(bool trans_a, bool trans_b, std::size_t M, std::size_t N, std::size_t K) {
#if defined(__OPTIMIZE__)
    if (!std::is_same_v<T, float> || scalar_only()) return false;
    if (get_register_gemm_policy() == register_gemm_policy::everywhere) return N >= batch<T>::size;
    return register_gemm_faster<T>(trans_a, trans_b, M, N, K);
#else
    (void)trans_a, (void)trans_b, (void)M, (void)N, (void)K;
    return false;
#endif
}

namespace detail {

// One thread's product: the small-shape paths, else OpenBLAS.
template <class T>
inline void gemm_serial(bool trans_a, bool trans_b, std::size_t M, std::size_t N, std::size_t K, T alpha, const T* A,
                        std::size_t lda, const T* B, std::size_t ldb, T beta, T* C, std::size_t ldc,
                        const T* bias = nullptr) {
    if (K == 0 || scalar_only()) {
        gemm_reference(trans_a, trans_b, M, N, K, alpha, A, lda, B, ldb, beta, C, ldc, bias);
        return;
    }
    if (M == 1 && !trans_a && !trans_b && alpha == T(1) && beta == T(0)) {
        combine_rows(K, N, A, B, ldb, C, bias);  // a vector times a matrix (a decoding step): no BLAS call overhead
        return;
    }
    if (bias) {
        // The register kernel adds the bias as it stores C (no pass of its own); other paths: the
        // bias is written into C first and the product accumulates onto it (OpenBLAS reads C at
        // beta 1 anyway), or, for one row or beta != 0, added after.
        if constexpr (std::is_same_v<T, float>)
            if (use_register_gemm<T>(trans_a, trans_b, M, N, K)) {
                register_gemm(trans_a, trans_b, M, N, K, alpha, A, lda, B, ldb, beta, C, ldc, bias);
                return;
            }
        if (beta == T(0) && M > 1) {
            for (std::size_t i = 0; i < M; ++i) std::copy(bias, bias + N, C + i * ldc);
            gemm_serial(trans_a, trans_b, M, N, K, alpha, A, lda, B, ldb, T(1), C, ldc);
        } else {
            gemm_serial(trans_a, trans_b, M, N, K, alpha, A, lda, B, ldb, beta, C, ldc);
            for (std::size_t i = 0; i < M; ++i) add_to(N, bias, C + i * ldc);
        }
        return;
    }
    auto scaled = [alpha, beta](T v, T c) { return alpha * v + (beta == T(0) ? T(0) : beta * c); };  // C never read at beta 0
    if (!trans_a && trans_b && M == 1) {  // one row times B^T: N dot products (attention's context VJP)
        for (std::size_t j = 0; j < N; ++j)
            C[j] = scaled(reduce_sum(K, A, B + j * ldb, [](auto a, auto b) { return a * b; }), C[j]);
        return;
    }
    const bool register_everywhere = use_register_gemm<T>(trans_a, trans_b, M, N, K) &&  // (Debug: never measured)
                                     get_register_gemm_policy() == register_gemm_policy::everywhere;
    if (!trans_a && trans_b && M <= 16 && M < N && K >= 64 && !register_everywhere) {
        // A B^T with few rows (a VJP's dX = dY W^T over a small batch: the rnn's recurrent step),
        // unless the register kernel takes every product (it runs them at 2.1x OpenBLAS's rate
        // then, transposing B into its panel). OpenBLAS's NT kernels run these at about 55 % of
        // its NN rate, so compute C^T = B A^T, an NN product, through A^T and C^T in a scratch
        // buffer (two transposes of M K and N M elements). Measured with kernels::gemm, 1 thread:
        // 16x128x128 8.1 -> 5.6 us, 16x384x256 48 -> 39 us; from 32 rows on the transposes cost
        // more than they save (32x128x384: 40 -> 43 us).
        scratch<T> buffer(M * (K + N));
        T *at = buffer.data(), *ct = at + M * K;
        transpose(M, K, A, lda, at, M);
        if constexpr (std::is_same_v<T, float>)
            cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, int(N), int(M), int(K), alpha, B, int(ldb), at, int(M), 0.0f, ct, int(M));
        else
            cblas_dgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, int(N), int(M), int(K), alpha, B, int(ldb), at, int(M), 0.0, ct, int(M));
        if (beta != T(0) && beta != T(1))
            for (std::size_t i = 0; i < M; ++i)
                for (std::size_t j = 0; j < N; ++j) C[i * ldc + j] *= beta;
        transpose(N, M, ct, M, C, ldc, beta != T(0));  // C (+)= (C^T)^T; C not read at beta 0
        return;
    }
    if (trans_a && !trans_b && K == 1) {  // an outer product (attention's context VJP): no BLAS call
        for (std::size_t i = 0; i < M; ++i)
            for (std::size_t j = 0; j < N; ++j) C[i * ldc + j] = scaled(A[i] * B[j], C[i * ldc + j]);
        return;
    }
    if constexpr (std::is_same_v<T, float>)  // double (gradient checks) stays with OpenBLAS: half the compile cost
        if (use_register_gemm<T>(trans_a, trans_b, M, N, K)) {  // measured faster than OpenBLAS: see register_gemm.hpp
            register_gemm(trans_a, trans_b, M, N, K, alpha, A, lda, B, ldb, beta, C, ldc);
            return;
        }
    const auto ta = trans_a ? CblasTrans : CblasNoTrans;
    const auto tb = trans_b ? CblasTrans : CblasNoTrans;
    if constexpr (std::is_same_v<T, float>)
        cblas_sgemm(CblasRowMajor, ta, tb, int(M), int(N), int(K), alpha, A, int(lda), B, int(ldb), beta, C, int(ldc));
    else
        cblas_dgemm(CblasRowMajor, ta, tb, int(M), int(N), int(K), alpha, A, int(lda), B, int(ldb), beta, C, int(ldc));
}

}  // namespace detail

/// Products below this many floating-point operations run on one thread: splitting costs about a
/// microsecond of hand-over, the rnn's 16 x 128 x 128 step (0.5 MFLOP, ~5 us) already gains.
inline constexpr std::uint64_t parallel_gemm_min_flops = std::uint64_t(1) << 18;

/// C (M x N) = alpha * op(A) (M x K) * op(B) (K x N) + beta * C, plus `bias` (N values, optional:
/// a linear layer's) in every row; all row-major. On a pool of P > 1
/// threads a product of at least parallel_gemm_min_flops is split into P row blocks (M >= N) or
/// column blocks, each one thread's product; every element of C is computed by one thread from the
/// same operands, so the result does not depend on a race.
template <class T>
inline void gemm(bool trans_a, bool trans_b, std::size_t M, std::size_t N, std::size_t K, T alpha, const T* A,
                 std::size_t lda, const T* B, std::size_t ldb, T beta, T* C, std::size_t ldc, const T* bias = nullptr) {
    if (M == 0 || N == 0) return;
#if defined(CTG_GEMM_PROFILE)  // per-shape timing: see kernels/gemm_profile.hpp
    const profile::gemm_timer timer(
        {std::is_same_v<T, float> && use_register_gemm<T>(trans_a, trans_b, M, N, K), trans_a, trans_b, M, N, K});
#endif
    const std::uint64_t flops = 2ULL * M * N * K;
    gemm_flop_counter().fetch_add(flops, std::memory_order_relaxed);
    const std::size_t P = std::size_t(kernel_pool().threads_here());  // 1 inside a task (an attention head's)
    if (P > 1 && M > 1 && flops >= parallel_gemm_min_flops && !scalar_only()) {
        constexpr std::size_t row_align = 8, col_align = 16;  // whole register tiles of OpenBLAS's kernels
        if (M >= N && M >= 2 * row_align) {
            parallel_ranges(M, P, row_align, [&](std::size_t m0, std::size_t m1) {
                detail::gemm_serial(trans_a, trans_b, m1 - m0, N, K, alpha, trans_a ? A + m0 : A + m0 * lda, lda, B, ldb,
                                    beta, C + m0 * ldc, ldc, bias);
            });
            return;
        }
        if (N >= 2 * col_align) {
            parallel_ranges(N, P, col_align, [&](std::size_t n0, std::size_t n1) {
                detail::gemm_serial(trans_a, trans_b, M, n1 - n0, K, alpha, A, lda, trans_b ? B + n0 * ldb : B + n0, ldb,
                                    beta, C + n0, ldc, bias ? bias + n0 : nullptr);
            });
            return;
        }
    }
    detail::gemm_serial(trans_a, trans_b, M, N, K, alpha, A, lda, B, ldb, beta, C, ldc, bias);
}

/// Two independent products of equal flops, such as a product's two VJPs (dA = dC B^T and
/// dB = A^T dC): on a pool of two threads, one task each (one hand-over instead of one per split
/// product, each product whole, so with the bits of one thread); otherwise one after the other,
/// each split as gemm() splits it. `first` and `second` call gemm().
template <class First, class Second>
inline void gemm_pair(std::uint64_t flops_each, First&& first, Second&& second) {
    if (kernel_pool().threads_here() == 2 && 2 * flops_each >= parallel_gemm_min_flops && !scalar_only()) {
        kernel_pool().run(2, [&](std::size_t which) { which == 0 ? first() : second(); });
        return;
    }
    first();
    second();
}

}  // namespace ctg::kernels

namespace ctg {
/// Threads used by ctgraph's kernels: the size of kernels::kernel_pool() (the caller and k - 1
/// workers; OpenBLAS itself stays at one thread). Default: CTG_NUM_THREADS, else
/// OPENBLAS_NUM_THREADS, else the hardware's.
inline void set_num_threads(int k) { kernels::kernel_pool().resize(k); }
inline int num_threads() { return kernels::kernel_pool().size(); }
}  // namespace ctg
