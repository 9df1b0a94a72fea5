// ctgraph/kernels/bf16.hpp: bfloat16 operands for matrix products.
//
// bfloat16 is the top half of an IEEE float: sign, the same 8 exponent bits, 7 mantissa bits. A
// float becomes one by rounding to nearest, ties to even, on the dropped 16 bits; a bfloat16 becomes
// a float exactly (16 zero bits appended). Products of two bfloat16 values are exact in float (8 +
// 8 significant bits), so a product of bf16-rounded operands accumulated in float differs from the
// exact one only by the float sums.
//
// Rounding is the CPU's VCVTNEPS2BF16 where the build has AVX512-BF16, else the same rule in
// integer arithmetic: round to nearest even, NaN stays NaN (quiet), and subnormal inputs become
// zero of the same sign, as the instruction does (it treats subnormal inputs as zero). Both give
// the same bits (tested on every float class in tests/test_bf16.cpp).
//
// pack(): op(X) (rows x cols, X row-major with leading dimension ld, op = identity or transpose)
// written row-major and contiguous, as bf16 bits (for oneDNN's bf16 kernels) or as bf16-rounded
// floats (for the float kernels, on CPUs without bf16 instructions): the operands every bf16
// product reads, whatever computes it.
#pragma once
#include <algorithm>
#include <array>
#include <atomic>
#include <bit>
#include <cstddef>
#include <cstdint>
#include <mutex>
#include <type_traits>

#if defined(__AVX512BF16__) && defined(__AVX512F__)
#include <immintrin.h>
#endif

namespace ctg::kernels {

/// A bfloat16 value's bits.
using bf16_bits = std::uint16_t;

/// f rounded to bfloat16 (nearest, ties to even; NaN quiet; subnormals to signed zero).
inline bf16_bits to_bf16(float f) {
    std::uint32_t u = std::bit_cast<std::uint32_t>(f);
    if ((u & 0x7F800000u) == 0) return bf16_bits((u >> 16) & 0x8000u);  // zero or subnormal: signed zero
    if ((u & 0x7FFFFFFFu) > 0x7F800000u) return bf16_bits((u >> 16) | 0x0040u);  // NaN: quiet, sign kept
    u += 0x7FFFu + ((u >> 16) & 1u);                                         // ties to even (overflows to inf)
    return bf16_bits(u >> 16);
}
/// The float a bfloat16 stands for (exact).
inline float from_bf16(bf16_bits b) { return std::bit_cast<float>(std::uint32_t(b) << 16); }
/// f rounded to bfloat16 and back: the value a bf16 product reads for f.
inline float round_bf16(float f) { return from_bf16(to_bf16(f)); }

namespace detail {

inline void to_bf16_row(std::size_t n, const float* x, bf16_bits* y) {
    std::size_t i = 0;
#if defined(__AVX512BF16__) && defined(__AVX512F__)
    for (; i + 16 <= n; i += 16)
        _mm256_storeu_si256(reinterpret_cast<__m256i*>(y + i), (__m256i)_mm512_cvtneps_pbh(_mm512_loadu_ps(x + i)));
#endif
    for (; i < n; ++i) y[i] = to_bf16(x[i]);
}
inline void to_bf16_row(std::size_t n, const float* x, float* y) {
    std::size_t i = 0;
#if defined(__AVX512BF16__) && defined(__AVX512F__)
    for (; i + 16 <= n; i += 16) {
        const __m256i b = (__m256i)_mm512_cvtneps_pbh(_mm512_loadu_ps(x + i));
        _mm512_storeu_ps(y + i, _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(b), 16)));
    }
#endif
    for (; i < n; ++i) y[i] = round_bf16(x[i]);
}

