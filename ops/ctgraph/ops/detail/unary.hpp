// ctgraph/ops/detail/unary.hpp: the family of element-wise unary primitives.
//
// A member of the family is a small struct Fn with
//   static constexpr std::string_view name;
//   template <class V> static V f(V x);              // value, for V = T and V = xsimd::batch<T>
//   template <class V> static V df(V x, V y);        // dy/dx, given x and y = f(x)
// and the generic unary_op<Fn> supplies the shape rule (same shape), forward and the VJP
// gx += gy * df(x, y) (or = when the adjoint is fresh). Use the output y where it is cheaper (tanh: 1 - y^2, exp: y).
// An Fn whose df ignores y says so (static constexpr bool df_reads_y = false: GELU): its VJP then
// does not read y, which a mixed-precision program may then keep in bf16 only (op.hpp,
// vjp_reads_result). One that also tolerates x rounded to bf16 in df says df_from_bf16_x = true
// (GELU): a program keeping values for backward in bf16 (options::bf16_saved) may then keep x as
// its bf16 shadow alone (op.hpp, vjp_reads_bf16).
#pragma once
#include <algorithm>
#include <string>
#include <string_view>

#include "ctgraph/graph/node.hpp"
#include "ctgraph/kernels/bf16.hpp"
#include "ctgraph/kernels/simd.hpp"
#include "ctgraph/op.hpp"

namespace ctg::ops {

template <class Fn>
struct unary_op {
    static constexpr std::string_view name = Fn::name;
    template <class S>
    static consteval bool check() { return true; }
    template <class S>
    static consteval auto dims() { return S::dims; }

    static constexpr bool assigns_adjoints = true;
    template <class S>
    static consteval bool rows_independent() { return true; }  // element-wise (see op.hpp)
    // ONNX: the function's own lowering, Fn::onnx(b, x, y), writing the value named y (op.hpp).
    template <class B>
        requires requires(B& b, const std::string& s) { Fn::onnx(b, s, s); }
    static void onnx(B& b) { Fn::onnx(b, b.x(0), b.y()); }
    // Whether the VJP reads y: unless Fn says its df ignores it (Fn::df_reads_y = false: GELU).
    static constexpr bool vjp_reads_result = [] {
        if constexpr (requires { Fn::df_reads_y; }) return bool(Fn::df_reads_y); else return true;
    }();

    // The result's bf16 shadow (op.hpp) written piece by piece while in L1 (GELU's feeds a product).
    static constexpr bool writes_bf16_result = true;
    // The VJP may read x rounded to bf16 (options::bf16_saved) where Fn says df tolerates it and
    // does not read y (Fn::df_from_bf16_x: GELU, whose input in PyTorch's autocast is the bf16
    // output of the product before it).
    static constexpr std::uint32_t vjp_reads_bf16 = [] {
        if constexpr (requires { Fn::df_from_bf16_x; }) return Fn::df_from_bf16_x && !vjp_reads_result ? 1u : 0u;
        else return 0u;
    }();

