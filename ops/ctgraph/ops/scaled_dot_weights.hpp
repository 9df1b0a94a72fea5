// ctgraph/ops/scaled_dot_weights.hpp: fused attention weights for (scaled) dot-product scores,
//   P = masked_softmax(c Q K^T),   Q (..., n, d), K (..., m, d) -> P (..., n, m)
// with c = 1/sqrt(d_k) (scaled dot) or 1 (dot), and a mask from ops/masks.hpp. Equal to the
// composed masked_softmax(scale<c>(matmul(Q, transpose(K))), mask), but the scores are never kept:
// they are written into P's buffer and turned into P in place, so forward keeps only the n x m
// probabilities for backward (the composed graph keeps S and P).
// VJP, per score matrix, from gP (the adjoint of P, gO V^T from the value product that follows, ops/attention_values.hpp):
//   gS = P * (gP - rowsum(gP * P))        (in op scratch: one n x m matrix, reused)
//   gQ += c gS K,   gK += c gS^T Q
// The products run only on the blocks of each matrix whose rows may see their keys
// (masked_rows::row_blocks): a causal matrix of 256 rows costs four row blocks of 64 rows times the
// keys up to each block's last, about 5/8 of the whole; gK sums over the rows by column blocks.
// In a mixed-precision program P may be kept in bf16 only (options::bf16_saved): forward then writes
// P's bf16 shadow a matrix at a time from its thread's scratch and keeps no float P at all, and the
// VJP reads P rounded (the value product's VJP reads that shadow anyway).
// Heads > 0: Q (B, n, Heads d) and K (B, m, Heads d) hold the heads side by side in their rows (a
// projection's output, not split: head j is features j d .. (j + 1) d - 1) -> P (B, Heads, n, m),
// as split_heads then the op with Heads = 0 would give, without the split's copies (nn's
// multi-head attention; head_rows in detail/score_blocks.hpp).
#pragma once
#include <string>
#include <string_view>

#include "ctgraph/graph/node.hpp"
#include "ctgraph/kernels/gemm.hpp"
#include "ctgraph/op.hpp"
#include "ctgraph/ops/masked_softmax.hpp"

