// ctgraph/kernels/quant.hpp: weight-only quantised matrices and their products by a few rows, the
// kernels of a decoding step whose weights are read as int8 or 4-bit.
//
// A decoding step reads every weight once per token: its time is the bytes of its weights over the
// memory's read bandwidth. Fewer bytes per weight is the way up. Two formats, both for a weight W
// (K, N) read as y = x W (+ b) with x a few rows (K):
//
//   q8_matrix  int8, one scale per output column, symmetric: s[n] = max_k |W[k][n]| / 127,
//              q[n][k] = round(W[k][n] / s[n]) (ties to even) in [-127, 127]. 1 byte a weight (+ 4
//              bytes a column). Stored column-major (q[n] is column n of W, contiguous along K,
//              padded with zeros to a multiple of 64) so that a column's dot product streams.
//   q4_matrix  4-bit in groups of 32 along K, one float16 scale a group: ggml's Q4_0 rule and bit
//              layout (d = m / -8 with m the group's value of largest magnitude, q = round(w / d) + 8
//              clamped to [0, 15]; a group's 16 bytes hold q[j] in the low nibble of byte j and
//              q[j + 16] in the high one), 4.5 bits a weight. Chosen over a float32 scale (5 bits) for
//              the bytes, and over Q4_K's super-blocks for a kernel with one scale per group; the
//              value -8 d is used, so the extreme weight of each group is exact. K must be a
//              multiple of 32 (every product of the reference models is).
//
// Products y = x W for M rows of x, two ways each (choose_quant_path picks the fastest the CPU has):
//   * float activations: the weights are widened to float in registers and multiplied by x
//     (AVX-512: vpmovsxbd + vcvtdq2ps + FMA; accumulated in float, 16 lanes, then summed);
//   * int8 activations (VNNI: vpdpbusd): each row of x quantised symmetrically, per row for q8
//     (sx = max |x| / 127) and per group of 32 for q4 (as ggml's Q8_0), and the integer dot products
//     accumulated exactly in int32, then scaled: y = sx s[n] sum_k xq[k] q[n][k]. vpdpbusd multiplies
//     unsigned by signed bytes: q8 feeds xq + 128 (u8) against q and subtracts 128 times the
//     column's sum of codes (kept with the matrix); q4 feeds its codes q + 8 (u8, 0..15) against xq
//     and subtracts 8 times each group's sum of xq (once per row, for every column); two groups of
//     32 per 512-bit product, their 16 lanes scaled by the two groups' scales. With AVX-512 VNNI,
//     or AVX-VNNI's 256-bit vpdpbusd (one group per product) on CPUs without AVX-512.
// The float-activation way also runs on AVX2 and FMA (256 bits), for CPUs without AVX-512.
// Each has a scalar reference (quant_path::scalar), which is also the portable path. The rule for
// the tests: the int8-activation paths' integer sums equal the scalar integer sums exactly
// (int8_dot_q8 / int8_dot_q4 expose them); the float paths agree with a float64 product of the
// dequantised weights to K * 2^-24 relative to sum_k |x_k w_k| (float accumulation).
// CTG_QUANT_ISA=scalar|avx2|avx_vnni|avx512|avx512_vnni caps the choice (to test every path on any host).
#pragma once
#include <algorithm>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <mutex>
#include <shared_mutex>
#include <stdexcept>
#include <string>
#include <string_view>
#include <vector>

#if defined(__x86_64__) || defined(__i386__)
#include <cpuid.h>
#include <immintrin.h>
#define CTG_QUANT_X86 1
#else
#define CTG_QUANT_X86 0
#endif

#include "ctgraph/error.hpp"
#include "ctgraph/op.hpp"
#include "ctgraph/kernels/parallel.hpp"
#include "ctgraph/memory.hpp"

