// ctgraph/graph/cell.hpp: a cell, the static sub-graph that scan (graph/scan.hpp) runs at every
// time step and repeat (graph/repeat.hpp) at every layer: what it reads and computes (cell_info),
// where its values, adjoints and scratch live in a step's frame (cell_frame), its plans remembered
// per input shape, and the folds that run its nodes forward and backward.
#pragma once
#include <algorithm>
#include <array>
#include <atomic>
#include <cstring>
#include <span>
#include <string>
#include <string_view>

#include "ctgraph/graph/analysis.hpp"
#include "ctgraph/graph/exec.hpp"
#include "ctgraph/graph/node.hpp"
#include "ctgraph/kernels/parallel.hpp"
#include "ctgraph/kernels/simd.hpp"
#include "ctgraph/memory.hpp"
#include "ctgraph/op.hpp"

namespace ctg {
namespace detail {

/// The adjoint writes of a cell's VJPs (adj_write_modes) where the engine owns every computed
/// node's adjoint except the result's, and the leaves `also_owned` as well.
template <class G, std::size_t N>
constexpr auto cell_adj_write_modes(const std::array<bool, N>& computed, const std::array<bool, N>& has_adjoint,
                                    std::size_t out, const std::array<bool, N>& also_owned) {
    std::array<bool, N> owned{}, runs{};
    for (std::size_t i = 0; i < N; ++i) {
        runs[i] = computed[i] && has_adjoint[i];
        owned[i] = (runs[i] && i != out) || (also_owned[i] && has_adjoint[i]);
    }
    return adj_write_modes(G::arity, G::operands, owned, runs);
}

/// Compile-time facts about a cell's sub-graph. PerStepParams (depth, see repeat.hpp): the cell's
/// parameters differ per step (one slice of a stacked parameter each), so whatever reads them runs
/// every step; otherwise (scan) parameters are loop invariants.
template <class CellOut, bool PerStepParams = false>
struct cell_info {
    using G = graph<topo_order<CellOut>, options{}, 1>;
    static constexpr std::size_t N = G::size;
    static constexpr std::size_t out = N - 1;  // the cell's result is last in topological order

    /// Depends on the state, the step input or (PerStepParams) a parameter: differs per step.
    static constexpr std::array<bool, N> variant = [] {
        std::array<bool, N> v{};
        for (std::size_t i = 0; i < N; ++i) {
            v[i] = G::kind[i] == leaf_kind::placeholder || (PerStepParams && G::kind[i] == leaf_kind::param);
            for (std::size_t k = 0; k < G::arity[i]; ++k) v[i] = v[i] || v[std::size_t(G::operands[i][k])];
        }
        return v;
    }();
    /// Op nodes that run every step (they get per-step values, scratch and adjoints).
    static constexpr std::array<bool, N> computed = [] {
        std::array<bool, N> c{};
        for (std::size_t i = 0; i < N; ++i) c[i] = variant[i] && G::kind[i] == leaf_kind::none;
        return c;
    }();
    /// Invariant nodes read by variant ones: they become operands of the scan node.
    static constexpr std::array<bool, N> hoisted_mask = [] {
        std::array<bool, N> h{};
        for (std::size_t i = 0; i < N; ++i)
            if (computed[i])
                for (std::size_t k = 0; k < G::arity[i]; ++k) {
                    const std::size_t j = std::size_t(G::operands[i][k]);
                    if (!variant[j]) h[j] = true;
                }
        return h;
    }();
    static constexpr std::size_t num_hoisted = [] {
        std::size_t n = 0;
        for (bool b : hoisted_mask) n += b;
        return n;
    }();
    static constexpr std::array<std::size_t, num_hoisted + 1> hoisted = [] {
        std::array<std::size_t, num_hoisted + 1> r{};
        std::size_t n = 0;
        for (std::size_t i = 0; i < N; ++i)
            if (hoisted_mask[i]) r[n++] = i;
        return r;
    }();
    /// The per-step parameters (PerStepParams only), in topological order.
    static constexpr std::size_t num_step_params = [] {
        std::size_t n = 0;
        for (std::size_t i = 0; i < N; ++i) n += PerStepParams && G::kind[i] == leaf_kind::param;
        return n;
    }();
    static constexpr std::array<std::size_t, num_step_params + 1> step_params = [] {
        std::array<std::size_t, num_step_params + 1> r{};
        std::size_t n = 0;
        for (std::size_t i = 0; i < N; ++i)
            if (PerStepParams && G::kind[i] == leaf_kind::param) r[n++] = i;
        return r;
    }();
    /// The nodes an adjoint reaches from the result: through every computed node but a
    /// ctg::stop_gradient (G::stops). Without stop_gradient in the cell, every node.
    static constexpr std::array<bool, N> reached = [] {
        std::array<bool, N> r{};
        r[out] = true;
        for (std::size_t j = N; j-- > 0;)
            if (r[j] && computed[j] && !G::stops[j])
                for (std::size_t k = 0; k < G::arity[j]; ++k) r[std::size_t(G::operands[j][k])] = true;
        return r;
    }();
    /// Every node except index and bf16 ones, constants, and those no adjoint reaches (stop_gradient)
    /// may get an adjoint inside the cell; one that nothing outside needs (a leaf whose outer
    /// operand has none) is null, so its VJP is skipped.
    static constexpr std::array<bool, N> has_adjoint = [] {
        std::array<bool, N> g{};
        for (std::size_t i = 0; i < N; ++i)
            g[i] = !G::is_index[i] && !G::is_bf16[i] && G::kind[i] != leaf_kind::constant && reached[i] && !G::stops[i];
        return g;
    }();
    /// The computed nodes whose VJP runs (run_cell_backward): not index ones, and not those no
    /// adjoint reaches.
    static constexpr std::array<bool, N> vjp_runs = [] {
        std::array<bool, N> r{};
        for (std::size_t i = 0; i < N; ++i) r[i] = computed[i] && !G::is_index[i] && reached[i] && !G::stops[i];
        return r;
    }();