namespace ctg {
namespace ops {
/// The sizes of S = c Q K^T: `matrices` products of (n x d)(d x m).
struct scaled_dot_sizes {
    std::size_t matrices, n, m, d;
    std::size_t work() const { return 2 * matrices * n * m * d; }  // flops of the products
    static scaled_dot_sizes of(const rshape& q, const rshape& k, std::size_t heads) {
        if (heads > 0) return {q.d[0] * heads, q[-2], k[-2], q[-1] / heads};
        return {q.rows() / q[-2], q[-2], k[-2], q[-1]};
    }
};

// The op's forward and VJP, templated on the mask only (the scale and the head count are runtime
// numbers): one body for every model, compiled once in the library for the common masks
// (CTG_SCALED_DOT_WEIGHTS_INSTANCES below). Not inline, so that an `extern template` is not
// instantiated anyway to be inlined.
template <class Mask, class T, std::size_t K>
void scaled_dot_weights_forward(op_io<T, K>& io, double c, std::size_t heads) {
    using ctg::detail::offset_or_null;
    const scaled_dot_sizes s = scaled_dot_sizes::of(io.x[0].shape, io.x[1].shape, heads);
    const masked_rows<Mask, T, K> rows(io, io.y.shape);
    Mask::validate(rows.args);
    const T *q = io.x_data(0), *k = io.x_data(1);
    T* p = io.y_data();  // null: P is kept as its bf16 shadow alone (io.yb)
    const std::size_t nm = s.n * s.m;
    const head_rows at{s.d, heads};
    // One task per block of (batch, head) matrices: their products are too small to split well.
    kernels::for_items(s.matrices, s.work(), kernels::parallel_gemm_min_flops, [&](std::size_t f0, std::size_t f1) {
        kernels::scratch<T> own(p ? 0 : nm);  // one matrix of P, when only its shadow is kept
        const score_blocks first = rows.row_blocks(f0);  // (no mask: one product of the whole matrix)
        for (std::size_t f = f0; f < f1; ++f) {
            T* pf = p ? p + f * nm : own.data();
            const score_blocks parts = rows.row_blocks(f, f0, first);
            // the scores the mask leaves visible
            const std::size_t qf = at.offset(f, s.n), kf = at.offset(f, s.m);
            block_scores(parts, s.m, s.d, T(c), offset_or_null(q, qf), offset_or_null(io.xb[0], qf), at.ld(), offset_or_null(k, kf),
                         offset_or_null(io.xb[1], kf), at.ld(), T(0), pf, io.run.bf16);
            for (std::size_t i = 0; i < s.n; ++i) rows.forward_row(f * s.n + i, pf + i * s.m, pf + i * s.m);
            if constexpr (std::is_same_v<T, float>)  // the shadow, while the matrix is in cache
                if (io.yb) kernels::pack_bf16(false, 1, nm, pf, nm, io.yb + f * nm);
        }
    });
}
template <class Mask, class T, std::size_t K>
void scaled_dot_weights_backward(op_io<T, K>& io, double c, std::size_t heads) {
    using ctg::detail::offset_or_null;
    T *gq = io.gx_data(0), *gk = io.gx_data(1);
    if (!gq && !gk) return;
    const scaled_dot_sizes s = scaled_dot_sizes::of(io.x[0].shape, io.x[1].shape, heads);
    const masked_rows<Mask, T, K> rows(io, io.y.shape);
    const T *q = io.x_data(0), *k = io.x_data(1), *p = io.y_data(), *gp = io.gy_data();
    const std::size_t nm = s.n * s.m;
    const head_rows at{s.d, heads};
    // gS of one matrix at a time: the op's scratch on one thread; on the pool, each block of
    // matrices uses its thread's own buffer (kept: allocated once per thread and size).
    kernels::for_items(s.matrices, s.work(), kernels::parallel_gemm_min_flops, [&](std::size_t f0, std::size_t f1) {
        const bool whole = f0 == 0 && f1 == s.matrices;
        kernels::scratch<T> own(whole ? 0 : nm), rounded(p ? 0 : nm);  // (rounded: P read from its shadow)
        T* gs = whole ? io.scratch.template as<T>() : own.data();
        const score_blocks first = rows.row_blocks(f0), first_cols = rows.column_blocks(first);
        for (std::size_t f = f0; f < f1; ++f) {
            const std::size_t off = f * nm;
            const T* pf = p ? p + off : rounded.data();
            if constexpr (std::is_same_v<T, float>)
                if (!p) kernels::pack_bf16(false, 1, nm, io.yb + off, nm, rounded.data());
            for (std::size_t i = 0; i < s.n; ++i)  // gS written whole (fresh): no clearing pass
                rows.backward_row(f * s.n + i, pf + i * s.m, gp + off + i * s.m, gs + i * s.m, true);
            // gS is 0 outside the blocks forward computed: the products read only inside them.
            const score_blocks parts = rows.row_blocks(f, f0, first);
            const std::size_t qf = at.offset(f, s.n), kf = at.offset(f, s.m);
            if (gq)  // (n x d) += c (n x m)(m x d)
                block_sum(sum_over::keys, parts, s.m, s.d, T(c), gs, nullptr, offset_or_null(k, kf), offset_or_null(io.xb[1], kf),
                          at.ld(), io.fresh(0) ? T(0) : T(1), gq + qf, at.ld(), io.run.bf16);
            if (gk)  // (m x d) += c (m x n)(n x d)
                block_sum(sum_over::queries, rows.column_blocks(f, f0, first_cols, parts), s.m, s.d, T(c), gs, nullptr,
                          offset_or_null(q, qf), offset_or_null(io.xb[0], qf), at.ld(), io.fresh(1) ? T(0) : T(1), gk + kf, at.ld(),
                          io.run.bf16);
        }
    });
}

template <cval Scale, class Mask, int Heads = 0>
struct scaled_dot_weights_op {
    static constexpr std::string_view name = "scaled_dot_weights";
    static constexpr flop_rule flops = flop_rule::scaled_dot;  // how summaries count it (op.hpp)
    static constexpr double c = Scale.value();
    // ONNX: S = c Q K^T (heads split from the rows by Reshape and Transpose), then the masked
    // softmax (masked_softmax_onnx).
    template <class B>
    static void onnx(B& b) {
        std::string q = b.x(0), k;
        std::size_t rank = b.xshape(0).rank;
        if constexpr (Heads > 0) {
            const long long d = b.xshape(0)[-1].n / Heads;
            const std::string split = b.ints({0, 0, Heads, d});
            q = b.emit("Transpose", {b.emit("Reshape", {q, split})}, {{"perm", std::vector<long long>{0, 2, 1, 3}}});
            k = b.emit("Transpose", {b.emit("Reshape", {b.x(1), split})}, {{"perm", std::vector<long long>{0, 2, 3, 1}}});
            rank = 4;
        } else {
            std::vector<long long> perm;
            for (std::size_t a = 0; a < rank; ++a) perm.push_back((long long)a);
            std::swap(perm[rank - 1], perm[rank - 2]);
            k = b.emit("Transpose", {b.x(1)}, {{"perm", perm}});
        }
        std::string s = b.emit("MatMul", {q, k});
        if (c != 1.0) s = b.emit("Mul", {s, b.scalar(c)});
        masked_softmax_onnx<Mask>(b, s, rank, 2);
    }
    static constexpr bool assigns_adjoints = true;
    static constexpr std::uint32_t bf16_operands = 0b11;  // q and k: their bf16 shadows, io.xb (see op.hpp)
    static constexpr std::uint32_t bf16_operands_only = 0b11;  // read nowhere but in the products (see op.hpp)
    static constexpr bool writes_bf16_result = true;             // P's shadow, a matrix at a time (see op.hpp)
    // The VJP may read P rounded, from its shadow (options::bf16_saved): gS = P (gP - <gP, P>) then
    // carries P's rounding (relative 2^-9), as gP carries the value product's operands'.
    static constexpr std::uint32_t vjp_reads_bf16 = reads_result;

