// ctgraph/ops/detail/binary.hpp: the family of element-wise binary primitives, with row broadcast.
//
// A member is a struct Fn with
//   static constexpr std::string_view name;
//   template <class V> static V f(V a, V b);
//   template <class V> static V da(V a, V b, V y);   // dy/da
//   template <class V> static V db(V a, V b, V y);   // dy/db
// Shapes broadcast as NumPy's and PyTorch's do: aligned from the last axis, each pair of
// dimensions equal or one of them a static 1, a missing leading axis counting as 1 (a bias (H)
// against (B, H), a scalar against anything, (B, T, 1) against (B, T, D), (1, D) against (B, D)).
// The result has the larger extent on each axis; an operand is repeated along its size-1 and
// missing axes. The broadcast gradient is reduced here, once for the whole family: a repeated
// operand's adjoint accumulates the sum over its repetitions. No op of the family writes its own
// reduction. Where one operand's shape is a trailing part of the other's (at run time), the
// smaller one is walked in blocks (vector kernels); other broadcasts go through per-axis strides.
#pragma once
#include <algorithm>
#include <array>
#include <string_view>

#include "ctgraph/graph/node.hpp"
#include "ctgraph/kernels/simd.hpp"
#include "ctgraph/op.hpp"

namespace ctg::ops {

/// Whether shapes A and B combine element-wise (aligned from the last axis, each pair equal or
/// one of them a static 1).
template <class A, class B>
consteval bool broadcastable() {
    constexpr std::size_t ra = A::rank, rb = B::rank;
    constexpr std::size_t r = ra < rb ? ra : rb;
    constexpr dim one{1};
    for (std::size_t i = 0; i < r; ++i) {
        const dim da = A::dims[ra - r + i], db = B::dims[rb - r + i];
        if (!(da == db || da == one || db == one)) return false;
    }
    return true;
}
/// The shape of A and B broadcast together (see broadcastable).
template <class A, class B>
consteval auto broadcast_dims() {
    constexpr std::size_t ra = A::rank, rb = B::rank, r = ra > rb ? ra : rb;
    constexpr dim one{1};
    std::array<dim, r> d{};
    for (std::size_t i = 0; i < r; ++i) {  // i counts from the last axis
        const bool in_a = i < ra, in_b = i < rb;
        const dim da = in_a ? A::dims[ra - 1 - i] : one, db = in_b ? B::dims[rb - 1 - i] : one;
        d[r - 1 - i] = !in_a ? db : !in_b ? da : da == one ? db : da;
    }
    return d;
}

template <class Fn>
struct binary_op {
    static constexpr std::string_view name = Fn::name;
    template <class A, class B>
    static consteval bool check() { return broadcastable<A, B>(); }
    template <class A, class B>
    static consteval auto dims() { return broadcast_dims<A, B>(); }
    // ONNX: Add, Sub, Mul, Div broadcast as this family does (aligned from the last axis).
    template <class B>
    static void onnx(B& b) { b.emit_y(std::string(Fn::onnx_op), {b.x(0), b.x(1)}); }

    // Where one operand's shape is a trailing part of the other's: the larger one is walked in
    // blocks of m = size of the smaller one.
    struct layout {
        std::size_t m, reps, a_step, b_step;
    };
    template <class T>
    static layout layout_of(const op_io<T, 2>& c) {
        const std::size_t n = c.y.size(), na = c.x[0].size(), nb = c.x[1].size();
        const std::size_t m = std::min(na, nb);
        return {m, m ? n / m : 0, na == n ? m : 0, nb == n ? m : 0};
    }
    static bool trailing_part(const rshape& small, const rshape& y) {
        if (small.rank > y.rank) return false;
        for (std::size_t i = 0; i < small.rank; ++i)
            if (small.d[small.rank - 1 - i] != y.d[y.rank - 1 - i]) return false;
        return true;
    }
    template <class T>
    static bool blocked(const op_io<T, 2>& c) {
        const rshape &a = c.x[0].shape, &b = c.x[1].shape, &y = c.y.shape;
        return (trailing_part(a, y) && trailing_part(b, y)) && (a.size() == y.size() || b.size() == y.size());
    }
    // Any other broadcast: the result's axes padded to 4, and each operand's element strides along
    // them (0 where it is repeated).
    struct strides {
        std::array<std::size_t, 4> n{}, a{}, b{};
    };
    template <class T>
    static strides strides_of(const op_io<T, 2>& c) {
        strides s;
        const rshape& y = c.y.shape;
        const std::size_t pad = 4 - y.rank;
        for (std::size_t i = 0; i < 4; ++i) s.n[i] = i < pad ? 1 : y.d[i - pad];
        for (std::size_t k = 0; k < 2; ++k) {
            const rshape& x = c.x[k].shape;
            auto& st = k == 0 ? s.a : s.b;
            std::size_t step = 1;
            for (std::size_t i = 4; i-- > 0;) {  // from the last axis
                const std::size_t back = 3 - i;   // 0 for the last axis
                const std::size_t extent = back < x.rank ? x.d[x.rank - 1 - back] : 1;
                st[i] = extent == 1 ? 0 : step;
                step *= extent;
            }
        }
        return s;
    }
    // f(iy, ia, ib) for every element of the result, in order.
    template <class F>
    static void each_element(const strides& s, F f) {
        std::size_t iy = 0;
        for (std::size_t i0 = 0; i0 < s.n[0]; ++i0)
            for (std::size_t i1 = 0; i1 < s.n[1]; ++i1)
                for (std::size_t i2 = 0; i2 < s.n[2]; ++i2) {
                    const std::size_t a = i0 * s.a[0] + i1 * s.a[1] + i2 * s.a[2], b = i0 * s.b[0] + i1 * s.b[1] + i2 * s.b[2];
                    for (std::size_t i3 = 0; i3 < s.n[3]; ++i3) f(iy++, a + i3 * s.a[3], b + i3 * s.b[3]);
                }
    }

