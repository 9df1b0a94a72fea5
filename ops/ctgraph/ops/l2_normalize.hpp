// ctgraph/ops/l2_normalize.hpp: each row over the last axis divided by its Euclidean norm,
//   y = x / max(||x||, eps),  eps = 1e-12 (PyTorch's F.normalize), so a zero row stays zero.
// VJP (||x|| > eps): gx += (gy - y <gy, y>) / ||x||; below eps the map is x / eps: gx += gy / eps.
// What cosine-similarity scores are written with: l2_normalize(q) l2_normalize(k)^T.
#pragma once
#include <algorithm>
#include <cmath>

#include "ctgraph/kernels/simd.hpp"
#include "ctgraph/ops/detail/rowwise.hpp"

namespace ctg {
namespace ops {
struct l2_normalize_fn {
    static constexpr std::string_view name = "l2_normalize";
    static constexpr double eps = 1e-12;
    template <class B>  // ONNX: x / max(||x||, eps) over the last axis (detail/rowwise.hpp)
    static void onnx(B& b, const std::string& x, const std::string& y) {
        const std::string norm = b.emit("ReduceL2", {x}, {{"axes", std::vector<long long>{-1}}, {"keepdims", 1}});
        b.emit_to("Div", {x, b.emit("Max", {norm, b.scalar(eps)})}, y);
    }
    template <class T>
    static T norm(std::size_t n, const T* x) {
        return std::max(std::sqrt(kernels::reduce_sum(n, x, x, [](auto a, auto b) { return a * b; })), T(eps));
    }
    template <class T>
    static void forward_row(std::size_t n, const T* x, T* y) {
        const T inv = T(1) / norm(n, x);
        kernels::map(n, y, [inv](auto v) { return v * decltype(v)(inv); }, x);
    }
    template <class T>
    static void backward_row(std::size_t n, const T* x, const T* y, const T* gy, T* gx) {
        const T len = norm(n, x), inv = T(1) / len;
        const T dot = len > T(eps) ? kernels::reduce_sum(n, gy, y, [](auto a, auto b) { return a * b; }) : T(0);
        kernels::map(n, gx, [inv, dot](auto acc, auto yv, auto gyv) {
            using V = decltype(yv);
            return acc + (gyv - yv * V(dot)) * V(inv);
        }, static_cast<const T*>(gx), y, gy);
    }
};
using l2_normalize_op = rowwise_op<l2_normalize_fn>;
}  // namespace ops

/// Each row over the last axis divided by its Euclidean norm (see the file comment).
template <expr A>
constexpr auto l2_normalize(A a) {
    static_assert(with_shapes<any_poison<A> || (A::shape::rank >= 1), typename A::shape::pretty>::value,
                  "ctg::l2_normalize: the operand must have rank 1 or more (it runs over the last axis)");
    return make_float_node<ops::l2_normalize_op>(a);
}
}  // namespace ctg