namespace ctg::kernels {

/// float -> IEEE half (round to nearest even), and back: the q4 group scales.
inline std::uint16_t to_half(float f) {
    std::uint32_t x;
    std::memcpy(&x, &f, 4);
    const std::uint32_t sign = (x >> 16) & 0x8000u;
    const std::int32_t exp = std::int32_t((x >> 23) & 0xff) - 127 + 15;
    std::uint32_t man = x & 0x7fffffu;
    if (((x >> 23) & 0xff) == 0xff) return std::uint16_t(sign | 0x7c00u | (man ? 0x200u : 0u));  // inf, NaN
    if (exp >= 31) return std::uint16_t(sign | 0x7c00u);                                        // overflow: inf
    if (exp <= 0) {                                                                            // subnormal or zero
        if (exp < -10) return std::uint16_t(sign);
        man |= 0x800000u;
        const int shift = 14 - exp;
        std::uint32_t h = man >> shift;
        const std::uint32_t rest = man & ((1u << shift) - 1), half = 1u << (shift - 1);
        if (rest > half || (rest == half && (h & 1))) ++h;
        return std::uint16_t(sign | h);
    }
    std::uint32_t h = (std::uint32_t(exp) << 10) | (man >> 13);
    const std::uint32_t rest = man & 0x1fffu;
    if (rest > 0x1000u || (rest == 0x1000u && (h & 1))) ++h;  // may carry into the exponent: right
    return std::uint16_t(sign | h);
}
/// IEEE half -> float (exact).
inline float from_half(std::uint16_t h) {
    const std::uint32_t sign = std::uint32_t(h & 0x8000u) << 16;
    std::uint32_t exp = (h >> 10) & 0x1f, man = h & 0x3ffu, x;
    if (exp == 0x1f) {
        x = sign | 0x7f800000u | (man << 13);
    } else if (exp == 0) {
        if (man == 0) {
            x = sign;
        } else {  // subnormal: normalise
            int e = -1;
            do {
                ++e;
                man <<= 1;
            } while (!(man & 0x400u));
            x = sign | (std::uint32_t(127 - 15 - e) << 23) | ((man & 0x3ffu) << 13);
        }
    } else {
        x = sign | ((exp - 15 + 127) << 23) | (man << 13);
    }
    float f;
    std::memcpy(&f, &x, 4);
    return f;
}

/// Columns [n0, n0 + N) of a q8_matrix, as the kernels read them (pointers into the matrix).
struct q8_view {
    std::size_t K = 0, N = 0, Kp = 0;            ///< as the matrix's; N: the view's columns
    const std::int8_t* q = nullptr;              ///< its first column's codes
    const float* scale = nullptr;                ///< its first column's scale
    const std::int32_t* column_sum = nullptr;    ///< its first column's code sum
};

/// Columns [n0, n0 + N) of a q4_matrix, as the kernels read them.
struct q4_view {
    std::size_t K = 0, N = 0, G = 0;             ///< as the matrix's; N: the view's columns
    const std::uint8_t* nibbles = nullptr;       ///< its first column's groups
    const std::uint16_t* scale = nullptr;        ///< its first column's scales
};

/// int8 weights, one scale per output column (see the file comment).
struct q8_matrix {
    std::size_t K = 0, N = 0, Kp = 0;    ///< rows and columns of W; K padded to a multiple of 64
    aligned_vector<std::int8_t> q;       ///< N columns of Kp values, column n at n Kp
    std::vector<float> scale;            ///< N scales
    std::vector<std::int32_t> column_sum;  ///< N sums of the codes (the VNNI path's offset correction)
    /// Bytes a product reads.
    std::size_t bytes() const { return q.size() + scale.size() * sizeof(float) + column_sum.size() * sizeof(std::int32_t); }
    /// The dequantised weight (k, n) as a double.
    double at(std::size_t k, std::size_t n) const { return double(scale[n]) * double(q[n * Kp + k]); }
    /// Columns [n0, n1).
    q8_view columns(std::size_t n0, std::size_t n1) const { return {K, n1 - n0, Kp, q.data() + n0 * Kp, scale.data() + n0, column_sum.data() + n0}; }
};

/// 4-bit weights in groups of 32 along K (ggml's Q4_0; see the file comment).
struct q4_matrix {
    static constexpr std::size_t group = 32;  ///< weights per scale
    std::size_t K = 0, N = 0, G = 0;          ///< rows and columns of W; groups per column (K / 32)
    aligned_vector<std::uint8_t> nibbles;     ///< N columns of G groups of 16 bytes
    std::vector<std::uint16_t> scale;         ///< N G float16 scales, column-major as the groups
    /// Bytes a product reads.
    std::size_t bytes() const { return nibbles.size() + scale.size() * sizeof(std::uint16_t); }
    /// The 4-bit value (k, n), in [-8, 7].
    int value(std::size_t k, std::size_t n) const {
        const std::size_t g = k / group, j = k % group;
        const std::uint8_t b = nibbles[(n * G + g) * 16 + (j % 16)];
        return int(j < 16 ? (b & 0x0f) : (b >> 4)) - 8;
    }
    /// The dequantised weight (k, n) as a double.
    double at(std::size_t k, std::size_t n) const { return double(from_half(scale[n * G + k / group])) * value(k, n); }
    /// Columns [n0, n1).
    q4_view columns(std::size_t n0, std::size_t n1) const { return {K, n1 - n0, G, nibbles.data() + n0 * G * 16, scale.data() + n0 * G}; }
};

/// W (K, N), row-major with leading dimension ldw, quantised to int8 per column. transposed: W is
/// stored as its transpose (N, K), row-major with leading dimension ldw (a tied head's embedding,
/// read as x E^T).
inline q8_matrix quantize_q8(const float* w, std::size_t K, std::size_t N, std::size_t ldw, bool transposed = false) {
    const std::size_t rs = transposed ? 1 : ldw, cs = transposed ? ldw : 1;  // element (k, n) at k rs + n cs
    q8_matrix m;
    m.K = K, m.N = N, m.Kp = (K + 63) / 64 * 64;
    m.q.assign(N * m.Kp, 0);
    m.scale.assign(N, 0.0f);
    m.column_sum.assign(N, 0);
    for (std::size_t n = 0; n < N; ++n) {
        float amax = 0;
        for (std::size_t k = 0; k < K; ++k) {
            const float v = w[k * rs + n * cs];
            if (!std::isfinite(v)) throw numeric_error("ctg::kernels::quantize_q8: weight (" + std::to_string(k) + ", " + std::to_string(n) + ") is not finite");
            amax = std::max(amax, std::abs(v));
        }
        const float s = amax / 127.0f;
        m.scale[n] = s;
        if (s == 0) continue;
        for (std::size_t k = 0; k < K; ++k) {
            m.q[n * m.Kp + k] = std::int8_t(std::clamp(std::nearbyint(w[k * rs + n * cs] / s), -127.0f, 127.0f));
            m.column_sum[n] += m.q[n * m.Kp + k];
        }
    }
    return m;
}

/// W (K, N), row-major with leading dimension ldw, quantised to 4 bits in groups of 32 along K
/// (transposed: as quantize_q8).
inline q4_matrix quantize_q4(const float* w, std::size_t K, std::size_t N, std::size_t ldw, bool transposed = false) {
    const std::size_t rs = transposed ? 1 : ldw, cs = transposed ? ldw : 1;
    if (K % q4_matrix::group != 0)
        throw shape_error("ctg::kernels::quantize_q4: the input size " + std::to_string(K) + " is not a multiple of 32");
    q4_matrix m;
    m.K = K, m.N = N, m.G = K / q4_matrix::group;
    m.nibbles.assign(N * m.G * 16, 0);
    m.scale.assign(N * m.G, 0);
    for (std::size_t n = 0; n < N; ++n)
        for (std::size_t g = 0; g < m.G; ++g) {
            float mx = 0, amax = 0;  // the value of largest magnitude, with its sign
            for (std::size_t j = 0; j < 32; ++j) {
                const float v = w[(g * 32 + j) * rs + n * cs];
                if (!std::isfinite(v)) throw numeric_error("ctg::kernels::quantize_q4: weight (" + std::to_string(g * 32 + j) + ", " + std::to_string(n) + ") is not finite");
                if (std::abs(v) > amax) amax = std::abs(v), mx = v;
            }
            const std::uint16_t dh = to_half(mx / -8.0f);
            m.scale[n * m.G + g] = dh;
            const float d = from_half(dh), id = d != 0 ? 1.0f / d : 0.0f;
            std::uint8_t* out = &m.nibbles[(n * m.G + g) * 16];
            for (std::size_t j = 0; j < 16; ++j) {
                auto code = [&](std::size_t jj) {
                    return std::uint8_t(std::clamp(std::nearbyint(w[(g * 32 + jj) * rs + n * cs] * id) + 8.0f, 0.0f, 15.0f));
                };
                out[j] = std::uint8_t(code(j) | (code(j + 16) << 4));
            }
        }
    return m;
}

/// How a quantised product runs.
enum class quant_path {
    scalar,       ///< the portable reference: float activations, one weight at a time
    avx2,         ///< AVX2 and FMA: float activations, weights widened in 256-bit registers
    avx_vnni,     ///< AVX-VNNI (AVX2, FMA, F16C): int8 activations, exact int32 dot products (256-bit vpdpbusd)
    avx512,       ///< AVX-512 (F, BW): float activations, weights widened in registers
    avx512_vnni,  ///< AVX-512 VNNI (and F16C): int8 activations, exact int32 dot products (vpdpbusd)
};
/// The path's name, as CTG_QUANT_ISA and the benchmarks spell it.
inline std::string_view quant_path_name(quant_path p) {
    return p == quant_path::scalar ? "scalar" : p == quant_path::avx2 ? "avx2" : p == quant_path::avx_vnni ? "avx_vnni"
           : p == quant_path::avx512 ? "avx512" : "avx512_vnni";
}
/// Whether a path quantises the activations to int8 (its integer sums are exact; see the file comment).
inline bool quant_int8_activations(quant_path p) { return p == quant_path::avx_vnni || p == quant_path::avx512_vnni; }
/// Whether this CPU runs a path.
inline bool quant_path_supported(quant_path p) {
#if CTG_QUANT_X86
    switch (p) {
        case quant_path::scalar: return true;
        case quant_path::avx2: return __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma");
        case quant_path::avx_vnni: {
            // CPUID leaf 7 sub-leaf 1, EAX bit 4 (F16C: leaf 1, ECX bit 29), asked once: every product
            // asks which paths run, and in a VM each CPUID instruction is a trip to the hypervisor
            // (asked per product, it made a small model's decoding 5x slower).
            static const bool has = [] {
                unsigned a = 0, b = 0, c = 0, d = 0, a1 = 0, b1 = 0, c1 = 0, d1 = 0;
                return __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma") && __get_cpuid_count(7, 1, &a, &b, &c, &d) &&
                       ((a >> 4) & 1u) && __get_cpuid(1, &a1, &b1, &c1, &d1) && ((c1 >> 29) & 1u);
            }();
            return has;
        }
        case quant_path::avx512: return __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw");
        case quant_path::avx512_vnni:
            return __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") && __builtin_cpu_supports("avx512vl") &&
                   __builtin_cpu_supports("avx512vnni");  // (and F16C, which every AVX-512 CPU has; clang 14 cannot ask)
    }
    return false;
#else
    return p == quant_path::scalar;
#endif
}
/// Every path, slowest first.
inline constexpr quant_path all_quant_paths[] = {quant_path::scalar, quant_path::avx2, quant_path::avx_vnni, quant_path::avx512,
                                                 quant_path::avx512_vnni};

/// The fastest path this CPU runs, or the fastest it runs up to CTG_QUANT_ISA's in the order above
/// (scalar, avx2, avx_vnni, avx512, avx512_vnni) when that is set; std::invalid_argument for
/// another value.
inline quant_path choose_quant_path() {
    int cap = int(quant_path::avx512_vnni);
    if (const char* c = std::getenv("CTG_QUANT_ISA")) {
        cap = -1;
        for (quant_path p : all_quant_paths)
            if (std::string_view(c) == quant_path_name(p)) cap = int(p);
        if (cap < 0)
            throw std::invalid_argument("CTG_QUANT_ISA='" + std::string(c) + "': expected scalar, avx2, avx_vnni, avx512 or avx512_vnni");
    }
    quant_path best = quant_path::scalar;
    for (quant_path p : all_quant_paths)
        if (int(p) <= cap && quant_path_supported(p)) best = p;
    return best;
}

namespace detail {

// ---------------------------------------------------------------- scalar (portable) paths
inline void gemv_q8_scalar(std::size_t M, const float* x, std::size_t ldx, const q8_view& w, const float* bias, float* y,
                           std::size_t ldy) {
    for (std::size_t m = 0; m < M; ++m)
        for (std::size_t n = 0; n < w.N; ++n) {
            const std::int8_t* q = &w.q[n * w.Kp];
            float acc = 0;
            for (std::size_t k = 0; k < w.K; ++k) acc += x[m * ldx + k] * float(q[k]);
            y[m * ldy + n] = acc * w.scale[n] + (bias ? bias[n] : 0.0f);
        }
}
inline void gemv_q4_scalar(std::size_t M, const float* x, std::size_t ldx, const q4_view& w, const float* bias, float* y,
                           std::size_t ldy) {
    for (std::size_t m = 0; m < M; ++m)
        for (std::size_t n = 0; n < w.N; ++n) {
            float acc = 0;
            for (std::size_t g = 0; g < w.G; ++g) {
                const std::uint8_t* b = &w.nibbles[(n * w.G + g) * 16];
                const float* xg = x + m * ldx + g * 32;
                float s = 0;
                for (std::size_t j = 0; j < 16; ++j)
                    s += xg[j] * float(int(b[j] & 0x0f) - 8) + xg[j + 16] * float(int(b[j] >> 4) - 8);
                acc += s * from_half(w.scale[n * w.G + g]);
            }
            y[m * ldy + n] = acc + (bias ? bias[n] : 0.0f);
        }
}

/// A row of x quantised symmetrically to int8 (scale max |x| / 127): into xq (padded with zeros to
/// `padded`); returns the scale.
inline float quantize_row_q8(const float* x, std::size_t K, std::int8_t* xq, std::size_t padded) {
    float amax = 0;
    for (std::size_t k = 0; k < K; ++k) amax = std::max(amax, std::abs(x[k]));
    const float s = amax / 127.0f, is = s != 0 ? 1.0f / s : 0.0f;
    for (std::size_t k = 0; k < K; ++k) xq[k] = std::int8_t(std::clamp(std::nearbyint(x[k] * is), -127.0f, 127.0f));
    std::fill(xq + K, xq + padded, std::int8_t(0));
    return s;
}

#if CTG_QUANT_X86
// ---------------------------------------------------------------- AVX2, float activations
__attribute__((target("avx2,fma"))) inline float hsum8(__m256 v) {
    __m128 s = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
    s = _mm_add_ps(s, _mm_movehl_ps(s, s));
    return _mm_cvtss_f32(_mm_add_ss(s, _mm_movehdup_ps(s)));
}

__attribute__((target("avx2,fma"))) inline void gemv_q8_avx2(std::size_t M, const float* x, std::size_t ldx, const q8_view& w,
                                                            const float* bias, float* y, std::size_t ldy) {
    const std::size_t K8 = w.K / 8 * 8;
    auto widen = [](const std::int8_t* q) {
        return _mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(_mm_loadl_epi64(reinterpret_cast<const __m128i*>(q))));
    };
    for (std::size_t m = 0; m < M; ++m) {
        const float* xr = x + m * ldx;
        std::size_t n = 0;
        for (; n + 4 <= w.N; n += 4) {  // four columns share each load of x
            __m256 a0 = _mm256_setzero_ps(), a1 = a0, a2 = a0, a3 = a0;
            const std::int8_t* q = &w.q[n * w.Kp];
            for (std::size_t k = 0; k < K8; k += 8) {
                const __m256 xv = _mm256_loadu_ps(xr + k);
                a0 = _mm256_fmadd_ps(xv, widen(q + k), a0);
                a1 = _mm256_fmadd_ps(xv, widen(q + w.Kp + k), a1);
                a2 = _mm256_fmadd_ps(xv, widen(q + 2 * w.Kp + k), a2);
                a3 = _mm256_fmadd_ps(xv, widen(q + 3 * w.Kp + k), a3);
            }
            float s[4] = {hsum8(a0), hsum8(a1), hsum8(a2), hsum8(a3)};
            for (std::size_t k = K8; k < w.K; ++k)
                for (std::size_t c = 0; c < 4; ++c) s[c] += xr[k] * float(q[c * w.Kp + k]);
            for (std::size_t c = 0; c < 4; ++c) y[m * ldy + n + c] = s[c] * w.scale[n + c] + (bias ? bias[n + c] : 0.0f);
        }
        for (; n < w.N; ++n) {
            const std::int8_t* q = &w.q[n * w.Kp];
            __m256 a = _mm256_setzero_ps();
            for (std::size_t k = 0; k < K8; k += 8) a = _mm256_fmadd_ps(_mm256_loadu_ps(xr + k), widen(q + k), a);
            float s = hsum8(a);
            for (std::size_t k = K8; k < w.K; ++k) s += xr[k] * float(q[k]);
            y[m * ldy + n] = s * w.scale[n] + (bias ? bias[n] : 0.0f);
        }
    }
}

__attribute__((target("avx2,fma"))) inline void gemv_q4_avx2(std::size_t M, const float* x, std::size_t ldx, const q4_view& w,
                                                            const float* bias, float* y, std::size_t ldy) {
    const __m128i low4 = _mm_set1_epi8(0x0f), eight = _mm_set1_epi8(8);
    auto widen = [](__m128i v) { return _mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(v)); };  // the low 8 bytes
    for (std::size_t m = 0; m < M; ++m) {
        const float* xr = x + m * ldx;
        for (std::size_t n = 0; n < w.N; ++n) {
            __m256 acc = _mm256_setzero_ps();
            const std::uint8_t* b = &w.nibbles[n * w.G * 16];
            const std::uint16_t* d = &w.scale[n * w.G];
            for (std::size_t g = 0; g < w.G; ++g) {
                const __m128i raw = _mm_loadu_si128(reinterpret_cast<const __m128i*>(b + g * 16));
                const __m128i lo = _mm_sub_epi8(_mm_and_si128(raw, low4), eight);                      // values 0..15
                const __m128i hi = _mm_sub_epi8(_mm_and_si128(_mm_srli_epi16(raw, 4), low4), eight);  // values 16..31
                const float* xg = xr + g * 32;
                __m256 s = _mm256_mul_ps(_mm256_loadu_ps(xg), widen(lo));
                s = _mm256_fmadd_ps(_mm256_loadu_ps(xg + 8), widen(_mm_srli_si128(lo, 8)), s);
                s = _mm256_fmadd_ps(_mm256_loadu_ps(xg + 16), widen(hi), s);
                s = _mm256_fmadd_ps(_mm256_loadu_ps(xg + 24), widen(_mm_srli_si128(hi, 8)), s);
                acc = _mm256_fmadd_ps(s, _mm256_set1_ps(from_half(d[g])), acc);
            }
            y[m * ldy + n] = hsum8(acc) + (bias ? bias[n] : 0.0f);
        }
    }
}