#if defined(__AVX512BF16__) && defined(__AVX512F__) && defined(__AVX512BW__)
#define CTG_BF16_TRANSPOSE_AVX512 1
// The 16 x 16 matrix of 32-bit lanes r[0..15] transposed in place (r[i] lane j <-> r[j] lane i).
inline void transpose_16x16_epi32(__m512i r[16]) {
    __m512i t[16], u[16];
    for (int i = 0; i < 8; ++i) {
        t[2 * i] = _mm512_unpacklo_epi32(r[2 * i], r[2 * i + 1]);
        t[2 * i + 1] = _mm512_unpackhi_epi32(r[2 * i], r[2 * i + 1]);
    }
    for (int i = 0; i < 4; ++i) {  // u[4i + j], 128-bit lane L: rows 4i..4i+3 at column 4L + j
        u[4 * i + 0] = _mm512_unpacklo_epi64(t[4 * i + 0], t[4 * i + 2]);
        u[4 * i + 1] = _mm512_unpackhi_epi64(t[4 * i + 0], t[4 * i + 2]);
        u[4 * i + 2] = _mm512_unpacklo_epi64(t[4 * i + 1], t[4 * i + 3]);
        u[4 * i + 3] = _mm512_unpackhi_epi64(t[4 * i + 1], t[4 * i + 3]);
    }
    for (int j = 0; j < 4; ++j) {
        const __m512i v0 = _mm512_shuffle_i32x4(u[j], u[4 + j], 0x88), v1 = _mm512_shuffle_i32x4(u[j], u[4 + j], 0xdd);
        const __m512i w0 = _mm512_shuffle_i32x4(u[8 + j], u[12 + j], 0x88), w1 = _mm512_shuffle_i32x4(u[8 + j], u[12 + j], 0xdd);
        r[j] = _mm512_shuffle_i32x4(v0, w0, 0x88);
        r[8 + j] = _mm512_shuffle_i32x4(v0, w0, 0xdd);
        r[4 + j] = _mm512_shuffle_i32x4(v1, w1, 0x88);
        r[12 + j] = _mm512_shuffle_i32x4(v1, w1, 0xdd);
    }
}

// Stores one row of a transposed tile (below): the first nc of the 32 bf16 values in v, as bf16
// bits or as the floats they stand for (each shifted into the top half of a float).
inline void store_tile_row(bf16_bits* o, std::size_t, __mmask32 store_mask, __m512i v) {
    _mm512_mask_storeu_epi16(o, store_mask, v);
}
inline void store_tile_row(float* o, std::size_t nc, __mmask32 store_mask, __m512i v) {
    const auto widen = [](__m256i h) { return _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(h), 16)); };
    _mm512_mask_storeu_ps(o, __mmask16(store_mask), widen(_mm512_castsi512_si256(v)));
    if (nc > 16) _mm512_mask_storeu_ps(o + 16, __mmask16(store_mask >> 16), widen(_mm512_extracti64x4_epi64(v, 1)));
}

// The walk shared by the transposing packs below: tiles of 32 rows of X (c0) by 16 of its columns
// (r0). pair(c, r0, load_mask) gives rows c and c + 1 of X at columns r0.. as bf16 (low half row
// c, high half row c + 1; zero past X's last row); they are interleaved so each 32-bit lane holds
// the pair X[c][r], X[c+1][r], and a 16 x 16 transpose of those lanes gives 16 rows of out, 32
// values each: emit(r0, c0, nr, nc, store_mask, v) stores them. before_tile(c0, r0) runs first.
template <class Pair, class BeforeTile, class Emit>
inline void for_transposed_tiles(std::size_t rows, std::size_t cols, Pair&& pair, BeforeTile&& before_tile, Emit&& emit) {
    alignas(64) static constexpr std::uint16_t interleave[32] = {0, 16, 1, 17, 2,  18, 3,  19, 4,  20, 5,  21, 6,  22, 7,  23,
                                                                 8, 24, 9, 25, 10, 26, 11, 27, 12, 28, 13, 29, 14, 30, 15, 31};
    const __m512i idx = _mm512_load_si512(interleave);
    for (std::size_t c0 = 0; c0 < cols; c0 += 32) {
        const std::size_t nc = std::min<std::size_t>(32, cols - c0);
        const __mmask32 store_mask = nc == 32 ? ~__mmask32(0) : __mmask32((1u << nc) - 1);
        for (std::size_t r0 = 0; r0 < rows; r0 += 16) {
            const std::size_t nr = std::min<std::size_t>(16, rows - r0);
            const __mmask16 load_mask = __mmask16((1u << nr) - 1);
            before_tile(c0, r0);
            __m512i v[16];
            for (std::size_t k = 0; k < 16; ++k) v[k] = _mm512_permutexvar_epi16(idx, pair(c0 + 2 * k, r0, load_mask));
            transpose_16x16_epi32(v);
            emit(r0, c0, nr, nc, store_mask, v);
        }
    }
}

