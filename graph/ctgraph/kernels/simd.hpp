// ctgraph/kernels/simd.hpp: element-wise loops over contiguous memory with xsimd.
//
// Every kernel is written once as a generic function of `V`, which is either the scalar T (the
// reference path and the tail of each loop) or xsimd::batch<T> (the fast path). `ctg::kernels::
// scalar_only` forces the reference path, so tests can compare the two on the same inputs.
#pragma once
#include <algorithm>
#include <array>
#include <cmath>
#include <cstddef>
#include <type_traits>

#include <xsimd/xsimd.hpp>
#if defined(__SSE2__)
#include <immintrin.h>
#endif

#include "ctgraph/kernels/bf16.hpp"
#include "ctgraph/kernels/parallel.hpp"

namespace ctg::kernels {

/// When true, every map runs its scalar path (used by tests to check SIMD against scalar).
inline bool& scalar_only() {
    static bool flag = false;
    return flag;
}

/// The instruction set of ctgraph's kernels: xsimd's best for this target, except in one case.
/// Without optimisation (__OPTIMIZE__ undefined: a Debug build), GCC defines several AVX-512BW
/// intrinsics as macros that cast their arguments with C casts, which xsimd 8.1's batch types do
/// not survive (xsimd's avx512bw `select` on int batches, reached from `log`, fails to compile).
/// Such a build uses the AVX2 + FMA kernels, which every AVX-512 CPU also runs.
#if defined(__GNUC__) && !defined(__clang__) && !defined(__OPTIMIZE__) && XSIMD_WITH_AVX512BW && XSIMD_WITH_FMA3_AVX2
using simd_arch = xsimd::fma3<xsimd::avx2>;
#else
using simd_arch = xsimd::default_arch;
#endif

template <class T>
using batch = xsimd::batch<T, simd_arch>;

/// x * y + z rounded once (the FMA instruction) wherever the target has one, whatever the
/// compiler's options: kernels that promise "one fused multiply-add per term" (combine_rows) call
/// this. xsimd 8.1's fma on AVX-512 batches is x * y + z, which the compiler fuses only where it
/// contracts (g++ from -O2: a -O1 test unit and a -O3 program computed different bits); on FMA3
/// targets it is the instruction. Without FMA hardware, x * y + z (no compiler fuses it either).
template <class T>
inline T fmadd(T x, T y, T z) {
#if defined(__FMA__)
    return std::fma(x, y, z);
#else
    return x * y + z;
#endif
}
template <class T, class A>
inline xsimd::batch<T, A> fmadd(const xsimd::batch<T, A>& x, const xsimd::batch<T, A>& y, const xsimd::batch<T, A>& z) {
#if defined(__AVX512F__)
    if constexpr (std::is_base_of_v<xsimd::avx512f, A> && std::is_same_v<T, float>) return _mm512_fmadd_ps(x, y, z);
    if constexpr (std::is_base_of_v<xsimd::avx512f, A> && std::is_same_v<T, double>) return _mm512_fmadd_pd(x, y, z);
#endif
    return xsimd::fma(x, y, z);
}

/// V's lanes from memory: T's as they are, or bfloat16 bits widened to floats (exactly: a shift).
template <class V>
inline V load_lanes(const typename V::value_type* p) { return V::load_unaligned(p); }
template <class V>
    requires std::is_same_v<typename V::value_type, float>
inline V load_lanes(const bf16_bits* p) {
    using A = typename V::arch_type;
#if defined(__AVX512F__)
    if constexpr (std::is_base_of_v<xsimd::avx512f, A>)
        return _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(p))), 16));
#endif
#if defined(__AVX2__)
    if constexpr (std::is_base_of_v<xsimd::avx2, A>)
        return _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_cvtepu16_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p))), 16));
#endif
#if defined(__SSE2__)
    if constexpr (std::is_base_of_v<xsimd::sse2, A> && V::size == 4)  // bits b into lane i as b << 16
        return _mm_castsi128_ps(_mm_unpacklo_epi16(_mm_setzero_si128(), _mm_loadl_epi64(reinterpret_cast<const __m128i*>(p))));