// ---------------------------------------------------------------- AVX-512, float activations
__attribute__((target("avx512f,avx512bw"))) inline float hsum(__m512 v) { return _mm512_reduce_add_ps(v); }

__attribute__((target("avx512f,avx512bw"))) inline void gemv_q8_avx512(std::size_t M, const float* x, std::size_t ldx,
                                                                       const q8_view& w, const float* bias, float* y,
                                                                       std::size_t ldy) {
    const std::size_t K16 = w.K / 16 * 16;
    for (std::size_t m = 0; m < M; ++m) {
        const float* xr = x + m * ldx;
        std::size_t n = 0;
        for (; n + 4 <= w.N; n += 4) {  // four columns share each load of x
            __m512 a0 = _mm512_setzero_ps(), a1 = a0, a2 = a0, a3 = a0;
            const std::int8_t* q = &w.q[n * w.Kp];
            for (std::size_t k = 0; k < K16; k += 16) {
                const __m512 xv = _mm512_loadu_ps(xr + k);
                auto col = [&](std::size_t c) {
                    return _mm512_cvtepi32_ps(_mm512_cvtepi8_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i*>(q + c * w.Kp + k))));
                };
                a0 = _mm512_fmadd_ps(xv, col(0), a0);
                a1 = _mm512_fmadd_ps(xv, col(1), a1);
                a2 = _mm512_fmadd_ps(xv, col(2), a2);
                a3 = _mm512_fmadd_ps(xv, col(3), a3);
            }
            float s[4] = {hsum(a0), hsum(a1), hsum(a2), hsum(a3)};
            for (std::size_t k = K16; k < w.K; ++k)
                for (std::size_t c = 0; c < 4; ++c) s[c] += xr[k] * float(q[c * w.Kp + k]);
            for (std::size_t c = 0; c < 4; ++c) y[m * ldy + n + c] = s[c] * w.scale[n + c] + (bias ? bias[n + c] : 0.0f);
        }
        {  // the last columns, one at a time
            for (; n < w.N; ++n) {
                const std::int8_t* q = &w.q[n * w.Kp];
                __m512 a = _mm512_setzero_ps();
                for (std::size_t k = 0; k < K16; k += 16)
                    a = _mm512_fmadd_ps(_mm512_loadu_ps(xr + k),
                                        _mm512_cvtepi32_ps(_mm512_cvtepi8_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i*>(q + k)))), a);
                float s = hsum(a);
                for (std::size_t k = K16; k < w.K; ++k) s += xr[k] * float(q[k]);
                y[m * ldy + n] = s * w.scale[n] + (bias ? bias[n] : 0.0f);
            }
        }
    }
}

