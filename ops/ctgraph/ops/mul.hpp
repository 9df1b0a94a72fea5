// ctgraph/ops/mul.hpp: element-wise product y = a * b (row broadcast, see detail/binary.hpp);
// dy/da = b, dy/db = a. (operator* is the matrix product; this is the Hadamard product.)
#pragma once
#include "ctgraph/ops/detail/binary.hpp"

namespace ctg {
namespace ops {
struct mul_fn {
    static constexpr std::string_view name = "mul";
    static constexpr std::string_view onnx_op = "Mul";  // its ONNX operator (binary_op::onnx)
    template <class V> static V f(V a, V b) { return a * b; }
    template <class V> static V da(V, V b, V) { return b; }
    template <class V> static V db(V a, V, V) { return a; }
};
using mul_op = binary_op<mul_fn>;
}  // namespace ops

/// Element-wise (Hadamard) product a * b, broadcast as ctg::add (operator* is the matrix product).
template <expr A, expr B>
constexpr auto mul(A a, B b) {
    static_assert(with_shapes<any_poison<A, B> || ops::broadcastable<typename A::shape, typename B::shape>(),
                              typename A::shape::pretty, typename B::shape::pretty>::value,
                  "ctg::mul: the operand shapes do not broadcast (aligned from the last axis, each pair of dimensions must be equal or one of them 1)");
    return make_float_node<ops::mul_op>(a, b);
}
}  // namespace ctg
