// ctgraph/ops/detail/rowwise.hpp: the family of row-wise primitives over the last axis (softmax,
// log-softmax, L2 normalisation). A member is a struct Fn with
//   static constexpr std::string_view name;
//   template <class T> static void forward_row(std::size_t n, const T* x, T* y);
//   template <class T> static void backward_row(std::size_t n, const T* x, const T* y, const T* gy, T* gx);  // adds into gx
// rowwise_op<Fn> supplies the shape rule (same shape, rank >= 1) and the loops over rows.
#pragma once
#include <string>
#include <string_view>

#include "ctgraph/graph/node.hpp"
#include "ctgraph/op.hpp"

namespace ctg::ops {

template <class Fn>
struct rowwise_op {
    static constexpr std::string_view name = Fn::name;
    template <class A>
    static consteval bool check() { return A::rank >= 1; }
    template <class A>
    static consteval auto dims() { return A::dims; }
    template <class A>
    static consteval bool rows_independent() { return A::rank >= 2; }  // along the last axis (see op.hpp)
    // ONNX: the function's own lowering of a row (the last axis), Fn::onnx(b, x, y) (op.hpp).
    template <class B>
        requires requires(B& b, const std::string& s) { Fn::onnx(b, s, s); }
    static void onnx(B& b) { Fn::onnx(b, b.x(0), b.y()); }
    template <class T>
    static void forward(op_io<T, 1>& c) {
        const std::size_t n = c.y.shape.cols(), rows = c.y.shape.rows();
        for (std::size_t r = 0; r < rows; ++r) Fn::forward_row(n, c.x_data(0) + r * n, c.y_data() + r * n);
    }
    template <class T>
    static void backward(op_io<T, 1>& c) {
        T* gx = c.gx_data(0);
        if (!gx) return;
        const std::size_t n = c.y.shape.cols(), rows = c.y.shape.rows();
        for (std::size_t r = 0; r < rows; ++r)
            Fn::backward_row(n, c.x_data(0) + r * n, static_cast<const T*>(c.y_data() + r * n),
                             static_cast<const T*>(c.gy_data() + r * n), gx + r * n);
    }
};

}  // namespace ctg::ops