/// 32 bytes of 4-bit values (a group's 16 bytes) as 32 int8 in [-8, 7], in order j = 0..31.
__attribute__((target("avx512f,avx512bw,avx512vl"))) inline __m256i unpack_q4(const std::uint8_t* b) {
    const __m128i raw = _mm_loadu_si128(reinterpret_cast<const __m128i*>(b));
    const __m128i lo = _mm_and_si128(raw, _mm_set1_epi8(0x0f)), hi = _mm_and_si128(_mm_srli_epi16(raw, 4), _mm_set1_epi8(0x0f));
    return _mm256_sub_epi8(_mm256_set_m128i(hi, lo), _mm256_set1_epi8(8));
}

__attribute__((target("avx512f,avx512bw,avx512vl"))) inline void gemv_q4_avx512(std::size_t M, const float* x, std::size_t ldx,
                                                                                const q4_view& w, const float* bias, float* y,
                                                                                std::size_t ldy) {
    for (std::size_t m = 0; m < M; ++m) {
        const float* xr = x + m * ldx;
        for (std::size_t n = 0; n < w.N; ++n) {
            __m512 acc = _mm512_setzero_ps();
            const std::uint8_t* b = &w.nibbles[n * w.G * 16];
            const std::uint16_t* d = &w.scale[n * w.G];
            for (std::size_t g = 0; g < w.G; ++g) {
                const __m256i v = unpack_q4(b + g * 16);
                const __m512 w0 = _mm512_cvtepi32_ps(_mm512_cvtepi8_epi32(_mm256_castsi256_si128(v)));
                const __m512 w1 = _mm512_cvtepi32_ps(_mm512_cvtepi8_epi32(_mm256_extracti128_si256(v, 1)));
                const __m512 s = _mm512_fmadd_ps(_mm512_loadu_ps(xr + g * 32), w0, _mm512_mul_ps(_mm512_loadu_ps(xr + g * 32 + 16), w1));
                acc = _mm512_fmadd_ps(s, _mm512_set1_ps(from_half(d[g])), acc);
            }
            y[m * ldy + n] = hsum(acc) + (bias ? bias[n] : 0.0f);
        }
    }
}