    /// Computed nodes that keep a bf16 shadow in a mixed-precision training program's frames
    /// (exec.hpp, bf16_shadowed): those a computed node reads as a product operand. The cell's
    /// result (the next step's input, read outside) and index values keep none.
    static constexpr std::array<bool, N> shadowed = [] {
        constexpr auto prod = []<std::size_t... I>(std::index_sequence<I...>) {
            return std::array<std::uint32_t, N>{bf16_operands_of<op_of_t<typename G::template node_t<I>>>...};
        }(std::make_index_sequence<N>{});
        return bf16_shadowed(G::arity, G::operands, prod,
                             [](std::size_t i) { return computed[i] && i != out && !G::is_index[i]; },
                             [](std::size_t j) { return computed[j]; });
    }();

    /// The values that keep no float for backward when the frame says so (cell_frame::only; exec.hpp,
    /// bf16_only_values): backward reads them only through their shadow, or not at all.
    static constexpr bf16_only_plan<N> bf16_only =
        bf16_only_values_of<G, false>(shadowed, [](std::size_t i) { return computed[i] && i != out && !G::is_index[i]; });
    /// ... and with those that VJPs read rounded (cell_frame::saved, options::bf16_saved).
    static constexpr bf16_only_plan<N> bf16_saved =
        bf16_only_values_of<G, true>(shadowed, [](std::size_t i) { return computed[i] && i != out && !G::is_index[i]; });
    static constexpr const bf16_only_plan<N>& bf16_plan(bool saved) { return saved ? bf16_saved : bf16_only; }
    /// Whether node i's float is scratch shared while forward reads it (one of those, not an alias).
    static constexpr bool float_transient(const bf16_only_plan<N>& p, std::size_t i) {
        return p.only[i] && !G::aliases[i] && !p.no_float[i];
    }