// out (rows x cols, row-major, contiguous) = X^T rounded to bf16, X (cols x rows, leading
// dimension ld), by the tiles above: two rows of X are loaded and rounded by one VCVTNE2PS2BF16
// (the rounding of VCVTNEPS2BF16: the same bits). Edges by masked loads and stores. The tiles
// walk 32 rows of X at a time (32 sequential read streams); their stores land one cache line in
// each row of out, so where out is larger than half an L2 (1 MiB) and its rows are whole lines
// they are non-temporal: read-for-ownership of lines scattered 4 KB apart was what held the
// stores back (gpt-m's 2048 x 1536: 1,110 -> 890 us on the AMX host; in-cache sizes keep
// ordinary stores, whose lines the product then reads from L2).
template <class Out>
inline void pack_bf16_transposed(std::size_t rows, std::size_t cols, const float* x, std::size_t ld, Out* out) {
    const bool stream = std::is_same_v<Out, bf16_bits> && rows * cols * sizeof(Out) >= (std::size_t(1) << 20) &&
                        cols % 32 == 0 && reinterpret_cast<std::uintptr_t>(out) % 64 == 0;
    for_transposed_tiles(
        rows, cols,
        [&](std::size_t c, std::size_t r0, __mmask16 load_mask) {
            const __m512 a = c < cols ? _mm512_maskz_loadu_ps(load_mask, x + c * ld + r0) : _mm512_setzero_ps();
            const __m512 b = c + 1 < cols ? _mm512_maskz_loadu_ps(load_mask, x + (c + 1) * ld + r0) : _mm512_setzero_ps();
            return (__m512i)_mm512_cvtne2ps_pbh(b, a);  // low half a, high half b
        },
        // The next 32 rows' line under this tile, one pass ahead: X comes from memory (a value kept
        // from the forward pass), and 32 short streams of 1.5 KB rows (gpt-m's 384-wide
        // activations) were more than the hardware prefetchers followed (2048 x 384 from DRAM: 420
        // -> 305 us; plain 215-235).
        [&](std::size_t c0, std::size_t r0) {
            for (std::size_t k = c0 + 32; k < std::min(cols, c0 + 64); ++k)
                _mm_prefetch(reinterpret_cast<const char*>(x + k * ld + r0), _MM_HINT_T1);
        },
        [&](std::size_t r0, std::size_t c0, std::size_t nr, std::size_t nc, __mmask32 store_mask, const __m512i* v) {
            for (std::size_t j = 0; j < nr; ++j) {
                Out* o = out + (r0 + j) * cols + c0;
                if (stream) _mm512_stream_si512(reinterpret_cast<__m512i*>(o), v[j]);
                else store_tile_row(o, nc, store_mask, v[j]);
            }
        });
    if (stream) _mm_sfence();  // the streamed lines are visible before a product reads them
}

