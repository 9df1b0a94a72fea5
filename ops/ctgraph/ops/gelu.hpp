// ctgraph/ops/gelu.hpp: GELU, tanh approximation (as GPT-2 and torch's approximate="tanh"):
//   y = 0.5 x (1 + tanh(u)),  u = sqrt(2/pi) (x + 0.044715 x^3)
//   dy/dx = 0.5 (1 + t) + 0.5 x (1 - t^2) sqrt(2/pi) (1 + 3 * 0.044715 x^2),  t = tanh(u)
#pragma once
#include <cmath>

#include "ctgraph/ops/detail/unary.hpp"

namespace ctg {
namespace ops {
struct gelu_fn {
    static constexpr std::string_view name = "gelu";
    static constexpr double k = 0.7978845608028654;  // sqrt(2 / pi)
    static constexpr double c = 0.044715;
    template <class V>
    static V f(V x) {
        using std::tanh;
        return V(0.5) * x * (V(1) + tanh(V(k) * (x + V(c) * x * x * x)));
    }
    template <class V>
    static V df(V x, V) {
        using std::tanh;
        const V t = tanh(V(k) * (x + V(c) * x * x * x));
        return V(0.5) * (V(1) + t) + V(0.5) * x * (V(1) - t * t) * V(k) * (V(1) + V(3 * c) * x * x);
    }
};
using gelu_op = unary_op<gelu_fn>;
}  // namespace ops

template <expr A>
constexpr auto gelu(A a) { return ops::make_unary<ops::gelu_fn>(a); }
}  // namespace ctg
