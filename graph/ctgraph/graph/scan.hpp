// ctgraph/graph/scan.hpp: recurrence over a runtime sequence length (backpropagation through time).
//
//   auto hs = scan<H>(cell, xs);                 // xs (T, B, X) time-major -> hs (T, B, H)
//   auto hs = scan<H>(cell, xs, h0);             // initial state h0 (B, H) instead of zeros, or
//                                                // h0 (H), one row for every sequence (a learnable
//                                                // param<"h0", H>: its gradient sums over the batch)
//   auto hs = scan<H>(cell, xs, h0, lengths);    // per-sequence lengths: an index_input (B)
//   auto hs = scan<H>(cell, xs, zero_state{}, lengths);
//
// `cell(state, x)` is ordinary ctgraph code: it receives placeholders for the carried state (B, H)
// and the step's input (B, X) and returns the new state (B, H). It is declared once; nothing about T
// is a template parameter. Its type is a static sub-graph whose backward is generated like any other.
//
// What the cell reads that does not depend on the state or the step input (its parameters, an
// encoder's states, their projections: "loop invariants") becomes an operand of the scan node,
// computed once in the outer graph; its adjoint is accumulated over all steps, so a decoder that
// attends to encoder states sends gradient back into the encoder.
//
// Forward runs the cell T times, keeping each step's intermediate values; the state of step t is
// written straight into the output hs[t], and step t+1 reads it from there. Backward is BPTT: for
// t = T-1 .. 0 the cell's VJPs run with the output adjoint hs'[t], which already holds the loss's
// part and the next step's part (step t+1 adds its state adjoint into hs'[t]).
//
// Lengths: for a row b with t >= lengths[b], the step is padding: hs[t][b] = hs[t-1][b] (the state
// is carried unchanged) and in backward the row's adjoint passes through to step t-1, the cell
// receiving none. The cell must treat batch rows independently (every built-in cell does).
//
// A state with several parts (LSTM's h and c) is one tensor: concat them, slice inside the cell.
//
// Batch parts (threads): when every op of the cell declares rows_independent (op.hpp) and the batch
// is a dimension letter found only as the first axis of what the cell computes, a pool of k threads
// runs the batch as k equal parts (at least 8 rows each), each part through every step on a thread
// of its own: one hand-over per pass instead of one per step and product. Weights are shared; each
// part sums their adjoints on its own and the sums are added in part order. A cell that reads
// across rows (reverse_time), numbers its elements (dropout) or uses an op that does not declare
// rows_independent runs whole, as does a batch with less than 16 rows or weights over 2^17 elements
// (every part would read them all at every step; a reasoned limit, not a measured one).
//
// Weight adjoints after the loop: a weight W read by one product x W only (matmul, affine: ops
// declaring weight_adjoint_is_xt_dy) whose x has fewer than 16 rows per step (a batch part of 8)
// gets sum_t x_t^T dy_t as one product after the steps, from each step's x_t and dy_t kept in the
// scratch, instead of one narrow product per step (its inner dimension is the rows).
#pragma once
#include <algorithm>
#include <array>
#include <atomic>
#include <cstring>
#include <span>
#include <string>
#include <string_view>

#include "ctgraph/graph/analysis.hpp"
#include "ctgraph/graph/cell.hpp"
#include "ctgraph/graph/exec.hpp"
#include "ctgraph/graph/node.hpp"
#include "ctgraph/kernels/gemm.hpp"
#include "ctgraph/kernels/parallel.hpp"
#include "ctgraph/kernels/simd.hpp"
#include "ctgraph/memory.hpp"
#include "ctgraph/op.hpp"

namespace ctg {

/// Marks "no initial state" (zeros) where scan takes one.
struct zero_state {
    using shape = ctg::shape<>;  ///< no shape: zeros of the state's shape are used
    static constexpr bool is_poison = false;  ///< not a failed expression
};

namespace detail {

/// w (K x N) += x^T dy for x (rows x K), dy (rows x N): a deferred weight adjoint (scan_op). One
/// out-of-line body per element type, not one inlined into every scan type's backward.
template <class T>
[[gnu::noinline]] inline void add_xt_dy(std::size_t K, std::size_t N, std::size_t rows, const T* x, const T* dy, T* w, bool bf16) {
    kernels::gemm(true, false, K, N, rows, T(1), x, K, dy, N, T(1), w, N, nullptr, bf16);
}

/// y += x (n elements): kernels::add_to out of line, once per element type (inlined at each of a
/// scan's adjoint sums, it grew every scan type's code by kilobytes).
template <class T>
[[gnu::noinline]] inline void add_into(std::size_t n, const T* x, T* y) {
    kernels::add_to(n, x, y);
}

/// Scans run in batch parts so far in this process (tests and benchmarks read it).
inline std::atomic<long>& scan_parts_runs() {
    static std::atomic<long> n{0};
    return n;
}

/// Whether a scan may run its batch in parts, each part through every step on a thread of its own
/// (see scan's file comment), and what each part reads. The state's first axis must be a dimension
/// letter (the batch, `b`); every op the step runs must declare rows_independent for its operand
/// shapes (op.hpp); every computed node, and every operand that has `b`, must have it as its first
/// axis and nowhere else. Invariants without `b` (the weights) are shared by the parts; their
/// adjoints are summed per part and added in part order.
template <class Info, int StateNode, int InputNode>
struct batch_parts {
    using G = typename Info::G;
    static constexpr std::size_t N = Info::N;
    static constexpr char b = StateNode >= 0 ? G::dims[std::size_t(StateNode)][0].sym : 0;

