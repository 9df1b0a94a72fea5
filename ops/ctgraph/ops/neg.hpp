// ctgraph/ops/neg.hpp: y = -x; dy/dx = -1.
#pragma once
#include "ctgraph/ops/detail/unary.hpp"

namespace ctg {
namespace ops {
struct neg_fn {
    static constexpr std::string_view name = "neg";
    template <class B>  // ONNX (detail/unary.hpp)
    static void onnx(B& b, const std::string& x, const std::string& y) { b.emit_to("Neg", {x}, y); }
    template <class V>
    static V f(V x) { return -x; }
    template <class V>
    static V df(V, V) { return V(-1); }
};
using neg_op = unary_op<neg_fn>;
}  // namespace ops

/// Element-wise -x.
template <expr A>
constexpr auto neg(A a) { return ops::make_unary<ops::neg_fn>(a); }
}  // namespace ctg
