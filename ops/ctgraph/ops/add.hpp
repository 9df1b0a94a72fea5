// ctgraph/ops/add.hpp: y = a + b (row broadcast, see detail/binary.hpp); dy/da = dy/db = 1.
#pragma once
#include "ctgraph/ops/detail/binary.hpp"

namespace ctg {
namespace ops {
struct add_fn {
    static constexpr std::string_view name = "add";
    static constexpr std::string_view onnx_op = "Add";  // its ONNX operator (binary_op::onnx)
    static constexpr bool constant_derivatives = true;  // backward reads no value
    static constexpr std::uint32_t identity_vjp_operands = 0b11;  // dy/da = dy/db = 1: both adjoints are gy (op.hpp)
    template <class V> static V f(V a, V b) { return a + b; }
    template <class V> static V da(V, V, V) { return V(1); }
    template <class V> static V db(V, V, V) { return V(1); }
};
using add_op = binary_op<add_fn>;
}  // namespace ops

/// Element-wise a + b, broadcast as NumPy does (ops/detail/binary.hpp): a bias (H) added to every row of
/// (B, H), (B, T, 1) against (B, T, D), (1, D) against (B, D). Shapes that do not broadcast are a compile error.
template <expr A, expr B>
constexpr auto add(A a, B b) {
    static_assert(with_shapes<any_poison<A, B> || ops::broadcastable<typename A::shape, typename B::shape>(),
                              typename A::shape::pretty, typename B::shape::pretty>::value,
                  "ctg::add: the operand shapes do not broadcast (aligned from the last axis, each pair of dimensions must be equal or one of them 1)");
    return make_float_node<ops::add_op>(a, b);
}
}  // namespace ctg
