// ctgraph/ops/gelu.hpp: GELU in its two forms.
//
// gelu(x): the tanh approximation (GPT-2, torch's approximate="tanh"):
//   y = 0.5 x (1 + tanh(u)),  u = sqrt(2/pi) (x + 0.044715 x^3)
//   dy/dx = 0.5 (1 + t) + 0.5 x (1 - t^2) sqrt(2/pi) (1 + 3 * 0.044715 x^2),  t = tanh(u)
// computed through the identity 0.5 (1 + tanh(u)) = s = 1 / (1 + exp(-2u)), so y = x s and
// dy/dx = s + 2 x s (1 - s) sqrt(2/pi) (1 + 3 * 0.044715 x^2): one exp per element instead of a
// tanh (xsimd's evaluates a polynomial and an exp and selects; GELU was 4.7 % of a gpt-s step).
// At u -> -inf, exp(-2u) -> inf and s -> 0: y = -0, dy/dx = 0, no NaN.
//
// gelu_erf(x): the exact form (torch's nn.GELU() default, activation="gelu" of its Transformer
// layers, BERT): y = x Phi(x) = 0.5 x (1 + erf(x / sqrt 2)), dy/dx = Phi(x) + x phi(x) with
// phi(x) = exp(-x^2 / 2) / sqrt(2 pi). The two forms differ by up to 4.7e-4 (at x near 2.7):
// a model trained with one and run with the other drifts by that much per layer.
#pragma once
#include <cmath>

#include "ctgraph/ops/detail/unary.hpp"

namespace ctg {
namespace ops {
struct gelu_fn {
    static constexpr std::string_view name = "gelu";
    static constexpr double k = 0.7978845608028654;  // sqrt(2 / pi)
    static constexpr double c = 0.044715;
    static constexpr bool df_reads_y = false;  // (detail/unary.hpp)
    static constexpr bool df_from_bf16_x = true;  // (detail/unary.hpp)
    template <class V>
    static V logistic(V x) {
        using std::exp;
        return V(1) / (V(1) + exp(V(-2 * k) * (x + V(c) * x * x * x)));  // 0.5 (1 + tanh(u))
    }
    template <class V>
    static V f(V x) { return x * logistic(x); }
    // ONNX (opset 17 has no Gelu): x sigmoid(2k (x + c x^3)), the same identity as above.
    template <class B>
    static void onnx(B& b, const std::string& x, const std::string& y) {
        const std::string x3 = b.emit("Mul", {b.emit("Mul", {x, x}), x});
        const std::string u = b.emit("Add", {x, b.emit("Mul", {x3, b.scalar(c)})});
        b.emit_to("Mul", {x, b.emit("Sigmoid", {b.emit("Mul", {u, b.scalar(2 * k)})})}, y);
    }
    template <class V>
    static V df(V x, V) {
        const V s = logistic(x);
        return s + V(2 * k) * x * s * (V(1) - s) * (V(1) + V(3 * c) * x * x);
    }
};
using gelu_op = unary_op<gelu_fn>;

struct gelu_erf_fn {
    static constexpr std::string_view name = "gelu_erf";
    static constexpr double inv_sqrt2 = 0.7071067811865476;   // 1 / sqrt(2)
    static constexpr double inv_sqrt2pi = 0.3989422804014327;  // 1 / sqrt(2 pi)
    static constexpr bool df_reads_y = false;  // (detail/unary.hpp)
    static constexpr bool df_from_bf16_x = true;  // (detail/unary.hpp)
    template <class V>
    static V cdf(V x) {  // Phi(x)
        using std::erf;  // xsimd::erf for batches, by argument-dependent lookup
        return V(0.5) * (V(1) + erf(x * V(inv_sqrt2)));
    }
    template <class V>
    static V f(V x) { return x * cdf(x); }
    // ONNX: 0.5 x (1 + erf(x / sqrt 2)), in the order ONNX Runtime fuses into its Gelu kernel.
    template <class B>
    static void onnx(B& b, const std::string& x, const std::string& y) {
        const std::string e = b.emit("Erf", {b.emit("Div", {x, b.scalar(1.4142135623730951)})});
        b.emit_to("Mul", {b.emit("Mul", {x, b.emit("Add", {e, b.scalar(1.0)})}), b.scalar(0.5)}, y);
    }
    template <class V>
    static V df(V x, V) {
        using std::exp;
        return cdf(x) + x * V(inv_sqrt2pi) * exp(V(-0.5) * x * x);
    }
};
using gelu_erf_op = unary_op<gelu_erf_fn>;
}  // namespace ops

/// GELU, tanh approximation (GPT-2's; torch.nn.GELU(approximate="tanh")), element-wise.
template <expr A>
constexpr auto gelu(A a) { return ops::make_unary<ops::gelu_fn>(a); }
/// GELU, exact form: x Phi(x) = 0.5 x (1 + erf(x / sqrt 2)) (torch.nn.GELU()'s default, BERT's),
/// element-wise.
template <expr A>
constexpr auto gelu_erf(A a) { return ops::make_unary<ops::gelu_erf_fn>(a); }
}  // namespace ctg