// ---------------------------------------------------------------- AVX-512 VNNI, int8 activations
/// sum_k u[k] q[k] over Kp bytes (a multiple of 64), u unsigned and q signed bytes, exactly: one
/// sequential stream through q, four accumulators along K.
__attribute__((target("avx512f,avx512bw,avx512vnni"))) inline std::int32_t dot_u8s8_vnni(const std::int8_t* u, const std::int8_t* q,
                                                                                           std::size_t Kp) {
    __m512i a0 = _mm512_setzero_si512(), a1 = a0, a2 = a0, a3 = a0;
    std::size_t k = 0;
    for (; k + 256 <= Kp; k += 256) {
        a0 = _mm512_dpbusd_epi32(a0, _mm512_load_si512(u + k), _mm512_load_si512(q + k));
        a1 = _mm512_dpbusd_epi32(a1, _mm512_load_si512(u + k + 64), _mm512_load_si512(q + k + 64));
        a2 = _mm512_dpbusd_epi32(a2, _mm512_load_si512(u + k + 128), _mm512_load_si512(q + k + 128));
        a3 = _mm512_dpbusd_epi32(a3, _mm512_load_si512(u + k + 192), _mm512_load_si512(q + k + 192));
    }
    for (; k < Kp; k += 64) a0 = _mm512_dpbusd_epi32(a0, _mm512_load_si512(u + k), _mm512_load_si512(q + k));
    return _mm512_reduce_add_epi32(_mm512_add_epi32(_mm512_add_epi32(a0, a1), _mm512_add_epi32(a2, a3)));
}

/// The M rows of x quantised for gemv_q8_vnni: row m's codes plus 128 as unsigned bytes at
/// xu + m Kp (padded with zeros, i.e. 128, to Kp), its scale at sx[m]. Once per product: every
/// piece of columns reads them.
inline void quantize_rows_u8(std::size_t M, const float* x, std::size_t ldx, std::size_t K, std::size_t Kp, std::int8_t* xu,
                             float* sx) {
    for (std::size_t m = 0; m < M; ++m) {
        std::int8_t* r = xu + m * Kp;
        sx[m] = quantize_row_q8(x + m * ldx, K, r, Kp);
        for (std::size_t k = 0; k < Kp; ++k) r[k] = std::int8_t(std::uint8_t(r[k]) ^ 0x80u);  // xq + 128 as u8 (the sign bit flipped)
    }
}

/// y = x W for the rows quantize_rows_u8 made. One column at a time, its Kp bytes one sequential
/// stream (four accumulators along K): the columns are contiguous, so the product reads the
/// weights front to back as the hardware prefetcher likes best. (Four columns side by side, each
/// load of x shared, read four interleaved streams of Kp bytes and ran 25-35 % slower from memory.)
/// A column stays in L1 while the other rows read it.
__attribute__((target("avx512f,avx512bw,avx512vnni"))) inline void gemv_q8_vnni(std::size_t M, const std::int8_t* xu, const float* sx,
                                                                                 const q8_view& w, const float* bias, float* y,
                                                                                 std::size_t ldy) {
    for (std::size_t n = 0; n < w.N; ++n)
        for (std::size_t m = 0; m < M; ++m) {
            const std::int32_t exact = dot_u8s8_vnni(xu + m * w.Kp, &w.q[n * w.Kp], w.Kp) - 128 * w.column_sum[n];
            y[m * ldy + n] = float(exact) * (sx[m] * w.scale[n]) + (bias ? bias[n] : 0.0f);
        }
}

// ---------------------------------------------------------------- AVX-VNNI (256-bit), int8 activations
__attribute__((target("avx2,avxvnni"))) inline std::int32_t hsum_epi32_256(__m256i v) {
    __m128i s = _mm_add_epi32(_mm256_castsi256_si128(v), _mm256_extracti128_si256(v, 1));
    s = _mm_add_epi32(s, _mm_shuffle_epi32(s, 0x4e));
    return _mm_cvtsi128_si32(_mm_add_epi32(s, _mm_shuffle_epi32(s, 0xb1)));
}

/// sum_k u[k] q[k] over Kp bytes (a multiple of 64), u unsigned and q signed bytes, exactly.
__attribute__((target("avx2,avxvnni"))) inline std::int32_t dot_u8s8_avxvnni(const std::int8_t* u, const std::int8_t* q, std::size_t Kp) {
    __m256i a0 = _mm256_setzero_si256(), a1 = a0;
    for (std::size_t k = 0; k < Kp; k += 64) {
        a0 = _mm256_dpbusd_avx_epi32(a0, _mm256_load_si256(reinterpret_cast<const __m256i*>(u + k)),
                                     _mm256_load_si256(reinterpret_cast<const __m256i*>(q + k)));
        a1 = _mm256_dpbusd_avx_epi32(a1, _mm256_load_si256(reinterpret_cast<const __m256i*>(u + k + 32)),
                                     _mm256_load_si256(reinterpret_cast<const __m256i*>(q + k + 32)));
    }
    return hsum_epi32_256(_mm256_add_epi32(a0, a1));
}

/// gemv_q8_vnni in 256-bit registers (CPUs with AVX-VNNI and no AVX-512): the same sums, exactly.
__attribute__((target("avx2,avxvnni"))) inline void gemv_q8_avxvnni(std::size_t M, const std::int8_t* xu, const float* sx,
                                                                    const q8_view& w, const float* bias, float* y, std::size_t ldy) {
    for (std::size_t n = 0; n < w.N; ++n)
        for (std::size_t m = 0; m < M; ++m) {
            const std::int32_t exact = dot_u8s8_avxvnni(xu + m * w.Kp, &w.q[n * w.Kp], w.Kp) - 128 * w.column_sum[n];
            y[m * ldy + n] = float(exact) * (sx[m] * w.scale[n]) + (bias ? bias[n] : 0.0f);
        }
}

/// A row of x quantised per group of 32 (ggml's Q8_0: scale max |x_g| / 127 per group).
inline void quantize_row_q8_groups(const float* x, std::size_t K, std::int8_t* xq, float* sx) {
    for (std::size_t g = 0; g < K / 32; ++g) sx[g] = quantize_row_q8(x + g * 32, 32, xq + g * 32, 32);
}

