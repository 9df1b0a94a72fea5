// ctgraph/kernels/simd.hpp: element-wise loops over contiguous memory with xsimd.
//
// Every kernel is written once as a generic function of `V`, which is either the scalar T (the
// reference path and the tail of each loop) or xsimd::batch<T> (the fast path). `ctg::kernels::
// scalar_only` forces the reference path, so tests can compare the two on the same inputs.
#pragma once
#include <algorithm>
#include <cmath>
#include <cstddef>
#include <type_traits>

#include <xsimd/xsimd.hpp>

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

/// Returns sum_i f(x[i], y[i]).
template <class T, class F>
inline T reduce_sum(std::size_t n, const T* x, const T* y, F&& f) {
    std::size_t i = 0;
    T s = 0;
    if (!scalar_only()) {
        constexpr std::size_t W = batch<T>::size;
        batch<T> acc(T(0));
        for (; i + W <= n; i += W) acc += f(batch<T>::load_unaligned(x + i), batch<T>::load_unaligned(y + i));
        s = xsimd::hadd(acc);
    }
    for (; i < n; ++i) s += f(x[i], y[i]);
    return s;
}

/// Returns sum_i x[i].
template <class T>
inline T sum(std::size_t n, const T* x) {
    return reduce_sum(n, x, x, [](auto a, auto) { return a; });
}

/// Returns max_i x[i] (n >= 1). xsimd 8.1 has no horizontal max: store the batch and finish in scalar.
template <class T>
inline T max(std::size_t n, const T* x) {
    std::size_t i = 0;
    T m = x[0];
    if (!scalar_only()) {
        constexpr std::size_t W = batch<T>::size;
        if (n >= W) {
            batch<T> acc = batch<T>::load_unaligned(x);
            for (i = W; i + W <= n; i += W) acc = xsimd::max(acc, batch<T>::load_unaligned(x + i));
            alignas(64) T lanes[W];
            acc.store_aligned(lanes);
            m = lanes[0];
            for (std::size_t k = 1; k < W; ++k) m = lanes[k] > m ? lanes[k] : m;
        }
    }
    for (; i < n; ++i) m = x[i] > m ? x[i] : m;
    return m;
}

/// out[c] = sum_r w[r] * rows[r * stride + c] for c < width: a weighted sum of `count` rows (a
/// vector-matrix product). Accumulates in registers, up to 4 batches of columns at a time, so the
/// sum over rows is not a chain of loads and stores through `out`.
template <class T>
inline void combine_rows(std::size_t count, std::size_t width, const T* w, const T* rows, std::size_t stride, T* out) {
    std::size_t c = 0;
    if (!scalar_only()) {
        using V = batch<T>;
        constexpr std::size_t W = V::size;
        for (; c + 4 * W <= width; c += 4 * W) {
            V a0(T(0)), a1(T(0)), a2(T(0)), a3(T(0));
            for (std::size_t r = 0; r < count; ++r) {
                const V wr(w[r]);
                const T* p = rows + r * stride + c;
                a0 = xsimd::fma(wr, V::load_unaligned(p), a0);
                a1 = xsimd::fma(wr, V::load_unaligned(p + W), a1);
                a2 = xsimd::fma(wr, V::load_unaligned(p + 2 * W), a2);
                a3 = xsimd::fma(wr, V::load_unaligned(p + 3 * W), a3);
            }
            a0.store_unaligned(out + c);
            a1.store_unaligned(out + c + W);
            a2.store_unaligned(out + c + 2 * W);
            a3.store_unaligned(out + c + 3 * W);
        }
        // Narrow blocks (a head's 32 features): four accumulators over interleaved rows, so the sum
        // is not one chain of dependent FMAs (4 cycles each) but four.
        for (; c + W <= width; c += W) {
            V a0(T(0)), a1(T(0)), a2(T(0)), a3(T(0));
            std::size_t r = 0;
            for (; r + 4 <= count; r += 4) {
                const T* p = rows + r * stride + c;
                a0 = xsimd::fma(V(w[r]), V::load_unaligned(p), a0);
                a1 = xsimd::fma(V(w[r + 1]), V::load_unaligned(p + stride), a1);
                a2 = xsimd::fma(V(w[r + 2]), V::load_unaligned(p + 2 * stride), a2);
                a3 = xsimd::fma(V(w[r + 3]), V::load_unaligned(p + 3 * stride), a3);
            }
            for (; r < count; ++r) a0 = xsimd::fma(V(w[r]), V::load_unaligned(rows + r * stride + c), a0);
            ((a0 + a1) + (a2 + a3)).store_unaligned(out + c);
        }
    }
    for (; c < width; ++c) {
        T a = 0;
        for (std::size_t r = 0; r < count; ++r) a += w[r] * rows[r * stride + c];
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

/// y[i] = x[i] when `fresh`, else y[i] += x[i].
template <class T>
inline void put(bool fresh, std::size_t n, const T* x, T* y) {
    if (fresh) std::copy(x, x + n, y);
    else add_to(n, x, y);
}

}  // namespace ctg::kernels
