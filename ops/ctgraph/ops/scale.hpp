// ctgraph/ops/scale.hpp: y = c x for a compile-time constant c (scale<0.125>(x)); dy/dx = c.
#pragma once
#include <string>

#include "ctgraph/ops/detail/unary.hpp"

namespace ctg {
namespace ops {
template <cval C>
struct scale_fn {
    static constexpr std::string_view name = "scale";
    template <class B>  // ONNX (detail/unary.hpp)
    static void onnx(B& b, const std::string& x, const std::string& y) { b.emit_to("Mul", {x, b.scalar(C.value())}, y); }
    template <class V>
    static V f(V x) { return x * V(C.value()); }
    template <class V>
    static V df(V, V) { return V(C.value()); }
    static std::string describe() { return std::to_string(C.value()); }
};
template <cval C>
using scale_op = unary_op<scale_fn<C>>;
}  // namespace ops

/// c * x for a constant c known at compile time.
template <cval C, expr A>
constexpr auto scale(A a) { return ops::make_unary<ops::scale_fn<C>>(a); }
}  // namespace ctg
