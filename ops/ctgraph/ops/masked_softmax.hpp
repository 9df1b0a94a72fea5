// ctgraph/ops/masked_softmax.hpp: softmax over the last axis restricted to a mask's visible keys,
//   P_ij = exp(S_ij) / sum_{l visible} exp(S_il) for visible j, 0 otherwise,
// which is softmax(S + M) with M_ij = 0 (visible) or -inf, in one pass: no M is built or added.
// A row with nothing visible is all zeros (softmax(S + M) would be NaN there) with zero gradient.
// VJP: gS += P * (gP - <gP, P>) per row; masked entries have P = 0 and receive nothing.
// S has shape (..., n, m): any leading axes (batch, heads); masks index the batch by the first.
// Masks: ops/masks.hpp.
#pragma once
#include <algorithm>
#include <array>
#include <cassert>
#include <cmath>
#include <limits>
#include <string>
#include <string_view>

#include "ctgraph/graph/node.hpp"
#include "ctgraph/kernels/softmax.hpp"
#include "ctgraph/op.hpp"
#include "ctgraph/ops/detail/score_blocks.hpp"
#include "ctgraph/ops/masks.hpp"

namespace ctg {
namespace ops {

/// The rows of a (..., n, m) tensor with their batch index, query index and visible range.
template <class Mask, class T, std::size_t K>
struct masked_rows {
    static constexpr std::size_t first_mask_operand = K - Mask::operands::size;
    mask_args args;
    std::array<std::string_view, Mask::operands::size + 1> names{};
    std::size_t rows = 0, per_batch = 1;

    /// `scores` is the (..., n, m) shape; the op's operands from first_mask_operand on are the mask's.
    masked_rows(const op_io<T, K>& c, const rshape& scores) {
        args.n = scores[-2];
        args.m = scores[-1];
        args.batches = scores.rank >= 3 ? scores.d[0] : 1;
        args.x = c.x.data() + first_mask_operand;
        for (std::size_t k = 0; k < Mask::operands::size; ++k) names[k] = c.x_name[first_mask_operand + k];
        args.names = names.data();
        rows = scores.rows();
        const std::size_t matrices = args.n ? rows / args.n : 0;
        per_batch = args.batches ? std::max<std::size_t>(1, matrices / args.batches) : 1;
    }
    /// Whether every matrix has the same blocks (row_blocks): a mask without runtime tensors
    /// depends on no batch (the mask contract, ops/masks.hpp).
    static constexpr bool same_blocks = Mask::operands::size == 0;
    std::size_t batch_of(std::size_t r) const { return (r / args.n) / per_batch; }
    std::size_t query_of(std::size_t r) const { return r % args.n; }
    /// Visible columns of row r, clamped to [0, m].
    std::pair<std::size_t, std::size_t> range(std::size_t r) const {
        const col_range c = Mask::cols(args, batch_of(r), query_of(r));
        const long long lo = std::max(0LL, c.lo), hi = std::min((long long)args.m, c.hi);
        return hi > lo ? std::pair{std::size_t(lo), std::size_t(hi)} : std::pair{std::size_t(0), std::size_t(0)};
    }