    /// The computed nodes that read node i, of lowest and highest index (N where none does).
    static constexpr std::array<std::size_t, N> first_reader = [] {
        std::array<std::size_t, N> r{};
        r.fill(N);
        for (std::size_t j = N; j-- > 0;)
            if (computed[j])
                for (std::size_t k = 0; k < G::arity[j]; ++k) r[std::size_t(G::operands[j][k])] = j;
        return r;
    }();
    static constexpr std::array<std::size_t, N> last_reader = [] {
        std::array<std::size_t, N> r{};
        r.fill(N);
        for (std::size_t j = 0; j < N; ++j)
            if (computed[j])
                for (std::size_t k = 0; k < G::arity[j]; ++k) r[std::size_t(G::operands[j][k])] = j;
        return r;
    }();
    /// Computed nodes whose op can make their bf16 shadow again from what its VJP reads (op.hpp,
    /// remakes_bf16_result), read inside the cell: where the frame keeps them in bf16 only and
    /// nothing reads their float, cell_frame::remade.
    static constexpr std::array<bool, N> remakable = [] {
        constexpr std::array<bool, N> op_can = []<std::size_t... I>(std::index_sequence<I...>) {
            return std::array<bool, N>{remakes_bf16_result_of<op_of_t<typename G::template node_t<I>>>...};
        }(std::make_index_sequence<N>{});
        std::array<bool, N> r{};
        for (std::size_t i = 0; i < N; ++i) r[i] = computed[i] && i != out && !G::is_index[i] && op_can[i] && last_reader[i] < N;
        return r;
    }();

    /// How each step's VJPs write the computed nodes' adjoints (adj_write_modes): the first writer
    /// assigns or zeroes, so the per-step adjoint block is never cleared as a whole. The cell's
    /// result and its leaves (state, step input, invariants, parameters) belong to the enclosing op.
    static constexpr auto adj_writes = cell_adj_write_modes<G>(computed, has_adjoint, out, std::array<bool, N>{});
    /// The VJP that writes each owned adjoint first (its consumer of highest index), or N for one
    /// no VJP writes (zeroed at the start of the step): where that adjoint's life begins.
    static constexpr std::array<std::size_t, N> first_writer = [] {
        std::array<std::size_t, N> f{};
        for (std::size_t j = 0; j < N; ++j) f[j] = adj_writes.orphan[j] ? N : j;
        for (std::size_t i = 0; i < N; ++i)
            for (std::size_t k = 0; k < G::arity[i]; ++k)
                if (adj_writes.mode[i][k] != adj_write::add) f[std::size_t(G::operands[i][k])] = i;
        return f;
    }();
    /// Whose adjoint memory node j's adjoint is (adjoint_roots). The result's adjoint is the
    /// enclosing op's; in a repeat's block (PerStepParams) it is shared too (`out` is then a root
    /// outside the block's memory: the layer's output adjoint, adjoint_shares_result), so that a
    /// block ending in a residual sum copies no adjoint into its branch. A scan's is not: the
    /// scan adds the next step's state adjoint into it.
    static constexpr std::array<std::size_t, N> adj_root = [] {
        std::array<bool, N> planned{}, shared_root{};
        for (std::size_t i = 0; i < N; ++i) planned[i] = computed[i] && has_adjoint[i] && i != out;
        shared_root[out] = PerStepParams && computed[out] && has_adjoint[out];
        return adjoint_roots(G::arity, G::operands, G::identity_vjp, planned, shared_root);
    }();
    /// Whether node i's adjoint is the result's memory (adj_root; a repeat's block only).
    static constexpr bool adjoint_shares_result(std::size_t i) { return i != out && adj_root[i] == out; }
    static constexpr std::size_t num_orphans = [] {
        std::size_t n = 0;
        for (bool b : adj_writes.orphan) n += b;
        return n;
    }();
    static constexpr std::array<std::size_t, num_orphans + 1> orphans = [] {
        std::array<std::size_t, num_orphans + 1> r{};
        std::size_t n = 0;
        for (std::size_t i = 0; i < N; ++i)
            if (adj_writes.orphan[i]) r[n++] = i;
        return r;
    }();

