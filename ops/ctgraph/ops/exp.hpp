// ctgraph/ops/exp.hpp: y = exp(x); dy/dx = y.
#pragma once
#include <cmath>

#include "ctgraph/ops/detail/unary.hpp"

namespace ctg {
namespace ops {
struct exp_fn {
    static constexpr std::string_view name = "exp";
    template <class B>  // ONNX (detail/unary.hpp)
    static void onnx(B& b, const std::string& x, const std::string& y) { b.emit_to("Exp", {x}, y); }
    template <class V>
    static V f(V x) {
        using std::exp;
        return exp(x);
    }
    template <class V>
    static V df(V, V y) { return y; }
};
using exp_op = unary_op<exp_fn>;
}  // namespace ops

/// Element-wise exp(x).
template <expr A>
constexpr auto exp(A a) { return ops::make_unary<ops::exp_fn>(a); }
}  // namespace ctg