    static constexpr bool assigns_adjoints = true;
    // The operands whose VJP is gy itself (Fn::identity_vjp_operands: add's two, sub's first): the
    // planners may give such an operand's adjoint gy's memory (op.hpp), which backward then skips.
    static constexpr std::uint32_t identity_vjp_operands = [] {
        if constexpr (requires { Fn::identity_vjp_operands; }) return std::uint32_t(Fn::identity_vjp_operands); else return 0u;
    }();
    template <class A, class B>
    static consteval bool rows_independent() { return true; }  // element-wise, rows repeated (see op.hpp)
    /// The values backward reads (op.hpp): none when the derivatives are constants (Fn::constant_derivatives: add, sub).
    static constexpr std::uint32_t backward_reads = [] {
        if constexpr (requires { Fn::constant_derivatives; }) return Fn::constant_derivatives ? 0u : 0b011u | reads_result;
        else return 0b011u | reads_result;
    }();

    template <class T>
    static void forward(op_io<T, 2>& c) {
        if (!blocked(c)) {
            const T *a = c.x_data(0), *b = c.x_data(1);
            T* y = c.y_data();
            each_element(strides_of(c), [&](std::size_t iy, std::size_t ia, std::size_t ib) { y[iy] = Fn::f(a[ia], b[ib]); });
            return;
        }
        const auto L = layout_of(c);
        const T *a = c.x_data(0), *b = c.x_data(1);
        T* y = c.y_data();
        for (std::size_t r = 0; r < L.reps; ++r)
            kernels::map(L.m, y + r * L.m, [](auto u, auto v) { return Fn::f(u, v); }, a + r * L.a_step,
                         b + r * L.b_step);
    }
    template <class T>
    static void backward(op_io<T, 2>& c) {
        T *ga = c.gx_to_write(0), *gb = c.gx_to_write(1);  // (null where shared with gy: identity_vjp_operands)
        if (!blocked(c)) {  // a fresh adjoint is zeroed, then every element adds its share
            const T *a = c.x_data(0), *b = c.x_data(1), *y = c.y_data(), *gy = c.gy_data();
            for (std::size_t k = 0; k < 2; ++k)
                if (T* g = k == 0 ? ga : gb; g && c.fresh(k)) std::fill(g, g + c.x[k].size(), T(0));
            each_element(strides_of(c), [&](std::size_t iy, std::size_t ia, std::size_t ib) {
                if (ga) ga[ia] += gy[iy] * Fn::da(a[ia], b[ib], y[iy]);
                if (gb) gb[ib] += gy[iy] * Fn::db(a[ia], b[ib], y[iy]);
            });
            return;
        }
        const auto L = layout_of(c);
        const T *a = c.x_data(0), *b = c.x_data(1), *y = c.y_data(), *gy = c.gy_data();
        // A repeated (broadcast) operand's adjoint sums over the repetitions: only the first may assign.
        if (ga)
            for (std::size_t r = 0; r < L.reps; ++r)
                kernels::map_into(c.fresh(0) && (r == 0 || L.a_step), L.m, ga + r * L.a_step,
                                  [](auto gyv, auto u, auto v, auto yv) { return gyv * Fn::da(u, v, yv); }, gy + r * L.m,
                                  a + r * L.a_step, b + r * L.b_step, y + r * L.m);
        if (gb)
            for (std::size_t r = 0; r < L.reps; ++r)
                kernels::map_into(c.fresh(1) && (r == 0 || L.b_step), L.m, gb + r * L.b_step,
                                  [](auto gyv, auto u, auto v, auto yv) { return gyv * Fn::db(u, v, yv); }, gy + r * L.m,
                                  a + r * L.a_step, b + r * L.b_step, y + r * L.m);
        // No repetitions (an empty batch): a fresh adjoint of the repeated operand is still all zero.
        if (L.reps == 0)
            for (std::size_t k = 0; k < 2; ++k)
                if (T* g = k == 0 ? ga : gb; g && c.fresh(k)) std::fill(g, g + c.x[k].size(), T(0));
    }
};

}  // namespace ctg::ops
