// ctgraph/ops/matmul.hpp: matrix product, row-major, batched over leading dimensions.
//
//   (..., k) x (k, n) -> (..., n)       a weight shared by every row: one GEMM over all rows
//   (..., k) x (k)    -> (...)          a vector: the same with n = 1 (additive attention's w)
//   (..., m, k) x (..., k, n) -> (..., m, n)   both batched, equal leading dimensions: a GEMM per batch
// VJP: dA += dY B^T, dB += A^T dY (per batch), accumulated by the GEMM itself (beta = 1; beta = 0
// where the adjoint is fresh).
#pragma once
#include <string_view>

#include "ctgraph/graph/node.hpp"
#include "ctgraph/kernels/gemm.hpp"
#include "ctgraph/kernels/quant_product.hpp"
#include "ctgraph/op.hpp"

namespace ctg {
namespace ops {
struct matmul_op {
    static constexpr std::string_view name = "matmul";
    static constexpr flop_rule flops = flop_rule::matmul;  // how summaries count it (op.hpp)
    template <class A, class B>
    static consteval bool rows_independent() { return true; }  // row r of A (or batch r) gives row r (see op.hpp)
    static constexpr bool weight_adjoint_is_xt_dy = true;  // for a (K, N) operand 1 (see op.hpp)
    static constexpr bool assigns_adjoints = true;
    static constexpr std::uint32_t bf16_operands = 0b11;  // both: their bf16 shadows, c.xb (see op.hpp)
    static constexpr std::uint32_t weight_operands = 0b10;  // a parameter B: read from its quantised copy under options::weights (see op.hpp)
    static constexpr std::uint32_t bf16_operands_only = 0b11;  // read nowhere but in the products (see op.hpp)
    static constexpr std::uint32_t backward_reads = 0b11;  // a and b, not y (see op.hpp)

    template <class A, class B>
    static consteval bool check() {
        if constexpr (A::rank == 0 || B::rank == 0) {
            return false;
        } else if constexpr (B::rank <= 2) {
            return A::dims[A::rank - 1] == B::dims[0];
        } else {
            if (A::rank != B::rank) return false;
            for (std::size_t i = 0; i + 2 < A::rank; ++i)
                if (!(A::dims[i] == B::dims[i])) return false;
            return A::dims[A::rank - 1] == B::dims[B::rank - 2];
        }
    }
    template <class A, class B>
    static consteval auto dims() {
        if constexpr (B::rank == 1) {
            std::array<dim, A::rank - 1> r{};
            for (std::size_t i = 0; i + 1 < A::rank; ++i) r[i] = A::dims[i];
            return r;
        } else {
            std::array<dim, A::rank> r = A::dims;
            r[A::rank - 1] = B::dims[B::rank - 1];
            return r;
        }
    }

    // Problem sizes: `batches` GEMMs of (M x K) (K x N); strides between batches.
    struct sizes {
        std::size_t batches, M, K, N, sa, sb, sy;
        std::size_t work() const { return 2 * batches * M * N * K; }  // flops of the forward products
    };
    static sizes sizes_of(const rshape& a, const rshape& b) {
        if (b.rank <= 2) {
            const std::size_t K = a.cols(), N = b.rank == 2 ? b.d[1] : 1;
            return {1, a.rows(), K, N, 0, 0, 0};
        }
        const std::size_t M = a[-2], K = a[-1], N = b[-1];
        return {a.size() / (M * K), M, K, N, M * K, K * N, M * N};
    }

    // ONNX: MatMul has NumPy's rule, which covers every accepted shape (a vector operand drops
    // the last axis there as here).
    template <class B>
    static void onnx(B& b) { b.emit_y("MatMul", {b.x(0), b.x(1)}); }

