// ctgraph/ops/detail/binary.hpp: the family of element-wise binary primitives, with row broadcast.
//
// A member is a struct Fn with
//   static constexpr std::string_view name;
//   template <class V> static V f(V a, V b);
//   template <class V> static V da(V a, V b, V y);   // dy/da
//   template <class V> static V db(V a, V b, V y);   // dy/db
// Shapes: equal, or one operand's shape is a trailing part of the other's (a bias (H) against
// (B,H), a scalar against anything): the smaller operand is repeated over the leading dimensions.
// The broadcast gradient is reduced here, once for the whole family: the repeated operand's adjoint
// accumulates the sum over the repetitions. No op of the family writes its own reduction.
#pragma once
#include <algorithm>
#include <string_view>

#include "ctgraph/graph/node.hpp"
#include "ctgraph/kernels/simd.hpp"
#include "ctgraph/op.hpp"

namespace ctg::ops {

/// Whether shapes A and B combine element-wise (equal, or one a trailing part of the other).
template <class A, class B>
consteval bool broadcastable() {
    constexpr std::size_t ra = A::rank, rb = B::rank;
    constexpr std::size_t r = ra < rb ? ra : rb;
    for (std::size_t i = 0; i < r; ++i)
        if (!(A::dims[ra - r + i] == B::dims[rb - r + i])) return false;
    return true;
}

template <class Fn>
struct binary_op {
    static constexpr std::string_view name = Fn::name;
    template <class A, class B>
    static consteval bool check() { return broadcastable<A, B>(); }
    template <class A, class B>
    static consteval auto dims() {
        if constexpr (A::rank >= B::rank) return A::dims; else return B::dims;
    }

    // The larger operand is walked in blocks of m = size of the smaller one.
    struct layout {
        std::size_t m, reps, a_step, b_step;
    };
    template <class T>
    static layout layout_of(const op_io<T, 2>& c) {
        const std::size_t n = c.y.size(), na = c.x[0].size(), nb = c.x[1].size();
        const std::size_t m = std::min(na, nb);
        return {m, m ? n / m : 0, na == n ? m : 0, nb == n ? m : 0};
    }

    static constexpr bool assigns_adjoints = true;
    template <class A, class B>
    static consteval bool rows_independent() { return true; }  // element-wise, rows repeated (see op.hpp)

    template <class T>
    static void forward(op_io<T, 2>& c) {
        const auto L = layout_of(c);
        const T *a = c.x_data(0), *b = c.x_data(1);
        T* y = c.y_data();
        for (std::size_t r = 0; r < L.reps; ++r)
            kernels::map(L.m, y + r * L.m, [](auto u, auto v) { return Fn::f(u, v); }, a + r * L.a_step,
                         b + r * L.b_step);
    }
    template <class T>
    static void backward(op_io<T, 2>& c) {
        const auto L = layout_of(c);
        const T *a = c.x_data(0), *b = c.x_data(1), *y = c.y_data(), *gy = c.gy_data();
        // A repeated (broadcast) operand's adjoint sums over the repetitions: only the first may assign.
        if (T* ga = c.gx_data(0))
            for (std::size_t r = 0; r < L.reps; ++r)
                kernels::map_into(c.fresh(0) && (r == 0 || L.a_step), L.m, ga + r * L.a_step,
                                  [](auto gyv, auto u, auto v, auto yv) { return gyv * Fn::da(u, v, yv); }, gy + r * L.m,
                                  a + r * L.a_step, b + r * L.b_step, y + r * L.m);
        if (T* gb = c.gx_data(1))
            for (std::size_t r = 0; r < L.reps; ++r)
                kernels::map_into(c.fresh(1) && (r == 0 || L.b_step), L.m, gb + r * L.b_step,
                                  [](auto gyv, auto u, auto v, auto yv) { return gyv * Fn::db(u, v, yv); }, gy + r * L.m,
                                  a + r * L.a_step, b + r * L.b_step, y + r * L.m);
        // No repetitions (an empty batch): a fresh adjoint of the repeated operand is still all zero.
        if (L.reps == 0)
            for (std::size_t k = 0; k < 2; ++k)
                if (T* g = c.gx_data(k); g && c.fresh(k)) std::fill(g, g + c.x[k].size(), T(0));
    }
};

}  // namespace ctg::ops
