// ctgraph/ops/log.hpp: y = log(x) (x > 0); dy/dx = 1 / x.
#pragma once
#include <cmath>

#include "ctgraph/ops/detail/unary.hpp"

namespace ctg {
namespace ops {
struct log_fn {
    static constexpr std::string_view name = "log";
    template <class B>  // ONNX (detail/unary.hpp)
    static void onnx(B& b, const std::string& x, const std::string& y) { b.emit_to("Log", {x}, y); }
    template <class V>
    static V f(V x) {
        using std::log;
        return log(x);
    }
    template <class V>
    static V df(V x, V) { return V(1) / x; }
};
using log_op = unary_op<log_fn>;
}  // namespace ops

/// Element-wise natural logarithm (x > 0; a non-finite loss throws ctg::numeric_error at forward()).
template <expr A>
constexpr auto log(A a) { return ops::make_unary<ops::log_fn>(a); }
}  // namespace ctg