    static constexpr bool has_batch(std::size_t j) {
        for (std::size_t a = 0; a < G::rank[j]; ++a)
            if (G::dims[j][a].sym == b) return true;
        return false;
    }
    static constexpr bool batch_first_only(std::size_t j) {
        if (G::rank[j] == 0 || G::dims[j][0].sym != b) return false;
        for (std::size_t a = 1; a < G::rank[j]; ++a)
            if (G::dims[j][a].sym == b) return false;
        return true;
    }
    template <std::size_t I, std::size_t... K>
    static constexpr bool op_says(std::index_sequence<K...>) {
        using Op = op_of_t<typename G::template node_t<I>>;
        if constexpr (requires {
                          Op::template rows_independent<
                              typename G::template node_t<std::size_t(G::operands[I][K])>::shape...>();
                      })
            return Op::template rows_independent<typename G::template node_t<std::size_t(G::operands[I][K])>::shape...>();
        else
            return false;
    }
    template <std::size_t... I>
    static constexpr std::array<bool, N> ops_say(std::index_sequence<I...>) {
        return {op_says<I>(std::make_index_sequence<G::arity[I]>{})...};
    }
    static constexpr bool ok = [] {
        if (b == 0) return false;
        constexpr std::array<bool, N> says = ops_say(std::make_index_sequence<N>{});
        for (std::size_t i = 0; i < N; ++i) {
            if (!Info::computed[i]) continue;
            if (!says[i] || !batch_first_only(i)) return false;
            for (std::size_t k = 0; k < G::arity[i]; ++k) {
                const std::size_t j = std::size_t(G::operands[i][k]);
                if (has_batch(j) && !batch_first_only(j)) return false;
            }
        }
        return InputNode < 0 || batch_first_only(std::size_t(InputNode));
    }();
    /// Hoisted invariant j (Info::hoisted[j]) has the batch axis: each part reads (and writes the
    /// adjoint of) its own rows of it.
    static constexpr std::array<bool, Info::num_hoisted + 1> rows = [] {
        std::array<bool, Info::num_hoisted + 1> r{};
        for (std::size_t j = 0; j < Info::num_hoisted; ++j) r[j] = b != 0 && has_batch(Info::hoisted[j]);
        return r;
    }();
};

}  // namespace detail

namespace ops {

/// The scan primitive. Operands: xs, [h0], [lengths], then the cell's hoisted invariants.
template <class CellOut, bool HasH0, bool HasLengths, bool H0Rows = false>
struct scan_op {
    using info = detail::cell_info<CellOut>;
    using G = typename info::G;
    static constexpr std::size_t N = info::N;
    static constexpr std::size_t len_index = 1 + HasH0;
    static constexpr std::size_t first_hoisted = 1 + HasH0 + HasLengths;
    static constexpr int state_node =
        detail::find_role_impl<CellOut, 0>(std::make_index_sequence<N>{});
    static constexpr int input_node =
        detail::find_role_impl<CellOut, 1>(std::make_index_sequence<N>{});
    static constexpr std::string_view name = "scan";
    static constexpr flop_rule flops = flop_rule::nested;  // how summaries count it (op.hpp)

    template <class Xs, class... R>
    static consteval bool check() { return true; }
    template <class Xs, class... R>
    static consteval auto dims() {
        using S = typename CellOut::shape;
        std::array<dim, S::rank + 1> r{};
        r[0] = Xs::dims[0];
        for (std::size_t i = 0; i < S::rank; ++i) r[i + 1] = S::dims[i];
        return r;
    }
    static std::string describe() {
        return std::to_string(N) + "-node cell" + (HasH0 ? ", h0" : "") + (HasLengths ? ", lengths" : "");
    }