/// What both VNNI q4 paths need of a row: x quantised per group of 32 (xq, sx) and each group's
/// offset correction 8 sx_g sum_j xq[j] (the codes are fed as q + 8, unsigned).
inline void prepare_q4_row(const float* x, std::size_t K, std::int8_t* xq, float* sx, float* correction) {
    quantize_row_q8_groups(x, K, xq, sx);
    for (std::size_t g = 0; g < K / 32; ++g) {
        std::int32_t t = 0;
        for (std::size_t j = 0; j < 32; ++j) t += xq[g * 32 + j];
        correction[g] = 8.0f * sx[g] * float(t);
    }
}

/// 4-bit products by int8 activations in 256-bit registers: per group, its 32 codes (q + 8, in x's
/// order: the low nibbles are j < 16, the high ones j >= 16) against the group's 32 xq.
__attribute__((target("avx2,fma,f16c,avxvnni"))) inline void gemv_q4_avxvnni(std::size_t M, const float* x, std::size_t ldx,
                                                                              const q4_view& w, const float* bias, float* y,
                                                                              std::size_t ldy, std::int8_t* xq, float* sx,
                                                                              float* correction, float* ds) {
    const std::size_t G = w.G;
    const __m128i low4 = _mm_set1_epi8(0x0f);
    for (std::size_t m = 0; m < M; ++m) {
        prepare_q4_row(x + m * ldx, w.K, xq, sx, correction);
        for (std::size_t n = 0; n < w.N; ++n) {
            const std::uint8_t* b = &w.nibbles[n * G * 16];
            const std::uint16_t* d = &w.scale[n * G];
            float corr = 0;
            std::size_t g = 0;
            __m256 corr8 = _mm256_setzero_ps();
            for (; g + 8 <= G; g += 8) {  // the column's scales times x's, and the correction, 8 groups at a time
                const __m256 dg = _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(d + g)));
                _mm256_storeu_ps(ds + g, _mm256_mul_ps(dg, _mm256_loadu_ps(sx + g)));
                corr8 = _mm256_fmadd_ps(dg, _mm256_loadu_ps(correction + g), corr8);
            }
            for (; g < G; ++g) {
                const float dg = _cvtsh_ss(d[g]);
                ds[g] = dg * sx[g], corr += dg * correction[g];
            }
            corr += hsum8(corr8);
            __m256 acc0 = _mm256_setzero_ps(), acc1 = acc0;
            auto group = [&](std::size_t gi) {
                const __m128i raw = _mm_loadu_si128(reinterpret_cast<const __m128i*>(b + gi * 16));
                const __m256i codes = _mm256_set_m128i(_mm_and_si128(_mm_srli_epi16(raw, 4), low4), _mm_and_si128(raw, low4));
                const __m256i dot = _mm256_dpbusd_avx_epi32(_mm256_setzero_si256(), codes,
                                                            _mm256_loadu_si256(reinterpret_cast<const __m256i*>(xq + gi * 32)));
                return _mm256_mul_ps(_mm256_cvtepi32_ps(dot), _mm256_set1_ps(ds[gi]));
            };
            for (g = 0; g + 2 <= G; g += 2) {  // two groups a step: two independent sums
                acc0 = _mm256_add_ps(acc0, group(g));
                acc1 = _mm256_add_ps(acc1, group(g + 1));
            }
            if (g < G) acc0 = _mm256_add_ps(acc0, group(g));
            y[m * ldy + n] = hsum8(_mm256_add_ps(acc0, acc1)) - corr + (bias ? bias[n] : 0.0f);
        }
    }
}

__attribute__((target("avx512f,avx512bw,avx512vl,avx512vnni,f16c"))) inline void gemv_q4_vnni(std::size_t M, const float* x,
                                                                                               std::size_t ldx, const q4_view& w,
                                                                                               const float* bias, float* y,
                                                                                               std::size_t ldy, std::int8_t* xq, float* sx,
                                                                                               float* correction, std::int8_t* xp,
                                                                                               float* ds) {
    const std::size_t G = w.G, pairs = G / 2;
    const __m512i low4 = _mm512_set1_epi8(0x0f);
    // The two groups' scales over the 16 lanes of a pair's product (see below): lanes 0-3 and 8-11
    // are group g's, 4-7 and 12-15 group g + 1's.
    const __m512i pick = _mm512_set_epi32(1, 1, 1, 1, 0, 0, 0, 0, 1, 1, 1, 1, 0, 0, 0, 0);
    for (std::size_t m = 0; m < M; ++m) {
        prepare_q4_row(x + m * ldx, w.K, xq, sx, correction);
        // x in the order of a pair's codes: the 32 bytes of nibbles of groups g and g + 1 give
        // [low nibbles of g, of g + 1 | high nibbles of g, of g + 1], values j < 16 then j >= 16.
        for (std::size_t p = 0; p < pairs; ++p) {
            const std::int8_t* a = xq + p * 64;
            std::int8_t* o = xp + p * 64;
            std::memcpy(o, a, 16), std::memcpy(o + 16, a + 32, 16), std::memcpy(o + 32, a + 16, 16), std::memcpy(o + 48, a + 48, 16);
        }
        for (std::size_t n = 0; n < w.N; ++n) {
            const std::uint8_t* b = &w.nibbles[n * G * 16];
            const std::uint16_t* d = &w.scale[n * G];
            // The column's scales times x's, and the offset's correction, 16 groups at a time.
            __m512 corr16 = _mm512_setzero_ps();
            std::size_t g = 0;
            for (; g + 16 <= G; g += 16) {
                const __m512 dg = _mm512_cvtph_ps(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(d + g)));
                _mm512_storeu_ps(ds + g, _mm512_mul_ps(dg, _mm512_loadu_ps(sx + g)));
                corr16 = _mm512_fmadd_ps(dg, _mm512_loadu_ps(correction + g), corr16);
            }
            if (g < G) {  // the last groups, masked (a small K has nothing but these)
                const __mmask16 m = __mmask16((1u << (G - g)) - 1);
                const __m512 dg = _mm512_cvtph_ps(_mm256_maskz_loadu_epi16(m, d + g));
                _mm512_mask_storeu_ps(ds + g, m, _mm512_mul_ps(dg, _mm512_maskz_loadu_ps(m, sx + g)));
                corr16 = _mm512_fmadd_ps(dg, _mm512_maskz_loadu_ps(m, correction + g), corr16);
            }
            const float corr = _mm512_reduce_add_ps(corr16);
            __m512 acc0 = _mm512_setzero_ps(), acc1 = acc0;
            std::size_t p = 0;
            for (; p + 2 <= pairs; p += 2) {  // two pairs a step: two independent sums
                const __m256i r0 = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(b + p * 32));
                const __m256i r1 = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(b + p * 32 + 32));
                const __m512i c0 = _mm512_and_si512(_mm512_inserti64x4(_mm512_castsi256_si512(r0), _mm256_srli_epi16(r0, 4), 1), low4);
                const __m512i c1 = _mm512_and_si512(_mm512_inserti64x4(_mm512_castsi256_si512(r1), _mm256_srli_epi16(r1, 4), 1), low4);
                const __m512i d0 = _mm512_dpbusd_epi32(_mm512_setzero_si512(), c0, _mm512_load_si512(xp + p * 64));
                const __m512i d1 = _mm512_dpbusd_epi32(_mm512_setzero_si512(), c1, _mm512_load_si512(xp + p * 64 + 64));
                const __m512 s0 = _mm512_permutexvar_ps(pick, _mm512_castps128_ps512(_mm_castpd_ps(_mm_load_sd(reinterpret_cast<const double*>(ds + 2 * p)))));
                const __m512 s1 = _mm512_permutexvar_ps(pick, _mm512_castps128_ps512(_mm_castpd_ps(_mm_load_sd(reinterpret_cast<const double*>(ds + 2 * p + 2)))));
                acc0 = _mm512_fmadd_ps(_mm512_cvtepi32_ps(d0), s0, acc0);
                acc1 = _mm512_fmadd_ps(_mm512_cvtepi32_ps(d1), s1, acc1);
            }
            for (; p < pairs; ++p) {
                const __m256i r = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(b + p * 32));
                const __m512i c = _mm512_and_si512(_mm512_inserti64x4(_mm512_castsi256_si512(r), _mm256_srli_epi16(r, 4), 1), low4);
                const __m512i dt = _mm512_dpbusd_epi32(_mm512_setzero_si512(), c, _mm512_load_si512(xp + p * 64));
                const __m512 sc = _mm512_permutexvar_ps(pick, _mm512_castps128_ps512(_mm_castpd_ps(_mm_load_sd(reinterpret_cast<const double*>(ds + 2 * p)))));
                acc0 = _mm512_fmadd_ps(_mm512_cvtepi32_ps(dt), sc, acc0);
            }
            float tail = 0;
            if (G % 2) {  // an odd last group, in x's own order
                const std::size_t gl = G - 1;
                const __m256i v = _mm256_add_epi8(unpack_q4(b + gl * 16), _mm256_set1_epi8(8));
                const __m256i dot = _mm256_dpbusd_epi32(_mm256_setzero_si256(), v, _mm256_loadu_si256(reinterpret_cast<const __m256i*>(xq + gl * 32)));
                alignas(32) std::int32_t lanes[8];
                _mm256_store_si256(reinterpret_cast<__m256i*>(lanes), dot);
                std::int32_t t = 0;
                for (std::int32_t v8 : lanes) t += v8;
                tail = float(t) * ds[gl];
            }
            y[m * ldy + n] = _mm512_reduce_add_ps(_mm512_add_ps(acc0, acc1)) + tail - corr + (bias ? bias[n] : 0.0f);
        }
    }
}
#endif

}  // namespace detail