    /// Score matrix f (rows f n .. f n + n - 1) cut into row blocks, each with the columns its rows
    /// may see (the union of their ranges: each row's own lies inside), neighbours with the same
    /// columns merged: a causal mask's 256 x 256 matrix in blocks [0, 64) x [0, 64), [64, 128) x
    /// [0, 128), ...; without a mask, or with key lengths alone, one block. Attention's products need
    /// only these parts: P is 0 outside them, and masked softmax reads S and gP only inside. A block
    /// whose rows see nothing has no columns (c0 = c1).
    score_blocks row_blocks(std::size_t f) const {
        score_blocks out;
        const std::size_t n = args.n, blocks = std::min(score_blocks::max_row_blocks, std::max<std::size_t>(1, (n + score_blocks::block_rows - 1) / score_blocks::block_rows));
        const std::size_t step = (n + blocks - 1) / blocks;
        for (std::size_t i0 = 0; i0 < n; i0 += step) {
            score_block b{i0, std::min(n, i0 + step), args.m, 0};
            for (std::size_t i = b.r0; i < b.r1; ++i) {
                const auto [lo, hi] = range(f * n + i);
                if (hi > lo) b.c0 = std::min(b.c0, lo), b.c1 = std::max(b.c1, hi);
            }
            if (b.c1 <= b.c0) b.c0 = b.c1 = 0;
            score_block* last = out.count ? &out.at[out.count - 1] : nullptr;
            if (last && last->c0 == b.c0 && last->c1 == b.c1) last->r1 = b.r1;
            else out.at[out.count++] = b;
        }
        return out;
    }
    /// Matrix f's row blocks for a task whose first matrix f0 has `first` (row_blocks(f0)): those
    /// again when every matrix has the same blocks, else computed. Debug builds check the former.
    score_blocks row_blocks(std::size_t f, std::size_t f0, const score_blocks& first) const {
        if (f == f0) return first;
        if constexpr (same_blocks) {
            assert(row_blocks(f) == first && "a mask without operands gave matrices different columns: see ops/masks.hpp");
            return first;
        } else {
            return row_blocks(f);
        }
    }
    /// Matrix f's column blocks, given its row blocks `parts` (row_blocks(f, f0, first)) and
    /// `first_cols` = column_blocks(first): those again where the row blocks are first's.
    score_blocks column_blocks(std::size_t f, std::size_t f0, const score_blocks& first_cols, const score_blocks& parts) const {
        return same_blocks || f == f0 ? first_cols : column_blocks(parts);
    }
    /// The same parts as column blocks (row_blocks' result `rows`), each with the rows that may see
    /// its columns, neighbours with the same rows merged; columns no row sees have no rows (r0 = r1).
    /// For products that sum over the rows into each key's row: gK = gS^T Q, gV = P^T gO.
    score_blocks column_blocks(const score_blocks& rows) const {
        std::array<std::size_t, 2 * score_blocks::max_row_blocks + 2> cuts{};
        std::size_t k = 0;
        const auto add = [&](std::size_t c) {  // sorted, distinct
            std::size_t j = 0;
            while (j < k && cuts[j] < c) ++j;
            if (j < k && cuts[j] == c) return;
            for (std::size_t t = k; t > j; --t) cuts[t] = cuts[t - 1];
            cuts[j] = c, ++k;
        };
        add(0), add(args.m);
        for (std::size_t b = 0; b < rows.count; ++b)
            if (rows.at[b].c1 > rows.at[b].c0) add(rows.at[b].c0), add(rows.at[b].c1);
        score_blocks out;
        for (std::size_t j = 0; j + 1 < k; ++j) {
            score_block c{args.n, 0, cuts[j], cuts[j + 1]};
            for (std::size_t b = 0; b < rows.count; ++b)
                if (rows.at[b].c0 <= c.c0 && c.c1 <= rows.at[b].c1) c.r0 = std::min(c.r0, rows.at[b].r0), c.r1 = std::max(c.r1, rows.at[b].r1);
            if (c.r1 <= c.r0) c.r0 = c.r1 = 0;
            score_block* last = out.count ? &out.at[out.count - 1] : nullptr;
            if (last && last->r0 == c.r0 && last->r1 == c.r1) last->c1 = c.c1;
            else out.at[out.count++] = c;
        }
        return out;
    }

    /// y = masked softmax of row r of x (m elements each).
    void forward_row(std::size_t r, const T* x, T* y) const {
        const std::size_t m = args.m;
        const auto [lo, hi] = range(r);
        std::fill(y, y + lo, T(0));
        std::fill(y + hi, y + m, T(0));
        if (hi == lo) return;
        if constexpr (!Mask::dense) {
            kernels::softmax_row(hi - lo, x + lo, y + lo);
        } else {
            const std::size_t b = batch_of(r), i = query_of(r);
            T mx = -std::numeric_limits<T>::infinity();
            bool whole = true;  // every key of the range visible
            for (std::size_t j = lo; j < hi; ++j) {
                if (Mask::visible(args, b, i, j)) mx = std::max(mx, x[j]);
                else whole = false;
            }
            if (whole) {  // as a mask of ranges: the same kernel, the same bits (key_padding_mask vs key_padding)
                kernels::softmax_row(hi - lo, x + lo, y + lo);
                return;
            }
            if (mx == -std::numeric_limits<T>::infinity()) {  // nothing visible in the range
                std::fill(y + lo, y + hi, T(0));
                return;
            }
            T sum = 0;
            for (std::size_t j = lo; j < hi; ++j) {
                y[j] = Mask::visible(args, b, i, j) ? std::exp(x[j] - mx) : T(0);
                sum += y[j];
            }
            const T inv = T(1) / sum;
            for (std::size_t j = lo; j < hi; ++j) y[j] *= inv;
        }
    }
    /// gx += y * (gy - <gy, y>) over row r's visible range (y is 0 elsewhere); with `fresh`, gx is
    /// written (=) over the whole row instead, zero outside the range.
    void backward_row(std::size_t r, const T* y, const T* gy, T* gx, bool fresh = false) const {
        const auto [lo, hi] = range(r);
        if (fresh) {
            std::fill(gx, gx + lo, T(0));
            std::fill(gx + hi, gx + args.m, T(0));
        }
        if (hi == lo) return;
        const std::size_t n = hi - lo;
        const T dot = kernels::reduce_sum(n, gy + lo, y + lo, [](auto a, auto b) { return a * b; });
        kernels::map_into(fresh, n, gx + lo, [dot](auto yv, auto gyv) { return yv * (gyv - decltype(yv)(dot)); }, y + lo,
                          gy + lo);
    }
};

/// ONNX: softmax over the last axis of the scores `s` (node operand 0 or computed), hidden keys
/// 0, a row with nothing visible all zeros (masks.hpp, mask_onnx); writes b.y(). The mask's
/// operands are the node's from `first_mask_operand` on.
template <class Mask, class B>
void masked_softmax_onnx(B& b, const std::string& s, std::size_t rank, std::size_t first_mask_operand) {
    mask_onnx<B> o{b, s, rank, first_mask_operand, {}, {}};
    onnx_visible_softmax(b, s, Mask::onnx_visible(o), b.y());
}

template <class Mask>
struct masked_softmax_op {
    static constexpr std::string_view name = "masked_softmax";
    template <class B>  // ONNX (masked_softmax_onnx above)
    static void onnx(B& b) { masked_softmax_onnx<Mask>(b, b.x(0), b.xshape(0).rank, 1); }
    static constexpr bool assigns_adjoints = true;
    template <class S, class... Ops>
    static consteval bool check() {
        return S::rank >= 2 && sizeof...(Ops) == Mask::operands::size && Mask::template check<S, Ops...>();
    }
    template <class S, class... Ops>
    static consteval auto dims() { return S::dims; }

