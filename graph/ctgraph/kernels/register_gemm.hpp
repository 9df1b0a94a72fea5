// ctgraph/kernels/register_gemm.hpp: a register-blocked matrix product for mid-sized shapes.
//
// OpenBLAS multiplies small products (M N K up to about a million) with unpacked "small-matrix"
// kernels at this machine's peak (113-116 GFLOP/s at 1 thread), and larger ones by packing both
// operands first: that packing holds its rate to 93-98 GFLOP/s on the shapes of attention heads
// (128 x 128 x 64), of a batch of 1024 token rows times a 64-512 wide layer, and of their weight
// gradients. Those operands fit in L1/L2, so they need no packing: this kernel keeps an 8 x 32
// tile of C in 16 vector registers, loads B's row of the tile and
// broadcasts A's 8 elements per step of k, and runs these shapes at 103-115 GFLOP/s
// (bench/gemm_shapes.cpp prints both side by side). gemm() (kernels/gemm.hpp) calls it where it
// measured faster: `use_register_gemm`. On a machine with full-width AVX-512 units (Zen 5) and an
// OpenBLAS that runs its AVX2 kernels there, it is as fast or faster everywhere (1.0-2.9x; 1.0 only with N of one vector).
//
// One tile function (two: A or A^T, the broadcast reads an element wherever it is) serves every
// case, which keeps the compile cost of each element type small: the last rows and columns go
// through zero-padded copies, op(B) = B^T transposed into a per-thread
// panel first, 32 rows of B at a time (16 x 16 blocks in AVX-512 registers).
#pragma once
#include <algorithm>
#include <array>
#include <cstddef>
#include <type_traits>
#include <utility>

#include "ctgraph/kernels/parallel.hpp"
#include "ctgraph/kernels/simd.hpp"

#if defined(__AVX512F__)
#include <immintrin.h>
#endif

