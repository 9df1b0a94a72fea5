// ctgraph/ops/at_time.hpp: one step of a sequence, at_time<I>(xs): (T, ...) -> (...), step I of the
// leading axis (negative counts from the end: at_time<-1> is the last step, e.g. an encoder's final
// state; with scan's lengths the last step holds each sequence's state at its own end).
// The VJP adds the adjoint into that step.
#pragma once
#include <string>
#include <string_view>

#include "ctgraph/graph/node.hpp"
#include "ctgraph/kernels/simd.hpp"
#include "ctgraph/op.hpp"

namespace ctg {
namespace ops {
template <long long I>
struct at_time_op {
    static constexpr std::string_view name = "at_time";
    template <class Xs>
    static consteval bool check() {
        if constexpr (Xs::rank < 2) return false;
        else if constexpr (!Xs::dims[0].is_static()) return true;  // checked at run time
        else return I < Xs::dims[0].n && -I <= Xs::dims[0].n;
    }
    template <class Xs>
    static consteval auto dims() {
        std::array<dim, Xs::rank - 1> r{};
        for (std::size_t i = 1; i < Xs::rank; ++i) r[i - 1] = Xs::dims[i];
        return r;
    }
    template <class T>
    static std::size_t step_of(const op_io<T, 1>& c) {
        const long long steps = (long long)c.x[0].shape.d[0];
        const long long t = I < 0 ? steps + I : I;
        if (t < 0 || t >= steps)
            throw shape_error("ctg::at_time: step " + std::to_string(I) + " of a sequence of " + std::to_string(steps) +
                              " steps (operand '" + std::string(c.x_name[0]) + "')");
        return std::size_t(t);
    }
    // ONNX: Gather on axis 0 with the 0-d index I, which drops the axis (a negative I counts from
    // the end there too; one outside the axis is an error in both).
    template <class B>
    static void onnx(B& b) { b.emit_y("Gather", {b.x(0), b.int_scalar(I)}, {{"axis", 0}}); }
    template <class T>
    static void forward(op_io<T, 1>& c) {
        const std::size_t n = c.y.size(), t = step_of(c);
        std::copy(c.x_data(0) + t * n, c.x_data(0) + (t + 1) * n, c.y_data());
    }
    template <class T>
    static void backward(op_io<T, 1>& c) {
        if (T* g = c.gx_data(0)) kernels::add_to(c.y.size(), c.gy_data(), g + step_of(c) * c.y.size());
    }
    static std::string describe() { return std::to_string(I); }
};
}  // namespace ops

/// Step I of the leading (time) axis; negative I counts from the end.
template <long long I, expr Xs>
constexpr auto at_time(Xs xs) {
    static_assert(with_shapes<any_poison<Xs> || ops::at_time_op<I>::template check<typename Xs::shape>(),
                              typename Xs::shape::pretty, shape_is<I>>::value,
                  "ctg::at_time: the operand needs a time axis and another, and the step must lie inside it");
    return make_float_node<ops::at_time_op<I>>(xs);
}
}  // namespace ctg