    template <class T, std::size_t K>
    static void forward(op_io<T, K>& c) {
        const masked_rows<Mask, T, K> rows(c, c.x[0].shape);
        Mask::validate(rows.args);
        const std::size_t m = rows.args.m;
        kernels::for_items(rows.rows, rows.rows * m, kernels::parallel_map_min_size, [&](std::size_t r0, std::size_t r1) {
            for (std::size_t r = r0; r < r1; ++r) rows.forward_row(r, c.x_data(0) + r * m, c.y_data() + r * m);
        });
    }
    template <class T, std::size_t K>
    static void backward(op_io<T, K>& c) {
        T* gx = c.gx_data(0);
        if (!gx) return;
        const masked_rows<Mask, T, K> rows(c, c.x[0].shape);
        const std::size_t m = rows.args.m;
        kernels::for_items(rows.rows, rows.rows * m, kernels::parallel_map_min_size, [&](std::size_t r0, std::size_t r1) {
            for (std::size_t r = r0; r < r1; ++r)
                rows.backward_row(r, static_cast<const T*>(c.y_data() + r * m), static_cast<const T*>(c.gy_data() + r * m),
                                  gx + r * m, c.fresh(0));
        });
    }
    static std::string describe() { return Mask::describe(); }
};

}  // namespace ops

namespace detail {
template <class Mask, class S, class... Ops>
constexpr auto make_masked_softmax(S s, tlist<Ops...>) {
    static_assert(with_shapes<any_poison<S, Ops...> || (Ops::is_index && ...), typename Ops::shape::pretty...>::value,
                  "ctg::masked_softmax: a mask's lengths, padding or matrix must be an index_input");
    static_assert(with_shapes<any_poison<S, Ops...> || S::shape::rank < 2 ||
                                  Mask::template check<typename S::shape, typename Ops::shape...>(),
                              typename S::shape::pretty, typename Ops::shape::pretty...>::value,
                  "ctg::masked_softmax: the mask's tensor does not fit the scores (..., n, m): key lengths are (B) "
                  "for scores (B, ..., n, m), a key padding mask (B, m), a mask matrix (n, m) or (B, n, m)");
    if constexpr (any_poison<S, Ops...>) return poison{};
    else return make_node<ops::masked_softmax_op<Mask>>(s, Ops{}...);
}
}  // namespace detail

/// Softmax over the last axis of scores (..., n, m), restricted to the keys `mask` leaves visible
/// (see the file comment and ops/masks.hpp).
template <expr S, attention_mask Mask>
constexpr auto masked_softmax(S s, Mask) {
    static_assert(with_shapes<any_poison<S> || (S::shape::rank >= 2 && !S::is_index), typename S::shape::pretty>::value,
                  "ctg::masked_softmax: the scores must be a floating-point tensor (..., n, m)");
    return detail::make_masked_softmax<Mask>(s, typename Mask::operands{});
}
}  // namespace ctg
