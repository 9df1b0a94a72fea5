// ctgraph/ops/sub.hpp: y = a - b (row broadcast, see detail/binary.hpp); dy/da = 1, dy/db = -1.
#pragma once
#include "ctgraph/ops/detail/binary.hpp"

namespace ctg {
namespace ops {
struct sub_fn {
    static constexpr std::string_view name = "sub";
    static constexpr std::string_view onnx_op = "Sub";  // its ONNX operator (binary_op::onnx)
    static constexpr bool constant_derivatives = true;  // backward reads no value
    static constexpr std::uint32_t identity_vjp_operands = 0b01;  // dy/da = 1: a's adjoint is gy (op.hpp)
    template <class V> static V f(V a, V b) { return a - b; }
    template <class V> static V da(V, V, V) { return V(1); }
    template <class V> static V db(V, V, V) { return V(-1); }
};
using sub_op = binary_op<sub_fn>;
}  // namespace ops

/// Element-wise a - b, broadcast as ctg::add.
template <expr A, expr B>
constexpr auto sub(A a, B b) {
    static_assert(with_shapes<any_poison<A, B> || ops::broadcastable<typename A::shape, typename B::shape>(),
                              typename A::shape::pretty, typename B::shape::pretty>::value,
                  "ctg::sub: the operand shapes do not broadcast (aligned from the last axis, each pair of dimensions must be equal or one of them 1)");
    return make_float_node<ops::sub_op>(a, b);
}
}  // namespace ctg
