// ctgraph/ops/stop_gradient.hpp: the operand's value, through which no gradient flows
// (torch.Tensor.detach, tf.stop_gradient).
//   auto target = stop_gradient(teacher(x));   // a target computed by the model, held constant
//   auto h = stop_gradient(encoder(x)) ;       // train what comes after a fixed feature extractor
// Forward is the operand itself (its memory: no copy). The engine gives the node no adjoint
// (op.hpp, stops_gradient): nothing below it receives one through it, so every VJP that would
// lead only there is not generated (graph/analysis.hpp, needs_grad; in a scan's or repeat's cell,
// cell_info::reached).
#pragma once
#include <algorithm>
#include <string_view>

#include "ctgraph/graph/node.hpp"
#include "ctgraph/op.hpp"

namespace ctg {
namespace ops {
struct stop_gradient_op {
    static constexpr std::string_view name = "stop_gradient";
    static constexpr bool stops_gradient = true;   // no adjoint: the engine runs no VJP for it
    static constexpr bool aliases_operand = true;  // the engine points y at x: no copy, no memory
    static constexpr std::uint32_t backward_reads = 0;
    template <class A>
    static consteval bool rows_independent() { return true; }
    template <class A>
    static consteval bool check() { return true; }
    template <class A>
    static consteval auto dims() { return A::dims; }
    // ONNX: Identity (forward is the operand; there is no backward in an exported graph).
    template <class B>
    static void onnx(B& b) { b.emit_y("Identity", {b.x(0)}); }
    template <class T>
    static void forward(op_io<T, 1>& c) {
        if (c.y.ptr != c.x[0].ptr) std::copy(c.x_data(0), c.x_data(0) + c.y.size(), c.y_data());  // a cell's result
    }
    template <class T>
    static void backward(op_io<T, 1>&) {}  // (never called: the node has no adjoint)
};
}  // namespace ops

/// The operand's value, held constant for differentiation: no gradient flows through it into
/// what it is computed from (as PyTorch's detach()). A parameter read only through it gets no
/// gradient; to freeze parameters by name, see options::frozen.
template <expr A>
constexpr auto stop_gradient(A a) {
    return make_float_node<ops::stop_gradient_op>(a);
}
}  // namespace ctg
