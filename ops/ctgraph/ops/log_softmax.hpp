// ctgraph/ops/log_softmax.hpp: row-wise log-softmax over the last axis.
//   y = x - max - log(sum(exp(x - max)));   VJP: gx += gy - exp(y) * sum(gy)   (per row)
#pragma once
#include <string_view>

#include "ctgraph/graph/node.hpp"
#include "ctgraph/kernels/softmax.hpp"
#include "ctgraph/op.hpp"

namespace ctg {
namespace ops {
struct log_softmax_op {
    static constexpr std::string_view name = "log_softmax";
    template <class A>
    static consteval bool check() { return A::rank >= 1; }
    template <class A>
    static consteval auto dims() { return A::dims; }
    template <class T>
    static void forward(op_io<T, 1>& c) {
        const std::size_t n = c.y.shape.cols(), rows = c.y.shape.rows();
        for (std::size_t r = 0; r < rows; ++r) kernels::log_softmax_row(n, c.x_data(0) + r * n, c.y_data() + r * n);
    }
    template <class T>
    static void backward(op_io<T, 1>& c) {
        T* gx = c.gx_data(0);
        if (!gx) return;
        const std::size_t n = c.y.shape.cols(), rows = c.y.shape.rows();
        for (std::size_t r = 0; r < rows; ++r) {
            const T *y = c.y_data() + r * n, *gy = c.gy_data() + r * n;
            T* g = gx + r * n;
            const T s = kernels::sum(n, gy);
            kernels::map(n, g, [s](auto acc, auto yv, auto gyv) {
                using std::exp;
                return acc + gyv - exp(yv) * decltype(yv)(s);
            }, static_cast<const T*>(g), y, gy);
        }
    }
};
}  // namespace ops

/// Log-softmax over the last axis.
template <expr A>
constexpr auto log_softmax(A a) {
    static_assert(with_shapes<any_poison<A> || (A::shape::rank >= 1), typename A::shape::pretty>::value,
                  "ctg::log_softmax: the operand must have rank 1 or more (it runs over the last axis)");
    return make_float_node<ops::log_softmax_op>(a);
}
}  // namespace ctg
