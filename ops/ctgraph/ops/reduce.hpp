// ctgraph/ops/reduce.hpp: sum and mean, over one axis or over everything.
//   sum<Axis>(x), mean<Axis>(x): remove axis Axis (negative counts from the end);
//   sum<Axis, true>(x), mean<Axis, true>(x): keep it, of extent 1 (PyTorch's keepdim=True), to
//                                           broadcast against x: x - mean<-1, true>(x);
//   sum(x), mean(x): reduce to a scalar.
// The tensor is seen as (outer, n, inner) around the reduced axis; VJP: gx[o, j, i] += s * gy[o, i]
// with s = 1 (sum) or 1/n (mean).
#pragma once
#include <climits>
#include <string>
#include <string_view>
#include <vector>

#include "ctgraph/graph/node.hpp"
#include "ctgraph/kernels/simd.hpp"
#include "ctgraph/op.hpp"
#include "ctgraph/ops/reshape.hpp"

namespace ctg {
namespace ops {
inline constexpr int all_axes = INT_MIN;

template <int Axis, bool Mean>
struct reduce_op {
    static constexpr std::string_view name = Mean ? "mean" : "sum";
    template <class A>
    static consteval int axis() { return Axis < 0 ? int(A::rank) + Axis : Axis; }
    template <class A>
    static consteval bool check() {
        if constexpr (Axis == all_axes) return true;
        else return axis<A>() >= 0 && axis<A>() < int(A::rank);
    }
    template <class A>
    static consteval auto dims() {
        if constexpr (Axis == all_axes) {
            return std::array<dim, 0>{};
        } else {
            std::array<dim, A::rank - 1> r{};
            for (std::size_t i = 0, j = 0; i < A::rank; ++i)
                if (int(i) != axis<A>()) r[j++] = A::dims[i];
            return r;
        }
    }
    struct split {
        std::size_t outer, n, inner;
    };
    static split split_of(const rshape& x) {
        if constexpr (Axis == all_axes) {
            return {1, x.size(), 1};
        } else {
            const std::size_t a = std::size_t(Axis < 0 ? long(x.rank) + Axis : Axis);
            std::size_t outer = 1, inner = 1;
            for (std::size_t i = 0; i < a; ++i) outer *= x.d[i];
            for (std::size_t i = a + 1; i < x.rank; ++i) inner *= x.d[i];
            return {outer, x.d[a], inner};
        }
    }
    // ONNX: ReduceSum, keepdims 0 (opset 17: the axes an input; none for every axis). The mean is
    // that sum times 1/n, as here: a constant for a static n, else n read at run time (Shape, or
    // Size for every axis), with a count of 0 giving 0 as here (the sum is 0: times 1/max(n, 1)).
    template <class B>
    static void onnx(B& b) {
        const auto& s = b.xshape(0);
        if (s.rank == 0) return b.emit_y("Identity", {b.x(0)});  // one element: its sum and mean
        std::vector<std::string> in{b.x(0)};
        if constexpr (Axis != all_axes) in.push_back(b.ints({Axis}));
        if constexpr (!Mean) {
            b.emit_y("ReduceSum", in, {{"keepdims", 0}});
        } else {
            const std::string total = b.emit("ReduceSum", in, {{"keepdims", 0}});
            bool is_static = true;
            long long n = 1;
            for (std::size_t a = 0; a < s.rank; ++a)
                if (Axis == all_axes || long(a) == (Axis < 0 ? long(s.rank) + Axis : long(Axis))) {
                    is_static = is_static && s.d[a].is_static();
                    n *= s.d[a].n;
                }
            if (is_static) return b.emit_y("Mul", {total, b.scalar(n ? 1.0 / double(n) : 0.0)});
            const std::string count = Axis == all_axes ? b.emit("Size", {b.x(0)}) : b.emit("Squeeze", {b.extent(0, Axis)});
            const std::string nf = b.emit("Max", {b.emit("Cast", {count}, {{"to", 1}}), b.scalar(1.0)});
            b.emit_y("Mul", {total, b.emit("Reciprocal", {nf})});
        }
    }
    template <class T>
    static void forward(op_io<T, 1>& c) {
        const split s = split_of(c.x[0].shape);
        const T* x = c.x_data(0);
        T* y = c.y_data();
        const T k = Mean ? (s.n ? T(1) / T(s.n) : T(0)) : T(1);
        for (std::size_t o = 0; o < s.outer; ++o) {
            T* yo = y + o * s.inner;
            const T* xo = x + o * s.n * s.inner;
            if (s.inner == 1) {
                yo[0] = k * kernels::sum(s.n, xo);
                continue;
            }
            std::fill(yo, yo + s.inner, T(0));
            for (std::size_t j = 0; j < s.n; ++j) kernels::add_to(s.inner, xo + j * s.inner, yo);
            if (Mean) kernels::map(s.inner, yo, [k](auto v) { return v * decltype(v)(k); }, static_cast<const T*>(yo));
        }
    }
    template <class T>
    static void backward(op_io<T, 1>& c) {
        T* gx = c.gx_data(0);
        if (!gx) return;
        const split s = split_of(c.x[0].shape);
        const T* gy = c.gy_data();
        const T k = Mean ? (s.n ? T(1) / T(s.n) : T(0)) : T(1);
        for (std::size_t o = 0; o < s.outer; ++o)
            for (std::size_t j = 0; j < s.n; ++j) {
                T* g = gx + (o * s.n + j) * s.inner;
                if (s.inner == 1) {
                    g[0] += k * gy[o];
                } else {
                    kernels::map(s.inner, g, [k](auto acc, auto v) { return acc + decltype(v)(k) * v; },
                                 static_cast<const T*>(g), gy + o * s.inner);
                }
            }
    }
    static std::string describe() { return Axis == all_axes ? "all" : "axis " + std::to_string(Axis); }
};
}  // namespace ops

/// Sum over axis Axis (negative counts from the end); KeepDim: the axis stays, of extent 1.
template <int Axis, bool KeepDim = false, expr A>
constexpr auto sum(A a) {
    static_assert(with_shapes<any_poison<A> || ops::reduce_op<Axis, false>::template check<typename A::shape>(),
                              typename A::shape::pretty>::value,
                  "ctg::sum: the axis is outside the operand's rank");
    constexpr int axis = Axis < 0 ? int(A::shape::rank) + Axis : Axis;
    if constexpr (KeepDim && !any_poison<A> && ops::reduce_op<Axis, false>::template check<typename A::shape>())
        return unsqueeze<axis>(sum<Axis>(a));
    else return make_float_node<ops::reduce_op<Axis, false>>(a);
}
/// Sum of every element (a scalar).
template <expr A>
constexpr auto sum(A a) { return make_float_node<ops::reduce_op<ops::all_axes, false>>(a); }
/// Mean over axis Axis (negative counts from the end); KeepDim: the axis stays, of extent 1.
template <int Axis, bool KeepDim = false, expr A>
constexpr auto mean(A a) {
    static_assert(with_shapes<any_poison<A> || ops::reduce_op<Axis, true>::template check<typename A::shape>(),
                              typename A::shape::pretty>::value,
                  "ctg::mean: the axis is outside the operand's rank");
    constexpr int axis = Axis < 0 ? int(A::shape::rank) + Axis : Axis;
    if constexpr (KeepDim && !any_poison<A> && ops::reduce_op<Axis, true>::template check<typename A::shape>())
        return unsqueeze<axis>(mean<Axis>(a));
    else return make_float_node<ops::reduce_op<Axis, true>>(a);
}
/// Mean of every element (a scalar).
template <expr A>
constexpr auto mean(A a) { return make_float_node<ops::reduce_op<ops::all_axes, true>>(a); }
}  // namespace ctg
