// ctgraph/ops/matmul_transposed.hpp: the product by a transposed matrix, a b^T.
//
//   (..., K) x (N, K) -> (..., N)     one GEMM over all rows with b read transposed (no copy)
//
// What a weight stored (out, in) needs, above all an output head tied to a token embedding (V, D):
// logits = h E^T. The same as matmul(a, transpose(b)) without the (K, N) copy of b in every forward
// pass and its adjoint (GPT-2 small: 2 x 154 MB in float, and the copy's time in every decoding step).
// VJP: da = dy b, db = dy^T a (rows flattened), each written by the GEMM itself (beta = 0 where the
// adjoint is fresh, 1 where it adds to another use's: the embedding's rows of a tied table).
#pragma once
#include <string_view>

#include "ctgraph/graph/node.hpp"
#include "ctgraph/kernels/gemm.hpp"
#include "ctgraph/kernels/quant_product.hpp"
#include "ctgraph/op.hpp"

namespace ctg {
namespace ops {
struct matmul_transposed_op {
    static constexpr std::string_view name = "matmul_transposed";
    // ONNX: a 2-D product is Gemm with transB (no transposed copy); otherwise MatMul by the
    // transpose, which ONNX Runtime folds once when b is an initializer (a tied head).
    template <class B>
    static void onnx(B& b) {
        if (b.xshape(0).rank == 2) b.emit_y("Gemm", {b.x(0), b.x(1)}, {{"transB", 1}});
        else b.emit_y("MatMul", {b.x(0), b.emit("Transpose", {b.x(1)}, {{"perm", std::vector<long long>{1, 0}}})});
    }
    static constexpr flop_rule flops = flop_rule::matmul_transposed;  // how summaries count it (op.hpp)
    template <class A, class B>
    static consteval bool rows_independent() { return true; }  // row r of a gives row r (see op.hpp)
    static constexpr bool assigns_adjoints = true;
    static constexpr std::uint32_t bf16_operands = 0b11;  // both: their bf16 shadows, c.xb (see op.hpp)
    static constexpr std::uint32_t weight_operands = 0b10;  // a parameter B (a tied head's embedding), read as B^T: quantised
    static constexpr std::uint32_t transposed_weight_operands = 0b10;  // copy under options::weights (see op.hpp)
    static constexpr std::uint32_t bf16_operands_only = 0b11;  // read nowhere but in the products (see op.hpp)

    template <class A, class B>
    static consteval bool check() {
        if constexpr (A::rank == 0 || B::rank != 2) return false;
        else return A::dims[A::rank - 1] == B::dims[1];
    }
    template <class A, class B>
    static consteval auto dims() {
        std::array<dim, A::rank> r = A::dims;
        r[A::rank - 1] = B::dims[0];
        return r;
    }

    template <class T>
    static void forward(op_io<T, 2>& c) {
        const std::size_t M = c.x[0].shape.rows(), K = c.x[0].shape.cols(), N = c.x[1].shape[0];
        if (kernels::quantized_product(c.run.weights, true, M, N, K, c.x_data(0), K, c.x_data(1), K, static_cast<const T*>(nullptr), c.y_data(), N)) return;
        kernels::gemm(false, true, M, N, K, T(1), c.x_data(0), K, c.x_data(1), K, T(0), c.y_data(), N, nullptr,
                      c.run.bf16, c.xb[0], c.xb[1]);
    }
    template <class T>
    static void backward(op_io<T, 2>& c) {
        const std::size_t M = c.x[0].shape.rows(), K = c.x[0].shape.cols(), N = c.x[1].shape[0];
        const T *a = c.x_data(0), *b = c.x_data(1), *gy = c.gy_data();
        T *ga = c.gx_data(0), *gb = c.gx_data(1);
        // da (M x K) = dy (M x N) b (N x K);  db (N x K) = dy^T (N x M) a (M x K).
        const kernels::gemm_args<T> da{false, false, M, K, N, T(1), gy, N, b, K, c.fresh(0) ? T(0) : T(1), ga, K, nullptr, c.run.bf16, nullptr, c.xb[1]};
        const kernels::gemm_args<T> db{true, false, N, K, M, T(1), gy, N, a, K, c.fresh(1) ? T(0) : T(1), gb, K, nullptr, c.run.bf16, nullptr, c.xb[0]};
        if (ga && gb) {
            kernels::gemm_together<T, 2>({da, db});
            return;
        }
        for (const auto& g : {da, db})
            if (g.C) kernels::gemm(g.trans_a, g.trans_b, g.M, g.N, g.K, g.alpha, g.A, g.lda, g.B, g.ldb, g.beta, g.C, g.ldc,
                                   nullptr, g.bf16, g.A16, g.B16);
    }
};
}  // namespace ops

/// a b^T: a (..., K) times b (N, K) transposed -> (..., N), without copying b (a weight stored
/// (out, in), such as a token embedding used as the output head).
template <expr A, expr B>
constexpr auto matmul_transposed(A a, B b) {
    static_assert(with_shapes<any_poison<A, B> || ops::matmul_transposed_op::check<typename A::shape, typename B::shape>(),
                              typename A::shape::pretty, typename B::shape::pretty>::value,
                  "ctg::matmul_transposed: the right operand must be a matrix (N, K) whose last dimension equals "
                  "the left operand's last dimension");
    return make_float_node<ops::matmul_transposed_op>(a, b);
}
}  // namespace ctg
