// ctgraph/ops/slice.hpp: columns [Begin, End) of the last axis: (..., n) -> (..., End - Begin).
// The VJP adds the adjoint into those columns.
#pragma once
#include <string>
#include <string_view>

#include "ctgraph/graph/node.hpp"
#include "ctgraph/kernels/simd.hpp"
#include "ctgraph/op.hpp"

namespace ctg {
namespace ops {
template <long long Begin, long long End>
struct slice_op {
    static constexpr std::string_view name = "slice";
    template <class A>
    static consteval bool rows_independent() { return A::rank >= 2; }  // the last axis (see op.hpp)
    template <class A>
    static consteval bool check() {
        if constexpr (A::rank == 0) return false;
        else return A::dims[A::rank - 1].is_static() && 0 <= Begin && Begin < End && End <= A::dims[A::rank - 1].n;
    }
    template <class A>
    static consteval auto dims() {
        auto r = A::dims;
        r[A::rank - 1] = dim(End - Begin);
        return r;
    }
    // ONNX: Slice of [Begin, End) on the last axis (starts, ends and axes as inputs).
    template <class B>
    static void onnx(B& b) { b.emit_y("Slice", {b.x(0), b.ints({Begin}), b.ints({End}), b.ints({-1})}); }
    template <class T>
    static void forward(op_io<T, 1>& c) {
        const std::size_t rows = c.y.shape.rows(), n = c.x[0].shape.cols(), w = End - Begin;
        for (std::size_t r = 0; r < rows; ++r)
            std::copy(c.x_data(0) + r * n + Begin, c.x_data(0) + r * n + End, c.y_data() + r * w);
    }
    template <class T>
    static void backward(op_io<T, 1>& c) {
        T* g = c.gx_data(0);
        if (!g) return;
        const std::size_t rows = c.y.shape.rows(), n = c.x[0].shape.cols(), w = End - Begin;
        for (std::size_t r = 0; r < rows; ++r) kernels::add_to(w, c.gy_data() + r * w, g + r * n + Begin);
    }
    static std::string describe() { return std::to_string(Begin) + ":" + std::to_string(End); }
};
}  // namespace ops

/// Columns [Begin, End) of the last axis.
template <long long Begin, long long End, expr A>
constexpr auto slice(A a) {
    static_assert(with_shapes<any_poison<A> || ops::slice_op<Begin, End>::template check<typename A::shape>(),
                              typename A::shape::pretty, shape_is<Begin, End>>::value,
                  "ctg::slice: the range [Begin, End) must lie inside the static last dimension");
    return make_float_node<ops::slice_op<Begin, End>>(a);
}
}  // namespace ctg