#endif
    alignas(64) float lanes[V::size];
    for (std::size_t i = 0; i < V::size; ++i) lanes[i] = from_bf16(p[i]);
    return V::load_aligned(lanes);
}

// Helpers that read the same for scalars and batches.
template <class T>
inline T vmax(T a, T b) { return a > b ? a : b; }
template <class T, class A>
inline xsimd::batch<T, A> vmax(const xsimd::batch<T, A>& a, const xsimd::batch<T, A>& b) { return xsimd::max(a, b); }
template <class T>
inline T where(bool c, T a, T b) { return c ? a : b; }
template <class T, class A>
inline xsimd::batch<T, A> where(const xsimd::batch_bool<T, A>& c, const xsimd::batch<T, A>& a,
                                const xsimd::batch<T, A>& b) { return xsimd::select(c, a, b); }

/// Element-wise loops at least this long are split over the kernel pool (a few microseconds of
/// work each half: the hand-over costs about one).
inline constexpr std::size_t parallel_map_min_size = std::size_t(1) << 15;

/// out[i] = f(in_0[i], in_1[i], ...) for i < n. `out` may be one of the inputs (in-place update).
/// `f` must be a pure function of its arguments: long loops run in pieces on several threads.
template <class T, class F, class... In>
inline void map(std::size_t n, T* out, F&& f, const In*... in) {
    static_assert((std::is_same_v<T, In> && ...), "ctg::kernels::map: all arrays have one element type");
    constexpr std::size_t W = batch<T>::size;
    auto run = [&](std::size_t begin, std::size_t end) {
        std::size_t i = begin;
        if (!scalar_only())
            for (; i + W <= end; i += W) f(batch<T>::load_unaligned(in + i)...).store_unaligned(out + i);
        for (; i < end; ++i) out[i] = f(in[i]...);
    };
    for_ranges<T>(n, parallel_map_min_size, run);
}

/// out[i] = f(in_0[i], ...) when `fresh`, else out[i] += f(in_0[i], ...): how a VJP writes an adjoint
/// (op_io::fresh: the first writer assigns, later ones add).
template <class T, class F, class... In>
inline void map_into(bool fresh, std::size_t n, T* out, F&& f, const In*... in) {
    if (fresh) map(n, out, f, in...);
    else map(n, out, [&f](auto acc, auto... v) { return acc + f(v...); }, static_cast<const T*>(out), in...);
}

/// Returns sum_i f(x[i], y[i]). Four accumulators over consecutive batches: one would make the
/// loop a chain of dependent adds (4 cycles each), the cost of a softmax row's sums.
template <class T, class F>
inline T reduce_sum(std::size_t n, const T* x, const T* y, F&& f) {
    std::size_t i = 0;
    T s = 0;
    if (!scalar_only()) {
        using V = batch<T>;
        constexpr std::size_t W = V::size;
        V a0(T(0)), a1(T(0)), a2(T(0)), a3(T(0));
        for (; i + 4 * W <= n; i += 4 * W) {
            a0 += f(V::load_unaligned(x + i), V::load_unaligned(y + i));
            a1 += f(V::load_unaligned(x + i + W), V::load_unaligned(y + i + W));
            a2 += f(V::load_unaligned(x + i + 2 * W), V::load_unaligned(y + i + 2 * W));
            a3 += f(V::load_unaligned(x + i + 3 * W), V::load_unaligned(y + i + 3 * W));
        }
        for (; i + W <= n; i += W) a0 += f(V::load_unaligned(x + i), V::load_unaligned(y + i));
        s = xsimd::hadd((a0 + a1) + (a2 + a3));
    }
    for (; i < n; ++i) s += f(x[i], y[i]);
    return s;
}

/// Returns sum_i x[i].
template <class T>
inline T sum(std::size_t n, const T* x) {
    return reduce_sum(n, x, x, [](auto a, auto) { return a; });
}

