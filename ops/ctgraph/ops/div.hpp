// ctgraph/ops/div.hpp: y = a / b (row broadcast, see detail/binary.hpp); dy/da = 1/b, dy/db = -y/b.
#pragma once
#include "ctgraph/ops/detail/binary.hpp"

namespace ctg {
namespace ops {
struct div_fn {
    static constexpr std::string_view name = "div";
    static constexpr std::string_view onnx_op = "Div";  // its ONNX operator (binary_op::onnx)
    template <class V> static V f(V a, V b) { return a / b; }
    template <class V> static V da(V, V b, V) { return V(1) / b; }
    template <class V> static V db(V, V b, V y) { return -y / b; }
};
using div_op = binary_op<div_fn>;
}  // namespace ops

/// Element-wise a / b, broadcast as ctg::add.
template <expr A, expr B>
constexpr auto div(A a, B b) {
    static_assert(with_shapes<any_poison<A, B> || ops::broadcastable<typename A::shape, typename B::shape>(),
                              typename A::shape::pretty, typename B::shape::pretty>::value,
                  "ctg::div: the operand shapes do not broadcast (aligned from the last axis, each pair of dimensions must be equal or one of them 1)");
    return make_float_node<ops::div_op>(a, b);
}
}  // namespace ctg
