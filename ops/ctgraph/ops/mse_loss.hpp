// ctgraph/ops/mse_loss.hpp: mean squared error, a scalar.
//   L = (1/n) sum_i (p_i - t_i)^2;   VJP: gp += gy 2 (p - t) / n,  gt -= gy 2 (p - t) / n
#pragma once
#include <string>
#include <string_view>

#include "ctgraph/graph/node.hpp"
#include "ctgraph/kernels/simd.hpp"
#include "ctgraph/op.hpp"

namespace ctg {
namespace ops {
struct mse_loss_op {
    static constexpr std::string_view name = "mse_loss";
    template <class P, class Tg>
    static consteval bool check() {
        if constexpr (P::rank != Tg::rank) {
            return false;
        } else {
            for (std::size_t i = 0; i < P::rank; ++i)
                if (!(P::dims[i] == Tg::dims[i])) return false;
            return true;
        }
    }
    template <class P, class Tg>
    static consteval auto dims() { return std::array<dim, 0>{}; }
    // ONNX: as here, d = p - t, ReduceSum(d d) over every axis (keepdims 0), divided by the element
    // count n: a constant when static, else Size(p) at run time, a count of 0 giving 0 as here (the
    // sum is 0: divided by max(n, 1)).
    template <class B>
    static void onnx(B& b) {
        const auto& s = b.xshape(0);
        const std::string d = b.emit("Sub", {b.x(0), b.x(1)});
        const std::string sq = b.emit("Mul", {d, d});
        if (s.rank == 0) return b.emit_y("Identity", {sq});  // one element
        const std::string total = b.emit("ReduceSum", {sq}, {{"keepdims", 0}});
        if (s.is_static()) {
            long long n = 1;
            for (std::size_t a = 0; a < s.rank; ++a) n *= s.d[a].n;
            if (n == 0) return b.emit_y("Identity", {b.scalar(0.0)});
            return b.emit_y("Div", {total, b.scalar(double(n))});
        }
        const std::string n = b.emit("Max", {b.emit("Cast", {b.emit("Size", {b.x(0)})}, {{"to", 1}}), b.scalar(1.0)});
        b.emit_y("Div", {total, n});
    }
    template <class T>
    static void forward(op_io<T, 2>& c) {
        const std::size_t n = c.x[0].size();
        const T s = kernels::reduce_sum(n, c.x_data(0), c.x_data(1), [](auto p, auto t) { return (p - t) * (p - t); });
        *c.y_data() = n ? s / T(n) : T(0);
    }
    template <class T>
    static void backward(op_io<T, 2>& c) {
        const std::size_t n = c.x[0].size();
        if (!n) return;
        const T k = T(2) * *c.gy_data() / T(n);
        for (std::size_t which = 0; which < 2; ++which)
            if (T* g = c.gx_data(which)) {
                const T sk = which == 0 ? k : -k;
                kernels::map(n, g, [sk](auto acc, auto p, auto t) { return acc + decltype(p)(sk) * (p - t); },
                             static_cast<const T*>(g), c.x_data(0), c.x_data(1));
            }
    }
};
}  // namespace ops

/// Mean of (prediction - target)^2 over every element.
template <expr P, expr Tg>
constexpr auto mse_loss(P p, Tg t) {
    static_assert(with_shapes<any_poison<P, Tg> || ops::mse_loss_op::check<typename P::shape, typename Tg::shape>(),
                              typename P::shape::pretty, typename Tg::shape::pretty>::value,
                  "ctg::mse_loss: prediction and target must have the same shape");
    return make_float_node<ops::mse_loss_op>(p, t);
}
}  // namespace ctg