/// Returns max_i x[i] (n >= 1), with four accumulators as reduce_sum. xsimd 8.1 has no horizontal
/// max: store the batch and finish in scalar.
template <class T>
inline T max(std::size_t n, const T* x) {
    std::size_t i = 0;
    T m = x[0];
    if (!scalar_only()) {
        using V = batch<T>;
        constexpr std::size_t W = V::size;
        if (n >= W) {
            V a0 = V::load_unaligned(x), a1 = a0, a2 = a0, a3 = a0;
            for (i = W; i + 4 * W <= n; i += 4 * W) {
                a0 = xsimd::max(a0, V::load_unaligned(x + i));
                a1 = xsimd::max(a1, V::load_unaligned(x + i + W));
                a2 = xsimd::max(a2, V::load_unaligned(x + i + 2 * W));
                a3 = xsimd::max(a3, V::load_unaligned(x + i + 3 * W));
            }
            for (; i + W <= n; i += W) a0 = xsimd::max(a0, V::load_unaligned(x + i));
            alignas(64) T lanes[W];
            xsimd::max(xsimd::max(a0, a1), xsimd::max(a2, a3)).store_aligned(lanes);
            m = lanes[0];
            for (std::size_t k = 1; k < W; ++k) m = lanes[k] > m ? lanes[k] : m;
        }
    }
    for (; i < n; ++i) m = x[i] > m ? x[i] : m;
    return m;
}

/// The one-row products (combine_rows) prefetch the rows they read next into L2 when the rows they
/// read span this much or more: memory then streams at 20-25 GB/s on AMD Zen 4 where the hardware
/// prefetchers alone gave 10-16 for rows of 1.5-6 KB (GPT-2's layers: 1.4-2.1x in bf16, with the
/// four-rows form 1.9-2.4x in float).
/// Smaller weights are read from cache from step to step, where the prefetches cost up to 30 %.
inline constexpr std::size_t row_prefetch_min_bytes = std::size_t(512) << 10;