    template <std::size_t... J>
    static auto hoisted_types(std::index_sequence<J...>) -> tlist<typename G::template node_t<hoisted[J]>...>;
    using hoisted_list = decltype(hoisted_types(std::make_index_sequence<num_hoisted>{}));
    template <std::size_t... J>
    static auto step_param_types(std::index_sequence<J...>) -> tlist<typename G::template node_t<step_params[J]>...>;
    using step_param_list = decltype(step_param_types(std::make_index_sequence<num_step_params>{}));
};

/// Where one step of a cell keeps its values, op scratch and adjoints, computed from the runtime
/// shapes of the cell's nodes (shared by scan and repeat). Element offsets, each rounded up.
template <class Info>
struct cell_frame {
    using G = typename Info::G;
    static constexpr std::size_t N = Info::N;
    std::array<rshape, N> shapes{};
    std::array<std::size_t, N> val_off{}, adj_off{}, scr_off{}, scr_size{};
    std::size_t per_step = 0, adj_block = 0;
    bool forward_only = false;  // one frame for every step (run_info::forward_only), no adjoints
    // Whether the frame holds bf16 shadows (run_info::bf16_shadows; never in a forward-only frame):
    // node i's (Info::shadowed) at sh_off[i], (size + 1) / 2 floats holding its bf16 values.
    bool shadows = false;
    std::array<std::size_t, N> sh_off{};
    // Whether values whose floats backward does not read keep none (run_info::bf16_only, with
    // shadows): node i's (Info::float_transient) float then lives at tr_off[i] of one block of
    // tr_size elements shared by every step, while forward reads it, instead of in the step's frame.
    bool only = false;
    std::array<std::size_t, N> tr_off{};
    std::size_t tr_size = 0;
    // With only: node i's forward scratch (op.hpp, forward_scratch_size; fs_size[i] elements) at
    // fs_off[i] of that block, live during its forward alone.
    std::array<std::size_t, N> fs_off{}, fs_size{};
    // Node i's backward scratch (op.hpp, backward_scratch_size; bs_size[i] elements) at bs_off[i] of
    // the adjoint block, live during its VJP alone (place_adjoints; not in a forward-only frame).
    std::array<std::size_t, N> bs_off{}, bs_size{};
    // With only: whether values that VJPs read rounded are kept in bf16 only too (run_info::bf16_saved).
    bool saved = false;
    // Node i's shadow is not kept in the step's frame but made again (remade[i]; see plan()):
    // while forward reads it, at tr_off[i] of the transients' block; from its last reader's VJP
    // to its first reader's, at rm_off[i] of the adjoint block.
    std::array<bool, N> remade{};
    std::array<std::size_t, N> rm_off{};
    /// The values in bf16 only, and the shadows, of this frame (with only).
    const bf16_only_plan<N>& only_plan() const { return Info::bf16_plan(saved); }
    /// Whether node i keeps a bf16 shadow in this frame.
    bool shadowed(std::size_t i) const { return shadows && (only ? only_plan().shadow[i] : Info::shadowed[i]); }
    /// Whether node i keeps no float for backward in this frame.
    bool bf16_only(std::size_t i) const { return only && only_plan().only[i]; }

    /// Where step (or layer) t's frame starts: all steps' values are kept for backward, a
    /// forward-only pass reuses one frame.
    std::size_t frame_off(std::size_t t) const { return forward_only ? 0 : t * per_step; }
    /// Elements of the frames of `steps` steps.
    std::size_t frames_size(std::size_t steps) const { return forward_only ? per_step : steps * per_step; }