    // ---------------------------------------------------------------- batch parts
    // When the cell treats rows independently (detail::batch_parts), the batch is cut into `parts`
    // equal parts of at least min_part_rows rows, and each part runs every step as one task of the
    // pool: no hand-over per time step (a recurrent step's product, 16 x 128 x 128, takes ~2 us,
    // too short to split across threads). As many parts as the pool has threads here; the count is
    // chosen at forward and stored in the scratch for backward. The scratch is sized for any count
    // the batch allows, so resizing the pool between planning and a step stays in bounds.
    using parts_info = detail::batch_parts<info, state_node, input_node>;
    static constexpr std::size_t min_part_rows = 8, max_parts = 8;
    // Shared invariants (weights) over this many elements (512 KiB of floats) keep the scan whole:
    // every part would read all of them at every step, where a product split per step reads each
    // weight once. A reasoned limit, not a measured crossover (the reference workloads' weights are
    // 64-196 KiB): measure one before moving it.
    static constexpr std::size_t max_shared_elems = std::size_t(1) << 17;
    static constexpr std::size_t header = 16;  // scratch elements holding the part count (a cache line)

    template <std::size_t K>
    static bool parts_allowed(const std::array<rshape, K>& x, std::size_t parts) {
        if (parts == 1) return true;
        if constexpr (!parts_info::ok) {
            return false;
        } else {
            const std::size_t batch = x[0].d[1];
            if (parts > max_parts || batch % parts != 0 || batch / parts < min_part_rows) return false;
            std::size_t shared = 0;
            for (std::size_t j = 0; j < info::num_hoisted; ++j)
                if (!parts_info::rows[j]) shared += x[first_hoisted + j].size();
            return shared <= max_shared_elems;
        }
    }
    template <std::size_t K>
    static std::size_t choose_parts(const std::array<rshape, K>& x) {
        const std::size_t threads = std::size_t(kernels::thread_pool::instance().threads_here());
        for (std::size_t p = std::min(threads, max_parts); p > 1; --p)
            if (parts_allowed(x, p)) return p;
        return 1;
    }

    // ---------------------------------------------------------------- weight adjoints after the loop
    // A hoisted weight W (rank 2) read by one product x W only (an op declaring
    // weight_adjoint_is_xt_dy: matmul, affine) gets its adjoint sum_t x_t^T dy_t as one product over
    // all steps after the loop: each step keeps its x_t and dy_t (the product's result adjoint) and
    // runs the op's VJP with W's adjoint null. Only where a step's product is narrow: x's rows per
    // step (the product's inner dimension) under defer_below_rows. 128 x 128 at 1 thread: 104
    // GFLOP/s at 8 rows, 187 at 16, 219 over 512; from 16 rows on, keeping x_t and dy_t (read back
    // from beyond L2) cost more than it saved (s2s's 32-row GRUs: their backward 4-13 % slower).
    static constexpr std::size_t defer_below_rows = 16;
    template <std::size_t I>
    static constexpr bool declares_xt_dy() {
        using Op = detail::op_of_t<typename G::template node_t<I>>;
        if constexpr (requires { Op::weight_adjoint_is_xt_dy; }) return Op::weight_adjoint_is_xt_dy; else return false;
    }
    template <std::size_t... I>
    static constexpr std::array<bool, N> xt_dy_ops(std::index_sequence<I...>) { return {declares_xt_dy<I>()...}; }
    static constexpr std::array<bool, N> deferred = [] {
        constexpr std::array<bool, N> xt_dy = xt_dy_ops(std::make_index_sequence<N>{});
        std::array<bool, N> d{};
        for (std::size_t i = 0; i < N; ++i) {
            if (!info::computed[i] || !xt_dy[i] || G::arity[i] < 2) continue;
            const std::size_t w = std::size_t(G::operands[i][1]);
            if (!info::hoisted_mask[w] || !info::has_adjoint[w] || G::rank[w] != 2) continue;
            bool only_here = true;  // no other computed node reads W, nor does this one twice
            for (std::size_t k = 0; k < N; ++k)
                for (std::size_t a = 0; info::computed[k] && a < G::arity[k]; ++a)
                    if (std::size_t(G::operands[k][a]) == w && !(k == i && a == 1)) only_here = false;
            d[i] = only_here;
        }
        return d;
    }();
    /// Hoisted invariant j is the weight (operand 1, rank 2) of a product: its transpose is kept
    /// for the VJPs' dX = dY W^T during backward (kernels::constant_operands).
    static constexpr std::array<bool, info::num_hoisted + 1> product_weight = [] {
        constexpr std::array<bool, N> xt_dy = xt_dy_ops(std::make_index_sequence<N>{});
        std::array<bool, info::num_hoisted + 1> r{};
        for (std::size_t i = 0; i < N; ++i)
            for (std::size_t j = 0; info::computed[i] && xt_dy[i] && G::arity[i] >= 2 && j < info::num_hoisted; ++j) {
                const std::size_t w = info::hoisted[j];
                r[j] = r[j] || (w == std::size_t(G::operands[i][1]) && G::rank[w] == 2 && !G::is_index[w]);
            }
        return r;
    }();
    static constexpr std::size_t hoisted_index(std::size_t node) {
        for (std::size_t j = 0; j < info::num_hoisted; ++j)
            if (info::hoisted[j] == node) return j;
        return 0;
    }