namespace detail {
/// A row element as the sums' type: a float or double as it is, bf16 bits widened (exactly).
template <class T, class E>
inline T row_value(E e) {
    if constexpr (std::is_same_v<E, bf16_bits>) return from_bf16(e); else return T(e);
}

/// One block of combine_rows: NB batches of columns, the rows taken RI at a time into separate
/// accumulators (RI > 1 when the block is narrow, so the sum is not one chain of dependent FMAs;
/// RI = 1: each column's terms added in row order).
template <class V, std::size_t NB, std::size_t RI, class T, class E>
inline void combine_block(std::size_t count, const T* w, const E* rows, std::size_t stride, T* out, const T* bias) {
    constexpr std::size_t W = V::size;
    V acc[RI][NB];
    for (std::size_t i = 0; i < RI; ++i)
        for (std::size_t b = 0; b < NB; ++b) acc[i][b] = i == 0 && bias ? V::load_unaligned(bias + b * W) : V(T(0));
    std::size_t r = 0;
    for (; r + RI <= count; r += RI)
        for (std::size_t i = 0; i < RI; ++i) {
            const V wr(w[r + i]);
            const E* p = rows + (r + i) * stride;
            for (std::size_t b = 0; b < NB; ++b) acc[i][b] = fmadd(wr, load_lanes<V>(p + b * W), acc[i][b]);
        }
    for (; r < count; ++r) {
        const V wr(w[r]);
        for (std::size_t b = 0; b < NB; ++b) acc[0][b] = fmadd(wr, load_lanes<V>(rows + r * stride + b * W), acc[0][b]);
    }
    for (std::size_t i = 1; i < RI; ++i)
        for (std::size_t b = 0; b < NB; ++b) acc[0][b] += acc[i][b];
    for (std::size_t b = 0; b < NB; ++b) acc[0][b].store_unaligned(out + b * W);
}

/// combine_rows over `width` columns (a multiple of the batch) with the sums in memory: four rows a
/// pass over chunks of up to 256 KB of sums (in L2) while the rows stream past, each sum still
/// bias + w_0 r_0 + w_1 r_1 + ... in row order, one FMA per term: the bits of combine_block<V, NB, 1>.
/// Each pass loads and stores the chunk's sums once, where a row a pass did for every row (an
/// L1-bound loop). In chunks of 2,048 columns instead (sums in L1), a GPT-2 head's rows, 100 KB
/// apart in bf16, were read 4 KB at a time, every visit a new page: 12-13 GB/s on AMD Zen 4 against
/// 24 for four rows read whole. Over rows spanning row_prefetch_min_bytes or more, each pass also
/// prefetches the next four rows into L2 (prefetcht1, a line of each for every line of these read).
template <class V, class T, class E>
inline void combine_wide(std::size_t count, std::size_t width, const T* w, const E* rows, std::size_t stride, T* out, const T* bias) {
    constexpr std::size_t W = V::size, chunk = (std::size_t(256) << 10) / sizeof(T);
    const bool prefetch = count * stride * sizeof(E) >= row_prefetch_min_bytes;
    const auto pass = [&]<bool Prefetch>(std::size_t r, std::size_t c0, std::size_t n, T* o) {
        const V w0(w[r]), w1(w[r + 1]), w2(w[r + 2]), w3(w[r + 3]);
        const E *p0 = rows + r * stride + c0, *p1 = p0 + stride, *p2 = p1 + stride, *p3 = p2 + stride;
        const E* a0 = r + 8 <= count ? p0 + 4 * stride : p0;  // the next four rows (the last four: these)
        for (std::size_t j = 0; j < n; j += W) {
            if constexpr (Prefetch)
                if ((j * sizeof(E)) % 64 == 0)
                    for (std::size_t i = 0; i < 4; ++i) __builtin_prefetch(a0 + i * stride + j, 0, 2);
            V a = V::load_unaligned(o + j);
            a = fmadd(w0, load_lanes<V>(p0 + j), a);
            a = fmadd(w1, load_lanes<V>(p1 + j), a);
            a = fmadd(w2, load_lanes<V>(p2 + j), a);
            a = fmadd(w3, load_lanes<V>(p3 + j), a);
            a.store_unaligned(o + j);
        }
    };
    for (std::size_t c0 = 0; c0 < width; c0 += chunk) {
        const std::size_t n = std::min(chunk, width - c0);
        T* o = out + c0;
        for (std::size_t j = 0; j < n; j += W) (bias ? V::load_unaligned(bias + c0 + j) : V(T(0))).store_unaligned(o + j);
        std::size_t r = 0;
        for (; r + 4 <= count; r += 4)
            if (prefetch) pass.template operator()<true>(r, c0, n, o);
            else pass.template operator()<false>(r, c0, n, o);
        for (; r < count; ++r) {
            const V wr(w[r]);
            const E* p = rows + r * stride + c0;
            for (std::size_t j = 0; j < n; j += W) fmadd(wr, load_lanes<V>(p + j), V::load_unaligned(o + j)).store_unaligned(o + j);
        }
    }
}
}  // namespace detail

