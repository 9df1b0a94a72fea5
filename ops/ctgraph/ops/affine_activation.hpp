// ctgraph/ops/affine_activation.hpp: y = f(x W + b), a linear layer and its activation in one node
// (a Transformer FFN's first half).
//
//   affine_gelu(x, W, b), affine_gelu_erf(x, W, b), affine_relu(x, W, b):
//     x (..., in), W (in, out), b (out) -> (..., out): the value of gelu(affine(x, W, b)), ...
//
// Why one node. As two, the pre-activation z = x W + b (gpt-m: 12.6 MB a layer) is written by the
// product and read back by the activation; a mixed-precision program reads it once more to keep
// its bf16 copy for the activation's VJP. In backward, z's adjoint dz (as large) is written by the
// activation's VJP, then read again to round it for the two gradient products and to sum the bias
// gradient. Here forward makes f(z), its bf16 shadow and z's bf16 copy in one pass over z, and
// backward makes dz = dy f'(z) by column blocks straight into bf16 (or T), summing the bias
// gradient in the same pass: in a bf16 program dz never exists in float (cuBLASLt's GELU_AUX_BIAS
// and DGELU_BGRAD epilogues are the same idea on GPUs).
//
// What backward keeps: z, in the op's scratch (op.hpp, scratch_size), as T; rounded to bf16 where
// the program keeps values that VJPs read in bf16 (options::bf16_saved: the fifth argument of
// scratch_size is 3) and the activation's derivative tolerates it (Fn::df_from_bf16_x: GELU), as
// the composed program keeps GELU's input; z's float then lives only while forward runs, in memory
// the engine places for it (op.hpp, forward_scratch_size: in a repeat, the adjoint block), and
// dz only while backward runs, in memory placed beside the adjoints (backward_scratch_size). The
// activation's derivative must come from its input alone (Fn::df_reads_y = false: GELU, GELU erf,
// ReLU).
//
// The same bits as the composed graph (value and every gradient; float, double and bf16; one and
// two threads) where `out` is a multiple of the SIMD width (every real layer): elsewhere the row
// ends fall on the activation's scalar form, which may differ from its SIMD form in the last bit.
// Tested against the composed graph and by finite differences (tests/test_affine_activation.cpp).
#pragma once
#include <algorithm>
#include <array>
#include <string_view>

#include "ctgraph/graph/node.hpp"
#include "ctgraph/kernels/gemm.hpp"
#include "ctgraph/kernels/quant_product.hpp"
#include "ctgraph/kernels/simd.hpp"
#include "ctgraph/op.hpp"
#include "ctgraph/ops/affine.hpp"
#include "ctgraph/ops/detail/unary.hpp"
#include "ctgraph/ops/gelu.hpp"
#include "ctgraph/ops/relu.hpp"

namespace ctg {
namespace ops {
template <class Fn>
struct affine_activation_op : affine_shape_rule {
    static_assert(requires { Fn::df_reads_y; } && !Fn::df_reads_y,
                  "ctg::ops::affine_activation_op: the activation's derivative must come from its input alone");
    static constexpr auto name_chars = [] {
        constexpr std::string_view prefix = "affine_";
        std::array<char, prefix.size() + Fn::name.size()> s{};
        std::copy(prefix.begin(), prefix.end(), s.begin());
        std::copy(Fn::name.begin(), Fn::name.end(), s.begin() + prefix.size());
        return s;
    }();
    static constexpr std::string_view name{name_chars.data(), name_chars.size()};  // "affine_gelu"
    // ONNX: the composed graph, MatMul, Add and the activation's own lowering.
    template <class B>
        requires requires(B& b, const std::string& s) { Fn::onnx(b, s, s); }
    static void onnx(B& b) { Fn::onnx(b, b.emit("Add", {b.emit("MatMul", {b.x(0), b.x(1)}), b.x(2)}), b.y()); }
    static constexpr flop_rule flops = flop_rule::affine_activation;  // as affine, then the activation (op.hpp)
    template <class X, class W, class B>
    static consteval bool rows_independent() { return true; }  // see op.hpp
    static constexpr bool assigns_adjoints = true;
    static constexpr std::uint32_t backward_reads = 0b011 | reads_result;  // x, W and z in the scratch (see op.hpp)
    static constexpr bool vjp_reads_result = false;  // not y itself
    static constexpr std::uint32_t bf16_operands = 0b011;       // x and W (see op.hpp)
    static constexpr std::uint32_t weight_operands = 0b010;  // W: read from its quantised copy under options::weights (see op.hpp)
    static constexpr std::uint32_t bf16_operands_only = 0b011;  // read nowhere but in the products
    static constexpr bool writes_bf16_result = true;            // f(z) rounded in the pass that makes it
    // Whether z may be kept rounded for the VJP (see the file comment).
    static constexpr bool z_in_bf16_allowed = [] {
        if constexpr (requires { Fn::df_from_bf16_x; }) return bool(Fn::df_from_bf16_x); else return false;
    }();