    // ---------------------------------------------------------------- sizes
    // Everything below is derived from the operand shapes and the part count, identically in
    // scratch_size, forward and backward (the op keeps no state of its own but the part count).
    template <std::size_t K>
    struct layout : detail::cell_frame<info> {
        std::size_t steps = 0, zeros = 0, h0_adj = 0, part_total = 0;
        std::size_t parts = 1, batch = 0, rows = 0;  // rows per part
        std::size_t x_stride = 0, y_stride = 0;      // elements of one step of xs and of hs (all parts)
        std::size_t part_x = 0, part_y = 0;          // one part's elements of a step of xs, of hs
        // A part's sums of the shared invariants' adjoints (parts after the first), at these offsets.
        std::array<std::size_t, info::num_hoisted + 1> grad_off{};
        std::size_t h0_grad_off = 0, grads = 0;
        // Products whose weight adjoint waits for the end of the loop (defer), their weights
        // (defer_w, by hoisted index, null adjoint during the steps), and where their kept x_t and
        // dy_t are: node i's from kept_off[i], x of all steps then dy of all steps.
        std::array<bool, N> defer{};
        std::array<bool, info::num_hoisted + 1> defer_w{};
        std::array<std::size_t, N> kept_off{};
        std::size_t kept = 0;
        // The product weights' transposes (product_weight), at transposed_off[j] from transposed_base().
        std::array<std::size_t, info::num_hoisted + 1> transposed_off{};
        std::size_t transposed = 0;
        // scratch = [header][part 0]...[part parts-1]; part = [frames][adjoint block][zeros (the
        // initial state)][h0's adjoint rows][adjoint sums][kept x_t, dy_t][transposed weights]
        std::size_t part_base(std::size_t p) const { return header + p * part_total; }
        std::size_t zeros_off() const { return this->frames_size(steps) + this->adj_block; }
        std::size_t grads_off() const { return zeros_off() + zeros + h0_adj; }
        std::size_t kept_base() const { return grads_off() + grads; }
        std::size_t transposed_base() const { return kept_base() + kept; }
        std::size_t total() const { return header + parts * part_total; }
    };

    // noinline: one body per scan type for scratch_size and the remembered plans of forward and
    // backward (inlined into each, it was a third of the scan's code in test_cells).
    template <std::size_t K>
    [[gnu::noinline]] static layout<K> plan(const std::array<rshape, K>& x, bool forward_only, std::size_t parts) {
        layout<K> L;
        using binding = typename detail::cell_frame<info>::binding;
        // The cell's dimension letters come from the operands' runtime shapes; with parts, the
        // batch letter is bound first to a part's rows (the first binding of a letter wins).
        std::array<binding, info::num_hoisted + 4> known{};
        std::size_t nk = 0;
        L.steps = x[0].rank ? x[0].d[0] : 0;
        L.batch = x[0].d[1];
        L.parts = parts;
        L.rows = L.batch / parts;
        if (parts > 1) known[nk++] = {std::size_t(state_node), rshape{1, {L.rows}}, 0};
        if constexpr (input_node >= 0) known[nk++] = {std::size_t(input_node), x[0], 1};
        for (std::size_t j = 0; j < info::num_hoisted; ++j) known[nk++] = {info::hoisted[j], x[first_hoisted + j], 0};
        // (a cell that does not read its state has no state node: h0 and lengths bind nothing in it)
        if constexpr (HasH0 && !H0Rows && state_node >= 0) known[nk++] = {std::size_t(state_node), x[1], 0};
        if constexpr (HasLengths && state_node >= 0) {  // lengths (B): the state's first dimension
            if (G::dims[state_node][0].sym) known[nk++] = {std::size_t(state_node), rshape{1, {x[len_index].d[0]}}, 0};
        }
        // Last, the batch from xs itself: a cell that reads neither its step input nor an operand
        // with the batch axis had it unbound, and its steps had no rows (nothing was computed).
        if constexpr (state_node >= 0)
            if (parts == 1) known[nk++] = {std::size_t(state_node), rshape{1, {L.rows}}, 0};
        L.plan(known.data(), nk, forward_only);
        L.zeros = round_up_lines(L.shapes[info::out].size());
        L.h0_adj = H0Rows ? L.zeros : 0;
        if (parts > 1) {
            for (std::size_t j = 0; j < info::num_hoisted; ++j)
                if (!parts_info::rows[j] && info::has_adjoint[info::hoisted[j]]) {
                    L.grad_off[j] = L.grads;
                    L.grads += round_up_lines(L.shapes[info::hoisted[j]].size());
                }
            L.h0_grad_off = L.grads;
            if constexpr (H0Rows) L.grads += round_up_lines(x[1].size());
        }
        for (std::size_t i = 0; i < N && !forward_only; ++i) {
            if (!deferred[i]) continue;
            const std::size_t x = std::size_t(G::operands[i][0]), w = std::size_t(G::operands[i][1]);
            if (L.shapes[x].size() / L.shapes[w].d[0] >= defer_below_rows) continue;
            L.defer[i] = true;
            L.defer_w[hoisted_index(w)] = true;
            L.kept_off[i] = L.kept;
            L.kept += round_up_lines(L.steps * (L.shapes[x].size() + L.shapes[i].size()));
        }
        for (std::size_t j = 0; j < info::num_hoisted && !forward_only; ++j)
            if (product_weight[j]) {
                L.transposed_off[j] = L.transposed;
                L.transposed += round_up_lines(L.shapes[info::hoisted[j]].size());
            }
        L.part_total = L.transposed_base() + L.transposed;
        L.x_stride = L.steps ? x[0].size() / L.steps : 0;
        L.part_x = L.x_stride / parts;
        L.part_y = L.shapes[info::out].size();
        L.y_stride = L.part_y * parts;
        return L;
    }