    // With vjp_reads_bf16, the engine hands forward x as its shadow alone (c.x[0] null) where the
    // VJP reads it so (graph/exec.hpp): the value then comes from x rounded, as the VJP's
    // derivative does, and as PyTorch's autocast computes GELU of a product's bf16 output.
    template <class T>
    static void forward(op_io<T, 1>& c) {
        if constexpr (std::is_same_v<T, float> && vjp_reads_bf16 != 0)
            if (!c.x_data(0)) return apply_rounded(c.y.size(), c.y_data(), c.yb, nullptr, c.xb[0]);
        apply(c.y.size(), c.y_data(), c.yb, c.x_data(0));
    }
    /// y = f(x) over n elements, and its bf16 rounding into yb where not null; y may be null when
    /// yb is not (only the shadow is kept). x16, where not null, gets x rounded to bf16 in the same
    /// pieces (affine_activation.hpp: the saved pre-activation).
    template <class T>
    static void apply(std::size_t n, T* y, std::uint16_t* yb, const T* x, std::uint16_t* x16 = nullptr) {
        if constexpr (std::is_same_v<T, float>)
            if (yb || x16) {  // the same pieces as kernels::map (so the same SIMD and scalar elements), each rounded after
                by_pieces(n, y, [&](std::size_t i, std::size_t m, float* yi) {
                    map_piece(m, yi, x + i);
                    if (yb) kernels::pack_bf16(false, 1, m, yi, m, yb + i);
                    if (x16) kernels::pack_bf16(false, 1, m, x + i, m, x16 + i);
                });
                return;
            }
        kernels::map(n, y, [](auto v) { return Fn::f(v); }, x);
    }
    /// y = f(x rounded to bf16) over n elements, from x's floats (x, whose rounding also goes to
    /// x16 where not null) or from its bf16 bits (xb, where x is null); yb and y as apply's. The
    /// same pieces, so the same bits, from either input.
    static void apply_rounded(std::size_t n, float* y, std::uint16_t* yb, const float* x, const std::uint16_t* xb,
                              std::uint16_t* x16 = nullptr) {
        by_pieces(n, y, [&](std::size_t i, std::size_t m, float* yi) {
            kernels::scratch<float> xr(m);
            if (x) kernels::pack_bf16(false, 1, m, x + i, m, xr.data());  // rounded, as floats
            else kernels::pack_bf16(false, 1, m, xb + i, m, xr.data());   // widened
            if (x16) kernels::pack_bf16(false, 1, m, x + i, m, x16 + i);
            map_piece(m, yi, static_cast<const float*>(xr.data()));
            if (yb) kernels::pack_bf16(false, 1, m, yi, m, yb + i);
        });
    }
    // kernels::map's ranges cut into pieces of 4096 (a multiple of every SIMD width; 16 KiB): piece(i,
    // m, yi) with yi = y + i, or a piece of memory of its own where y is null (only the shadow is
    // kept; the VJP widens x into it).
    template <class Piece>
    static void by_pieces(std::size_t n, float* y, Piece&& piece_fn) {
        kernels::for_ranges<float>(n, kernels::parallel_map_min_size, [&](std::size_t b, std::size_t e) {
            constexpr std::size_t piece = 4096;
            kernels::scratch<float> own(y ? 0 : piece);
            for (std::size_t i = b; i < e; i += piece) {
                const std::size_t m = std::min(e, i + piece) - i;
                piece_fn(i, m, y ? y + i : own.data());
            }
        });
    }
    // kernels::map's loop over one piece, on this thread.
    template <class T>
    static void map_piece(std::size_t n, T* y, const T* x) {
        constexpr std::size_t W = kernels::batch<T>::size;
        std::size_t i = 0;
        if (!kernels::scalar_only())
            for (; i + W <= n; i += W) Fn::f(kernels::batch<T>::load_unaligned(x + i)).store_unaligned(y + i);
        for (; i < n; ++i) y[i] = Fn::f(x[i]);
    }
    /// out[i] = gy[i] f'(x[i]) for i < n, on this thread, for an Fn whose df ignores y; x as T or
    /// bf16 bits (widened exactly). The elements kernels::map_into gives the SIMD and the scalar
    /// form (affine_activation.hpp's VJP, a row piece at a time).
    template <class T, class X>
    static void vjp_piece(std::size_t n, T* out, const T* gy, const X* x) {
        static_assert(!vjp_reads_result);
        constexpr std::size_t W = kernels::batch<T>::size;
        std::size_t i = 0;
        if (!kernels::scalar_only())
            for (; i + W <= n; i += W) {
                const auto xv = kernels::load_lanes<kernels::batch<T>>(x + i);
                (kernels::batch<T>::load_unaligned(gy + i) * Fn::df(xv, xv)).store_unaligned(out + i);
            }
        for (; i < n; ++i) {
            T xi;
            if constexpr (std::is_same_v<X, T>) xi = x[i]; else xi = kernels::from_bf16(x[i]);
            out[i] = gy[i] * Fn::df(xi, xi);
        }
    }
    template <class T>
    static void backward(op_io<T, 1>& c) {
        if (!c.gx[0]) return;
        if constexpr (!vjp_reads_result) {  // (y may be kept in bf16 only: graph/exec.hpp, bf16_only_values)
            if constexpr (std::is_same_v<T, float> && vjp_reads_bf16 != 0)
                if (!c.x_data(0)) {  // x kept in bf16 only: read rounded, a piece at a time (widened into the piece's memory)
                    const bool fresh = c.fresh(0);
                    by_pieces(c.y.size(), nullptr, [&](std::size_t i, std::size_t m, float* x) {
                        kernels::pack_bf16(false, 1, m, c.xb[0] + i, m, x);
                        kernels::map_into(fresh, m, c.gx_data(0) + i, [](auto gy, auto x) { return gy * Fn::df(x, x); },
                                          static_cast<const float*>(c.gy_data()) + i, static_cast<const float*>(x));
                    });
                    return;
                }
            kernels::map_into(c.fresh(0), c.y.size(), c.gx_data(0), [](auto gy, auto x) { return gy * Fn::df(x, x); },
                              static_cast<const T*>(c.gy_data()), c.x_data(0));
            return;
        }
        kernels::map_into(c.fresh(0), c.y.size(), c.gx_data(0), [](auto gy, auto x, auto y) { return gy * Fn::df(x, y); },
                          static_cast<const T*>(c.gy_data()), c.x_data(0), static_cast<const T*>(c.y_data()));
    }
    static std::string describe()
        requires requires { Fn::describe(); }
    {
        return Fn::describe();
    }
};

/// Applies unary family member Fn to a floating-point expression.
template <class Fn, expr A>
constexpr auto make_unary(A a) {
    return make_float_node<unary_op<Fn>>(a);
}

}  // namespace ctg::ops