/// Columns per piece of a product by several rows: each piece's weights (48 KiB of int8 at K = 768)
/// stay in cache while every row reads them, so M rows read the weights once, not M times.
inline constexpr std::size_t quant_columns_per_piece = 64;

namespace detail {
// Runs piece(n0, n1) over column pieces of N: on the pool's threads when the product is large
// enough to share (at least 64 Ki weights a thread), else in order on this thread.
template <class Piece>
void quant_pieces(std::size_t M, std::size_t K, std::size_t N, Piece&& piece) {
    const std::size_t step = M == 1 ? N : quant_columns_per_piece;  // one row reads each weight once anyway
    const std::size_t P = std::size_t(thread_pool::instance().threads_here());
    if (P > 1 && K * N >= (std::size_t(1) << 16) * P) {
        const std::size_t chunk = std::max<std::size_t>(16, (N + 4 * P - 1) / (4 * P) / 16 * 16);  // 4 tasks a thread
        thread_pool::instance().run((N + chunk - 1) / chunk, [&](std::size_t t) {
            const std::size_t c0 = t * chunk, c1 = std::min(N, c0 + chunk);
            for (std::size_t n = c0; n < c1; n += std::min(step, c1 - n)) piece(n, std::min(c1, n + step));
        });
        return;
    }
    for (std::size_t n = 0; n < N; n += std::min(step, N - n)) piece(n, std::min(N, n + step));
}
}  // namespace detail

/// y (M, N) = x (M, K) W + bias (optional), W quantised to int8 (see the file comment); `path`
/// must be supported here (choose_quant_path()). Scratch from kernels::scratch; the columns are
/// shared among the pool's threads when the product is large.
inline void gemv_q8(std::size_t M, const float* x, std::size_t ldx, const q8_matrix& w, const float* bias, float* y, std::size_t ldy,
                    quant_path path = choose_quant_path()) {
    if (!quant_path_supported(path)) throw error("ctg::kernels::gemv_q8: this CPU does not run the path " + std::string(quant_path_name(path)));
#if CTG_QUANT_X86
    if (quant_int8_activations(path)) {  // the rows quantised once, for every piece
        scratch<std::int8_t> xu(M * w.Kp);
        scratch<float> sx(M);
        detail::quantize_rows_u8(M, x, ldx, w.K, w.Kp, xu.data(), sx.data());
        detail::quant_pieces(M, w.K, w.N, [&](std::size_t n0, std::size_t n1) {
            const q8_view v = w.columns(n0, n1);
            const float* b = bias ? bias + n0 : nullptr;
            if (path == quant_path::avx512_vnni) detail::gemv_q8_vnni(M, xu.data(), sx.data(), v, b, y + n0, ldy);
            else detail::gemv_q8_avxvnni(M, xu.data(), sx.data(), v, b, y + n0, ldy);
        });
        return;
    }
#endif
    detail::quant_pieces(M, w.K, w.N, [&](std::size_t n0, std::size_t n1) {
        const q8_view v = w.columns(n0, n1);
        const float* b = bias ? bias + n0 : nullptr;
#if CTG_QUANT_X86
        if (path == quant_path::avx2) return detail::gemv_q8_avx2(M, x, ldx, v, b, y + n0, ldy);
        if (path == quant_path::avx512) return detail::gemv_q8_avx512(M, x, ldx, v, b, y + n0, ldy);
#endif
        detail::gemv_q8_scalar(M, x, ldx, v, b, y + n0, ldy);
    });
}