    /// Binds the cell's dimension letters from the runtime shapes of some of its nodes:
    /// {cell node, runtime shape, leading axes of that shape to skip}.
    struct binding {
        std::size_t node;
        rshape shape;
        std::size_t skip;
    };
    /// bf16: 1 keeps bf16 shadows, 2 also values in bf16 only, 3 also those that VJPs read rounded
    /// (not in a forward-only frame).
    void plan(const binding* known, std::size_t count, bool forward_pass_only, int bf16 = 0) {
        forward_only = forward_pass_only;
        shadows = bf16 >= 1 && !forward_only;
        only = bf16 >= 2 && shadows;
        saved = bf16 >= 3 && only;
        std::array<std::pair<char, std::size_t>, 16> env{};
        std::size_t nenv = 0;
        for (const binding& b : std::span(known, count))
            for (std::size_t a = 0; a < G::rank[b.node]; ++a) {
                const char c = G::dims[b.node][a].sym;
                if (!c) continue;
                bool seen = false;
                for (std::size_t e = 0; e < nenv; ++e) seen = seen || env[e].first == c;
                if (!seen && nenv < env.size()) env[nenv++] = {c, b.shape.d[a + b.skip]};
            }
        auto value_of = [&](char c) -> std::size_t {
            for (std::size_t e = 0; e < nenv; ++e)
                if (env[e].first == c) return env[e].second;
            return 0;
        };
        for (std::size_t i = 0; i < N; ++i) {
            shapes[i].rank = G::rank[i];
            for (std::size_t a = 0; a < G::rank[i]; ++a)
                shapes[i].d[a] = G::dims[i][a].sym ? value_of(G::dims[i][a].sym) : std::size_t(G::dims[i][a].n);
        }
        scratch_sizes(std::make_index_sequence<N>{});
        // A value kept in bf16 only whose float nothing reads (a Transformer FFN's activation,
        // read by the second product alone), made by an op that can make its shadow again from
        // what its own VJP keeps (affine_gelu, from the pre-activation): its shadow lives only
        // while forward's readers and backward's read it, not from forward until backward. The
        // op makes it again before the first of its readers' VJPs (run_cell_backward).
        for (std::size_t i = 0; i < N; ++i) remade[i] = only && Info::remakable[i] && only_plan().no_float[i];
        if (forward_only) {
            place_values_by_lifetime();
            return;
        }
        // Per step: values and op scratch of the computed nodes (the result lives elsewhere).
        std::size_t off = 0;
        for (std::size_t i = 0; i < N; ++i) {
            if (!Info::computed[i]) continue;
            if (i != Info::out && !G::aliases[i] && !bf16_only(i)) {  // an aliasing node reads its operand's memory
                val_off[i] = off;
                off += round_up_lines(shapes[i].size());
            }
            scr_off[i] = off;
            off += round_up_lines(scr_size[i]);
            if (shadowed(i) && !remade[i]) {  // (bf16 programs are float programs: 2 values per element)
                sh_off[i] = off;
                off += round_up_lines((shapes[i].size() + 1) / 2);
            }
        }
        per_step = off;
        place_adjoints();
        tr_size = 0;
        if (only) place_transients();
    }

    /// Those floats, first fit by lifetime: node i's from its forward to that of its last forward
    /// reader (a reader in forward only, or an alias making its shadow), only_plan().last[i]; and
    /// the ops' forward scratch, during their forward (detail::place_forward_transients).
    /// A remade shadow (remade) takes a float's place there, from its forward to its last reader's.
    void place_transients() {
        std::array<std::size_t, N> last = only_plan().last;
        for (std::size_t i = 0; i < N; ++i)
            if (remade[i]) last[i] = Info::last_reader[i];
        tr_size = place_forward_transients(
            [this](std::size_t i) { return Info::computed[i] && (Info::float_transient(only_plan(), i) || remade[i]); }, last,
            [this](std::size_t i) { return round_up_lines(remade[i] ? shadow_elems(i) : shapes[i].size()); }, fs_size,
            [](std::size_t e) { return round_up_lines(e); }, tr_off, fs_off);
    }
    /// Floats that hold node i's bf16 shadow, two elements each.
    std::size_t shadow_elems(std::size_t i) const { return (shapes[i].size() + 1) / 2; }

