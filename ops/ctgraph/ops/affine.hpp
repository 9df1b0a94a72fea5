// ctgraph/ops/affine.hpp: y = x W + b over the last axis, one node (a linear layer).
//
//   affine(x, W, b): x (..., in), W (in, out), b (out) -> (..., out)
//
// The same value as matmul(x, W) + b, in one node instead of two: gemm() adds the bias as the
// register kernel stores C (or, on OpenBLAS's path, writes it into C for the product to accumulate
// onto); one output tensor and one adjoint are kept instead of two (a Transformer layer's four
// linear layers: about a fifth of its activation memory).
// VJP: dx += dY W^T (beta = 0 when fresh), dW += x^T dY, db += column sums of dY (on oneDNN's
// bf16 engine, summed in the pass that rounds dY for the two products).
// Tested against the composed matmul + add and by finite differences (tests/test_gradcheck_structural.cpp).
#pragma once
#include <algorithm>
#include <string_view>

#include "ctgraph/graph/node.hpp"
#include "ctgraph/kernels/gemm.hpp"
#include "ctgraph/kernels/quant_product.hpp"
#include "ctgraph/kernels/simd.hpp"
#include "ctgraph/op.hpp"

namespace ctg {
namespace ops {
/// x (..., in), W (in, out), b (out) -> (..., out): the shape rule of affine and of affine_gelu & co.
struct affine_shape_rule {
    template <class X, class W, class B>
    static consteval bool check() {
        return X::rank >= 1 && W::rank == 2 && B::rank == 1 && X::dims[X::rank - 1] == W::dims[0] &&
               B::dims[0] == W::dims[1];
    }
    template <class X, class W, class B>
    static consteval auto dims() {
        std::array<dim, X::rank> r = X::dims;
        r[X::rank - 1] = W::dims[1];
        return r;
    }
};

struct affine_op : affine_shape_rule {
    static constexpr std::string_view name = "affine";
    // ONNX: MatMul then Add (ONNX Runtime fuses the pair into one kernel).
    template <class B>
    static void onnx(B& b) { b.emit_y("Add", {b.emit("MatMul", {b.x(0), b.x(1)}), b.x(2)}); }
    static constexpr flop_rule flops = flop_rule::affine;  // how summaries count it (op.hpp)
    template <class X, class W, class B>
    static consteval bool rows_independent() { return true; }  // see op.hpp
    static constexpr bool weight_adjoint_is_xt_dy = true;  // see op.hpp
    static constexpr bool assigns_adjoints = true;
    static constexpr std::uint32_t backward_reads = 0b011;  // x and W (see op.hpp)
    static constexpr std::uint32_t bf16_operands = 0b011;   // x and W: their bf16 shadows, c.xb (see op.hpp)
    static constexpr std::uint32_t bf16_operands_only = 0b011;  // read nowhere but in the products (see op.hpp)
    static constexpr std::uint32_t weight_operands = 0b010;  // W: read from its quantised copy under options::weights (see op.hpp)

    template <class T>
    static void forward(op_io<T, 3>& c) {
        const std::size_t M = c.x[0].shape.rows(), K = c.x[0].shape.cols(), N = c.x[1].shape.d[1];
        const T *x = c.x_data(0), *w = c.x_data(1), *b = c.x_data(2);
        if (kernels::quantized_product(c.run.weights, false, M, N, K, x, K, w, N, b, c.y_data(), N)) return;
        kernels::gemm(false, false, M, N, K, T(1), x, K, w, N, T(0), c.y_data(), N, b, c.run.bf16, c.xb[0], c.xb[1]);
    }
    template <class T>
    static void backward(op_io<T, 3>& c) {  // reads x and W (not y, not the bias): backward_reads
        const std::size_t M = c.x[0].shape.rows(), K = c.x[0].shape.cols(), N = c.x[1].shape.d[1];
        const T *x = c.x_data(0), *w = c.x_data(1), *gy = c.gy_data();
        T *gx = c.gx_data(0), *gw = c.gx_data(1);
        T* gb = c.gx_data(2);
        // oneDNN's bf16 products read dY rounded, converted once for both (by gemm_together, as
        // for any product's two VJPs); with a bias, converted here instead, with the bias gradient
        // summed in the same pass (kernels::column_sums), so dY is read from memory once instead
        // of twice (gpt-m: about 9 ms a step fewer on a Xeon of model 207, 0.7 %). The emulation
        // rounds dY by blocks as it multiplies, from cache; a whole converted dY there would add
        // its size to the peak (gpt-m: 9 MiB) for no gain.
        const bool convert_dy = std::is_same_v<T, float> && c.run.bf16 && gb && (gx || gw) &&
                                kernels::get_bf16_engine() == kernels::bf16_engine::onednn;
        const kernels::bf16_bits* gy16 = nullptr;
        kernels::scratch<kernels::bf16_bits> converted(convert_dy ? M * N : 0);
        if constexpr (std::is_same_v<T, float>)
            if (convert_dy) {
                kernels::column_sums(M, N, gy, N, gb, c.fresh(2), converted.data());
                gy16 = converted.data(), gb = nullptr;
            }
        // The two products as one job of the pool (kernels::gemm_together): dx (M x K) (+)= dY W^T,
        // dW (K x N) (+)= x^T dY; a missing adjoint (nullptr) is skipped.
        kernels::gemm_together<T, 2>({kernels::gemm_args<T>{false, true, M, K, N, T(1), gy, N, w, N, c.fresh(0) ? T(0) : T(1), gx, K, nullptr, c.run.bf16, gy16, c.xb[1]},
                                      kernels::gemm_args<T>{true, false, K, N, M, T(1), x, K, gy, N, c.fresh(1) ? T(0) : T(1), gw, N, nullptr, c.run.bf16, c.xb[0], gy16}});
        if (gb) kernels::column_sums(M, N, gy, N, gb, c.fresh(2));  // (the first row assigns when fresh)
    }
};
}  // namespace ops

/// x W + b over the last axis (see the file comment): the node of a linear layer.
template <expr X, expr W, expr B>
constexpr auto affine(X x, W w, B b) {
    static_assert(with_shapes<any_poison<X, W, B> ||
                                  ops::affine_op::check<typename X::shape, typename W::shape, typename B::shape>(),
                              typename X::shape::pretty, typename W::shape::pretty, typename B::shape::pretty>::value,
                  "ctg::affine: x (..., in) times a weight (in, out) plus a bias (out): the weight's rows must equal "
                  "x's last dimension and the bias its columns");
    return make_float_node<ops::affine_op>(x, w, b);
}
}  // namespace ctg
