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
#include <cmath>
#include <limits>
#include <string>
#include <string_view>

#include "ctgraph/graph/node.hpp"
#include "ctgraph/kernels/softmax.hpp"
#include "ctgraph/op.hpp"
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
    std::size_t batch_of(std::size_t r) const { return (r / args.n) / per_batch; }
    std::size_t query_of(std::size_t r) const { return r % args.n; }
    /// Visible columns of row r, clamped to [0, m].
    std::pair<std::size_t, std::size_t> range(std::size_t r) const {
        const col_range c = Mask::cols(args, batch_of(r), query_of(r));
        const long long lo = std::max(0LL, c.lo), hi = std::min((long long)args.m, c.hi);
        return hi > lo ? std::pair{std::size_t(lo), std::size_t(hi)} : std::pair{std::size_t(0), std::size_t(0)};
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
            for (std::size_t j = lo; j < hi; ++j)
                if (Mask::visible(args, b, i, j)) mx = std::max(mx, x[j]);
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

template <class Mask>
struct masked_softmax_op {
    static constexpr std::string_view name = "masked_softmax";
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
                  "ctg::masked_softmax: a mask's lengths or matrix must be an index_input");
    static_assert(with_shapes<any_poison<S, Ops...> || S::shape::rank < 2 ||
                                  Mask::template check<typename S::shape, typename Ops::shape...>(),
                              typename S::shape::pretty, typename Ops::shape::pretty...>::value,
                  "ctg::masked_softmax: the mask's tensor does not fit the scores (..., n, m): key lengths are (B) "
                  "for scores (B, ..., n, m), a mask matrix is (n, m) or (B, n, m)");
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