/// out[c] = bias[c] + sum_r w[r] * rows[r * stride + c] for c < width (bias may be null): a
/// weighted sum of `count` rows (a vector-matrix product: a decoding step's layers; attention over
/// a KV cache). The rows are T's or bf16 bits (a weight's bf16 copy, a bf16 KV cache: half the
/// bytes read; widened exactly, by a shift). Accumulates in registers or, over wide rows, in L2.
///
/// float or double rows: blocks of 8 batches of columns (128 floats) where the width allows; when
/// there are 1 KB of them a row or more (a decoder's layers and head), four rows a pass over all
/// those columns with the sums in memory, the next four rows prefetched (combine_wide): held in
/// registers across all the rows, 128 columns at a time, a GPT-2 head's rows (200 KB apart) were
/// visited 512 bytes each, and that read memory at 9-10 GB/s on AMD Zen 4 against 25 now (768 x
/// 50,257: 16.4 -> 6.0 ms; GPT-2's layers 1.9-2.4x, 20-25 GB/s; weights in cache, without the
/// prefetch, 1.05-1.5x; AVX2 alike). Below 1 KB (128 columns: gpt-s's step, the rows contiguous)
/// the register blocks stream better. Narrower rests (a head's 32 features) in one pass with rows
/// interleaved; a rest narrower than a batch as the last full batch of columns once more.
///
/// bf16 rows: every column's sum is bias + w_0 r_0 + w_1 r_1 + ... in row order, one fused
/// multiply-add per term, whatever the width (so a product split into column ranges over threads
/// computes the same bits at any thread count). Up to 4 batches of columns (attention's weighted
/// sum of one head's values over a bf16 KV cache, a small vocabulary's head) in registers over all
/// the rows (through memory, 32 columns of 257 rows took 0.72 us against 0.32; 64: 0.77 against
/// 0.59; AMD Zen 4); wider, combine_wide (kept in registers over 128 columns instead, GPT-2's rows
/// were visited 256 bytes each: 3.3 GB/s on an Intel Xeon); a rest narrower than a batch as the
/// last full batch once more (the same sums).
template <class T, class E>
void combine_rows(std::size_t count, std::size_t width, const T* w, const E* rows, std::size_t stride, T* out,
                  const T* bias = nullptr) {  // (not inline: CTG_SEPARATE_COMPILATION in gemm.hpp)
    static_assert(std::is_same_v<E, T> || (std::is_same_v<E, bf16_bits> && std::is_same_v<T, float>),
                  "ctg::kernels::combine_rows: rows of the sums' type, or bf16 rows for float sums");
    std::size_t c = 0;
    if (!scalar_only()) {
        using V = batch<T>;
        constexpr std::size_t W = V::size;
        const auto at = [&](std::size_t col) { return bias ? bias + col : nullptr; };
        if constexpr (std::is_same_v<E, T>) {
            if (const std::size_t blocks = width / (8 * W) * (8 * W); blocks * sizeof(T) >= 1024) {
                detail::combine_wide<V>(count, blocks, w, rows, stride, out, bias);  // the same sums as the blocks below
                c = blocks;
            }
            for (; c + 8 * W <= width; c += 8 * W) detail::combine_block<V, 8, 1>(count, w, rows + c, stride, out + c, at(c));
            switch ((width - c) / W) {
            case 0: break;
            case 1: detail::combine_block<V, 1, 4>(count, w, rows + c, stride, out + c, at(c)); break;
            case 2: detail::combine_block<V, 2, 2>(count, w, rows + c, stride, out + c, at(c)); break;
            case 3: detail::combine_block<V, 3, 2>(count, w, rows + c, stride, out + c, at(c)); break;
            case 4: detail::combine_block<V, 4, 1>(count, w, rows + c, stride, out + c, at(c)); break;
            case 5: detail::combine_block<V, 5, 1>(count, w, rows + c, stride, out + c, at(c)); break;
            case 6: detail::combine_block<V, 6, 1>(count, w, rows + c, stride, out + c, at(c)); break;
            default: detail::combine_block<V, 7, 1>(count, w, rows + c, stride, out + c, at(c)); break;
            }
            c += (width - c) / W * W;
            if (c < width && width >= W) {  // the last W columns again (the scalar tail reads each row per column)
                detail::combine_block<V, 1, 4>(count, w, rows + (width - W), stride, out + (width - W), at(width - W));
                c = width;
            }
        } else {
            switch (width / W) {
            case 0: break;
            case 1: detail::combine_block<V, 1, 1>(count, w, rows, stride, out, bias); break;
            case 2: detail::combine_block<V, 2, 1>(count, w, rows, stride, out, bias); break;
            case 3: detail::combine_block<V, 3, 1>(count, w, rows, stride, out, bias); break;
            case 4: detail::combine_block<V, 4, 1>(count, w, rows, stride, out, bias); break;
            default: detail::combine_wide<V>(count, width / W * W, w, rows, stride, out, bias); break;
            }
            c = width / W * W;
            if (c < width && width >= W) {  // the last W columns again, in row order as everywhere
                detail::combine_block<V, 1, 1>(count, w, rows + (width - W), stride, out + (width - W), at(width - W));
                c = width;
            }
        }
    }
    for (; c < width; ++c) {
        T a = bias ? bias[c] : T(0);
        for (std::size_t r = 0; r < count; ++r) a = fmadd(w[r], detail::row_value<T>(rows[r * stride + c]), a);
        out[c] = a;
    }
}