    static std::size_t scratch_size(const rshape&, const auto& x, bool forward_only) {
        std::size_t most = 0;
        for (std::size_t p = 1; p <= max_parts; ++p)
            if (parts_allowed(x, p)) most = std::max(most, plan(x, forward_only, p).total());
        return most;
    }
    template <class T, std::size_t K>
    static const layout<K>& plan_of(const op_io<T, K>& c, std::size_t parts) {
        std::array<rshape, K> xs{};
        for (std::size_t k = 0; k < K; ++k) xs[k] = c.x[k].shape;
        return detail::remembered_plan<layout<K>>(xs, c.run.forward_only, parts,
                                                  [](const auto& x, bool f, std::size_t n) { return plan(x, f, n); });
    }
    template <class T, std::size_t K>
    static std::array<rshape, K> shapes_of(const op_io<T, K>& c) {
        std::array<rshape, K> xs{};
        for (std::size_t k = 0; k < K; ++k) xs[k] = c.x[k].shape;
        return xs;
    }

    // ---------------------------------------------------------------- views of one step
    template <class T, std::size_t K>
    struct step_views {
        std::array<view, N> val{}, adj{}, scr{};
        std::array<view, N> bscr{};  // backward scratch (cell_frame::bs_off), set by backward
    };

    /// Operand k's data as part p reads it: its rows of an operand with the batch axis.
    template <class U>
    static U* rows_of_part(void* base, std::size_t part_elems, std::size_t p) {
        return static_cast<U*>(base) + p * part_elems;
    }

    template <class T, std::size_t K>
    static void values_at(step_views<T, K>& v, const op_io<T, K>& c, const layout<K>& L, std::size_t t, std::size_t p) {
        if constexpr (!parts_info::ok) p = 0;  // (a cell that never runs in parts: no part offsets in its code)
        T* base = c.scratch.template as<T>() + L.part_base(p);
        T* y = c.y_data() + p * L.part_y;
        for (std::size_t i = 0; i < N; ++i) {
            v.val[i].shape = L.shapes[i];
            v.adj[i].shape = L.shapes[i];
            v.scr[i] = {base + L.frame_off(t) + L.scr_off[i], rshape{1, {L.scr_size[i]}}};
            if (info::computed[i])
                v.val[i].ptr = i == info::out ? y + t * L.y_stride : base + L.frame_off(t) + L.val_off[i];
        }
        for (std::size_t j = 0; j < info::num_hoisted; ++j) {
            void* h = c.x[first_hoisted + j].ptr;
            const std::size_t n = L.shapes[info::hoisted[j]].size();
            if (parts_info::rows[j] && p > 0)
                h = G::is_index[info::hoisted[j]] ? static_cast<void*>(rows_of_part<index_t>(h, n, p))
                                                  : static_cast<void*>(rows_of_part<T>(h, n, p));
            v.val[info::hoisted[j]].ptr = h;
        }
        if constexpr (state_node >= 0) {
            T* zeros = base + L.zeros_off();
            // A one-row h0 was copied into every row of the zeros block by forward().
            void* prev = t > 0                  ? static_cast<void*>(y + (t - 1) * L.y_stride)
                         : (HasH0 && !H0Rows) ? static_cast<void*>(rows_of_part<T>(c.x[1].ptr, L.part_y, p))
                                              : zeros;
            v.val[state_node].ptr = prev;
        }
        if constexpr (input_node >= 0) {
            if constexpr (G::is_index[input_node])
                v.val[input_node].ptr = c.x[0].template as<index_t>() + t * L.x_stride + p * L.part_x;
            else
                v.val[input_node].ptr = c.x[0].template as<T>() + t * L.x_stride + p * L.part_x;
        }
        L.resolve_aliases(v.val);
    }

    template <class T, std::size_t K>
    static detail::exec_state exec_of(const step_views<T, K>& v, const layout<K>& L, const run_info& run, std::size_t t) {
        return {v.val.data(), v.adj.data(), v.scr.data(), L.shapes.data(), info::has_adjoint.data(), G::elem.data(), G::label.data(),
                &G::operands[0][0], G::max_arity, detail::cell_run(run, t),
                &info::adj_writes.mode[0][0], nullptr, nullptr, nullptr, v.bscr.data()};
    }

