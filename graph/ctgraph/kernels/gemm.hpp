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
#include <array>
#include <atomic>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <stdexcept>
#include <string>
#include <string_view>
#include <type_traits>
#include <utility>
#include <vector>

extern "C" {
#include <cblas.h>
// OpenBLAS's name for the kernels it chose; weak, so a BLAS without it links too.
__attribute__((weak)) char* openblas_get_corename(void);
// OpenBLAS's own (exported) shutdown of its thread server, as its fork handler uses it; weak, so
// a BLAS without it links too.
__attribute__((weak)) int blas_thread_shutdown_(void);
}

#if defined(__x86_64__) || defined(__i386__)
#include <cpuid.h>
#endif

#include "ctgraph/kernels/bf16.hpp"
#include "ctgraph/kernels/gemm_profile.hpp"
#include "ctgraph/kernels/onednn.hpp"
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

/// Which kernel gemm() multiplies float products with: the register kernel, OpenBLAS or oneDNN.
enum class register_gemm_policy {
    table,       ///< register kernel where register_gemm_faster says, else OpenBLAS (measured where OpenBLAS runs at the machine's full vector rate)
    everywhere,  ///< register kernel for every product it tiles (N of one vector or more): OpenBLAS runs narrower vectors than the machine
    onednn,      ///< oneDNN's f32 kernels for products of 32+ rows and 2^18+ multiply-adds, the register kernel for the rest (Intel AVX-512)
};

namespace detail {

// What the machine is, as far as the choice goes: whether this build's register kernel runs
// 512-bit vectors, whether the CPU executes them at full width, and which kernels OpenBLAS chose.
struct gemm_machine {
    bool avx512_build = false;       // this build's kernels use 512-bit vectors (-march with AVX-512)
    bool avx512_full_width = false;  // the CPU runs them at twice the AVX2 rate (not Zen 4's two 256-bit halves)
    std::string_view blas_core;      // openblas_get_corename(): "Haswell", "SkylakeX", "Zen", ...
    bool intel = false;              // GenuineIntel
    bool onednn_avx512 = false;      // this build has oneDNN and it dispatches AVX-512 (or better) kernels here
};

// The CPU's vendor, from CPUID leaf 0 ("GenuineIntel", "AuthenticAMD").
enum class cpu_vendor { intel, amd, other };
inline cpu_vendor this_cpu_vendor() {
#if defined(__x86_64__) || defined(__i386__)
    unsigned eax = 0, ebx = 0, ecx = 0, edx = 0;
    __get_cpuid(0, &eax, &ebx, &ecx, &edx);
    if (ebx == 0x756e6547u) return cpu_vendor::intel;  // "Genu"
    if (ebx == 0x68747541u) return cpu_vendor::amd;    // "Auth"
#endif
    return cpu_vendor::other;
}

inline gemm_machine this_machine() {
    gemm_machine m;
    if (openblas_get_corename) m.blas_core = openblas_get_corename();
#if defined(__AVX512F__) && (defined(__x86_64__) || defined(__i386__))
    m.avx512_build = true;
    unsigned eax = 0, ebx = 0, ecx = 0, edx = 0;
    const cpu_vendor vendor = this_cpu_vendor();
    const bool amd = vendor == cpu_vendor::amd;
    m.intel = vendor == cpu_vendor::intel;
    m.onednn_avx512 = onednn_has_avx512();
    __get_cpuid(1, &eax, &ebx, &ecx, &edx);
    const unsigned family = ((eax >> 8) & 0xfu) + (((eax >> 8) & 0xfu) == 0xfu ? (eax >> 20) & 0xffu : 0u);
    m.avx512_full_width = !(amd && family == 0x19);  // Zen 4 (family 19h) splits 512-bit operations in two
#endif
    return m;
}

// The policy for a machine: `everywhere` where the register kernel runs 512-bit vectors at full
// width and OpenBLAS has no AVX-512 kernels of its own for the CPU (Debian's OpenBLAS 0.3.21 runs
// its Haswell kernels on a Zen 5, family 1Ah, which it does not know); else `table`. Measured on
// bench/gemm-shapes: on the Zen 5 the register kernel won on every shape but one (N of one vector:
// 1.0x), 1.2-2.9x; on a Zen 4 it lost below about a million multiply-adds (OpenBLAS's small
// kernels: 113-116 against 99-111 GFLOP/s), where the table keeps OpenBLAS.
// (This was once a timing of one 64^3 product at start-up, against a 1.5x
// threshold; on the Zen 5 host the ratio ranged over 1.2-1.5x between processes and the policy
// flipped in 4 runs of 20: a program's bits and speed depended on the timing.)
// On an Intel AVX-512 CPU with oneDNN: `onednn`. Measured with bench/gemm-shapes on a Xeon of
// model 207 (Emerald Rapids, AMX not exposed to the VM), 1 thread: oneDNN's f32 brgemm ran gpt-m's
// and gpt-s's products at 97-134 GFLOP/s against the register kernel's 39-115 (its weight-gradient
// shapes, A^T B, 39-45: 2.4-2.7x slower), and OpenBLAS 0.3.21, which does not know the model and
// runs its Prescott (SSE3) kernels, at 15-28; the register kernel kept the small products (the rnn's
// 16 x 128 x 128 step: 147 against 85).
inline register_gemm_policy policy_for(const gemm_machine& m) {
    if (m.intel && m.avx512_build && m.onednn_avx512) return register_gemm_policy::onednn;
    for (std::string_view own : {"SkylakeX", "Cooperlake", "SapphireRapids"})  // OpenBLAS's AVX-512 cores
        if (m.blas_core == own) return register_gemm_policy::table;
    return m.avx512_build && m.avx512_full_width ? register_gemm_policy::everywhere : register_gemm_policy::table;
}

// CTG_REGISTER_GEMM=table|everywhere, else policy_for(this_machine()): the same choice in every
// process on one machine (a resumed run must compute what the uninterrupted one did, bit for bit).
inline register_gemm_policy choose_register_gemm_policy() {
    if (const char* v = std::getenv("CTG_REGISTER_GEMM")) {
        const std::string_view choice(v);
        if (choice == "table") return register_gemm_policy::table;
        if (choice == "everywhere") return register_gemm_policy::everywhere;
        if (choice == "onednn") {
            if (!onednn_has_avx512())
                throw std::invalid_argument("CTG_REGISTER_GEMM=onednn: oneDNN has no AVX-512 kernels here (its effective ISA: " +
                                            onednn_isa_name() + ")");
            return register_gemm_policy::onednn;
        }
        throw std::invalid_argument("CTG_REGISTER_GEMM='" + std::string(choice) + "': expected 'table', 'everywhere' or 'onednn'");
    }
    return policy_for(this_machine());
}

inline std::atomic<register_gemm_policy>& register_gemm_policy_slot() {
    static std::atomic<register_gemm_policy> slot{choose_register_gemm_policy()};
    return slot;
}

}  // namespace detail