/// Element loops for kernels that read and write several arrays per element (fused recurrent
/// gates, optimizer updates), which map (one output) does not cover:
///
///   lanes::each<T>(n, [&](std::size_t j, auto tag) { using V = decltype(tag); ... });
///
/// calls the body with V = batch<T> over whole batches and V = T for the tail (for every element
/// under scalar_only()); load/store move a V at a pointer.
namespace lanes {
template <class T, class F>
inline void each(std::size_t n, F&& f) {
    std::size_t j = 0;
    if (!scalar_only()) {
        using V = batch<T>;
        for (; j + V::size <= n; j += V::size) f(j, V{});
    }
    for (; j < n; ++j) f(j, T{});
}
/// each() over elements [lo, hi) of an array of n elements, in the batches each(n) uses: an element
/// gets the same operations (in a batch, or in the scalar tail) whichever range it is updated in,
/// bit for bit (a FMA contracted in the scalar tail, say, may round otherwise). A batch cut by lo or
/// hi runs whole, then the lanes outside [lo, hi) of the arrays it writes (`written`, each of n
/// elements) get their values back: no other thread may use that batch meanwhile.
template <class T, class F, class... W>
inline void each_within(std::size_t n, std::size_t lo, std::size_t hi, F&& f, W*... written) {
    std::size_t j = lo;
    if (!scalar_only()) {
        using V = batch<T>;
        constexpr std::size_t w = V::size;
        while (j < hi) {
            const std::size_t c = j / w * w;
            if (c + w > n) break;  // the tail
            if (c == j && c + w <= hi) {
                f(c, V{});
                j = c + w;
                continue;
            }
            std::array<std::array<T, w>, sizeof...(W)> kept;
            std::size_t a = 0;
            ((std::copy_n(written + c, w, kept[a++].data())), ...);
            f(c, V{});
            auto put_back = [&](T* out, const std::array<T, w>& k) {
                for (std::size_t i = c; i < c + w; ++i)
                    if (i < lo || i >= hi) out[i] = k[i - c];
            };
            a = 0;
            (put_back(written, kept[a++]), ...);
            j = std::min(c + w, hi);
        }
    }
    for (; j < hi; ++j) f(j, T{});
}
template <class V, class T>
inline V load(const T* p) {
    if constexpr (std::is_same_v<V, T>) return *p; else return V::load_unaligned(p);
}
template <class T, class V>
inline void store(T* p, const V& v) {
    if constexpr (std::is_same_v<V, T>) *p = v; else v.store_unaligned(p);
}
}  // namespace lanes

/// y[i] += x[i].
template <class T>
inline void add_to(std::size_t n, const T* x, T* y) {
    map(n, y, [](auto a, auto b) { return a + b; }, x, static_cast<const T*>(y));
}

