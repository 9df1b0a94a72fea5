// ctgraph/ops/log_softmax.hpp: row-wise log-softmax over the last axis.
//   y = x - max - log(sum(exp(x - max)));   VJP: gx += gy - exp(y) * sum(gy)   (per row)
#pragma once
#include <cmath>

#include "ctgraph/kernels/softmax.hpp"
#include "ctgraph/ops/detail/rowwise.hpp"

namespace ctg {
namespace ops {
struct log_softmax_fn {
    static constexpr std::string_view name = "log_softmax";
    template <class B>  // ONNX: over the last axis (detail/rowwise.hpp)
    static void onnx(B& b, const std::string& x, const std::string& y) { b.emit_to("LogSoftmax", {x}, y, {{"axis", -1}}); }
    template <class T>
    static void forward_row(std::size_t n, const T* x, T* y) { kernels::log_softmax_row(n, x, y); }
    template <class T>
    static void backward_row(std::size_t n, const T*, const T* y, const T* gy, T* gx) {
        const T s = kernels::sum(n, gy);
        kernels::map(n, gx, [s](auto acc, auto yv, auto gyv) {
            using std::exp;
            return acc + gyv - exp(yv) * decltype(yv)(s);
        }, static_cast<const T*>(gx), y, gy);
    }
};
using log_softmax_op = rowwise_op<log_softmax_fn>;
}  // namespace ops

/// Log-softmax over the last axis.
template <expr A>
constexpr auto log_softmax(A a) {
    static_assert(with_shapes<any_poison<A> || (A::shape::rank >= 1), typename A::shape::pretty>::value,
                  "ctg::log_softmax: the operand must have rank 1 or more (it runs over the last axis)");
    return make_float_node<ops::log_softmax_op>(a);
}
}  // namespace ctg