    template <class Q, class K, class... Ops>
    static consteval bool check() {
        if constexpr (Q::rank < 2 || Q::rank != K::rank) {
            return false;
        } else if constexpr (Heads > 0) {  // (B, n, Heads d) and (B, m, Heads d)
            return Q::rank == 3 && Q::dims[0] == K::dims[0] && Q::dims[2] == K::dims[2] && Q::dims[2].is_static() &&
                   Q::dims[2].n % Heads == 0;
        } else {
            for (std::size_t i = 0; i + 2 < Q::rank; ++i)
                if (!(Q::dims[i] == K::dims[i])) return false;
            return Q::dims[Q::rank - 1] == K::dims[K::rank - 1];
        }
    }
    template <class Q, class K, class... Ops>
    static consteval auto dims() {
        if constexpr (Heads > 0) {
            return std::array<dim, 4>{Q::dims[0], dim(Heads), Q::dims[1], K::dims[1]};
        } else {
            auto r = Q::dims;
            r[Q::rank - 1] = K::dims[K::rank - 2];
            return r;
        }
    }
    // Backward's gS (n x m) of one matrix. (Independent of the pool's size: a scan or repeat sizes
    // its cell's scratch again at every call, possibly at another thread count.)
    static std::size_t scratch_size(const rshape&, const auto& x) { return x[0][-2] * x[1][-2]; }

    template <class T, std::size_t K>
    static void forward(op_io<T, K>& io) { scaled_dot_weights_forward<Mask>(io, c, std::size_t(Heads)); }
    template <class T, std::size_t K>
    static void backward(op_io<T, K>& io) { scaled_dot_weights_backward<Mask>(io, c, std::size_t(Heads)); }
    static std::string describe() {
        return "scale " + std::to_string(c) + ", mask " + Mask::describe() +
               (Heads > 0 ? ", " + std::to_string(Heads) + " heads side by side" : std::string());
    }
};

/// The kernels compiled once (include/ctgraph/compiled.cpp) for float and double, without a mask
/// and causal; declared `extern template` where CTG_SEPARATE_COMPILATION is defined.
#define CTG_SCALED_DOT_WEIGHTS_INSTANCES(how, T) \
    CTG_SCALED_DOT_WEIGHTS_INSTANCE(how, no_mask, T) CTG_SCALED_DOT_WEIGHTS_INSTANCE(how, causal, T)
#define CTG_SCALED_DOT_WEIGHTS_INSTANCE(how, Mask, T)                                              \
    how void scaled_dot_weights_forward<Mask, T, 2>(op_io<T, 2>&, double, std::size_t);           \
    how void scaled_dot_weights_backward<Mask, T, 2>(op_io<T, 2>&, double, std::size_t);
#if defined(CTG_SEPARATE_COMPILATION)
CTG_SCALED_DOT_WEIGHTS_INSTANCES(extern template, float)
CTG_SCALED_DOT_WEIGHTS_INSTANCES(extern template, double)
#endif
}  // namespace ops

namespace detail {
template <cval Scale, class Mask, int Heads = 0, class Q, class K, class... Ops>
constexpr auto make_scaled_dot_weights(Q q, K k, tlist<Ops...>) {
    using op = ops::scaled_dot_weights_op<Scale, Mask, Heads>;
    static_assert(with_shapes<any_poison<Q, K> || (Heads > 0) || op::template check<typename Q::shape, typename K::shape>(),
                              typename Q::shape::pretty, typename K::shape::pretty>::value,
                  "ctg::attention: queries (..., n, d) and keys (..., m, d) need the same leading dimensions and the "
                  "same feature size d for a dot-product score");
    static_assert(with_shapes<any_poison<Q, K> || Heads == 0 || op::template check<typename Q::shape, typename K::shape>(),
                              typename Q::shape::pretty, typename K::shape::pretty, shape_is<Heads>>::value,
                  "ctg::attention: queries (B, n, D) and keys (B, m, D) of heads side by side need the same B and D, and D a "
                  "multiple of the number of heads");
    static_assert(with_shapes<any_poison<Q, K, Ops...> || (Ops::is_index && ...), typename Ops::shape::pretty...>::value,
                  "ctg::masked_softmax: a mask's lengths, padding or matrix must be an index_input");
    if constexpr (any_poison<Q, K, Ops...> || !op::template check<typename Q::shape, typename K::shape>()) {
        return poison{};
    } else {
        using S = shape_from<dims_of<op, Q, K>>;  // the weights' shape, for the mask's check
        static_assert(with_shapes<Mask::template check<S, typename Ops::shape...>(), typename S::pretty,
                                  typename Ops::shape::pretty...>::value,
                      "ctg::masked_softmax: the mask's tensor does not fit the scores (..., n, m): key lengths are (B) "
                      "for scores (B, ..., n, m), a key padding mask (B, m), a mask matrix (n, m) or (B, n, m)");
        return make_node<op>(q, k, Ops{}...);
    }
}
}  // namespace detail
}  // namespace ctg