namespace ctg::kernels {

/// Where the register kernel is faster than OpenBLAS on a machine whose OpenBLAS kernels run at
/// its full vector rate, from bench/gemm-shapes (1 thread, float) on the 2-core Zen 4 VM of the
/// first sessions (AVX-512 at the rate of AVX2 there: OpenBLAS's Haswell kernels ran at the
/// machine's peak): from 2^20 multiply-adds, the size from which OpenBLAS 0.3.21 packs
/// its operands (its unpacked small-matrix kernels are faster below: 113-116 against 99-111
/// GFLOP/s), and from 2^17 for A B^T, which OpenBLAS's small kernels run at 65-86 GFLOP/s (ours:
/// 81-99). Not when A is re-read from L3 for many panels of C: A over 1 MiB (2048 x 384 floats)
/// and either more than 512 columns (gpt-m's 2048 x 1536 x 384: 95 against 100 GFLOP/s) or A^T,
/// whose columns the broadcasts then read a cache line each (61 against 100). (gpt-s's 512 x 128 x
/// 1024 weight gradient, A^T of 2 MiB, ran 5 % faster alone but 15 % slower inside a training
/// step, where A comes from memory: OpenBLAS reads it once to pack it, this kernel once a panel.)
/// gemm() follows this table or, where OpenBLAS runs narrower vectors than the machine can, uses
/// the register kernel everywhere: kernels::register_gemm_policy (kernels/gemm.hpp).
inline constexpr std::size_t register_gemm_min_mnk = std::size_t(1) << 20;
inline constexpr std::size_t register_gemm_min_mnk_nt = std::size_t(1) << 17;

/// A B^T by dot products (detail::gemm_nt_dots) instead of B^T's transposed panels: where the
/// transpose of all of B is not paid back by enough rows of A. Measured (1 thread, aligned rows,
/// float; N x K of 128 x 128, 384 x 128, 128 x 64, 512 x 512, 65 x 128, 128 x 384): 2.0-3.4x at
/// 1-4 rows, 1.0-1.5x at 12, 0.9-1.45x at 8 (the panel's tiles are whole there: 8 x 128 x 128 1.90
/// against 1.74 us), 0.7-1.08x at 16.
inline bool register_gemm_nt_dots(std::size_t M) { return M < 8 || (M < 16 && M % 8 != 0); }

template <class T>
inline bool register_gemm_faster(bool trans_a, bool trans_b, std::size_t M, std::size_t N, std::size_t K) {
    const std::size_t mnk = M * N * K;
    if (mnk < (trans_b && !trans_a ? register_gemm_min_mnk_nt : register_gemm_min_mnk) || N < batch<T>::size)
        return false;
    const bool a_in_l2 = M * K * sizeof(T) <= (std::size_t(1) << 20);
    return a_in_l2 || (!trans_a && N <= 512);
}

namespace detail {

// Rows and columns of the register tile: 8 x 2 vectors of C (8 x 32 floats) in 16 registers.
inline constexpr std::size_t tile_rows = 8;
template <class T>
inline constexpr std::size_t tile_cols = 2 * batch<T>::size;

// C[8 x 2W] = alpha * sum_k A(r, k) B[k, .] + beta * C (+ bias[.] in every row), where A(r, k) =
// A[k * lda + r] when A_T (A^T is stored), else A[r * lda + k]. (One runtime-strided tile for both
// ran A^T products 10 % slower: the constant offsets of A_T's eight broadcasts matter.) Out of
// line: inlined into register_panels' loops (gpt-m's training step), it ran its products about
// 1.5x slower.
template <class T, bool A_T>
[[gnu::noinline]] inline void register_tile(std::size_t K, const T* A, std::size_t lda, const T* B, std::size_t ldb, T alpha, T beta,
                          T* C, std::size_t ldc, const T* bias = nullptr) {
    using V = batch<T>;
    constexpr std::size_t W = V::size, R = tile_rows;
    V acc[R][2];
    for (std::size_t r = 0; r < R; ++r) acc[r][0] = acc[r][1] = V(T(0));
    for (std::size_t k = 0; k < K; ++k) {
        const V b0 = V::load_unaligned(B + k * ldb), b1 = V::load_unaligned(B + k * ldb + W);
        for (std::size_t r = 0; r < R; ++r) {
            const V ar(A_T ? A[k * lda + r] : A[r * lda + k]);
            acc[r][0] = fmadd(ar, b0, acc[r][0]);
            acc[r][1] = fmadd(ar, b1, acc[r][1]);
        }
    }
    const V bias0 = bias ? V::load_unaligned(bias) : V(T(0)), bias1 = bias ? V::load_unaligned(bias + W) : V(T(0));
    for (std::size_t r = 0; r < R; ++r)
        for (std::size_t v = 0; v < 2; ++v) {
            T* c = C + r * ldc + v * W;
            V out = fmadd(acc[r][v], V(alpha), v ? bias1 : bias0);
            if (beta != T(0)) out = fmadd(V(beta), V::load_unaligned(c), out);  // C is not read at beta 0
            out.store_unaligned(c);
        }
}

// c = alpha * v + beta * c (+ bias), c not read at beta 0.
template <class T>
inline void put_scaled(T& c, T v, T alpha, T beta, T bias = T(0)) {
    c = alpha * v + bias + (beta == T(0) ? T(0) : beta * c);
}

// register_panels' copies of A^T (see there): blocks of at most this many bytes, of at most
// packed_k values of k; only where A^T's K x M values are more than packed_min_bytes (below, they
// stay in L2 and are read in place as fast: 256 x 64 x 256 ran 235 GFLOP/s in place, 190 copied).
// Measured with 1 thread, float, on the Zen 5 host (GFLOP/s in place -> copied, two rounds):
// 1536 x 384 x 2048 72-126 -> 182-197, 384 x 1536 x 2048 154-163 -> 143-194, 384 x 384 x 2048
// 134-167 -> 181-219, 128 x 512 x 1024 183-187 -> 181-227; blocks of 128 KB or 512 KB, or
// stretches of 512 or all 2048 values of k, were no better.
inline constexpr std::size_t packed_block_bytes = std::size_t(256) << 10;
inline constexpr std::size_t packed_k = 1024;
inline constexpr std::size_t packed_min_bytes = std::size_t(256) << 10;

// C (M x N, N a multiple of tile_cols) = alpha * op(A) B + beta * C, one column panel at a time
// (B's K x 32 panel stays in cache across the row tiles). The last M % 8 rows of A are copied
// into a zero-padded 8-row block once (in A's layout), and their tiles go through a scratch tile.
template <class T, bool A_T>
inline void register_panels(std::size_t M, std::size_t N, std::size_t K, T alpha, const T* A, std::size_t lda,
                            const T* B, std::size_t ldb, T beta, T* C, std::size_t ldc, const T* bias) {
    constexpr std::size_t R = tile_rows, NR = tile_cols<T>;
    const std::size_t full = M - M % R, rest = M % R;
    scratch<T> buffer(rest ? R * K + R * NR : 0);
    T *a_rest = buffer.data(), *c_rest = a_rest + R * K;
    if (rest) {
        for (std::size_t r = 0; r < R; ++r)
            for (std::size_t k = 0; k < K; ++k) {
                const T a = r < rest ? (A_T ? A[k * lda + full + r] : A[(full + r) * lda + k]) : T(0);
                (A_T ? a_rest[k * R + r] : a_rest[r * K + k]) = a;
            }
    }
    const bool prefetch_c = M * N * sizeof(T) > (std::size_t(256) << 10);
    // The full row tiles [i0, i1) against every panel of B's rows [k0, k0 + kn): tile i's A starts
    // at a0 + (i - i0) / R * a_step, stride a_ld; C = alpha * sum + beta_ * C (+ bias_).
    const auto tiles = [&](std::size_t i0, std::size_t i1, const T* a0, std::size_t a_step, std::size_t a_ld,
                           std::size_t k0, std::size_t kn, T beta_, const T* bias_) {
        for (std::size_t j = 0; j < N; j += NR)
            for (std::size_t i = i0; i < i1; i += R) {
                // The next tile's rows of C, requested now (for writing) so that they arrive while this
                // tile computes: in a training step a large C is usually not in cache (a layer's
                // output), and the tile's stores waited for their lines (gpt-s at 1 thread: 32.2 ->
                // 30.6 ms). A C of the size of L2's share (an attention head's scores) is left alone.
                const bool same_panel = i + R < i1;
                if (const std::size_t nj = same_panel ? j : j + NR; prefetch_c && nj < N)
                    for (std::size_t r = 0, next = same_panel ? i + R : i0; r < R; ++r) {
                        __builtin_prefetch(C + (next + r) * ldc + nj, 1, 3);
                        __builtin_prefetch(C + (next + r) * ldc + nj + NR - 1, 1, 3);
                    }
                register_tile<T, A_T>(kn, a0 + (i - i0) / R * a_step, a_ld, B + k0 * ldb + j, ldb, alpha, beta_, C + i * ldc + j, ldc,
                                      bias_ ? bias_ + j : nullptr);
            }
    };
    if constexpr (!A_T) {
        tiles(0, full, A, R * lda, lda, 0, K, beta, bias);
    } else if (N > NR && full > R && K * M * sizeof(T) > packed_min_bytes) {
        // A^T read in place costs a cache line (and, for long rows of A, a page) per step of k and
        // tile, for every panel of B: A's K x 8 strip is scattered over K lines. So blocks of A^T
        // (rows x a stretch of k) are copied first, each tile's strip contiguous (k-major, 8 values
        // per k), and every panel runs over the block while it is in L2; a stretch of k's sum is
        // added to C (beta 1 after the first). See packed_block_bytes for the figures.
        const std::size_t kc = std::min(K, packed_k);
        const std::size_t block = std::min(full, std::max(R, packed_block_bytes / (kc * sizeof(T)) / R * R));
        scratch<T> packed(block * kc);
        T* pk = packed.data();
        for (std::size_t k0 = 0; k0 < K; k0 += kc) {
            const std::size_t kn = std::min(kc, K - k0);
            for (std::size_t i0 = 0; i0 < full; i0 += block) {
                const std::size_t i1 = std::min(full, i0 + block);
                // 8 rows of A at a time, so that each tile's strip is written 8 k (256 bytes) at a
                // time (one k per strip at a time wrote strips kn * 32 bytes apart: the same L1 set)
                for (std::size_t ka = 0; ka < kn; ka += R)
                    for (std::size_t t = 0; t < (i1 - i0) / R; ++t)
                        for (std::size_t k = ka; k < std::min(kn, ka + R); ++k)
                            std::copy_n(A + (k0 + k) * lda + i0 + t * R, R, pk + (t * kn + k) * R);
                tiles(i0, i1, pk, R * kn, R, k0, kn, k0 ? T(1) : beta, k0 ? nullptr : bias);
            }
        }
    } else {  // in place, in the same stretches of k (the same sums whichever path a piece of a split product takes)
        for (std::size_t k0 = 0; k0 < K; k0 += packed_k)
            tiles(0, full, A + k0 * lda, R, lda, k0, std::min(packed_k, K - k0), k0 ? T(1) : beta, k0 ? nullptr : bias);
    }
    if (rest)
        for (std::size_t j = 0; j < N; j += NR) {
            register_tile<T, A_T>(K, a_rest, A_T ? R : K, B + j, ldb, T(1), T(0), c_rest, NR);
            for (std::size_t r = 0; r < rest; ++r)
                for (std::size_t c = 0; c < NR; ++c)
                    put_scaled(C[(full + r) * ldc + j + c], c_rest[r * NR + c], alpha, beta, bias ? bias[j + c] : T(0));
        }
}

// C (M x N), B row-major: whole panels, then the last N % 32 columns: as dot products (or, for
// A^T, weighted sums of A's rows) when there are a few of them (a vocabulary of 65 is 64 + 1),
// else as one zero-padded panel computed into a scratch block.
template <class T>
inline void register_gemm_b(bool trans_a, std::size_t M, std::size_t N, std::size_t K, T alpha, const T* A,
                            std::size_t lda, const T* B, std::size_t ldb, T beta, T* C, std::size_t ldc, const T* bias) {
    constexpr std::size_t W = batch<T>::size, NR = tile_cols<T>;
    const auto panels = [&](std::size_t n, T alpha_, const T* b, std::size_t ldb_, T beta_, T* c, std::size_t ldc_,
                            const T* bias_) {
        if (trans_a) register_panels<T, true>(M, n, K, alpha_, A, lda, b, ldb_, beta_, c, ldc_, bias_);
        else register_panels<T, false>(M, n, K, alpha_, A, lda, b, ldb_, beta_, c, ldc_, bias_);
    };
    const std::size_t j = N - N % NR, nt = N - j;
    if (j) panels(j, alpha, B, ldb, beta, C, ldc, bias);
    if (!nt) return;
    if (nt <= W / 4) {
        scratch<T> buffer(K + M);  // one column of B, contiguous; M results
        T *col = buffer.data(), *out = col + K;
        for (std::size_t c = j; c < N; ++c) {
            for (std::size_t k = 0; k < K; ++k) col[k] = B[k * ldb + c];
            if (trans_a) combine_rows(K, M, col, A, lda, out);  // out[i] = sum_k B[k, c] A[k, i]
            else
                for (std::size_t i = 0; i < M; ++i) out[i] = reduce_sum(K, A + i * lda, col, [](auto a, auto b) { return a * b; });
            for (std::size_t i = 0; i < M; ++i) put_scaled(C[i * ldc + c], out[i], alpha, beta, bias ? bias[c] : T(0));
        }
        return;
    }
    scratch<T> buffer(K * NR + M * NR);
    T *pb = buffer.data(), *pc = pb + K * NR;
    for (std::size_t k = 0; k < K; ++k)
        for (std::size_t c = 0; c < NR; ++c) pb[k * NR + c] = c < nt ? B[k * ldb + j + c] : T(0);
    panels(NR, T(1), pb, NR, T(0), pc, NR, nullptr);
    for (std::size_t i = 0; i < M; ++i)
        for (std::size_t c = 0; c < nt; ++c)
            put_scaled(C[i * ldc + j + c], pc[i * NR + c], alpha, beta, bias ? bias[j + c] : T(0));
}

#if defined(__AVX512F__)
// r[q] = the sum of v[q]'s 16 elements, for q < 16: pairs of vectors interleaved and added, then
// pairs of pairs, then 128-bit quarters twice (the transpose ladder, adding as it goes: 45
// instructions for 16 sums instead of 16 reductions of 8).
inline __m512 sum16(const __m512 (&v)[16]) {
    __m512 s[8], u[4], w[2];
    for (int i = 0; i < 8; ++i)  // per 128-bit lane: [a0+a2, b0+b2, a1+a3, b1+b3], a = v[2i], b = v[2i+1]
        s[i] = _mm512_add_ps(_mm512_unpacklo_ps(v[2 * i], v[2 * i + 1]), _mm512_unpackhi_ps(v[2 * i], v[2 * i + 1]));
    for (int i = 0; i < 4; ++i)  // per lane: the lane's sums of v[4i .. 4i+3]
        u[i] = _mm512_add_ps(_mm512_shuffle_ps(s[2 * i], s[2 * i + 1], _MM_SHUFFLE(1, 0, 1, 0)),
                             _mm512_shuffle_ps(s[2 * i], s[2 * i + 1], _MM_SHUFFLE(3, 2, 3, 2)));
    for (int i = 0; i < 2; ++i)  // lanes of u[2i] then u[2i+1], each added to its neighbour
        w[i] = _mm512_add_ps(_mm512_shuffle_f32x4(u[2 * i], u[2 * i + 1], 0x88), _mm512_shuffle_f32x4(u[2 * i], u[2 * i + 1], 0xdd));
    return _mm512_add_ps(_mm512_shuffle_f32x4(w[0], w[1], 0x88), _mm512_shuffle_f32x4(w[0], w[1], 0xdd));
}

// C (M x N) = alpha * A B^T + beta * C (+ bias) as dot products of rows of A and rows of B (both
// contiguous in k), 4 x 4 of them at a time in 16 registers, reduced together by sum16. For few
// rows of A (a recurrent step's dX = dY W^T over a batch part): the panel path transposes all of B
// for every call, which cost more than the product itself at 8 rows (8 x 128 x 128: 2.2 us, of
// which the transpose ~0.9). Edge rows and columns repeat the last one (computed, not stored).
inline void gemm_nt_dots(std::size_t M, std::size_t N, std::size_t K, float alpha, const float* A, std::size_t lda,
                         const float* B, std::size_t ldb, float beta, float* C, std::size_t ldc, const float* bias) {
    constexpr std::size_t W = 16, R = 4;
    const std::size_t k_full = K - K % W;
    const __mmask16 tail = __mmask16((1u << (K % W)) - 1);
    for (std::size_t i0 = 0; i0 < M; i0 += R) {
        const std::size_t rows = std::min(R, M - i0);
        const float *a0 = A + i0 * lda, *a1 = A + (i0 + std::min<std::size_t>(1, rows - 1)) * lda,
                    *a2 = A + (i0 + std::min<std::size_t>(2, rows - 1)) * lda, *a3 = A + (i0 + rows - 1) * lda;
        for (std::size_t j0 = 0; j0 < N; j0 += R) {
            const std::size_t cols = std::min(R, N - j0);
            const float *b0 = B + j0 * ldb, *b1 = B + (j0 + std::min<std::size_t>(1, cols - 1)) * ldb,
                        *b2 = B + (j0 + std::min<std::size_t>(2, cols - 1)) * ldb, *b3 = B + (j0 + cols - 1) * ldb;
            __m512 acc[16];
            for (auto& x : acc) x = _mm512_setzero_ps();
#define CTG_NT_DOTS_STEP(LOAD)                                                                          \
    {                                                                                                   \
        const __m512 y0 = LOAD(b0), y1 = LOAD(b1), y2 = LOAD(b2), y3 = LOAD(b3);                        \
        const float* const rows_of_a[4] = {a0, a1, a2, a3};                                             \
        for (int r = 0; r < 4; ++r) {                                                                   \
            const __m512 x = LOAD(rows_of_a[r]);                                                        \
            acc[4 * r + 0] = _mm512_fmadd_ps(x, y0, acc[4 * r + 0]);                                    \
            acc[4 * r + 1] = _mm512_fmadd_ps(x, y1, acc[4 * r + 1]);                                    \
            acc[4 * r + 2] = _mm512_fmadd_ps(x, y2, acc[4 * r + 2]);                                    \
            acc[4 * r + 3] = _mm512_fmadd_ps(x, y3, acc[4 * r + 3]);                                    \
        }                                                                                               \
    }
            std::size_t k = 0;
#define CTG_LOAD_FULL(p) _mm512_loadu_ps((p) + k)
#define CTG_LOAD_TAIL(p) _mm512_maskz_loadu_ps(tail, (p) + k)
            for (; k < k_full; k += W) CTG_NT_DOTS_STEP(CTG_LOAD_FULL)
            if (tail) CTG_NT_DOTS_STEP(CTG_LOAD_TAIL)
#undef CTG_LOAD_FULL
#undef CTG_LOAD_TAIL
#undef CTG_NT_DOTS_STEP
            // Lane r of the sums: row i0 + r's four results, stored as one masked 128-bit write.
            const __m512 sums = sum16(acc);
            const __mmask8 cmask = __mmask8((1u << cols) - 1);
            const __m128 va = _mm_set1_ps(alpha), vb = _mm_set1_ps(beta);
            const __m128 vbias = bias ? _mm_maskz_loadu_ps(cmask, bias + j0) : _mm_setzero_ps();
            const auto put = [&](__m128 v, std::size_t r) {
                float* c = C + (i0 + r) * ldc + j0;
                __m128 out = _mm_fmadd_ps(v, va, vbias);
                if (beta != 0.0f) out = _mm_fmadd_ps(vb, _mm_maskz_loadu_ps(cmask, c), out);  // C not read at beta 0
                _mm_mask_storeu_ps(c, cmask, out);
            };
            put(_mm512_castps512_ps128(sums), 0);
            if (rows > 1) put(_mm512_extractf32x4_ps(sums, 1), 1);
            if (rows > 2) put(_mm512_extractf32x4_ps(sums, 2), 2);
            if (rows > 3) put(_mm512_extractf32x4_ps(sums, 3), 3);
        }
    }
}
#endif

}  // namespace detail

/// dst (cols x rows, row-major, stride ldd) = src^T, or += when `accumulate`; src is rows x cols
/// with stride lds. The one transpose of the project: the transpose op, gemm()'s few-row A B^T path
/// and the register kernel's B^T panels.
template <class T>
inline void transpose(std::size_t rows, std::size_t cols, const T* src, std::size_t lds, T* dst, std::size_t ldd,
                      bool accumulate = false) {
    std::size_t r0 = 0;
#if defined(__AVX512F__)
    if constexpr (std::is_same_v<T, float>) {
        if (!scalar_only())
            for (; r0 + 16 <= rows; r0 += 16) {
                std::size_t c0 = 0;
                for (; c0 + 16 <= cols; c0 += 16) {
                    // A 16 x 16 block in registers: pairs of rows interleaved, then pairs of pairs,
                    // then 128-bit quarters twice (the usual unpack / shuffle / permute ladder).
                    __m512 x[16], t[16];
                    for (int i = 0; i < 16; ++i) x[i] = _mm512_loadu_ps(src + (r0 + i) * lds + c0);
                    for (int i = 0; i < 16; i += 2) {
                        t[i] = _mm512_unpacklo_ps(x[i], x[i + 1]);
                        t[i + 1] = _mm512_unpackhi_ps(x[i], x[i + 1]);
                    }
                    for (int i = 0; i < 16; i += 4) {
                        x[i] = _mm512_shuffle_ps(t[i], t[i + 2], _MM_SHUFFLE(1, 0, 1, 0));
                        x[i + 1] = _mm512_shuffle_ps(t[i], t[i + 2], _MM_SHUFFLE(3, 2, 3, 2));
                        x[i + 2] = _mm512_shuffle_ps(t[i + 1], t[i + 3], _MM_SHUFFLE(1, 0, 1, 0));
                        x[i + 3] = _mm512_shuffle_ps(t[i + 1], t[i + 3], _MM_SHUFFLE(3, 2, 3, 2));
                    }
                    for (int h = 0; h < 16; h += 8)
                        for (int i = 0; i < 4; ++i) {
                            t[h + i] = _mm512_shuffle_f32x4(x[h + i], x[h + 4 + i], 0x88);
                            t[h + 4 + i] = _mm512_shuffle_f32x4(x[h + i], x[h + 4 + i], 0xdd);
                        }
                    for (int i = 0; i < 8; ++i) {
                        x[i] = _mm512_shuffle_f32x4(t[i], t[8 + i], 0x88);
                        x[8 + i] = _mm512_shuffle_f32x4(t[i], t[8 + i], 0xdd);
                    }
                    for (int i = 0; i < 16; ++i) {
                        float* d = dst + (c0 + i) * ldd + r0;
                        _mm512_storeu_ps(d, accumulate ? _mm512_add_ps(_mm512_loadu_ps(d), x[i]) : x[i]);
                    }
                }
                for (; c0 < cols; ++c0)
                    for (std::size_t r = r0; r < r0 + 16; ++r)
                        dst[c0 * ldd + r] = (accumulate ? dst[c0 * ldd + r] : 0.0f) + src[r * lds + c0];
            }
    }
#endif
    for (; r0 < rows; ++r0)
        for (std::size_t c = 0; c < cols; ++c) dst[c * ldd + r0] = (accumulate ? dst[c * ldd + r0] : T(0)) + src[r0 * lds + c];
}

/// Matrices that do not change while an object of this type lives on the calling thread (a scan's
/// weights during its backward pass): register_gemm's A B^T with such a B transposes it once, at
/// its first use in the scope, into a buffer the owner provides, and multiplies by the transpose
/// afterwards, instead of transposing B at every call (a recurrent step's dX = dY W^T for 8 rows x
/// 128 x 128: the transpose took 40 % of the call in a perf profile of the rnn). Scopes nest; the innermost one is asked.
class constant_operands {
public:
    static constexpr std::size_t capacity = 8;
    constant_operands() : outer_(active()) { active() = this; }
    ~constant_operands() { active() = outer_; }
    constant_operands(const constant_operands&) = delete;
    constant_operands& operator=(const constant_operands&) = delete;

