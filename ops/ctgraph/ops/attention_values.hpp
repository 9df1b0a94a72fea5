// ctgraph/ops/attention_values.hpp: attention's value product under a mask,
//   O = P V,   P (..., n, m) the masked weights, V (..., m, d_v) -> O (..., n, d_v)
// computed only on the blocks of each P matrix whose rows may see their keys
// (masked_rows::row_blocks, as ops/scaled_dot_weights.hpp computes P): P is 0 outside them, so
// the sum over the keys needs only their columns. ctg::attention() builds it for every masked
// attention (matmul(P, V) without a mask).
// VJP, per matrix, on the same blocks:
//   gP  = gO V^T   by row block; outside the blocks gP is written 0 (fresh) or left as it is,
//                  which P's producer never reads: its softmax VJP reads gP only where a row may
//                  see (elsewhere P is 0 whatever the scores, and so is the scores' adjoint)
//   gV += P^T gO   by column block (keys no row sees: 0 when fresh)
// So the op is matmul(P, V) for any P that is 0 where the mask hides a key, and its adjoints are
// matmul's wherever the producer of such a P reads them.
// Heads > 0: P (B, Heads, n, m) and V (B, m, Heads d_v), the heads side by side in V's rows -> O
// (B, n, Heads d_v), the heads side by side again: merge_heads(P split_heads(V)) without the
// copies of the split and the merge (head_rows in detail/score_blocks.hpp). Without a mask too
// (no_mask: one block per matrix).
#pragma once
#include <algorithm>
#include <string>
#include <string_view>

#include "ctgraph/graph/node.hpp"
#include "ctgraph/kernels/gemm.hpp"
#include "ctgraph/op.hpp"
#include "ctgraph/ops/masked_softmax.hpp"
#include "ctgraph/ops/matmul.hpp"

namespace ctg {
namespace ops {
/// The sizes of O = P V: `matrices` products of (n x m)(m x dv).
struct attention_values_sizes {
    std::size_t matrices, n, m, dv;
    std::size_t work() const { return 2 * matrices * n * m * dv; }  // flops of the whole products
    static attention_values_sizes of(const rshape& p, const rshape& v, std::size_t heads) {
        return {p.rows() / p[-2], p[-2], p[-1], v[-1] / (heads > 0 ? heads : 1)};
    }
};

// The op's forward and VJP, templated on the mask only (the head count is a runtime number): one
// body for every model's heads, compiled once in the library for the common masks
// (CTG_ATTENTION_VALUES_INSTANCES below). Not inline, so that an `extern template` is not
// instantiated anyway to be inlined.
template <class Mask, class T, std::size_t K>
void attention_values_forward(op_io<T, K>& io, std::size_t heads) {
    using ctg::detail::offset_or_null;
    const attention_values_sizes s = attention_values_sizes::of(io.x[0].shape, io.x[1].shape, heads);
    const masked_rows<Mask, T, K> rows(io, io.x[0].shape);
    const T *p = io.x_data(0), *v = io.x_data(1);
    T* o = io.y_data();
    const std::size_t nm = s.n * s.m;
    const head_rows at{s.dv, heads};
    // One task per block of (batch, head) matrices, as matmul's batches.
    kernels::for_items(s.matrices, s.work(), kernels::parallel_gemm_min_flops, [&](std::size_t f0, std::size_t f1) {
        const score_blocks first = rows.row_blocks(f0);
        for (std::size_t f = f0; f < f1; ++f)  // (n x dv) = (n x m)(m x dv); rows that see nothing: 0
            block_sum(sum_over::keys, rows.row_blocks(f, f0, first), s.m, s.dv, T(1), offset_or_null(p, f * nm),
                      offset_or_null(io.xb[0], f * nm), offset_or_null(v, at.offset(f, s.m)),
                      offset_or_null(io.xb[1], at.offset(f, s.m)), at.ld(), T(0), o + at.offset(f, s.n), at.ld(), io.run.bf16);
    });
}
template <class Mask, class T, std::size_t K>
void attention_values_backward(op_io<T, K>& io, std::size_t heads) {
    using ctg::detail::offset_or_null;
    T *gp = io.gx_data(0), *gv = io.gx_data(1);
    if (!gp && !gv) return;
    const attention_values_sizes s = attention_values_sizes::of(io.x[0].shape, io.x[1].shape, heads);
    const masked_rows<Mask, T, K> rows(io, io.x[0].shape);
    const T *p = io.x_data(0), *v = io.x_data(1), *go = io.gy_data();
    const std::size_t nm = s.n * s.m;
    const head_rows at{s.dv, heads};
    kernels::for_items(s.matrices, 2 * s.work(), kernels::parallel_gemm_min_flops, [&](std::size_t f0, std::size_t f1) {
        const score_blocks first = rows.row_blocks(f0), first_cols = rows.column_blocks(first);
        for (std::size_t f = f0; f < f1; ++f) {
            const score_blocks parts = rows.row_blocks(f, f0, first);
            const T* gof = go + at.offset(f, s.n);
            const std::size_t vf = at.offset(f, s.m);
            if (gp) {  // (n x m) = or += (n x dv)(dv x m) inside the blocks
                if (io.fresh(0))  // a fresh adjoint is written whole: 0 beside each block
                    for (std::size_t b = 0; b < parts.count; ++b)
                        for (std::size_t i = parts.at[b].r0; i < parts.at[b].r1; ++i) {
                            T* row = gp + f * nm + i * s.m;
                            std::fill(row, row + parts.at[b].c0, T(0));
                            std::fill(row + parts.at[b].c1, row + s.m, T(0));
                        }
                block_scores(parts, s.m, s.dv, T(1), gof, nullptr, at.ld(), offset_or_null(v, vf), offset_or_null(io.xb[1], vf),
                             at.ld(), io.fresh(0) ? T(0) : T(1), gp + f * nm, io.run.bf16);
            }
            if (gv)  // (m x dv) = or += (m x n)(n x dv), by column block
                block_sum(sum_over::queries, rows.column_blocks(f, f0, first_cols, parts), s.m, s.dv, T(1), offset_or_null(p, f * nm),
                          offset_or_null(io.xb[0], f * nm), gof, nullptr, at.ld(), io.fresh(1) ? T(0) : T(1), gv + vf, at.ld(),
                          io.run.bf16);
        }
    });
}

template <class Mask, int Heads = 0>
struct attention_values_op {
    static constexpr std::string_view name = "attention_values";
    // ONNX: MatMul of P (0 where the mask hides a key) by V, its heads split and merged again by
    // Reshape and Transpose when they sit side by side in V's rows.
    template <class B>
    static void onnx(B& b) {
        if constexpr (Heads > 0) {
            const long long dv = b.xshape(1)[-1].n / Heads;
            const std::string v = b.emit("Transpose", {b.emit("Reshape", {b.x(1), b.ints({0, 0, Heads, dv})})},
                                         {{"perm", std::vector<long long>{0, 2, 1, 3}}});
            const std::string o = b.emit("Transpose", {b.emit("MatMul", {b.x(0), v})}, {{"perm", std::vector<long long>{0, 2, 1, 3}}});
            b.emit_y("Reshape", {o, b.ints({0, 0, Heads * dv})});
        } else {
            b.emit_y("MatMul", {b.x(0), b.x(1)});
        }
    }
    // how summaries count it (op.hpp): the whole P V
    static constexpr flop_rule flops = Heads > 0 ? flop_rule::head_values : flop_rule::matmul;
    static constexpr bool assigns_adjoints = true;
    static constexpr std::uint32_t bf16_operands = 0b11;  // P and V: their bf16 shadows, io.xb (see op.hpp)
    static constexpr std::uint32_t bf16_operands_only = 0b11;  // read nowhere but in the products (see op.hpp)
    static constexpr std::uint32_t backward_reads = 0b11;  // P and V, not O (see op.hpp)