    /// z for backward: in bf16 (two per T) at level 3 (see above), else as T.
    /// (In a forward-only pass z is needed during forward alone, where the engine places op scratch
    /// by lifetime: it is that scratch.)
    static std::size_t scratch_size(const rshape& y, const std::array<rshape, 3>&, bool forward_only, bool, int bf16) {
        return !forward_only && bf16 >= 3 && z_in_bf16_allowed ? (y.size() + 1) / 2 : y.size();
    }
    /// z in float while forward makes it, where backward keeps it in bf16 (level 3, as above): in
    /// a repeat's layers, memory that backward uses for adjoints (op.hpp).
    static std::size_t forward_scratch_size(const rshape& y, const std::array<rshape, 3>&, int bf16) {
        return bf16 >= 3 && z_in_bf16_allowed ? y.size() : 0;
    }
    /// dz while backward runs: in bf16 (two per T) in a program whose products read it rounded
    /// (bf16 level 1 and up); at level 0 as T, which holds either (a bf16 program that keeps no shadows).
    static std::size_t backward_scratch_size(const rshape& y, const std::array<rshape, 3>&, int bf16) {
        return bf16 >= 1 ? (y.size() + 1) / 2 : y.size();
    }
    /// Whether the scratch holds z rounded to bf16: it was sized for that (scratch_size above; a
    /// one-element z is kept as it is either way).
    template <class T>
    static bool z_in_bf16(const op_io<T, 3>& c) {
        return std::is_same_v<T, float> && c.scratch && c.scratch.size() < c.y.size();
    }

    template <class T>
    static void forward(op_io<T, 3>& c) {
        const std::size_t M = c.x[0].shape.rows(), K = c.x[0].shape.cols(), N = c.x[1].shape.d[1];
        const bool z16 = z_in_bf16(c);
        // z: in the scratch when backward keeps it as T, else in memory for this pass alone (the
        // engine's forward scratch where it places one, else the kernels' scratch).
        const bool z_kept = c.scratch && !z16;
        kernels::scratch<T> transient(z_kept ? 0 : M * N, c.transient.ptr, c.transient.size() * sizeof(T));
        T* z = z_kept ? c.scratch.template as<T>() : transient.data();
        if (!kernels::quantized_product(c.run.weights, false, M, N, K, c.x_data(0), K, c.x_data(1), N, c.x_data(2), z, N))
            kernels::gemm(false, false, M, N, K, T(1), c.x_data(0), K, c.x_data(1), N, T(0), z, N, c.x_data(2), c.run.bf16, c.xb[0],
                          c.xb[1]);
        // Where backward keeps z rounded, the value comes from z rounded too, as the VJP's
        // derivative does (and as the composed GELU computes it from its input's shadow there).
        if constexpr (std::is_same_v<T, float>)
            if (z16) return unary_op<Fn>::apply_rounded(M * N, c.y_data(), c.yb, z, nullptr, c.scratch.template as<kernels::bf16_bits>());
        unary_op<Fn>::apply(M * N, c.y_data(), c.yb, static_cast<const T*>(z));
    }

    /// The result's bf16 shadow again, from z as backward keeps it: the bits forward wrote (both
    /// apply f to the same z in the same pieces). A repeat whose layers keep this value in bf16
    /// only, read by products alone, keeps no shadow of it in each layer's frame: it calls this
    /// before the first VJP that reads the value (graph/cell.hpp, cell_frame::remade). gpt-m: the
    /// FFN's activation, 6 MiB a layer, made again by one pass over z16 in each layer's backward.
    static constexpr bool remakes_bf16_result = true;
    template <class T>
    static void remake_bf16_result(op_io<T, 3>& c) {
        if constexpr (std::is_same_v<T, float>) {
            const std::size_t n = c.y.size();
            if (z_in_bf16(c)) unary_op<Fn>::apply_rounded(n, nullptr, c.yb, nullptr, c.scratch.template as<const kernels::bf16_bits>());
            else unary_op<Fn>::apply(n, static_cast<float*>(nullptr), c.yb, c.scratch.template as<const float>());
        }
    }