/// y (M, N) = x (M, K) W + bias (optional), W quantised to 4 bits (see the file comment).
inline void gemv_q4(std::size_t M, const float* x, std::size_t ldx, const q4_matrix& w, const float* bias, float* y, std::size_t ldy,
                    quant_path path = choose_quant_path()) {
    if (!quant_path_supported(path)) throw error("ctg::kernels::gemv_q4: this CPU does not run the path " + std::string(quant_path_name(path)));
    detail::quant_pieces(M, w.K, w.N, [&](std::size_t n0, std::size_t n1) {
        const q4_view v = w.columns(n0, n1);
        const float* b = bias ? bias + n0 : nullptr;
#if CTG_QUANT_X86
        if (path == quant_path::avx2) return detail::gemv_q4_avx2(M, x, ldx, v, b, y + n0, ldy);
        if (path == quant_path::avx512) return detail::gemv_q4_avx512(M, x, ldx, v, b, y + n0, ldy);
        if (path == quant_path::avx_vnni) {
            scratch<std::int8_t> xq(w.K);
            scratch<float> sx(w.G), correction(w.G), ds(w.G);
            return detail::gemv_q4_avxvnni(M, x, ldx, v, b, y + n0, ldy, xq.data(), sx.data(), correction.data(), ds.data());
        }
        if (path == quant_path::avx512_vnni) {
            scratch<std::int8_t> xq(w.K), xp(w.K);
            scratch<float> sx(w.G), correction(w.G), ds(w.G + 2);
            return detail::gemv_q4_vnni(M, x, ldx, v, b, y + n0, ldy, xq.data(), sx.data(), correction.data(), xp.data(), ds.data());
        }
#endif
        detail::gemv_q4_scalar(M, x, ldx, v, b, y + n0, ldy);
    });
}

/// The integer dot products of the int8-activation q8 path for one row x: xq[k] = round(x[k] / sx),
/// out[n] = sum_k xq[k] q[n][k] (exact); returns sx. The VNNI path's sums, computed on `path`
/// (scalar: plain int64 arithmetic), for the tests' bit-exact rule.
inline float int8_dot_q8(const float* x, const q8_matrix& w, std::int64_t* out, quant_path path) {
    aligned_vector<std::int8_t> xq(w.Kp);
    const float sx = detail::quantize_row_q8(x, w.K, xq.data(), w.Kp);
    aligned_vector<std::int8_t> xu(xq);  // xq + 128 as u8, as gemv_q8_vnni feeds it
    for (auto& v : xu) v = std::int8_t(std::uint8_t(v) ^ 0x80u);
    for (std::size_t n = 0; n < w.N; ++n) {
#if CTG_QUANT_X86
        if (quant_int8_activations(path)) {  // as the VNNI kernels compute it: (xq + 128) q, less 128 sum q
            const std::int8_t* q = &w.q[n * w.Kp];
            out[n] = (path == quant_path::avx512_vnni ? detail::dot_u8s8_vnni(xu.data(), q, w.Kp) : detail::dot_u8s8_avxvnni(xu.data(), q, w.Kp)) -
                     128 * std::int64_t(w.column_sum[n]);
            continue;
        }
#endif
        std::int64_t s = 0;
        for (std::size_t k = 0; k < w.Kp; ++k) s += std::int64_t(xq[k]) * std::int64_t(w.q[n * w.Kp + k]);
        out[n] = s;
    }
    return sx;
}


// ---------------------------------------------------------------- quantised copies of parameters
/// One matrix of a parameter quantised for the products that read it as a weight (options::weights):
/// y = x W with W (K, N), or, transposed, y = x E^T with E (N, K) as stored (a tied head).
struct quantized_weight {
    weight_format format = weight_format::f32;  ///< int8 or q4
    bool transposed = false;                    ///< stored as E (N, K), the product x E^T
    std::size_t K = 0, N = 0;  ///< the product's inner and output sizes
    q8_matrix q8;              ///< format int8
    q4_matrix q4;              ///< format q4
    /// Bytes a product reads.
    std::size_t bytes() const { return format == weight_format::int8 ? q8.bytes() : q4.bytes(); }
    /// The dequantised weight (k, n) of W as a double.
    double at(std::size_t k, std::size_t n) const { return format == weight_format::int8 ? q8.at(k, n) : q4.at(k, n); }
};

/// W quantised in `format` (int8 or q4): W (K, N) row-major, or its transpose (N, K) as stored.
inline quantized_weight quantize_weight(weight_format format, const float* w, std::size_t K, std::size_t N, bool transposed) {
    quantized_weight q;
    q.format = format, q.transposed = transposed, q.K = K, q.N = N;
    const std::size_t ld = transposed ? K : N;
    if (format == weight_format::int8) q.q8 = quantize_q8(w, K, N, ld, transposed);
    else if (format == weight_format::q4) q.q4 = quantize_q4(w, K, N, ld, transposed);
    else throw error("ctg::kernels::quantize_weight: weight_format::f32 is not a quantised format");
    return q;
}

/// A parameter's quantised copy: every matrix of it (its last two axes; one per layer of a stacked
/// parameter), in one format and orientation. `stale`: its values were written since.
struct quantized_tensor {
    weight_format format = weight_format::f32;  ///< int8 or q4
    bool transposed = false;                    ///< read as x E^T (see quantized_weight)
    std::vector<quantized_weight> matrices;     ///< one per matrix of the parameter (per layer of a stacked one)
    bool stale = false;                         ///< the float values were written since it was made
    /// Bytes of the matrices.
    std::size_t bytes() const {
        std::size_t n = 0;
        for (const auto& m : matrices) n += m.bytes();
        return n;
    }
};

/// Where the quantised copies of parameters are: the float ranges of the stores that keep some, each
/// with the store's lookup (ctg::quantize, graph/ctgraph/quant_store.hpp). A product by a weight asks it for the copy of
/// its right operand (kernels::quantized_product) in a program with options::weights.
class quantized_weights {
public:
    /// A store's lookup: its matrix at `offset` into its values, or null.
    using lookup_fn = const quantized_weight* (*)(const void* owner, std::size_t offset, bool transposed, weight_format format);
    /// The process's registry.
    static quantized_weights& instance() {
        static quantized_weights registry;
        return registry;
    }
    /// The quantised matrix in `format` that starts at w, read transposed or not; null when there is none.
    const quantized_weight* find(const float* w, bool transposed, weight_format format) const {
        std::shared_lock lock(mutex_);
        for (const auto& r : ranges_)
            if (w >= r.begin && w < r.end) return r.lookup(r.owner, std::size_t(w - r.begin), transposed, format);
        return nullptr;
    }
    /// Registers (or, with the same owner, moves) a store's float range.
    void put(const void* owner, const float* begin, const float* end, lookup_fn lookup) {
        std::unique_lock lock(mutex_);
        for (auto& r : ranges_)
            if (r.owner == owner) {
                r = {owner, begin, end, lookup};
                return;
            }
        ranges_.push_back({owner, begin, end, lookup});
    }
    /// Forgets a store's range (it is destroyed, or keeps no copies).
    void remove(const void* owner) {
        std::unique_lock lock(mutex_);
        std::erase_if(ranges_, [owner](const range& r) { return r.owner == owner; });
    }

private:
    struct range {
        const void* owner;
        const float *begin, *end;
        lookup_fn lookup;
    };
    std::vector<range> ranges_;
    mutable std::shared_mutex mutex_;
};

}  // namespace ctg::kernels