    /// Adjoints share memory by lifetime. Node j's adjoint is live from its first writer's VJP
    /// (Info::first_writer[j], the consumer of highest index) until j's own VJP has read it; the VJPs
    /// run from the last node down, so two adjoints may share memory when one's node runs before the
    /// other's first writer (j1 > fw2). First fit, in the order they become live: a Transformer
    /// block's adjoints take about a third of their sum.
    /// An adjoint shared with an alias's (Info::adj_root) is live from the alias's first writer
    /// until the lowest sharing node's VJP. An op's backward scratch (bs_size) is live during its
    /// VJP alone, placed after the adjoints that become live by then. A remade shadow (remade) is
    /// live from its last reader's VJP, before which the op makes it, to its first reader's.
    void place_adjoints() {
        // order: N + i for node i's backward scratch, 2 N + i for its remade shadow, j for adjoint j
        std::array<std::size_t, 3 * N> order{};
        std::array<std::size_t, N> lowest{};
        std::size_t n = 0;
        for (std::size_t i = 0; i < N; ++i) lowest[i] = i;
        for (std::size_t i = 0; i < N; ++i)
            if (Info::computed[i]) {
                if (bs_size[i]) order[n++] = N + i;
                if (remade[i]) order[n++] = 2 * N + i;
                if (i == Info::out) continue;
                if (Info::adj_root[i] == i) order[n++] = i;
                else if (!Info::adjoint_shares_result(i)) lowest[Info::adj_root[i]] = std::min(lowest[Info::adj_root[i]], i);
            }
        // Backward time runs from node N - 1 down: adjoint j is live at steps N - first_writer[j] ..
        // N - j, node i's backward scratch at step N - i, its remade shadow at N - last_reader[i] ..
        // N - first_reader[i].
        const auto first = [](std::size_t a) {
            return a < N ? N - Info::first_writer[a] : a < 2 * N ? N - (a - N) : N - Info::last_reader[a - 2 * N];
        };
        std::sort(order.begin(), order.begin() + n,
                  [&](std::size_t x, std::size_t y) { return first(x) != first(y) ? first(x) < first(y) : x < y; });
        std::array<lifetime, 3 * N> blocks{};
        std::array<std::size_t, 3 * N> offset{};
        std::array<std::pair<std::size_t, std::size_t>, 3 * N> taken{};
        for (std::size_t a = 0; a < n; ++a) {
            const std::size_t j = order[a];
            blocks[a] = j < N       ? lifetime{first(j), N - lowest[j], round_up_lines(shapes[j].size())}
                        : j < 2 * N ? lifetime{first(j), first(j), round_up_lines(bs_size[j - N])}
                                    : lifetime{first(j), N - Info::first_reader[j - 2 * N], round_up_lines(shadow_elems(j - 2 * N))};
        }
        adj_block = place_by_lifetime(n, blocks.data(), offset.data(), taken.data());
        for (std::size_t a = 0; a < n; ++a)
            (order[a] < N ? adj_off[order[a]] : order[a] < 2 * N ? bs_off[order[a] - N] : rm_off[order[a] - 2 * N]) = offset[a];
        for (std::size_t i = 0; i < N; ++i)
            if (Info::computed[i] && i != Info::out && Info::adj_root[i] != i && !Info::adjoint_shares_result(i))
                adj_off[i] = adj_off[Info::adj_root[i]];
    }

    /// A forward-only frame: values and op scratch of one step by lifetime (first fit), as an
    /// inference program places its own (program::place_values_by_lifetime). Node i's value is live
    /// from its forward to its last reader's in the step (its aliases' readers included), its
    /// scratch during its forward; nothing of a step is read by the next but the result.
    void place_values_by_lifetime() {
        std::array<std::size_t, N> until = G::last_use;
        for (std::size_t i = N; i-- > 0;)
            if (Info::computed[i] && G::aliases[i]) {
                const std::size_t o = std::size_t(G::operands[i][0]);
                until[o] = std::max(until[o], until[i]);
            }
        per_step = place_forward_frame(
            until, [](std::size_t i) { return Info::computed[i] && i != Info::out && !G::aliases[i]; },
            [this](std::size_t i) { return round_up_lines(shapes[i].size()); },
            [this](std::size_t i) { return Info::computed[i] ? round_up_lines(scr_size[i]) : std::size_t(0); },
            val_off, scr_off);
        adj_block = 0;
    }

    /// Points the aliasing nodes of one step (reshape) at their operand's memory, once every other
    /// value of the step has its place. The cell's result keeps its own (the op then copies).
    static void resolve_aliases(std::array<view, N>& val) {
        for (std::size_t i = 0; i < N; ++i)
            if (Info::computed[i] && G::aliases[i] && i != Info::out) val[i].ptr = val[std::size_t(G::operands[i][0])].ptr;
    }