    // Its shapes are matmul's for batched operands: (..., n, m) x (..., m, d_v) -> (..., n, d_v).
    template <class P, class V, class... Ops>
    static consteval bool check() {
        if constexpr (Heads > 0)  // (B, Heads, n, m) and (B, m, Heads d_v)
            return P::rank == 4 && V::rank == 3 && P::dims[0] == V::dims[0] && P::dims[1] == dim(Heads) &&
                   P::dims[3] == V::dims[1] && V::dims[2].is_static() && V::dims[2].n % Heads == 0;
        else if constexpr (P::rank < 2 || P::rank != V::rank) return false;
        else return matmul_op::check<P, V>();
    }
    template <class P, class V, class... Ops>
    static consteval auto dims() {
        if constexpr (Heads > 0) return std::array<dim, 3>{P::dims[0], P::dims[2], V::dims[2]};
        else return matmul_op::dims<P, V>();
    }

    template <class T, std::size_t K>
    static void forward(op_io<T, K>& io) { attention_values_forward<Mask>(io, std::size_t(Heads)); }
    template <class T, std::size_t K>
    static void backward(op_io<T, K>& io) { attention_values_backward<Mask>(io, std::size_t(Heads)); }
    static std::string describe() {
        return "mask " + Mask::describe() + (Heads > 0 ? ", " + std::to_string(Heads) + " heads side by side" : std::string());
    }
};
/// The kernels compiled once (include/ctgraph/compiled.cpp) for float and double, without a mask
/// and causal; declared `extern template` where CTG_SEPARATE_COMPILATION is defined.
#define CTG_ATTENTION_VALUES_INSTANCES(how, T) \
    CTG_ATTENTION_VALUES_INSTANCE(how, no_mask, T) CTG_ATTENTION_VALUES_INSTANCE(how, causal, T)
#define CTG_ATTENTION_VALUES_INSTANCE(how, Mask, T)                                               \
    how void attention_values_forward<Mask, T, 2>(op_io<T, 2>&, std::size_t);                    \
    how void attention_values_backward<Mask, T, 2>(op_io<T, 2>&, std::size_t);
#if defined(CTG_SEPARATE_COMPILATION)
CTG_ATTENTION_VALUES_INSTANCES(extern template, float)
CTG_ATTENTION_VALUES_INSTANCES(extern template, double)
#endif
}  // namespace ops

namespace detail {
/// O = P V for attention weights P under `Mask` (ctg::attention builds it; see the file comment).
template <class Mask, int Heads = 0, class P, class V, class... Ops>
constexpr auto make_attention_values(P p, V v, tlist<Ops...>) {
    using op = ops::attention_values_op<Mask, Heads>;
    if constexpr (any_poison<P, V, Ops...>) {
        return poison{};
    } else {
        static_assert(op::template check<typename P::shape, typename V::shape>(),
                      "ctg::attention: the weights (..., n, m) and the values (..., m, d_v) need the same leading "
                      "dimensions and the same m");
        return make_node<op>(p, v, Ops{}...);
    }
}
}  // namespace detail
}  // namespace ctg