    template <class T>
    static void forward(op_io<T, 2>& c) {
        using ctg::detail::offset_or_null;
        const sizes s = sizes_of(c.x[0].shape, c.x[1].shape);
        const T *a = c.x_data(0), *b = c.x_data(1);
        T* y = c.y_data();
        // Batched products (attention heads) as tasks, a block of batches each.
        kernels::for_items(s.batches, s.work(), kernels::parallel_gemm_min_flops, [&](std::size_t i0, std::size_t i1) {
            for (std::size_t i = i0; i < i1; ++i)
                if (!kernels::quantized_product(c.run.weights, false, s.M, s.N, s.K, offset_or_null(a, i * s.sa), s.K,
                                                offset_or_null(b, i * s.sb), s.N, static_cast<const T*>(nullptr), y + i * s.sy, s.N))
                kernels::gemm(false, false, s.M, s.N, s.K, T(1), offset_or_null(a, i * s.sa), s.K, offset_or_null(b, i * s.sb), s.N,
                              T(0), y + i * s.sy, s.N, nullptr, c.run.bf16, offset_or_null(c.xb[0], i * s.sa),
                              offset_or_null(c.xb[1], i * s.sb));
        });
    }
    template <class T>
    static void backward(op_io<T, 2>& c) {
        using ctg::detail::offset_or_null;
        const sizes s = sizes_of(c.x[0].shape, c.x[1].shape);
        const T *a = c.x_data(0), *b = c.x_data(1), *gy = c.gy_data();
        T *ga = c.gx_data(0), *gb = c.gx_data(1);
        // beta = 0 writes a fresh adjoint; a shared weight's (sb == 0) sums over the batches.
        auto grad_a = [&](std::size_t i) {  // (M x K) += (M x N)(N x K)
            const T beta_a = c.fresh(0) && (i == 0 || s.sa) ? T(0) : T(1);
            kernels::gemm(false, true, s.M, s.K, s.N, T(1), gy + i * s.sy, s.N, offset_or_null(b, i * s.sb), s.N, beta_a,
                          ga + i * s.sa, s.K, nullptr, c.run.bf16, nullptr, offset_or_null(c.xb[1], i * s.sb));
        };
        auto grad_b = [&](std::size_t i) {  // (K x N) += (K x M)(M x N)
            const T beta_b = c.fresh(1) && (i == 0 || s.sb) ? T(0) : T(1);
            kernels::gemm(true, false, s.K, s.N, s.M, T(1), offset_or_null(a, i * s.sa), s.K, gy + i * s.sy, s.N, beta_b,
                          gb + i * s.sb, s.N, nullptr, c.run.bf16, offset_or_null(c.xb[0], i * s.sa));
        };
        auto batches = [&](std::size_t i0, std::size_t i1) {
            for (std::size_t i = i0; i < i1; ++i) {
                if (ga) grad_a(i);
                if (gb) grad_b(i);
            }
        };
        // As tasks only when every batch writes adjoints of its own (no operand broadcast over them).
        if (s.sa && s.sb && s.batches > 1) {
            kernels::for_items(s.batches, 2 * s.work(), kernels::parallel_gemm_min_flops, batches);
            return;
        }
        if (ga && gb && s.batches == 1) {  // the two VJP products as one job (an rnn step's 16 x 128 x 128 ones)
            kernels::gemm_together<T, 2>(
                {kernels::gemm_args<T>{false, true, s.M, s.K, s.N, T(1), gy, s.N, b, s.N, c.fresh(0) ? T(0) : T(1), ga, s.K, nullptr, c.run.bf16, nullptr, c.xb[1]},
                 kernels::gemm_args<T>{true, false, s.K, s.N, s.M, T(1), a, s.K, gy, s.N, c.fresh(1) ? T(0) : T(1), gb, s.N, nullptr, c.run.bf16, c.xb[0]}});
            return;
        }
        if (ga && gb) {  // over batches that share an operand: the two VJPs as a pair
            kernels::gemm_pair(s.work(), [&] { for (std::size_t i = 0; i < s.batches; ++i) grad_a(i); },
                               [&] { for (std::size_t i = 0; i < s.batches; ++i) grad_b(i); });
            return;
        }
        batches(0, s.batches);
    }
};
}  // namespace ops

/// Matrix product (see the file comment for the accepted shapes). Also spelled a * b.
template <expr A, expr B>
constexpr auto matmul(A a, B b) {
    static_assert(with_shapes<any_poison<A, B> || ops::matmul_op::check<typename A::shape, typename B::shape>(),
                              typename A::shape::pretty, typename B::shape::pretty>::value,
                  "ctg::matmul: the last dimension of the left operand must equal the row dimension of the right "
                  "operand (and batched operands need equal leading dimensions)");
    return make_float_node<ops::matmul_op>(a, b);
}
}  // namespace ctg
