// ctgraph/ops/softmax.hpp: row-wise softmax over the last axis.
//   y = exp(x - max) / sum(exp(x - max));   VJP: gx += y * (gy - <gy, y>)   (per row)
#pragma once
#include <string_view>

#include "ctgraph/graph/node.hpp"
#include "ctgraph/kernels/softmax.hpp"
#include "ctgraph/op.hpp"

namespace ctg {
namespace ops {
struct softmax_op {
    static constexpr std::string_view name = "softmax";
    template <class A>
    static consteval bool check() { return A::rank >= 1; }
    template <class A>
    static consteval auto dims() { return A::dims; }
    template <class T>
    static void forward(op_io<T, 1>& c) {
        const std::size_t n = c.y.shape.cols(), rows = c.y.shape.rows();
        for (std::size_t r = 0; r < rows; ++r) kernels::softmax_row(n, c.x_data(0) + r * n, c.y_data() + r * n);
    }
    template <class T>
    static void backward(op_io<T, 1>& c) {
        T* gx = c.gx_data(0);
        if (!gx) return;
        const std::size_t n = c.y.shape.cols(), rows = c.y.shape.rows();
        for (std::size_t r = 0; r < rows; ++r) {
            const T *y = c.y_data() + r * n, *gy = c.gy_data() + r * n;
            T* g = gx + r * n;
            const T dot = kernels::reduce_sum(n, gy, y, [](auto a, auto b) { return a * b; });
            kernels::map(n, g, [dot](auto acc, auto yv, auto gyv) { return acc + yv * (gyv - decltype(yv)(dot)); },
                         static_cast<const T*>(g), y, gy);
        }
    }
};
}  // namespace ops

/// Softmax over the last axis.
template <expr A>
constexpr auto softmax(A a) {
    static_assert(with_shapes<any_poison<A> || (A::shape::rank >= 1), typename A::shape::pretty>::value,
                  "ctg::softmax: the operand must have rank 1 or more (softmax runs over the last axis)");
    return make_float_node<ops::softmax_op>(a);
}
}  // namespace ctg