    template <class T>
    static void backward(op_io<T, 3>& c) {  // reads x, W and z (not y, not the bias): backward_reads
        const std::size_t M = c.x[0].shape.rows(), K = c.x[0].shape.cols(), N = c.x[1].shape.d[1];
        T *gx = c.gx_data(0), *gw = c.gx_data(1), *gb = c.gx_data(2);
        if (!gx && !gw && !gb) return;
        const T* gy = c.gy_data();
        // dz = dy f'(z), row by row in column blocks (kernels::column_sums_by: the bias gradient is
        // its column sums), into bf16 when the products read it rounded, else into T.
        // dz in the memory the engine placed for this VJP (backward_scratch_size), else in the kernels'.
        const bool rounded = std::is_same_v<T, float> && c.run.bf16;
        kernels::scratch<T> dz_memory(rounded ? 0 : M * N, c.transient.ptr, c.transient.size() * sizeof(T));
        kernels::scratch<kernels::bf16_bits> dz16_memory(rounded ? M * N : 0, c.transient.ptr, c.transient.size() * sizeof(T));
        T* const dz = dz_memory.data();
        kernels::bf16_bits* const dz16 = dz16_memory.data();
        const bool z16 = z_in_bf16(c);
        const T* z = c.scratch.template as<const T>();
        const kernels::bf16_bits* zb = c.scratch.template as<const kernels::bf16_bits>();
        auto row = [&](std::size_t r, std::size_t c0, std::size_t n, T* buf) -> const T* {
            T* out = rounded ? buf : dz + r * N + c0;
            const std::size_t at = r * N + c0;
            if (z16) {
                if constexpr (std::is_same_v<T, float>) unary_op<Fn>::vjp_piece(n, out, gy + at, zb + at);
            } else {
                unary_op<Fn>::vjp_piece(n, out, gy + at, z + at);
            }
            return out;
        };
        kernels::column_sums_by<T>(M, N, row, gb, c.fresh(2), rounded ? dz16 : nullptr, rounded);
        // The two products as one job of the pool (kernels::gemm_together), as affine's: dx (M x K)
        // (+)= dz W^T, dW (K x N) (+)= x^T dz; a missing adjoint (nullptr) is skipped.
        const T* dzf = rounded ? nullptr : dz;
        const kernels::bf16_bits* dzb = rounded ? dz16 : nullptr;
        kernels::gemm_together<T, 2>({kernels::gemm_args<T>{false, true, M, K, N, T(1), dzf, N, c.x_data(1), N, c.fresh(0) ? T(0) : T(1), gx, K, nullptr, c.run.bf16, dzb, c.xb[1]},
                                      kernels::gemm_args<T>{true, false, K, N, M, T(1), c.x_data(0), K, dzf, N, c.fresh(1) ? T(0) : T(1), gw, N, nullptr, c.run.bf16, c.xb[0], dzb}});
    }
};
}  // namespace ops

namespace detail {
/// The node of act(affine(x, W, b)), Fn the activation; the shapes as affine's, one error naming
/// the op (its type, with the shapes, in the message's instantiation) where they do not fit.
template <class Fn, expr X, expr W, expr B>
constexpr auto affine_activation(X x, W w, B b) {
    using op = ops::affine_activation_op<Fn>;
    static_assert(with_shapes<any_poison<X, W, B> || op::template check<typename X::shape, typename W::shape, typename B::shape>(),
                              op, typename X::shape::pretty, typename W::shape::pretty, typename B::shape::pretty>::value,
                  "ctg::affine_gelu (affine_gelu_erf, affine_relu): x (..., in) times a weight (in, out) plus a bias "
                  "(out): the weight's rows must equal x's last dimension and the bias its columns");
    return make_float_node<op>(x, w, b);
}
}  // namespace detail

/// gelu(affine(x, W, b)) in one node (GELU's tanh form: GPT-2's FFN), the same bits (see the file
/// comment): the pre-activation never makes a round trip through memory in float.
template <expr X, expr W, expr B>
constexpr auto affine_gelu(X x, W w, B b) { return detail::affine_activation<ops::gelu_fn>(x, w, b); }
/// gelu_erf(affine(x, W, b)) in one node (GELU's exact form: PyTorch's nn.GELU(), BERT).
template <expr X, expr W, expr B>
constexpr auto affine_gelu_erf(X x, W w, B b) { return detail::affine_activation<ops::gelu_erf_fn>(x, w, b); }
/// relu(affine(x, W, b)) in one node.
template <expr X, expr W, expr B>
constexpr auto affine_relu(X x, W w, B b) { return detail::affine_activation<ops::relu_fn>(x, w, b); }
}  // namespace ctg