// out (rows x cols, contiguous) = X^T, X of bf16 values (cols x rows, leading dimension ld), by
// the same tiles with the loads already bf16, written as bf16 bits or as floats: a value kept in
// bf16 only that a product reads transposed (the attention weights in the value product's weight
// gradient), or a weight's bf16 copy read transposed by the emulated engine.
template <class Out>
inline void transpose_bf16(std::size_t rows, std::size_t cols, const bf16_bits* x, std::size_t ld, Out* out) {
    for_transposed_tiles(
        rows, cols,
        [&](std::size_t c, std::size_t r0, __mmask16 load_mask) {
            const __m256i a = c < cols ? _mm256_maskz_loadu_epi16(load_mask, x + c * ld + r0) : _mm256_setzero_si256();
            const __m256i b = c + 1 < cols ? _mm256_maskz_loadu_epi16(load_mask, x + (c + 1) * ld + r0) : _mm256_setzero_si256();
            return _mm512_inserti64x4(_mm512_castsi256_si512(a), b, 1);
        },
        [](std::size_t, std::size_t) {},
        [&](std::size_t r0, std::size_t c0, std::size_t nr, std::size_t nc, __mmask32 store_mask, const __m512i* v) {
            for (std::size_t j = 0; j < nr; ++j) store_tile_row(out + (r0 + j) * cols + c0, nc, store_mask, v[j]);
        });
}
#endif

}  // namespace detail

/// pack_bf16(true, ...) without vector transposes: tiles of 16 x 16 converted by rows and written
/// out transposed (the portable path; tests compare the vector path with it).
template <class Out>
inline void pack_bf16_transposed_tiles(std::size_t rows, std::size_t cols, const float* x, std::size_t ld, Out* out) {
    // out[r][c] = x[c][r]: tiles of 16 x 16, each read as 16 contiguous stretches of x, converted
    // 16 at a time, and written out transposed.
    constexpr std::size_t tile = 16;
    Out converted[tile * tile];
    for (std::size_t c0 = 0; c0 < cols; c0 += tile) {
        const std::size_t nc = std::min(tile, cols - c0);
        for (std::size_t r0 = 0; r0 < rows; r0 += tile) {
            const std::size_t nr = std::min(tile, rows - r0);
            for (std::size_t c = 0; c < nc; ++c) detail::to_bf16_row(nr, x + (c0 + c) * ld + r0, converted + c * tile);
            for (std::size_t r = 0; r < nr; ++r)
                for (std::size_t c = 0; c < nc; ++c) out[(r0 + r) * cols + c0 + c] = converted[c * tile + r];
        }
    }
}

/// Writes op(X) (rows x cols; X row-major with leading dimension ld; op(X) = X^T when trans) into
/// `out` row-major and contiguous, each element rounded to bfloat16: Out = bf16_bits (the bits) or
/// float (the rounded value). The transposing form runs at about the plain one's rate where the
/// build has AVX512-BF16 (detail::pack_bf16_transposed); elsewhere it converts tiles of 16 x 16
/// with to_bf16 and writes them out transposed. Both give the bits of to_bf16.
template <class Out>
inline void pack_bf16(bool trans, std::size_t rows, std::size_t cols, const float* x, std::size_t ld, Out* out) {
    if (!trans) {
        for (std::size_t r = 0; r < rows; ++r) detail::to_bf16_row(cols, x + r * ld, out + r * cols);
        return;
    }
#if defined(CTG_BF16_TRANSPOSE_AVX512)
    detail::pack_bf16_transposed(rows, cols, x, ld, out);
#else
    pack_bf16_transposed_tiles(rows, cols, x, ld, out);
#endif
}

}  // namespace ctg::kernels

