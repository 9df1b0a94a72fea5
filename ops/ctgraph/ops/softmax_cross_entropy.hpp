// ctgraph/ops/softmax_cross_entropy.hpp: fused log-softmax + negative log-likelihood, a scalar.
//   logits (..., V), targets (...) index_input with values in [0, V) or IgnoreIndex;
//   L = -(1/n) sum_{rows r with t_r != IgnoreIndex} log softmax(z_r)[t_r],  n = number of such rows
//   (L = 0 when every row is ignored).
// Fused VJP (stable, one pass): gz_r += gy (softmax(z_r) - onehot(t_r)) / n; ignored rows get nothing.
// The log-probabilities are kept in scratch between forward and backward.
#pragma once
#include <algorithm>
#include <cmath>
#include <string>
#include <string_view>

#include "ctgraph/graph/node.hpp"
#include "ctgraph/kernels/parallel.hpp"
#include "ctgraph/kernels/softmax.hpp"
#include "ctgraph/op.hpp"

namespace ctg {
namespace ops {
template <long long IgnoreIndex>
struct softmax_cross_entropy_op {
    static constexpr std::string_view name = "softmax_cross_entropy";
    template <class Z, class Tg>
    static consteval bool check() {
        if constexpr (Z::rank != Tg::rank + 1) {
            return false;
        } else {
            for (std::size_t i = 0; i < Tg::rank; ++i)
                if (!(Z::dims[i] == Tg::dims[i])) return false;
            return true;
        }
    }
    template <class Z, class Tg>
    static consteval auto dims() { return std::array<dim, 0>{}; }
    static std::size_t scratch_size(const rshape&, const std::array<rshape, 2>& x) { return x[0].size(); }

    // Rows in blocks of this many, as tasks of the pool when the logits are large enough: each block
    // sums its rows' losses, and the blocks' sums are added in block order, so the loss does not
    // depend on the thread count (an rnn step's 1024 x 65 logits: 60 us of serial work before).
    static constexpr std::size_t block_rows = 64, min_parallel_elems = std::size_t(1) << 15;

