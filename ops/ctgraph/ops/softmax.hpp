// ctgraph/ops/softmax.hpp: row-wise softmax over the last axis.
//   y = exp(x - max) / sum(exp(x - max));   VJP: gx += y * (gy - <gy, y>)   (per row)
#pragma once
#include "ctgraph/kernels/softmax.hpp"
#include "ctgraph/ops/detail/rowwise.hpp"

namespace ctg {
namespace ops {
struct softmax_fn {
    static constexpr std::string_view name = "softmax";
    template <class B>  // ONNX: over the last axis (detail/rowwise.hpp)
    static void onnx(B& b, const std::string& x, const std::string& y) { b.emit_to("Softmax", {x}, y, {{"axis", -1}}); }
    template <class T>
    static void forward_row(std::size_t n, const T* x, T* y) { kernels::softmax_row(n, x, y); }
    template <class T>
    static void backward_row(std::size_t n, const T*, const T* y, const T* gy, T* gx) {
        const T dot = kernels::reduce_sum(n, gy, y, [](auto a, auto b) { return a * b; });
        kernels::map(n, gx, [dot](auto acc, auto yv, auto gyv) { return acc + yv * (gyv - decltype(yv)(dot)); },
                     static_cast<const T*>(gx), y, gy);
    }
};
using softmax_op = rowwise_op<softmax_fn>;
}  // namespace ops

/// Softmax over the last axis.
template <expr A>
constexpr auto softmax(A a) {
    static_assert(with_shapes<any_poison<A> || (A::shape::rank >= 1), typename A::shape::pretty>::value,
                  "ctg::softmax: the operand must have rank 1 or more (softmax runs over the last axis)");
    return make_float_node<ops::softmax_op>(a);
}
}  // namespace ctg
