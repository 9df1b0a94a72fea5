// ctgraph/ops/tanh.hpp: y = tanh(x); dy/dx = 1 - y^2.
#pragma once
#include <cmath>

#include "ctgraph/ops/detail/unary.hpp"

namespace ctg {
namespace ops {
struct tanh_fn {
    static constexpr std::string_view name = "tanh";
    template <class B>  // ONNX (detail/unary.hpp)
    static void onnx(B& b, const std::string& x, const std::string& y) { b.emit_to("Tanh", {x}, y); }
    template <class V>
    static V f(V x) {
        using std::tanh;
        return tanh(x);
    }
    template <class V>
    static V df(V, V y) { return V(1) - y * y; }
};
using tanh_op = unary_op<tanh_fn>;
}  // namespace ops

/// Element-wise tanh(x).
template <expr A>
constexpr auto tanh(A a) { return ops::make_unary<ops::tanh_fn>(a); }
}  // namespace ctg