    /// Node i's backward scratch in a step's adjoint block (null where it has none).
    template <class T>
    view backward_scratch(T* adj_block_base, std::size_t i) const {
        return {bs_size[i] ? adj_block_base + bs_off[i] : nullptr, rshape{1, {bs_size[i]}}};
    }

    /// Zeroes the adjoints of one step that no VJP writes (see cell_info::orphans).
    template <class T>
    void zero_orphans(T* adj_block_base) const {
        for (std::size_t k = 0; k < Info::num_orphans; ++k) {
            const std::size_t i = Info::orphans[k];
            std::memset(adj_block_base + adj_off[i], 0, shapes[i].size() * sizeof(T));
        }
    }

private:
    /// scratch_size's fifth argument for an op of this frame (op.hpp): the frame's bf16 level (an
    /// affine_activation keeps its pre-activation in bf16 at 3), except for a nested repeat, which
    /// plans its frames from its run flags, cleared inside a cell (run_info), so from 0.
    template <class Op>
    int scratch_bf16_level() const {
        if constexpr (requires { Op::layers; }) return 0;
        else return bf16_frame_level(shadows, only, saved);
    }
    template <std::size_t... I>
    void scratch_sizes(std::index_sequence<I...>) {
        ((bs_size[I] = Info::computed[I] && !forward_only
                           ? detail::transient_size_of<detail::op_of_t<typename G::template node_t<I>>, G::arity[I], true>(
                                 shapes.data(), &G::operands[0][0], G::max_arity, I, bf16_frame_level(shadows, only, saved))
                           : 0),
         ...);
        ((fs_size[I] = Info::computed[I] && only
                           ? detail::transient_size_of<detail::op_of_t<typename G::template node_t<I>>, G::arity[I], false>(
                                 shapes.data(), &G::operands[0][0], G::max_arity, I, bf16_frame_level(shadows, only, saved))
                           : 0),
         ...);
        ((scr_size[I] = Info::computed[I] ? detail::scratch_size_of<detail::op_of_t<typename G::template node_t<I>>,
                                                                    G::arity[I]>(shapes.data(), &G::operands[0][0],
                                                                                  G::max_arity, I, forward_only, false,
                                                                                  scratch_bf16_level<detail::op_of_t<typename G::template node_t<I>>>())
                                          : 0),
         ...);
    }
};

/// plan(xs, forward_only) remembered per op type and thread: scan and repeat keep no state and plan
/// their cell from the operand shapes at every call (a decoding step calls each once per token);
/// the same shapes give the same layout, so only new shapes plan again (first-fit placement was
/// 2 % of a decoded token). The reference stays valid until the same op type plans again on this
/// thread, which cannot happen inside its own call (an op cannot contain itself).
/// `parts` (scan's batch parts) is part of the key; plan(xs, forward_only, parts).
template <class Layout, std::size_t K, class Plan>
const Layout& remembered_plan(const std::array<rshape, K>& xs, bool forward_only, std::size_t parts, Plan&& plan) {
    struct entry {
        std::array<rshape, K> shapes{};
        std::size_t parts = 0;
        bool forward_only = false, valid = false;
        Layout layout{};
    };
    thread_local entry last;
    if (!last.valid || last.forward_only != forward_only || last.parts != parts || !(last.shapes == xs)) {
        last.layout = plan(xs, forward_only, parts);
        last.shapes = xs;
        last.parts = parts;
        last.forward_only = forward_only;
        last.valid = true;
    }
    return last.layout;
}

/// Runs one step of a cell: the computed nodes' forward in order, or their VJPs in reverse order.
template <class Info, class T, std::size_t... I>
void run_cell_forward(const exec_state& s, std::index_sequence<I...>) {
    using G = typename Info::G;
    ((Info::computed[I] ? exec_forward<op_of_t<typename G::template node_t<I>>, G::arity[I], T>(s, I) : void()), ...);
}
/// Node I's exec_remake where its op makes its shadow again, else null.
template <class G, class T, std::size_t I>
constexpr void (*remake_fn())(const exec_state&, std::size_t) {
    using Op = op_of_t<typename G::template node_t<I>>;
    if constexpr (remakes_bf16_result_of<Op>) return &exec_remake<Op, G::arity[I], T>; else return nullptr;
}
/// Makes again the shadows of the step's remade values (exec_state::remade) that node r's VJP is
/// the first to read in backward (their reader of highest index).
template <class Info, class T>
void remake_shadows_before(const exec_state& s, std::size_t r) {
    using G = typename Info::G;
    static constexpr auto fns = []<std::size_t... I>(std::index_sequence<I...>) {
        return std::array<void (*)(const exec_state&, std::size_t), Info::N>{remake_fn<G, T, I>()...};
    }(std::make_index_sequence<Info::N>{});
    for (std::size_t i = 0; i < Info::N; ++i)
        if (Info::remakable[i] && Info::last_reader[i] == r && s.remade[i]) fns[i](s, i);
}
/// after(i) runs right after node i's VJP, while its adjoint is still intact (scan keeps some).
template <class Info, class T, class After, std::size_t... I>
void run_cell_backward(const exec_state& s, After&& after, std::index_sequence<I...>) {
    using G = typename Info::G;
    constexpr std::size_t M = sizeof...(I);
    constexpr bool any_remakable = std::find(Info::remakable.begin(), Info::remakable.end(), true) != Info::remakable.end();
    ((Info::computed[M - 1 - I] ? ((any_remakable && s.remade ? remake_shadows_before<Info, T>(s, M - 1 - I) : void()),
                                   exec_backward<op_of_t<typename G::template node_t<M - 1 - I>>, G::arity[M - 1 - I],
                                                 Info::vjp_runs[M - 1 - I], T>(s, M - 1 - I),
                                   after(M - 1 - I))
                                : void()),
     ...);
}

template <class N, int Role>
constexpr bool is_role() {
    if constexpr (N::kind == leaf_kind::placeholder) return N::role == Role; else return false;
}
template <class CellOut, int Role, std::size_t... I>
constexpr int find_role_impl(std::index_sequence<I...>) {
    using G = typename cell_info<CellOut>::G;
    constexpr bool hits[] = {is_role<typename G::template node_t<I>, Role>()..., false};
    for (std::size_t i = 0; i < sizeof...(I); ++i)
        if (hits[i]) return int(i);
    return -1;
}

template <class S, element Elem>
struct placeholder_of;
template <dim... D, element Elem>
struct placeholder_of<shape<D...>, Elem> {
    template <int Role>
    using type = placeholder<Role, Elem, D...>;
};

/// The copy that makes an argument of a cell its result. scan and repeat write a step's output
/// through the cell's result node; a cell that returns one of its arguments unchanged (its state, the
/// step input, an extra value of repeat, a block's parameter) has no such node, and the output was
/// left as zeros. cell_result(out) is the cell's own result when that is an op node, else this copy.
struct cell_result_op {
    static constexpr std::string_view name = "cell_result";
    static constexpr bool assigns_adjoints = true;
    static constexpr std::uint32_t backward_reads = 0;  // (op.hpp)
    template <class A>
    static consteval bool check() { return true; }
    template <class A>
    static consteval auto dims() { return A::dims; }
    template <class A>
    static consteval bool rows_independent() { return true; }
    template <class T>
    static void forward(op_io<T, 1>& c) { std::copy(c.x_data(0), c.x_data(0) + c.y.size(), c.y_data()); }
    template <class T>
    static void backward(op_io<T, 1>& c) {
        if (T* g = c.gx_data(0)) kernels::put(c.fresh(0), c.y.size(), static_cast<const T*>(c.gy_data()), g);
    }
};
template <class Out>
constexpr auto cell_result(Out out) {
    if constexpr (Out::is_poison || Out::kind == leaf_kind::none) return out;
    else return make_node<cell_result_op>(out);
}

// A step's input shape: a sequence's without its leading axis (time for scan, layers for repeat).
template <class Xs>
struct step_shape {
    static constexpr auto value = [] {
        std::array<dim, Xs::shape::rank - 1> r{};
        for (std::size_t i = 1; i < Xs::shape::rank; ++i) r[i - 1] = Xs::shape::dims[i];
        return r;
    }();
};

}  // namespace detail
}  // namespace ctg