    // ONNX: decomposed as computed here (not SoftmaxCrossEntropyLoss, whose mean over no kept row is
    // 0/0): LogSoftmax over the classes, each row's entry at its target (GatherElements on the last
    // axis; an ignored row reads class 0, then Where drops it), minus their sum (ReduceSum over every
    // axis) divided by the count of kept rows, or by 1 when there is none (the sum is 0: L = 0). The
    // targets are int64.
    template <class B>
    static void onnx(B& b) {
        const std::string lp = b.emit("LogSoftmax", {b.x(0)}, {{"axis", -1}});
        const std::string ignored = b.emit("Equal", {b.x(1), b.int_scalar(IgnoreIndex)});
        const std::string t = b.emit("Where", {ignored, b.int_scalar(0), b.x(1)});
        const std::string at = b.emit("GatherElements", {lp, b.emit("Unsqueeze", {t, b.ints({-1})})}, {{"axis", -1}});
        const std::string picked = b.emit("Squeeze", {at, b.ints({-1})});
        std::string total = b.emit("Where", {ignored, b.scalar(0.0), b.emit("Neg", {picked})});
        std::string count = b.emit("Cast", {b.emit("Not", {ignored})}, {{"to", 1}});
        if (b.xshape(1).rank > 0) {  // (one row: the values themselves)
            total = b.emit("ReduceSum", {total}, {{"keepdims", 0}});
            count = b.emit("ReduceSum", {count}, {{"keepdims", 0}});
        }
        b.emit_y("Div", {total, b.emit("Max", {count, b.scalar(1.0)})});
    }
    template <class T>
    static void forward(op_io<T, 2>& c) {
        const std::size_t V = c.x[0].shape.cols(), rows = c.x[0].shape.rows();
        const index_t* t = c.x[1].template as<index_t>();
        T* logp = c.scratch.template as<T>();
        std::size_t n = 0;
        for (std::size_t r = 0; r < rows; ++r) {  // checked before any task runs: the first bad one is named
            if (t[r] == IgnoreIndex) continue;
            if (t[r] < 0 || std::size_t(t[r]) >= V)
                throw index_error("ctg::softmax_cross_entropy: target " + std::to_string(t[r]) + " at position " +
                                  std::to_string(r) + " of input '" + std::string(c.x_name[1]) +
                                  "' is outside [0, " + std::to_string(V) + ") and is not the ignore index " +
                                  std::to_string(IgnoreIndex));
            ++n;
        }
        const std::size_t blocks = (rows + block_rows - 1) / block_rows;
        kernels::scratch<double> partial(blocks);
        double* sums = partial.data();
        kernels::for_items(blocks, rows * V, min_parallel_elems, [&](std::size_t b0, std::size_t b1) {
            for (std::size_t b = b0; b < b1; ++b) {
                double total = 0;
                for (std::size_t r = b * block_rows; r < std::min(rows, (b + 1) * block_rows); ++r) {
                    kernels::log_softmax_row(V, c.x_data(0) + r * V, logp + r * V);
                    if (t[r] != IgnoreIndex) total -= double(logp[r * V + std::size_t(t[r])]);
                }
                sums[b] = total;
            }
        });
        double total = 0;
        for (std::size_t b = 0; b < blocks; ++b) total += sums[b];
        *c.y_data() = n ? T(total / double(n)) : T(0);
    }
    // The logits' adjoint is assigned where it is fresh (every row: ignored ones get zeros), so the
    // engine does not zero it first (GPT-2's 4 x 1024 x 50257 logits: 823 MB).
    static constexpr bool assigns_adjoints = true;
    template <class T>
    static void backward(op_io<T, 2>& c) {
        T* g = c.gx_data(0);
        if (!g) return;
        const std::size_t V = c.x[0].shape.cols(), rows = c.x[0].shape.rows();
        const bool fresh = c.fresh(0);
        const index_t* t = c.x[1].template as<index_t>();
        const T* logp = c.scratch.template as<T>();
        std::size_t n = 0;
        for (std::size_t r = 0; r < rows; ++r) n += t[r] != IgnoreIndex;
        if (!n) {
            if (fresh) std::fill(g, g + rows * V, T(0));
            return;
        }
        const T k = *c.gy_data() / T(n);
        kernels::for_items(rows, rows * V, min_parallel_elems, [&](std::size_t r0, std::size_t r1) {
            for (std::size_t r = r0; r < r1; ++r) {
                T* gr = g + r * V;
                if (t[r] == IgnoreIndex) {
                    if (fresh) std::fill(gr, gr + V, T(0));
                    continue;
                }
                kernels::map_into(fresh, V, gr, [k](auto lp) {
                    using std::exp;
                    return decltype(lp)(k) * exp(lp);
                }, logp + r * V);
                gr[t[r]] -= k;
            }
        });
    }
    static std::string describe() { return "ignore " + std::to_string(IgnoreIndex); }
};
}  // namespace ops

/// Mean cross-entropy of softmax(logits) against integer targets; rows whose target equals
/// IgnoreIndex (default -100, as PyTorch) count neither in the sum nor in the mean.
template <long long IgnoreIndex = -100, expr Z, expr Tg>
constexpr auto softmax_cross_entropy(Z z, Tg t) {
    static_assert(with_shapes<any_poison<Z, Tg> || (Tg::is_index && !Z::is_index), typename Z::shape::pretty,
                              typename Tg::shape::pretty>::value,
                  "ctg::softmax_cross_entropy: the logits must be floating-point and the targets an index_input");
    static_assert(with_shapes<any_poison<Z, Tg> ||
                                  ops::softmax_cross_entropy_op<IgnoreIndex>::template check<typename Z::shape,
                                                                                             typename Tg::shape>(),
                              typename Z::shape::pretty, typename Tg::shape::pretty>::value,
                  "ctg::softmax_cross_entropy: the targets must have the logits' shape without its last (class) axis");
    return make_node<ops::softmax_cross_entropy_op<IgnoreIndex>>(z, t);
}
}  // namespace ctg
