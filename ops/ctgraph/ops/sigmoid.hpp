// ctgraph/ops/sigmoid.hpp: y = 1 / (1 + exp(-x)); dy/dx = y (1 - y).
#pragma once
#include <cmath>

#include "ctgraph/ops/detail/unary.hpp"

namespace ctg {
namespace ops {
struct sigmoid_fn {
    static constexpr std::string_view name = "sigmoid";
    template <class B>  // ONNX (detail/unary.hpp)
    static void onnx(B& b, const std::string& x, const std::string& y) { b.emit_to("Sigmoid", {x}, y); }
    template <class V>
    static V f(V x) {
        using std::exp;
        return V(1) / (V(1) + exp(-x));
    }
    template <class V>
    static V df(V, V y) { return y * (V(1) - y); }
};
using sigmoid_op = unary_op<sigmoid_fn>;
}  // namespace ops

/// Element-wise 1 / (1 + exp(-x)).
template <expr A>
constexpr auto sigmoid(A a) { return ops::make_unary<ops::sigmoid_fn>(a); }
}  // namespace ctg