    /// Declares the rows x cols floats at p (row-major, contiguous) constant for the scope; `buffer`
    /// has room for their transpose. Beyond `capacity` matrices, the rest are not kept.
    void add(const float* p, std::size_t rows, std::size_t cols, float* buffer) {
        if (n_ < capacity) entries_[n_++] = {p, rows, cols, buffer, false};
    }
    /// op(B) = B^T of a product with B (N x K, stride ldb): the K x N transpose if B is a declared
    /// matrix (computed at the first request), else nullptr.
    const float* transposed(const float* B, std::size_t ldb, std::size_t N, std::size_t K) {
        for (std::size_t i = 0; i < n_; ++i) {
            entry& e = entries_[i];
            if (e.p != B || e.rows != N || e.cols != K || ldb != K) continue;
            if (!e.ready) transpose(N, K, B, ldb, e.t, N);
            e.ready = true;
            return e.t;
        }
        return nullptr;
    }
    static constant_operands*& active() {
        thread_local constant_operands* scope = nullptr;
        return scope;
    }

private:
    struct entry {
        const float* p;
        std::size_t rows, cols;
        float* t;
        bool ready;
    };
    std::array<entry, capacity> entries_{};
    std::size_t n_ = 0;
    constant_operands* outer_;
};

/// C (M x N) = alpha * op(A) op(B) + beta * C (+ `bias`, N values, in every row), row-major, on the
/// calling thread; the same contract as gemm_reference. op(B) = B^T is transposed into a per-thread
/// buffer, 2 vectors of columns of C (32 floats) at a time, so the buffer stays in L1.
template <class T>
inline void register_gemm(bool trans_a, bool trans_b, std::size_t M, std::size_t N, std::size_t K, T alpha, const T* A,
                          std::size_t lda, const T* B, std::size_t ldb, T beta, T* C, std::size_t ldc,
                          const T* bias = nullptr) {
    // Float only: gemm() keeps double (gradient checks) with OpenBLAS, so a double instantiation
    // would be code no program runs, compiled (and tested) for nothing.
    static_assert(std::is_same_v<T, float>, "register_gemm: float only; double products go to OpenBLAS (kernels::gemm)");
    if (!trans_b) {
        detail::register_gemm_b(trans_a, M, N, K, alpha, A, lda, B, ldb, beta, C, ldc, bias);
        return;
    }
    if (constant_operands* constants = constant_operands::active())
        if (const float* bt = constants->transposed(B, ldb, N, K)) {
            detail::register_gemm_b(trans_a, M, N, K, alpha, A, lda, bt, N, beta, C, ldc, bias);
            return;
        }
#if defined(__AVX512F__)
    if (!trans_a && register_gemm_nt_dots(M)) {
        detail::gemm_nt_dots(M, N, K, alpha, A, lda, B, ldb, beta, C, ldc, bias);
        return;
    }
#endif
    constexpr std::size_t panel = detail::tile_cols<T>;
    scratch<T> panel_buffer(K * panel);
    T* bt = panel_buffer.data();
    for (std::size_t j = 0; j < N; j += panel) {
        const std::size_t n = N - j < panel ? N - j : panel;
        transpose(n, K, B + j * ldb, ldb, bt, n);  // rows j.. of B become columns of a K x n panel
        detail::register_gemm_b(trans_a, M, n, K, alpha, A, lda, bt, n, beta, C + j, ldc, bias ? bias + j : nullptr);
    }
}

}  // namespace ctg::kernels