// ---------------------------------------------------------------- bf16 copies of weights
namespace ctg::kernels {

/// Where the bf16 copies of parameter values live (parameter_store::enable_bf16): ranges of float
/// memory and the bf16 copy of each, registered by the stores that keep copies. A bf16 product
/// asks it for its operands (kernels::gemm): an operand inside a registered range is read from
/// the copy, converted when the values were written (an optimizer's step), not at every product.
/// A store keeps its copy current before a program's products read it (see params.hpp).
class bf16_copies {
public:
    static bf16_copies& instance() {
        static bf16_copies registry;
        return registry;
    }
    /// The bf16 copy of the float at p, or nullptr when p is in no registered range.
    const bf16_bits* find(const float* p) const {
        const std::size_t n = count_.load(std::memory_order_acquire);
        for (std::size_t i = 0; i < n; ++i) {
            const range& r = ranges_[i];
            const float* b = r.begin.load(std::memory_order_relaxed);
            if (b && p >= b && p < r.end.load(std::memory_order_relaxed))
                return r.copy.load(std::memory_order_relaxed) + (p - b);
        }
        return nullptr;
    }
    /// Registers (or, with the same owner, moves) the copy of [begin, end); false when the table is
    /// full (the products then convert that store's operands as any other's).
    bool put(const void* owner, const float* begin, const float* end, const bf16_bits* copy) {
        std::lock_guard<std::mutex> lock(mutex_);
        std::size_t i = 0;
        const std::size_t n = count_.load(std::memory_order_relaxed);
        while (i < n && ranges_[i].owner != owner && ranges_[i].owner != nullptr) ++i;
        if (i == ranges_.size()) return false;
        range& r = ranges_[i];
        r.begin.store(nullptr, std::memory_order_relaxed);  // no reader matches a half-written entry
        r.owner = owner;
        r.end.store(end, std::memory_order_relaxed);
        r.copy.store(copy, std::memory_order_relaxed);
        r.begin.store(begin, std::memory_order_release);
        if (i == n) count_.store(n + 1, std::memory_order_release);
        return true;
    }
    void remove(const void* owner) {
        std::lock_guard<std::mutex> lock(mutex_);
        for (std::size_t i = 0; i < count_.load(std::memory_order_relaxed); ++i)
            if (ranges_[i].owner == owner) {
                ranges_[i].begin.store(nullptr, std::memory_order_release);
                ranges_[i].owner = nullptr;
            }
    }

private:
    struct range {
        std::atomic<const float*> begin{nullptr}, end{nullptr};
        std::atomic<const bf16_bits*> copy{nullptr};
        const void* owner = nullptr;
    };
    std::array<range, 64> ranges_{};
    std::atomic<std::size_t> count_{0};
    std::mutex mutex_;
};

/// op(X) of bf16 values X (rows x cols, leading dimension ld) row-major and contiguous, as bf16
/// bits (Out = bf16_bits: a small transposed operand kept in bf16 only, the same bits as converting
/// its floats transposed) or as the floats they stand for (Out = float: the emulated engine's
/// operand read from a weight's bf16 copy or a value kept in bf16). The transposing form moves
/// tiles of 16 x 16 (vector transposes where the build has AVX512-BF16).
template <class Out>
inline void pack_bf16(bool trans, std::size_t rows, std::size_t cols, const bf16_bits* x, std::size_t ld, Out* out) {
    static_assert(std::is_same_v<Out, bf16_bits> || std::is_same_v<Out, float>);
    const auto value = [](bf16_bits b) {
        if constexpr (std::is_same_v<Out, float>) return from_bf16(b);
        else return b;
    };
    if (!trans) {
        for (std::size_t r = 0; r < rows; ++r)
            for (std::size_t c = 0; c < cols; ++c) out[r * cols + c] = value(x[r * ld + c]);
        return;
    }
#ifdef CTG_BF16_TRANSPOSE_AVX512
    return detail::transpose_bf16(rows, cols, x, ld, out);
#endif
    constexpr std::size_t tile = 16;  // out[r][c] = x[c][r]
    for (std::size_t c0 = 0; c0 < cols; c0 += tile)
        for (std::size_t r0 = 0; r0 < rows; r0 += tile) {
            const std::size_t c1 = std::min(cols, c0 + tile), r1 = std::min(rows, r0 + tile);
            for (std::size_t c = c0; c < c1; ++c)
                for (std::size_t r = r0; r < r1; ++r) out[r * cols + c] = value(x[c * ld + r]);
        }
}

}  // namespace ctg::kernels