    /// Runs part(p) for every part: on the pool's threads when there are several.
    template <class F>
    static void for_parts(std::size_t parts, F&& part) {
        if (parts == 1) part(std::size_t(0));
        else kernels::thread_pool::instance().run(parts, part);
    }

    // ---------------------------------------------------------------- forward
    template <class T, std::size_t K>
    static void forward(op_io<T, K>& c) {
        const std::size_t parts = choose_parts(shapes_of(c));
        std::memcpy(c.scratch.ptr, &parts, sizeof parts);  // for backward
        const layout<K>& L = plan_of(c, parts);
        check_lengths<T, K>(c, L);
        if (parts > 1) detail::scan_parts_runs().fetch_add(1, std::memory_order_relaxed);
        for_parts(parts, [&](std::size_t p) { forward_part(c, L, p); });
    }

    // noinline: one body per scan type, called on the calling thread or from a pool task (inlined
    // into both, it doubled the cell's code: test_scan compiled 8 % slower).
    template <class T, std::size_t K>
    [[gnu::noinline]] static void forward_part(const op_io<T, K>& c, const layout<K>& L, std::size_t p) {
        if constexpr (!parts_info::ok) p = 0;  // (a cell that never runs in parts: no part offsets in its code)
        T* base = c.scratch.template as<T>() + L.part_base(p);
        T* zeros = base + L.zeros_off();
        std::fill(zeros, zeros + L.zeros, T(0));
        if constexpr (H0Rows) {  // the initial state: h0 repeated for every sequence
            const std::size_t w = c.x[1].size();
            for (std::size_t r = 0; r * w < L.part_y; ++r) std::copy(c.x_data(1), c.x_data(1) + w, zeros + r * w);
        }
        step_views<T, K> v;
        const std::size_t width = L.rows ? L.part_y / L.rows : 0;
        for (std::size_t t = 0; t < L.steps; ++t) {
            values_at(v, c, L, t, p);
            detail::run_cell_forward<info, T>(exec_of(v, L, c.run, t), std::make_index_sequence<N>{});
            // A padding row keeps the previous state: the previous step's output, whether or not the
            // cell reads its state (lengths are at least 1: no row is padding at t = 0).
            if constexpr (HasLengths) {
                if (t > 0) {
                    const index_t* len = c.x[len_index].template as<index_t>() + p * L.rows;
                    const T* prev = c.y_data() + (t - 1) * L.y_stride + p * L.part_y;
                    T* cur = c.y_data() + t * L.y_stride + p * L.part_y;
                    for (std::size_t b = 0; b < L.rows; ++b)
                        if (index_t(t) >= len[b]) std::copy(prev + b * width, prev + (b + 1) * width, cur + b * width);
                }
            }
        }
    }

    // ---------------------------------------------------------------- backward (BPTT)
    template <class T, std::size_t K>
    static void backward(op_io<T, K>& c) {
        std::size_t parts = 1;
        std::memcpy(&parts, c.scratch.ptr, sizeof parts);  // as forward chose
        const layout<K>& L = plan_of(c, parts);
        for_parts(parts, [&](std::size_t p) { backward_part(c, L, p); });
        // The shared invariants' adjoints: part 0 added into them, the others into sums of their
        // own, added here in part order (the same sums for the same part count, run to run).
        for (std::size_t p = 1; p < parts; ++p) {
            const T* sums = c.scratch.template as<T>() + L.part_base(p) + L.grads_off();
            for (std::size_t j = 0; j < info::num_hoisted; ++j)
                if (!parts_info::rows[j] && info::has_adjoint[info::hoisted[j]] && c.gx[first_hoisted + j])
                    detail::add_into(c.gx[first_hoisted + j].size(), sums + L.grad_off[j], c.gx_data(first_hoisted + j));
            if constexpr (H0Rows)
                if (c.gx[1]) detail::add_into(c.gx[1].size(), sums + L.h0_grad_off, c.gx_data(1));
        }
    }