/// This process's register_gemm_policy: chosen at the first call (see
/// detail::choose_register_gemm_policy), or as set. Setting it is for tests and benchmarks of
/// both paths; results of the two differ in the last bits (sums in another order).
inline register_gemm_policy get_register_gemm_policy() { return detail::register_gemm_policy_slot().load(std::memory_order_relaxed); }
inline void set_register_gemm_policy(register_gemm_policy p) {
    if (p == register_gemm_policy::onednn && !onednn_has_avx512())
        throw std::invalid_argument("ctg::kernels::set_register_gemm_policy(onednn): oneDNN has no AVX-512 kernels here (its effective ISA: " +
                                    onednn_isa_name() + ")");
    detail::register_gemm_policy_slot().store(p, std::memory_order_relaxed);
}

inline const char* register_gemm_policy_name(register_gemm_policy p) {
    return p == register_gemm_policy::table ? "table" : p == register_gemm_policy::everywhere ? "everywhere" : "onednn";
}

/// Whether gemm() runs a float product on oneDNN's f32 kernels (policy onednn; products of 32 rows
/// or more and at least 2^18 multiply-adds: below that the register kernel won on the Xeon that
/// set the rule, and a call's set-up in oneDNN costs about a microsecond).
template <class T>
inline bool use_onednn_gemm(std::size_t M, std::size_t N, std::size_t K) {
    if (!std::is_same_v<T, float> || scalar_only()) return false;
    return get_register_gemm_policy() == register_gemm_policy::onednn && M >= 32 && M * N * K >= (std::size_t(1) << 18);
}