/// pack_bf16 (either input: floats rounded, or bf16 values moved or widened) with the rows of
/// op(X) shared among the pool's threads when there are enough of them (each element converted
/// alone: the same bits at any count). The products' operand conversions ran on the calling
/// thread alone while the other waited: at two threads, 7 % of the samples of gpt-m's emulated
/// bf16 step on a Xeon of model 207 against 1 % on the worker.
template <class In, class Out>
inline void pack_bf16_on_pool(bool trans, std::size_t rows, std::size_t cols, const In* x, std::size_t ld, Out* out) {
    const std::size_t P = std::size_t(thread_pool::instance().threads_here());
    if (P == 1 || rows < 32 || rows * cols < parallel_map_min_size) {
        pack_bf16(trans, rows, cols, x, ld, out);
        return;
    }
    const std::size_t step = range_step(rows, P, 16);
    thread_pool::instance().run((rows + step - 1) / step, [&](std::size_t p) {
        const std::size_t r0 = p * step, n = std::min(rows, r0 + step) - r0;
        // op(X)'s rows r0..: X's rows, or its columns when transposed
        pack_bf16(trans, n, cols, x + (trans ? r0 : r0 * ld), ld, out + r0 * cols);
    });
}

/// y[i] = x[i] when `fresh`, else y[i] += x[i].
template <class T>
inline void put(bool fresh, std::size_t n, const T* x, T* y) {
    if (fresh) std::copy(x, x + n, y);
    else add_to(n, x, y);
}

/// The column sums of a matrix whose rows `row` makes (rows x cols), into `sums` (when not null),
/// assigned when `fresh` (with no rows: zeros), else added; and, when `rounded` is not null (float
/// only), the matrix rounded to bf16 into it (rows x cols, contiguous) in the same pass.
/// row(r, c0, n, buf) returns where columns c0..c0+n of row r are: in memory, or computed into
/// `buf` (with `row_buffers`, a buffer of this task's; n is then at most row_chunk). Each column is
/// summed over the rows in order, as add_to row after row; on a pool, each task takes a block of
/// columns (the same bits at any count).
/// A linear layer's bias gradient: dY's column sums, with dY converted for the two gradient
/// products in the same pass, or computed there from the activation's VJP (affine_activation.hpp),
/// so that dY is read from memory once, or never made in float at all.
inline constexpr std::size_t row_chunk = 1024;
template <class T, class Row>
inline void column_sums_by(std::size_t rows, std::size_t cols, Row&& row, T* sums, bool fresh, bf16_bits* rounded = nullptr,
                           bool row_buffers = false) {
    if (sums && fresh && rows == 0) std::fill(sums, sums + cols, T(0));
    if (rows == 0 || cols == 0) return;
    const std::size_t P = std::size_t(thread_pool::instance().threads_here());
    const std::size_t pieces = P > 1 && rows * cols >= parallel_map_min_size && cols >= 64 ? P : 1;
    const std::size_t step = range_step(cols, pieces, 32);
    auto block = [&](std::size_t p) {
        const std::size_t c0 = p * step, c1 = std::min(cols, c0 + step);
        alignas(64) T buf[row_chunk];  // (on the stack: the kernels' scratch may be full with dY)
        const std::size_t chunk = row_buffers ? row_chunk : c1 - c0;
        for (std::size_t r = 0; r < rows; ++r)
            for (std::size_t c = c0; c < c1; c += chunk) {
                const std::size_t n = std::min(c1, c + chunk) - c;
                const T* xr = row(r, c, n, row_buffers ? buf : nullptr);
                if constexpr (std::is_same_v<T, float>)
                    if (rounded) pack_bf16(false, 1, n, xr, n, rounded + r * cols + c);
                if (sums) put(fresh && r == 0, n, xr, sums + c);
            }
    };
    if (pieces > 1) thread_pool::instance().run((cols + step - 1) / step, block);
    else block(0);
}

/// column_sums_by over X in memory (X: rows x cols, leading dimension ld): a linear layer's bias
/// gradient, with dY converted to bf16 in the same pass when `rounded` is not null (it was a
/// serial pass over dY, and a second read of it).
template <class T>
inline void column_sums(std::size_t rows, std::size_t cols, const T* x, std::size_t ld, T* sums, bool fresh,
                        bf16_bits* rounded = nullptr) {
    column_sums_by(rows, cols, [&](std::size_t r, std::size_t c0, std::size_t, T*) { return x + r * ld + c0; }, sums, fresh,
                   rounded);
}

}  // namespace ctg::kernels