    template <class T, std::size_t K>
    [[gnu::noinline]] static void backward_part(const op_io<T, K>& c, const layout<K>& L, std::size_t p) {
        if constexpr (!parts_info::ok) p = 0;  // (a cell that never runs in parts: no part offsets in its code)
        T* base = c.scratch.template as<T>() + L.part_base(p);
        T* adj_block = base + L.frames_size(L.steps);
        T* sums = base + L.grads_off();
        if (p > 0) std::fill(sums, sums + L.grads, T(0));
        T* gy = c.gy_data() + p * L.part_y;
        step_views<T, K> v;
        const std::size_t width = L.rows ? L.part_y / L.rows : 0;
        // Every step's dX = dY W^T multiplies by the same W: transposed once per pass, not per step.
        kernels::constant_operands constants;
        if constexpr (std::is_same_v<T, float>)
            for (std::size_t j = 0; j < info::num_hoisted; ++j)
                if (product_weight[j] && !parts_info::rows[j]) {
                    const rshape& w = L.shapes[info::hoisted[j]];
                    constants.add(c.x_data(first_hoisted + j), w.d[0], w.d[1], base + L.transposed_base() + L.transposed_off[j]);
                }
        std::size_t t = L.steps;
        T* kept = base + L.kept_base();
        const auto keep = [&](std::size_t i) {  // a deferred product's x_t and dy_t, after its VJP
            // deferred[] first: a constant once inlined at each node, so the rest is code only there
            if (!deferred[i] || !L.defer[i] || !c.gx[first_hoisted + hoisted_index(std::size_t(G::operands[i][1]))]) return;
            const view& x = v.val[std::size_t(G::operands[i][0])];
            const std::size_t nx = x.size(), ny = v.adj[i].size();
            T* at = kept + L.kept_off[i];
            std::memcpy(at + t * nx, x.ptr, nx * sizeof(T));
            std::memcpy(at + L.steps * nx + t * ny, v.adj[i].ptr, ny * sizeof(T));
        };
        while (t-- > 0) {
            values_at(v, c, L, t, p);
            L.zero_orphans(adj_block);
            for (std::size_t i = 0; i < N; ++i) {
                v.adj[i].ptr = nullptr;
                if (info::computed[i])
                    v.adj[i].ptr = i == info::out ? gy + t * L.y_stride : adj_block + L.adj_off[i];
                v.bscr[i] = L.backward_scratch(adj_block, i);
            }
            for (std::size_t j = 0; j < info::num_hoisted; ++j) {
                const view& g = c.gx[first_hoisted + j];
                if (!g) continue;
                v.adj[info::hoisted[j]].ptr = L.defer_w[j] ? nullptr
                                              : parts_info::rows[j] ? rows_of_part<T>(g.ptr, L.shapes[info::hoisted[j]].size(), p)
                                              : p == 0              ? g.ptr
                                                                    : sums + L.grad_off[j];
            }
            T* g_state = nullptr;  // t == 0 without a differentiable h0: nothing receives it
            if constexpr (state_node >= 0) {
                T* h0_rows = base + L.zeros_off() + L.zeros;
                if (t > 0) g_state = gy + (t - 1) * L.y_stride;
                else if (H0Rows && c.gx[1]) g_state = static_cast<T*>(std::memset(h0_rows, 0, L.h0_adj * sizeof(T)));
                else if (HasH0 && c.gx[1]) g_state = c.gx_data(1) + p * L.part_y;
                v.adj[state_node].ptr = g_state;
            }
            if constexpr (input_node >= 0) {
                if (!G::is_index[input_node] && c.gx[0]) v.adj[input_node].ptr = c.gx_data(0) + t * L.x_stride + p * L.part_x;
            }
            // Padding rows: the adjoint passes to the previous state, the previous step's output (also
            // when the cell does not read its state; no row is padding at t = 0).
            if constexpr (HasLengths) {
                const index_t* len = c.x[len_index].template as<index_t>() + p * L.rows;
                T* g_out = gy + t * L.y_stride;
                T* g_prev = t > 0 ? gy + (t - 1) * L.y_stride : nullptr;
                for (std::size_t b = 0; t > 0 && b < L.rows; ++b)
                    if (index_t(t) >= len[b]) {
                        for (std::size_t k = 0; k < width; ++k) g_prev[b * width + k] += g_out[b * width + k];
                        std::fill(g_out + b * width, g_out + (b + 1) * width, T(0));
                    }
            }
            detail::run_cell_backward<info, T>(exec_of(v, L, c.run, t), keep, std::make_index_sequence<N>{});
            if constexpr (H0Rows) {  // the one-row h0's gradient sums over the sequences
                if (t == 0 && c.gx[1]) {
                    const std::size_t w = c.x[1].size();
                    T* into = p == 0 ? c.gx_data(1) : sums + L.h0_grad_off;
                    for (std::size_t r = 0; r * w < L.part_y; ++r) detail::add_into(w, g_state + r * w, into);
                }
            }
        }
        // The deferred weights' adjoints: W (K x N) += [x_0; ...; x_T-1]^T [dy_0; ...; dy_T-1].
        for (std::size_t i = 0; i < N; ++i) {
            if (!L.defer[i]) continue;
            const std::size_t j = hoisted_index(std::size_t(G::operands[i][1]));
            if (!c.gx[first_hoisted + j]) continue;
            const rshape& w = L.shapes[info::hoisted[j]];
            const std::size_t rows = L.steps * (L.shapes[std::size_t(G::operands[i][0])].size() / w.d[0]);
            const T* x = kept + L.kept_off[i];
            detail::add_xt_dy(w.d[0], w.d[1], rows, x, x + rows * w.d[0], p == 0 ? c.gx_data(first_hoisted + j) : sums + L.grad_off[j],
                              c.run.bf16);
        }
    }

private:
    template <class T, std::size_t K>
    static void check_lengths(const op_io<T, K>& c, const layout<K>& L) {
        if constexpr (HasLengths) {
            const index_t* len = c.x[len_index].template as<index_t>();
            const std::size_t rows = L.batch;
            if (c.x[len_index].size() != rows)
                throw shape_error("ctg::scan: input '" + std::string(c.x_name[len_index]) + "' holds " +
                                  std::to_string(c.x[len_index].size()) + " lengths for a batch of " + std::to_string(rows));
            for (std::size_t b = 0; b < rows; ++b)
                if (len[b] < 1 || std::size_t(len[b]) > L.steps)
                    throw index_error("ctg::scan: length " + std::to_string(len[b]) + " of sequence " +
                                      std::to_string(b) + " in input '" + std::string(c.x_name[len_index]) +
                                      "' is outside [1, " + std::to_string(L.steps) + "] (the padded length)");
        }
    }
};

}  // namespace ops

namespace detail {
template <class Op, class Xs, class... Pre, class... H>
constexpr auto make_scan_node(Xs xs, tlist<H...>, Pre... pre) {
    return make_node<Op>(xs, pre..., H{}...);
}
}  // namespace detail

namespace detail {
template <dim... StateDims, class Cell, class Xs, class H0, class Len>
constexpr auto scan_checked(Cell cell, Xs xs, H0 h0, Len lengths) {
    static_assert(Xs::shape::rank >= 2, "ctg::scan: the sequence needs a time axis and a batch axis (T, B, ...)");
    using state_shape = shape<Xs::shape::dims[1], StateDims...>;
    static_assert(!Xs::is_bf16, "ctg::scan: the sequence must be floats or indices, not a bf16_input");
    using State = typename detail::placeholder_of<state_shape, element::real>::template type<0>;
    // (a bf16 sequence: the cell is still composed over floats, so that the mistake is one error)
    using Step = typename detail::placeholder_of<shape_from<detail::step_shape<Xs>>,
                                                 Xs::is_bf16 ? element::real : element_of<Xs>>::template type<1>;
    using Out = decltype(detail::cell_result(cell(State{}, Step{})));
    static_assert(with_shapes<Out::is_poison || std::is_same_v<typename Out::shape, state_shape>,
                              typename Out::shape::pretty, typename state_shape::pretty>::value,
                  "ctg::scan: the cell must return a new state of the state's shape");
    constexpr bool has_h0 = !std::is_same_v<H0, zero_state>;
    constexpr bool has_len = !std::is_same_v<Len, zero_state>;
    constexpr bool h0_rows = has_h0 && std::is_same_v<typename H0::shape, shape<StateDims...>>;
    if constexpr (has_h0) {
        static_assert(with_shapes<std::is_same_v<typename H0::shape, state_shape> || h0_rows,
                                  typename H0::shape::pretty, typename state_shape::pretty>::value,
                      "ctg::scan: the initial state must have the state's shape, or that shape without the batch axis");
    }
    if constexpr (has_len) {
        static_assert(with_shapes<Len::is_index && Len::shape::rank == 1 && Len::shape::dims[0] == Xs::shape::dims[1],
                                  typename Len::shape::pretty, typename Xs::shape::pretty>::value,
                      "ctg::scan: lengths must be an index_input with one entry per sequence (B)");
    }
    constexpr bool per_step = [] {
        if constexpr (Out::is_poison) return true; else return detail::cell_info<Out>::variant[detail::cell_info<Out>::out];
    }();
    static_assert(per_step, "ctg::scan: the cell's result depends on neither the state nor the step input");
    if constexpr (Out::is_poison || !per_step || Xs::is_bf16) {
        return poison{};
    } else {
        using Op = ops::scan_op<Out, has_h0, has_len, h0_rows>;
        using hoisted = typename detail::cell_info<Out>::hoisted_list;
        if constexpr (has_h0 && has_len) return detail::make_scan_node<Op>(xs, hoisted{}, h0, lengths);
        else if constexpr (has_h0) return detail::make_scan_node<Op>(xs, hoisted{}, h0);
        else if constexpr (has_len) return detail::make_scan_node<Op>(xs, hoisted{}, lengths);
        else return detail::make_scan_node<Op>(xs, hoisted{});
    }
}
}  // namespace detail

/// Runs `cell` over the leading (time) axis of `xs`; the state has shape (B, StateDims...) where B is
/// xs's second dimension. See the file comment.
template <dim... StateDims, class Cell, expr Xs, class H0 = zero_state, class Len = zero_state>
constexpr auto scan(Cell cell, Xs xs, H0 h0 = {}, Len lengths = {}) {
    if constexpr (any_poison<Xs, H0, Len>) return poison{};  // its error was said where it was made
    else return detail::scan_checked<StateDims...>(cell, xs, h0, lengths);
}

}  // namespace ctg