/// Whether gemm() multiplies op(A) (M x K) by op(B) (K x N) with the register kernel: float, in an
/// optimised build, where the policy says. A build without optimisation (Debug) compiles the
/// kernel's loops as written, tens of times slower than OpenBLAS (optimised whatever the build):
/// CI's Debug tests took 585 instead of 269 s.
template <class T>
inline bool use_register_gemm(bool trans_a, bool trans_b, std::size_t M, std::size_t N, std::size_t K) {
#if defined(__OPTIMIZE__)
    if (!std::is_same_v<T, float> || scalar_only()) return false;
    if (get_register_gemm_policy() != register_gemm_policy::table) return N >= batch<T>::size;
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
#if defined(CTG_WITH_ONEDNN)
    if constexpr (std::is_same_v<T, float>)
        if (K > 0 && use_onednn_gemm<T>(M, N, K)) {  // oneDNN adds a bias only at alpha 1, beta 0; else after
            const bool bias_in = bias && alpha == 1.0f && beta == 0.0f;
            onednn_matmuls::here().run(trans_a, trans_b, M, N, K, alpha, A, lda, B, ldb, beta, C, ldc, bias_in ? bias : nullptr);
            if (bias && !bias_in)
                for (std::size_t i = 0; i < M; ++i) add_to(N, bias, C + i * ldc);
            return;
        }
#endif
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
                                     get_register_gemm_policy() != register_gemm_policy::table;
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

/// A split product's pieces are about this large, up to 4 per thread: more pieces than threads, so
/// that a thread which runs slower than the other (a vCPU sharing its core) takes fewer of them
/// instead of making the other wait (gpt-m at 2 threads, one piece per thread: the caller waited
/// for the worker's half in 11.5 % of the samples). About 150 us at 1 thread: a hand-over (~1 us)
/// is under 1 %; pieces of 8 MFLOP made mlp's 2-thread step 6 % slower.
inline constexpr std::uint64_t gemm_piece_flops = std::uint64_t(32) << 20;

/// One product C = alpha op(A) op(B) + beta C (+ bias in every row), as gemm() takes it.
template <class T>
struct gemm_args {
    bool trans_a, trans_b;
    std::size_t M, N, K;
    T alpha;
    const T* A;
    std::size_t lda;
    const T* B;
    std::size_t ldb;
    T beta;
    T* C;
    std::size_t ldc;
    const T* bias = nullptr;
    bool bf16 = false;  // operands rounded to bfloat16, products accumulated in float (float only: see gemm())
    // bf16 products only: A's and B's values already rounded to bf16, laid out as A and B are
    // (same leading dimension), or null. A program keeps such a copy of a value that products read
    // (a bf16 shadow, filled when the value is made: graph/exec.hpp); the product then reads it
    // instead of converting the floats.
    const bf16_bits* A16 = nullptr;
    const bf16_bits* B16 = nullptr;
    std::uint64_t flops() const { return 2ULL * M * N * K; }
};

namespace detail {

// How a product is cut: `count` row blocks (or column blocks) of `step` rows (columns), the last
// shorter; bounds on whole register tiles of OpenBLAS's kernels (8 rows, 16 columns).
struct gemm_cut {
    bool by_rows = true;
    std::size_t step = 0, count = 1;
};
template <class T>
gemm_cut cut_of(const gemm_args<T>& g, std::size_t pieces) {
    constexpr std::size_t row_align = 8, col_align = 16;
    const auto cut = [pieces](bool rows, std::size_t n, std::size_t align) {
        const std::size_t step = range_step(n, pieces, align);
        return gemm_cut{rows, step, (n + step - 1) / step};
    };
    if (pieces > 1 && g.M >= g.N && g.M >= 2 * row_align) return cut(true, g.M, row_align);
    if (pieces > 1 && g.M > 1 && g.N >= 2 * col_align) return cut(false, g.N, col_align);
    // One row times B (combine_rows: a decoding step's layers and head, which read memory faster
    // from two threads than from one): column pieces of whole 128-column blocks, the last at least
    // a batch wide. combine_rows picks a column's form by its place among 128-column blocks and the
    // width's rest only, so each column is summed as on one thread: the same bits at any count.
    constexpr std::size_t one_row_align = 128;
    if (pieces > 1 && g.M == 1 && !g.trans_a && !g.trans_b && g.alpha == T(1) && g.beta == T(0) && g.N >= 2 * one_row_align) {
        const gemm_cut c = cut(false, g.N, one_row_align);
        if (g.N - (c.count - 1) * c.step >= batch<T>::size) return c;
    }
    return {};
}

// Piece p of product g cut as c, on the calling thread. Every element of C is computed by one
// piece from the same operands whatever the cut: the result does not depend on the thread count
// or on which thread ran which piece.
template <class T>
void run_piece(const gemm_args<T>& g, const gemm_cut& c, std::size_t p) {
    gemm_args<T> x = g;  // (one call of gemm_serial below: each call site is a copy of it)
    if (c.count > 1) {
        const std::size_t b = p * c.step, e = std::min(c.by_rows ? g.M : g.N, b + c.step);
        if (c.by_rows) {
            x.M = e - b;
            x.A = g.trans_a ? g.A + b : g.A + b * g.lda;
            x.C = g.C + b * g.ldc;
        } else {
            x.N = e - b;
            x.B = g.trans_b ? g.B + b * g.ldb : g.B + b;
            x.C = g.C + b;
            x.bias = g.bias ? g.bias + b : nullptr;
        }
    }
    gemm_serial(x.trans_a, x.trans_b, x.M, x.N, x.K, x.alpha, x.A, x.lda, x.B, x.ldb, x.beta, x.C, x.ldc, x.bias);
}

// Products that run together, each cut into pieces; all pieces are one job of the pool, claimed
// by whichever thread is free (one hand-over for all of them).
template <class T, std::size_t n>
void run_cut(const std::array<gemm_args<T>, n>& g, const std::array<gemm_cut, n>& c) {
    struct job {
        const std::array<gemm_args<T>, n>& g;
        const std::array<gemm_cut, n>& c;
    } j{g, c};
    std::size_t total = 0;
    for (const gemm_cut& x : c) total += x.count;
    kernel_pool().run_erased(
        total,
        [](void* ctx, std::size_t task) {
            const job& jb = *static_cast<const job*>(ctx);
            std::size_t i = 0;
            while (task >= jb.c[i].count) task -= jb.c[i++].count;
            run_piece(jb.g[i], jb.c[i], task);
        },
        &j);
}

// Pieces of a product of `flops` run among `together` products on P threads: 1 below
// parallel_gemm_min_flops (all of them together); enough for every thread to have one when the
// product is smaller than P pieces of gemm_piece_flops; else one per gemm_piece_flops, rounded up
// to a multiple of P (3 equal pieces on 2 threads take 2 pieces' time: mlp's 784 x 256 x 64
// weight gradient ran 9 % slower so) and at most 4 per thread.
inline std::size_t piece_count(std::uint64_t flops, std::uint64_t flops_together, std::size_t together, std::size_t P) {
    if (P <= 1 || flops_together < parallel_gemm_min_flops || scalar_only()) return 1;
    const std::size_t by_size = std::size_t(flops / gemm_piece_flops);
    if (by_size < P) return (P + together - 1) / together;
    return std::min((by_size + P - 1) / P * P, 4 * P);
}

}  // namespace detail

// ---------------------------------------------------------------- bf16 products
// What computes a bf16 product (gemm(..., bf16 = true)): its operands rounded to bfloat16, the
// products accumulated in float, whichever engine runs it.
//   onednn    oneDNN's kernels (kernels/onednn.hpp), wherever oneDNN has bf16 kernels for the CPU:
//             AMX tiles (Intel Xeon, 4th generation on) or AVX512-BF16 (AMD Zen 4/5, Intel Cooper
//             Lake). Measured on a Zen 4 (1 thread): 290-340 GFLOP/s on gpt-m's products against
//             100-120 for float. oneDNN 2.6's dnnl_primitive_execute allocates 6 small blocks per
//             call inside the library (its argument map and scratchpad wrappers; ctgraph's own code
//             allocates nothing): kernels::onednn_executions() counts the calls.
//   emulated  float products of the bf16-rounded operands (exact products, float sums): CPUs
//             without bf16 instructions (or ONEDNN_MAX_CPU_ISA below AVX512_CORE_BF16), and Intel
//             CPUs with AVX512-BF16 but no AMX, where it is the faster engine (default_bf16_engine).
//             Said once on stderr.
// CTG_BF16_ENGINE=onednn|emulated overrides the default (onednn where it cannot run is an error),
// as set_bf16_engine() does in a test. The choice depends only on the machine and the environment,
// never on a timing: every process on a machine computes the same bits.
enum class bf16_engine { onednn, emulated };

/// Whether this process can run engine e.
inline bool bf16_engine_available(bf16_engine e) {
    return e == bf16_engine::emulated || onednn_has_bf16();
}
inline const char* bf16_engine_name(bf16_engine e) {
    return e == bf16_engine::onednn ? "onednn" : "emulated";
}

namespace detail {
// Why the default is the emulation here, or nullptr where it is oneDNN.
inline const char* why_bf16_emulated_by_default() {
    if (!onednn_has_bf16()) return "oneDNN has no bf16 kernels for this CPU";
    // oneDNN's engine where its bf16 kernels outrun float products of the same operands: on AMX
    // tiles, and on AMD Zen 4/5's AVX512-BF16, whose VDPBF16PS runs at twice the float FMA rate
    // (Zen 4: 175-340 GFLOP/s on gpt-m's products against 100-120 in float). Intel cores without
    // AMX issue VDPBF16PS at half the FMA rate: on a Xeon of model 207 whose hypervisor hides AMX,
    // a register-only loop ran 80-86 GFLOP/s in VDPBF16PS against 166-174 in VFMADD231PS, oneDNN's
    // bf16 kernels 60-87 on gpt-m's and gpt-s's shapes against its float ones 83-164, and gpt-m's
    // bf16 step 1,368 ms on oneDNN against 798 emulated (float: 770). (Cooper Lake, the other
    // Intel CPU with AVX512-BF16 and no AMX, was not measured; it takes the same rule.) The rule
    // reads the CPU and oneDNN's ISA only, never a timing: every process on a machine computes
    // the same bits (ONEDNN_MAX_CPU_ISA below AMX on an AMX host gives the emulation too).
    if (!onednn_has_amx() && this_cpu_vendor() == cpu_vendor::intel)
        return "this Intel CPU has no AMX, and its bf16 dot product runs at half its float rate";
    return nullptr;
}
inline bf16_engine default_bf16_engine() {
    return why_bf16_emulated_by_default() ? bf16_engine::emulated : bf16_engine::onednn;
}
inline bf16_engine choose_bf16_engine() {
    const char* v = std::getenv("CTG_BF16_ENGINE");
    if (!v) return default_bf16_engine();
    const std::string_view choice(v);
    for (bf16_engine e : {bf16_engine::onednn, bf16_engine::emulated})
        if (choice == bf16_engine_name(e)) {
            if (!bf16_engine_available(e))
                throw std::invalid_argument("CTG_BF16_ENGINE=" + std::string(choice) +
                                            ": oneDNN has no bf16 kernels here (its effective ISA: " + onednn_isa_name() + ")");
            return e;
        }
    throw std::invalid_argument("CTG_BF16_ENGINE='" + std::string(choice) + "': expected onednn or emulated");
}
inline std::atomic<bf16_engine>& bf16_engine_slot() {
    static std::atomic<bf16_engine> slot{choose_bf16_engine()};
    return slot;
}
}  // namespace detail

/// This process's bf16 engine (see above): chosen at the first bf16 product, or as set.
inline bf16_engine get_bf16_engine() { return detail::bf16_engine_slot().load(std::memory_order_relaxed); }
/// Sets the bf16 engine (tests and benchmarks run each); one this process cannot run throws.
inline void set_bf16_engine(bf16_engine e) {
    if (!bf16_engine_available(e))
        throw std::invalid_argument(std::string("ctg::kernels::set_bf16_engine: '") + bf16_engine_name(e) +
                                    "' cannot run here (oneDNN's effective ISA " + onednn_isa_name() + ")");
    detail::bf16_engine_slot().store(e, std::memory_order_relaxed);
}

/// Says once on stderr that bf16 products are emulated (the first emulated product calls it).
inline void note_bf16_emulation() {
    static std::atomic<bool> said{false};
    if (!said.exchange(true))
        std::fprintf(stderr,
                     "ctgraph: bf16 products run as float products of bf16-rounded operands (%s): same rounding, "
                     "float speed\n",
                     detail::why_bf16_emulated_by_default() ? detail::why_bf16_emulated_by_default()
                                                            : "as chosen by CTG_BF16_ENGINE or set_bf16_engine");
}

namespace detail {
inline void gemm_bf16(const gemm_args<float>& g, const bf16_bits* a_converted = nullptr,
                      const bf16_bits* b_converted = nullptr);  // below gemm_together
}  // namespace detail

namespace detail {
/// Whether two of the products write overlapping parts of memory (their C).
template <class T, std::size_t n>
bool outputs_overlap(const std::array<gemm_args<T>, n>& g) {
    const auto span = [](const gemm_args<T>& x) {
        const auto begin = reinterpret_cast<std::uintptr_t>(x.C);
        return std::pair{begin, begin + ((x.M - 1) * x.ldc + x.N) * sizeof(T)};
    };
    for (std::size_t i = 0; i < n; ++i)
        for (std::size_t j = i + 1; j < n; ++j) {
            if (!g[i].C || !g[j].C || !g[i].M || !g[i].N || !g[j].M || !g[j].N) continue;
            const auto [a0, a1] = span(g[i]);
            const auto [b0, b1] = span(g[j]);
            if (a0 < b1 && b0 < a1) return true;
        }
    return false;
}
}  // namespace detail

/// Independent products (a product's two VJPs, dA = dC B^T and dB = A^T dC) as one job of the
/// pool: each cut into pieces (none below parallel_gemm_min_flops in all, so the rnn's two
/// 16 x 128 x 128 VJPs are one task each), every piece claimed by the first free thread, so the
/// threads stay busy to the end even when the products differ in cost (gpt-m's 2048 x 1536 x 384
/// dX and its 1536 x 384 x 2048 dW ran 10 and 20 ms as one task each). Each element of a C is
/// computed as by gemm() alone. Products with no C to write (C == nullptr) are skipped.
template <class T, std::size_t n>
void gemm_together(std::array<gemm_args<T>, n> g) {  // (not inline: see CTG_SEPARATE_COMPILATION below)
    // Products that write one C (the two VJPs of a product of a tensor by itself, matmul(w, w) or
    // affine(w, w, b): dA and dB are one adjoint) run one after the other, as on one thread: run
    // together, two threads added into the same elements at once and lost one of the sums.
    if constexpr (n > 1)
        if (detail::outputs_overlap(g)) {
            for (const auto& x : g) gemm_together<T, 1>({x});
            return;
        }
    if constexpr (std::is_same_v<T, float>) {
        bool any_bf16 = false;
        for (const auto& x : g) any_bf16 = any_bf16 || (x.bf16 && x.C);
        if (any_bf16) {  // each product splits itself (detail::gemm_bf16)
            // A linear layer's two gradient products read dY, one as A (dY W^T), one as B (x^T dY):
            // converted once for both (it was a third of a bf16 step's conversions).
            if constexpr (n == 2)
                if (g[0].C && g[1].C && g[0].A && g[0].A == g[1].B && !g[0].A16 && !g[1].B16 && !g[0].trans_a && !g[1].trans_b && g[0].lda == g[1].ldb &&
                    g[0].M == g[1].K && g[0].K == g[1].N && g[0].M && g[0].K && g[0].N && g[1].M &&
                    get_bf16_engine() == bf16_engine::onednn && !bf16_copies::instance().find(g[0].A)) {
                    scratch<bf16_bits> dy(g[0].M * g[0].K);
                    pack_bf16_on_pool(false, g[0].M, g[0].K, g[0].A, g[0].lda, dy.data());
                    detail::gemm_bf16(g[0], dy.data(), nullptr);
                    detail::gemm_bf16(g[1], nullptr, dy.data());
                    return;
                }
            for (const auto& x : g)
                if (x.C && x.M && x.N) detail::gemm_bf16(x);
            return;
        }
    }
    std::array<detail::gemm_cut, n> c{};
    std::uint64_t flops = 0;
    std::size_t present = 0;
    for (const auto& x : g)
        if (x.C && x.M && x.N) flops += x.flops(), ++present;
#if defined(CTG_GEMM_PROFILE)  // the products' time together, shared among them by flops
    const auto start = std::chrono::steady_clock::now();
#endif
    const std::size_t P = std::size_t(kernel_pool().threads_here());  // 1 inside a task (an attention head's)
    std::size_t pieces = 0;
    for (std::size_t i = 0; i < n; ++i) {
        if (!g[i].C || !g[i].M || !g[i].N) {
            c[i].count = 0;
            continue;
        }
        gemm_flop_counter().fetch_add(g[i].flops(), std::memory_order_relaxed);
        c[i] = detail::cut_of(g[i], detail::piece_count(g[i].flops(), flops, present, P));
        pieces += c[i].count;
    }
    if (pieces > 1 && P > 1 && !scalar_only()) {
        detail::run_cut(g, c);
    } else {
        for (std::size_t i = 0; i < n; ++i)
            for (std::size_t p = 0; p < c[i].count; ++p) detail::run_piece(g[i], c[i], p);
    }
#if defined(CTG_GEMM_PROFILE)
    const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    for (const auto& x : g)
        if (x.C && x.M && x.N)
            profile::gemm_table::instance().add(
                {std::is_same_v<T, float> && use_register_gemm<T>(x.trans_a, x.trans_b, x.M, x.N, x.K), x.trans_a, x.trans_b, x.M, x.N, x.K},
                flops ? seconds * double(x.flops()) / double(flops) : seconds / double(present));
#endif
}

/// y (N) = bias + x W for one row x (K floats) and a bf16 matrix W (K x N, leading dimension ldw):
/// combine_rows over bf16 rows, by its earlier name.
[[deprecated("ctg::kernels::combine_rows_bf16 is combine_rows(K, N, x, w, ldw, y, bias) over bf16 rows")]]
inline void combine_rows_bf16(std::size_t K, std::size_t N, const float* x, const bf16_bits* w, std::size_t ldw, float* y,
                              const float* bias) {
    combine_rows(K, N, x, w, ldw, y, bias);
}

namespace detail {

// The emulated engine converts its larger operand by blocks of about this many floats (1 MiB:
// half of an L2 of 2 MiB), see gemm_bf16.
inline constexpr std::size_t emulation_block_floats = std::size_t(1) << 18;

// Row blocks of a bf16 product for P threads: whole blocks of 16 rows, one piece below
// parallel_gemm_min_flops (the cut of a float product by rows, cut_of; no column cuts: the
// operands are packed once for all pieces).
inline gemm_cut bf16_cut(std::size_t M, std::uint64_t flops, std::size_t P) {
    const std::size_t pieces = piece_count(flops, flops, 1, P);
    if (pieces <= 1 || M < 32) return {};
    const std::size_t step = range_step(M, pieces, 16);
    return gemm_cut{true, step, (M + step - 1) / step};
}


// A bf16 product (see gemm()). Operands that are parameters of a store keeping bf16 copies
// (parameter_store::enable_bf16, as mixed-precision programs do) are read from their copy; others
// are rounded here. Then, by engine: oneDNN (the operands packed once, row blocks of C as pool
// tasks, each one single-threaded oneDNN call), or the emulation (float products of the rounded
// values). One row times a weight with a bf16 copy (a decoding step) is combine_rows on any
// engine: it reads the copy in place, half the bytes of the float weight.
// a_converted / b_converted: the operand already converted as it is stored (rows x cols of its
// op's storage, contiguous), by a caller that shares one conversion between two products.
inline void gemm_bf16(const gemm_args<float>& g, const bf16_bits* a_converted, const bf16_bits* b_converted) {
    const std::size_t M = g.M, N = g.N, K = g.K;
    if (M == 0 || N == 0) return;
    // A weight's copy (bf16_copies), else the caller's shadow of an activation (gemm_args::A16,
    // B16). A small transposed A is still converted transposed from its floats, as without a
    // shadow (the rule below: oneDNN then reads a plain A), so that a shadow changes no bits; a
    // value kept in bf16 only comes with a null A (or B) and its shadow, which is then transposed
    // instead (the same bits).
    const bf16_bits* b_weight = g.B ? bf16_copies::instance().find(g.B) : nullptr;
    const bf16_bits* a_copy = g.A ? bf16_copies::instance().find(g.A) : nullptr;
    const bf16_bits* a_only = g.A ? nullptr : g.A16;  // A kept in bf16 only
    if (!a_copy && g.A16 && !(g.trans_a && M * K <= (std::size_t(1) << 18))) a_copy = g.A16;
    const bf16_bits* b_copy = b_weight ? b_weight : g.B16;
    [[maybe_unused]] const bool a_given = !a_copy && a_converted && get_bf16_engine() == bf16_engine::onednn;
    [[maybe_unused]] const bool b_given = !b_copy && b_converted && get_bf16_engine() == bf16_engine::onednn;
    const std::uint64_t flops = g.flops();
    const std::size_t P = std::size_t(kernel_pool().threads_here());
    if (M == 1 && K > 0 && b_weight && !g.trans_b && g.alpha == 1.0f && g.beta == 0.0f) {
        gemm_flop_counter().fetch_add(flops, std::memory_order_relaxed);
        scratch<float> x(K);
        if (a_only) pack_bf16(g.trans_a, 1, K, a_only, g.lda, x.data());
        else pack_bf16(g.trans_a, 1, K, g.A, g.lda, x.data());
        const std::size_t pieces = P > 1 && flops >= parallel_gemm_min_flops && N >= 256 ? P : 1;
        const std::size_t step = range_step(N, pieces, 16);
        auto piece = [&](std::size_t p) {
            const std::size_t c0 = p * step, c1 = std::min(N, c0 + step);
            if (c0 < c1) combine_rows(K, c1 - c0, x.data(), b_weight + c0, g.ldb, g.C + c0, g.bias ? g.bias + c0 : nullptr);
        };
        if (pieces > 1) kernel_pool().run((N + step - 1) / step, piece);
        else piece(0);
        return;
    }
    const bf16_engine engine = K == 0 ? bf16_engine::emulated : get_bf16_engine();  // K = 0: C = beta C + bias
    auto pack = [](bool trans, std::size_t rows, std::size_t cols, const float* x, std::size_t ld, const bf16_bits* copy,
                   auto* out) {
        if (copy) pack_bf16_on_pool(trans, rows, cols, copy, ld, out);
        else pack_bf16_on_pool(trans, rows, cols, x, ld, out);
    };
    if (engine == bf16_engine::emulated) {
        note_bf16_emulation();
        // The smaller of op(A) and op(B) converted whole; the larger too up to 4 blocks' worth (4
        // MiB), else by blocks of its rows (op(A)) or columns (op(B)) of about
        // emulation_block_floats, each multiplied while its floats are still in cache. gpt-m's
        // 12.6 MB operands then take a block's scratch: its bf16 step's peak memory 370 -> 344 MiB
        // (float: 505). Blocks for smaller operands too cost gpt-s 5 MiB more (45 -> 50) and saved
        // nothing measurable. Every element of C is still one product's sum over all of K; the
        // blocks depend on the shape only.
        const bf16_bits* a16 = a_copy ? a_copy : a_only;
        const bool by_rows = M >= N;
        const std::size_t long_side = by_rows ? M : N;
        const std::size_t larger = long_side * K;
        const std::size_t pieces = larger <= 4 * emulation_block_floats ? 1 : (larger + emulation_block_floats - 1) / emulation_block_floats;
        const std::size_t step = range_step(long_side, std::max<std::size_t>(pieces, 1), 16);
        scratch<float> whole(by_rows ? K * N : M * K), part(std::min(step, long_side) * K);
        if (by_rows) pack(g.trans_b, K, N, g.B, g.ldb, b_copy, whole.data());
        else pack(g.trans_a, M, K, g.A, g.lda, a16, whole.data());
        const auto at = [](auto* p, bool trans, std::size_t i, std::size_t ld, bool along_rows) {
            // op(X)'s row i (along_rows) or column i, of X stored with leading dimension ld
            return p ? p + (trans == along_rows ? i : i * ld) : p;
        };
        for (std::size_t i0 = 0; i0 < long_side; i0 += step) {
            const std::size_t n = std::min(step, long_side - i0);
            if (by_rows) {
                pack(g.trans_a, n, K, at(g.A, g.trans_a, i0, g.lda, true), g.lda, at(a16, g.trans_a, i0, g.lda, true), part.data());
                gemm_together<float, 1>({gemm_args<float>{false, false, n, N, K, g.alpha, part.data(), K, whole.data(), N, g.beta,
                                                          g.C + i0 * g.ldc, g.ldc, g.bias}});
            } else {
                pack(g.trans_b, K, n, at(g.B, g.trans_b, i0, g.ldb, false), g.ldb, at(b_copy, g.trans_b, i0, g.ldb, false), part.data());
                gemm_together<float, 1>({gemm_args<float>{false, false, M, n, K, g.alpha, whole.data(), K, part.data(), n, g.beta,
                                                          g.C + i0, g.ldc, g.bias ? g.bias + i0 : nullptr}});
            }
        }
        return;
    }
#if defined(CTG_WITH_ONEDNN)
    gemm_flop_counter().fetch_add(flops, std::memory_order_relaxed);
    const gemm_cut cut = bf16_cut(M, flops, P);
    // Operands converted into the calling thread's scratch; a weight's bf16 copy is read in place.
    // A transposed A (x^T dY: a weight gradient, attention's P^T dO and dS^T Q) is read by oneDNN
    // through its strides, or converted transposed (pack_bf16) so that oneDNN reads a plain A: the
    // latter where A is small (its floats fit in half of L2, 1 MiB), which is what paid on the AMX
    // host (docs/mixed-precision.md): there a plain A runs the product faster (128 x 512 x 1024
    // 160 -> 123 us) and the transposing conversion reads A from cache (gpt-s's step 1.3 % faster).
    // A large A comes from memory, where the transposing conversion costs more than a plain one
    // (2048 x 384: 305 against 215 us) and took back what the faster products gave: gpt-m's step
    // was 1.6 % slower converting every A transposed and no faster converting its 1536-wide ones.
    // The rule depends on the shape only: every process computes the same bits.
    const bool a_transposed = g.trans_a && !a_copy && !a_given && M * K <= (std::size_t(1) << 18);
    const bool trans_a = g.trans_a && !a_transposed;
    const std::size_t a_rows = g.trans_a ? K : M, a_cols = g.trans_a ? M : K;
    const std::size_t b_rows = g.trans_b ? N : K, b_cols = g.trans_b ? K : N;
    scratch<bf16_bits> a(a_copy || a_given ? 0 : M * K), b(b_copy || b_given ? 0 : b_rows * b_cols);
    if (a_transposed && a_only) pack_bf16_on_pool(true, M, K, a_only, g.lda, a.data());
    else if (a_transposed) pack_bf16_on_pool(true, M, K, g.A, g.lda, a.data());
    else if (!a_copy && !a_given) pack_bf16_on_pool(false, a_rows, a_cols, g.A, g.lda, a.data());
    if (!b_copy && !b_given) pack_bf16_on_pool(false, b_rows, b_cols, g.B, g.ldb, b.data());
    const bf16_bits* ap = a_copy ? a_copy : a_given ? a_converted : a.data();
    const bf16_bits* bp = b_copy ? b_copy : b_given ? b_converted : b.data();
    const std::size_t lda = a_copy ? g.lda : a_transposed ? K : a_cols, ldb = b_copy ? g.ldb : b_cols;
    // oneDNN adds a bias only to alpha A B at beta 0 here; other cases add it after.
    const bool bias_in = g.bias && g.alpha == 1.0f && g.beta == 0.0f;
    auto piece = [&](std::size_t p) {
        const std::size_t r0 = cut.count > 1 ? p * cut.step : 0;
        const std::size_t rows = cut.count > 1 ? std::min(M, r0 + cut.step) - r0 : M;
        float* c = g.C + r0 * g.ldc;
        onednn_matmuls::here().run(trans_a, g.trans_b, rows, N, K, g.alpha, trans_a ? ap + r0 : ap + r0 * lda, lda, bp,
                                   ldb, g.beta, c, g.ldc, bias_in ? g.bias : nullptr);
        if (g.bias && !bias_in)
            for (std::size_t i = 0; i < rows; ++i) add_to(N, g.bias, c + i * g.ldc);
    };
    if (cut.count > 1) kernel_pool().run(cut.count, piece);
    else piece(0);
#endif
}

}  // namespace detail

/// C (M x N) = alpha * op(A) (M x K) * op(B) (K x N) + beta * C, plus `bias` (N values, optional:
/// a linear layer's) in every row; all row-major. On a pool of P > 1 threads a product of at
/// least parallel_gemm_min_flops is split into row blocks (M >= N) or column blocks, at least P
/// (see gemm_piece_flops), each one thread's product; every element of C is computed by one
/// thread from the same operands, so the result does not depend on a race.
///
/// K = 0 is an empty sum: C = beta * C plus the bias (beta = 0 writes zeros, whatever C held).
///
/// bf16 = true (float only; ignored for double): op(A) and op(B) are rounded to bfloat16 and the
/// products accumulated in float (mixed precision: options{.precision = precision::bf16}), on
/// oneDNN's bf16 kernels or emulated (kernels/onednn.hpp). A16 / B16 (bf16 products only, may be
/// null): A's / B's values already rounded, laid out as A / B (see gemm_args).
template <class T>
void gemm(bool trans_a, bool trans_b, std::size_t M, std::size_t N, std::size_t K, T alpha, const T* A,
          std::size_t lda, const T* B, std::size_t ldb, T beta, T* C, std::size_t ldc,
          const std::type_identity_t<T>* bias = nullptr, bool bf16 = false, const bf16_bits* A16 = nullptr,
          const bf16_bits* B16 = nullptr) {  // (not inline: see CTG_KERNEL_INSTANCES below)
    if (M == 0 || N == 0) return;
    if (K == 0) {  // an empty sum (attention's rows that see no key): C = beta C + bias, as in BLAS
        for (std::size_t i = 0; i < M; ++i)
            for (std::size_t j = 0; j < N; ++j)
                C[i * ldc + j] = (beta == T(0) ? T(0) : beta * C[i * ldc + j]) + (bias ? bias[j] : T(0));
        return;
    }
    if constexpr (std::is_same_v<T, float>)
        if (bf16) {
#if defined(CTG_GEMM_PROFILE)  // (bf16 products: the register-kernel column says no)
            const profile::gemm_timer timer({false, trans_a, trans_b, M, N, K});
#endif
            detail::gemm_bf16(gemm_args<float>{trans_a, trans_b, M, N, K, alpha, A, lda, B, ldb, beta, C, ldc, bias, true, A16, B16});
            return;
        }
    const std::uint64_t flops = 2ULL * M * N * K;
    const std::size_t P = std::size_t(kernel_pool().threads_here());  // 1 inside a task (an attention head's)
    if (P == 1 || flops < parallel_gemm_min_flops) {  // the common small case, without the job's set-up
#if defined(CTG_GEMM_PROFILE)  // per-shape timing: see kernels/gemm_profile.hpp
        const profile::gemm_timer timer(
            {std::is_same_v<T, float> && use_register_gemm<T>(trans_a, trans_b, M, N, K), trans_a, trans_b, M, N, K});
#endif
        gemm_flop_counter().fetch_add(flops, std::memory_order_relaxed);
        detail::gemm_serial(trans_a, trans_b, M, N, K, alpha, A, lda, B, ldb, beta, C, ldc, bias);
        return;
    }
    gemm_together<T, 1>({gemm_args<T>{trans_a, trans_b, M, N, K, alpha, A, lda, B, ldb, beta, C, ldc, bias}});
}

/// Two independent products of equal flops given as code (each calls gemm(), possibly several
/// times: matmul's VJPs over batches that sum into one weight adjoint): on a pool of two threads,
/// one task each (one hand-over instead of one per split product, each product whole, so with the
/// bits of one thread); otherwise one after the other, each split as gemm() splits it. Where the
/// products are single calls, gemm_together balances them better.
template <class First, class Second>
inline void gemm_pair(std::uint64_t flops_each, First&& first, Second&& second) {
    if (kernel_pool().threads_here() == 2 && 2 * flops_each >= parallel_gemm_min_flops && !scalar_only()) {
        kernel_pool().run(2, [&](std::size_t which) { which == 0 ? first() : second(); });
        return;
    }
    first();
    second();
}

// The products' code compiled once: every translation unit that runs a product otherwise compiles
// gemm() for float and double with all it calls (the register kernels, OpenBLAS's and oneDNN's
// paths, the bf16 conversions): about 2.5 s of g++'s time and 80 KB of code per unit. Defining
// CTG_SEPARATE_COMPILATION in every translation unit of a program declares these instances here and
// leaves their definition to one unit, compiled.cpp (include/ctgraph/; CMake: the ctgraph::compiled
// library, which the project's tests, examples and benchmarks link; npz.hpp, safetensors.hpp and
// plot.hpp do the same for their code). The functions are templates without `inline` so that a
// compiler does not instantiate them anyway to inline them.
#define CTG_KERNEL_INSTANCES(how)                                                                                  \
    how void gemm<float>(bool, bool, std::size_t, std::size_t, std::size_t, float, const float*, std::size_t,      \
                         const float*, std::size_t, float, float*, std::size_t, const float*, bool,                \
                         const bf16_bits*, const bf16_bits*);                                                      \
    how void gemm<double>(bool, bool, std::size_t, std::size_t, std::size_t, double, const double*, std::size_t,   \
                          const double*, std::size_t, double, double*, std::size_t, const double*, bool,           \
                          const bf16_bits*, const bf16_bits*);                                                     \
    how void gemm_together<float, 1>(std::array<gemm_args<float>, 1>);                                             \
    how void gemm_together<float, 2>(std::array<gemm_args<float>, 2>);                                             \
    how void gemm_together<double, 1>(std::array<gemm_args<double>, 1>);                                           \
    how void gemm_together<double, 2>(std::array<gemm_args<double>, 2>);                                           \
    how void combine_rows<float, float>(std::size_t, std::size_t, const float*, const float*, std::size_t, float*, \
                                        const float*);                                                             \
    how void combine_rows<float, bf16_bits>(std::size_t, std::size_t, const float*, const bf16_bits*, std::size_t, \
                                            float*, const float*);                                                 \
    how void combine_rows<double, double>(std::size_t, std::size_t, const double*, const double*, std::size_t,     \
                                          double*, const double*);
#if defined(CTG_SEPARATE_COMPILATION) && !defined(CTG_GEMM_PROFILE)
CTG_KERNEL_INSTANCES(extern template)
#endif

}  // namespace ctg::kernels

namespace ctg {
/// Threads used by ctgraph's kernels: the size of kernels::kernel_pool() (the caller and k - 1
/// workers; OpenBLAS itself stays at one thread). Default: CTG_NUM_THREADS, else
/// OPENBLAS_NUM_THREADS, else the hardware's.
inline void set_num_threads(int k) { kernels::kernel_pool().resize(k); }
inline int num_threads() { return kernels::kernel_pool().size(); }
}  // namespace ctg
