// ctgraph/ops/relu.hpp: y = max(x, 0); dy/dx = [x > 0].
#pragma once
#include "ctgraph/ops/detail/unary.hpp"

namespace ctg {
namespace ops {
struct relu_fn {
    static constexpr std::string_view name = "relu";
    template <class B>  // ONNX (detail/unary.hpp)
    static void onnx(B& b, const std::string& x, const std::string& y) { b.emit_to("Relu", {x}, y); }
    static constexpr bool df_reads_y = false;  // (detail/unary.hpp)
    template <class V>
    static V f(V x) { return kernels::vmax(x, V(0)); }
    template <class V>
    static V df(V x, V) { return kernels::where(x > V(0), V(1), V(0)); }
};
using relu_op = unary_op<relu_fn>;
}  // namespace ops

/// Element-wise max(x, 0).
template <expr A>
constexpr auto relu(A a) { return ops::make_unary<ops::relu_fn>(a); }
}  // namespace ctg
