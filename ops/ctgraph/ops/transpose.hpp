// ctgraph/ops/transpose.hpp: swaps the last two axes, (..., m, n) -> (..., n, m). The VJP is the
// transpose of the adjoint, added.
#pragma once
#include <string_view>
#include <utility>
#include <vector>

#include "ctgraph/graph/node.hpp"
#include "ctgraph/kernels/register_gemm.hpp"
#include "ctgraph/op.hpp"

namespace ctg {
namespace ops {
struct transpose_op {
    static constexpr std::string_view name = "transpose";
    template <class A>
    static consteval bool check() { return A::rank >= 2; }
    template <class A>
    static consteval auto dims() {
        auto r = A::dims;
        r[A::rank - 1] = A::dims[A::rank - 2];
        r[A::rank - 2] = A::dims[A::rank - 1];
        return r;
    }
    // ONNX: Transpose with the identity permutation but for the last two axes, swapped.
    template <class B>
    static void onnx(B& b) {
        const std::size_t r = b.xshape(0).rank;
        std::vector<long long> perm;
        for (std::size_t a = 0; a < r; ++a) perm.push_back((long long)a);
        std::swap(perm[r - 1], perm[r - 2]);
        b.emit_y("Transpose", {b.x(0)}, {{"perm", perm}});
    }
    // dst (n x m) = or += src (m x n), per batch (kernels::transpose).
    template <class T, bool Accumulate>
    static void transpose(const rshape& in, const T* src, T* dst) {
        const std::size_t m = in[-2], n = in[-1], batches = in.size() / (m * n);
        for (std::size_t b = 0; b < batches; ++b)
            kernels::transpose(m, n, src + b * m * n, n, dst + b * m * n, m, Accumulate);
    }
    template <class T>
    static void forward(op_io<T, 1>& c) { transpose<T, false>(c.x[0].shape, c.x_data(0), c.y_data()); }
    template <class T>
    static void backward(op_io<T, 1>& c) {
        if (T* gx = c.gx_data(0)) transpose<T, true>(c.y.shape, c.gy_data(), gx);
    }
};
}  // namespace ops

/// Swaps the last two axes.
template <expr A>
constexpr auto transpose(A a) {
    static_assert(with_shapes<any_poison<A> || (A::shape::rank >= 2), typename A::shape::pretty>::value,
                  "ctg::transpose: the operand must have rank 2 or more");
    return make_float_node<ops::transpose_op>(a);
}
}  // namespace ctg
