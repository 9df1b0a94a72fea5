// ctgraph/graph/repeat.hpp: depth as a loop. L layers of one block are one type.
//
//   auto y = repeat<L, "blocks.">(block, x);             // x (any shape) -> block applied L times
//   auto y = repeat<L, "dec.">(block, x, memory, ...);    // block(h, memory, ...): values every layer reads
//   auto y = repeat<L, "b.">(block, x, per_layer(cache));  // block(h, cache_l): row l of (L, ...) per layer
//
// `block(x)` is ordinary ctgraph code: it receives a placeholder for the carried value (the
// residual stream of a Transformer) and returns the next layer's value, of the same shape. It is
// composed once; L is only a number. Every parameter the block declares is per layer: in the
// program, param<"ln1.weight", D> inside the block is layered_param<"blocks.ln1.weight", L, D>, a stacked
// parameter whose row l is layer l's (so L layers cost one block's compile time, not L blocks').
// Values computed outside that every layer reads (an encoder's memory) are passed after x: the
// block receives a placeholder for each, so their own parameters stay outside and unstacked; their
// adjoints sum over the layers. Lengths for a padding mask may be named directly. A block that
// closes over a value combining data with parameters without going through its own arguments (an
// encoder's output, or an input the block multiplies by its weights) is a compile error: by types
// alone it cannot be told from the block's own computation, and its parameters would silently
// become per-layer; pass such values after x.
//
// Forward runs the block L times, keeping each layer's intermediate values (backward needs them)
// and each layer's output; the last layer's output is the node's value. Backward runs the layers'
// VJPs from L-1 down to 0; a layer's input adjoint is the previous layer's output adjoint (two
// buffers, alternating), and each layer's parameter gradients land in their own rows: row l is
// final once layer l is done, and program::backward_with reports it then (layered_operand).
//
// options{.recompute = true} (training programs) trades compute for memory: forward keeps each
// layer's input (the layer outputs, kept anyway) and runs every layer in ONE frame; backward, for
// layer l from L-1 down, first reruns layer l's forward from its kept input into that frame (the
// same kernels, operands and random streams: the values are those forward computed, bit for bit),
// then runs its VJPs; only the nodes whose values a VJP reads are rerun (repeat_op::rerun). The
// frame holds layer L-1 when forward ends, so a backward that follows directly reruns L-1 layers
// (the scratch's last line records which layer the frame holds).
#pragma once
#include <algorithm>
#include <array>
#include <cstring>
#include <string>
#include <type_traits>
#include <utility>

#include "ctgraph/graph/cell.hpp"

namespace ctg {

/// Marks an argument of repeat whose leading axis runs over the layers: layer l's block receives
/// row l (a KV cache per layer, say).
template <expr E>
struct per_layer_arg {
    using type = E;  ///< the marked argument
};
/// Marks `e` as a per-layer argument of ctg::repeat: its leading axis has one row per layer.
template <expr E>
constexpr per_layer_arg<E> per_layer(E) { return {}; }

namespace detail {
template <class A>
struct repeat_arg {  // an argument every layer reads whole
    using type = A;
    static constexpr bool sliced = false;
    using shape = typename A::shape;
};
template <class E>
struct repeat_arg<per_layer_arg<E>> {
    using type = E;
    static constexpr bool sliced = true;
    using shape = shape_from<step_shape<E>>;  // without the layer axis
};
/// param<Name, D...> -> layered_param<Prefix + Name, L, D...>.
template <fixed_string Prefix, int L, class P, class I = std::make_index_sequence<P::shape::rank>>
struct stacked_param;
template <fixed_string Prefix, int L, class P, std::size_t... I>
struct stacked_param<Prefix, L, P, std::index_sequence<I...>> {
    static_assert(P::shape::rank + 1 <= max_rank, "ctg::repeat: a stacked parameter would exceed the largest rank (4)");
    using type = layered_param<Prefix + P::name, L, P::shape::dims[I]...>;
};
template <fixed_string Prefix, int L, class List>
struct stacked_params;
template <fixed_string Prefix, int L, class... P>
struct stacked_params<Prefix, L, tlist<P...>> {
    using type = tlist<typename stacked_param<Prefix, L, P>::type...>;
};
template <class Op, class X, class... E, class... P, class... H>
constexpr auto make_repeat_node(X x, tlist<E...>, tlist<P...>, tlist<H...>) {
    return make_node<Op>(x, E{}..., P{}..., H{}...);
}

/// Whether some node of a block's graph computes from parameters and data without the block's
/// placeholders: a value built outside the block that the block closed over.
template <class G>
consteval bool closes_over_outer_value() {
    std::array<bool, G::size> ph{}, par{}, data{};
    for (std::size_t i = 0; i < G::size; ++i) {
        ph[i] = G::kind[i] == leaf_kind::placeholder;
        par[i] = G::kind[i] == leaf_kind::param;
        data[i] = G::kind[i] == leaf_kind::input || G::kind[i] == leaf_kind::index_input;
        for (std::size_t k = 0; k < G::arity[i]; ++k) {
            const std::size_t j = std::size_t(G::operands[i][k]);
            ph[i] = ph[i] || ph[j];
            par[i] = par[i] || par[j];
            data[i] = data[i] || data[j];
        }
        if (G::kind[i] == leaf_kind::none && !ph[i] && par[i] && data[i]) return true;
    }
    return false;
}
}  // namespace detail

namespace ops {

/// The repeat primitive. Operands: x, the Extra values every layer reads, the stacked parameters
/// (the block's, in its topological order), then the block's hoisted invariants.
template <class CellOut, int L, std::size_t Extra = 0, std::uint64_t SlicedMask = 0>
struct repeat_op {
    using info = detail::cell_info<CellOut, true>;
    using G = typename info::G;
    static constexpr std::size_t N = info::N, P = info::num_step_params, first_param = 1 + Extra,
                                 first_hoisted = first_param + P;
    static constexpr int state_node = detail::find_role_impl<CellOut, 0>(std::make_index_sequence<N>{});
    /// An extra value may be a bf16_input (a KV cache): the block's own ops say whether they read one.
    static constexpr bool reads_bf16_storage = true;
    /// The cell nodes standing for the extra values (-1: the block ignores that one).
    static constexpr std::array<int, Extra + 1> extra_nodes = [] {
        std::array<int, Extra + 1> r{};
        [&]<std::size_t... E>(std::index_sequence<E...>) {
            ((r[E] = detail::find_role_impl<CellOut, int(2 + E)>(std::make_index_sequence<N>{})), ...);
        }(std::make_index_sequence<Extra>{});
        return r;
    }();
    /// The block's adjoint writes, by [state owned][parameters owned]: the state's adjoint is the
    /// repeat's to write first in layers above the first (the buffer layer l sends down to l - 1)
    /// and in layer 0 when the repeat's input adjoint is fresh; the stacked parameters' gradients
    /// when all of theirs are (after zero_grad). Their first writer in the block then assigns them
    /// (gpt-m: 3 MiB a layer and 27 MiB of gradients a step were zeroed first, then added to).
    static constexpr auto adj_tables = [] {
        std::array<std::array<std::remove_const_t<decltype(info::adj_writes)>, 2>, 2> t{};
        for (std::size_t state = 0; state < 2; ++state)
            for (std::size_t params = 0; params < 2; ++params) {
                std::array<bool, N> also{};
                if (state && state_node >= 0) also[std::size_t(state_node)] = true;
                for (std::size_t p = 0; params && p < P; ++p) also[info::step_params[p]] = true;
                t[state][params] = detail::cell_adj_write_modes<G>(info::computed, info::has_adjoint, info::out, also);
            }
        return t;
    }();
    /// Whether no VJP of the block writes the state's adjoint: the buffer sent down is then zeroed.
    static constexpr bool zero_down = state_node >= 0 && adj_tables[1][0].orphan[std::size_t(std::max(state_node, 0))];
    /// Assigns adjoints: the repeat writes every fresh operand adjoint itself (see backward).
    static constexpr bool assigns_adjoints = true;
    static constexpr std::string_view name = "repeat";
    static constexpr flop_rule flops = flop_rule::nested;  // how summaries count it (op.hpp)
    static_assert(L >= 1, "ctg::repeat: at least one layer");
    /// The stacked parameters' adjoints are written row by row, layer l's row only by layer l's
    /// backward: the program may report each row final after its layer (run_info::after_layer).
    static constexpr int layers = L;
    static constexpr bool layered_operand(std::size_t k) { return k >= first_param && k < first_hoisted; }
    /// The nodes backward reruns under options::recompute: those whose values (result or scratch) a
    /// VJP of the layer reads (op.hpp, backward_reads), and what they are computed from. The others
    /// (a GPT block's second FFN product and the residual sum after it) keep another layer's stale
    /// values in the frame, which nothing reads.
    static constexpr std::array<bool, N> rerun = [] {
        constexpr auto reads = []<std::size_t... I>(std::index_sequence<I...>) {
            return std::array<std::uint32_t, N>{detail::backward_reads_of<detail::op_of_t<typename G::template node_t<I>>>...};
        }(std::make_index_sequence<N>{});
        std::array<bool, N> needed{}, r{};
        for (std::size_t i = 0; i < N; ++i) {
            if (!info::computed[i] || G::is_index[i]) continue;  // (index nodes run no VJP)
            needed[i] = needed[i] || (reads[i] & reads_result) != 0;
            for (std::size_t k = 0; k < G::arity[i]; ++k)
                if (k >= 31 || ((reads[i] >> k) & 1)) needed[std::size_t(G::operands[i][k])] = true;
        }
        for (std::size_t i = N; i-- > 0;) {  // consumers before their operands
            r[i] = info::computed[i] && needed[i];
            if (r[i])
                for (std::size_t k = 0; k < G::arity[i]; ++k) needed[std::size_t(G::operands[i][k])] = true;
        }
        return r;
    }();
    template <class T, std::size_t... I>
    static void rerun_layer(const detail::exec_state& s, std::index_sequence<I...>) {
        ((rerun[I] ? detail::exec_forward<detail::op_of_t<typename G::template node_t<I>>, G::arity[I], T>(s, I) : void()), ...);
    }

    template <class... S>
    static consteval bool check() { return true; }
    template <class X, class... R>
    static consteval auto dims() { return X::dims; }
    static std::string describe() { return std::to_string(L) + " layers of a " + std::to_string(N) + "-node block"; }

    // ---------------------------------------------------------------- sizes (from operand shapes)
    struct layout : detail::cell_frame<info> {
        std::size_t state = 0, total = 0;  // elements of the carried value (rounded up), of scratch
        std::array<std::size_t, P + 1> param_size{};
        bool recompute = false;  // options::recompute: one frame, each layer rerun before its VJP
        // scratch = [L x per_step][L-1 layer outputs][adjoint block][2 state adjoints]; recomputing:
        // [one frame][L-1 layer outputs][adjoint block][2 state adjoints][the frame's layer]; a
        // forward-only pass: [one frame][two layer outputs, alternating] (no adjoints: adj_block is 0).
        // The floats kept in bf16 only live in the adjoint block's memory while forward reads them
        // (tr_off), and so do the ops' forward scratch (fs_off, op.hpp): a layer's adjoints live only during its VJPs, which never run beside a forward
        // (recomputing, a layer's rerun comes before its VJPs, and its output's adjoint is a state
        // adjoint), so the block is the larger of the two, not their sum (gpt-m: 12 MiB less).
        std::size_t layer_frame_off(std::size_t l) const { return recompute ? 0 : this->frame_off(l); }
        std::size_t outputs_off() const { return recompute ? this->per_step : this->frames_size(L); }
        std::size_t kept_outputs() const { return this->forward_only ? std::min(L - 1, 2) : L - 1; }
        /// Where layer l's output goes (l < L - 1; the last layer's is the node's value).
        std::size_t output_off(std::size_t l) const { return outputs_off() + (this->forward_only ? l & 1 : l) * state; }
        std::size_t adjoints_off() const { return outputs_off() + std::size_t(kept_outputs()) * state; }
        /// The adjoint block, which the floats kept in bf16 only share (above).
        std::size_t shared_block() const { return std::max(this->adj_block, this->tr_size); }
        std::size_t state_adj_off(std::size_t k) const { return adjoints_off() + shared_block() + k * state; }
        /// Where a recomputing op notes which layer's values the frame holds (one line).
        std::size_t held_off() const { return state_adj_off(2); }
        /// Where the floats that backward does not read live while forward reads them (cell_frame::tr_off), shared by the layers.
        std::size_t transients_off() const { return adjoints_off(); }
    };
    /// The layout at these operand shapes. recompute (options::recompute) needs a backward pass and
    /// more than one layer; otherwise it changes nothing.
    template <std::size_t K>
    static layout plan(const std::array<rshape, K>& x, bool forward_only, bool recompute = false, int bf16_shadows = 0) {
        layout Ly;
        Ly.recompute = recompute && !forward_only && L > 1;
        using binding = typename detail::cell_frame<info>::binding;
        std::array<binding, info::num_hoisted + Extra + 1> known{};
        std::size_t nk = 0;
        if constexpr (state_node >= 0) known[nk++] = {std::size_t(state_node), x[0], 0};
        for (std::size_t e = 0; e < Extra; ++e)
            if (extra_nodes[e] >= 0) known[nk++] = {std::size_t(extra_nodes[e]), x[1 + e], sliced(e) ? 1u : 0u};
        for (std::size_t j = 0; j < info::num_hoisted; ++j) known[nk++] = {info::hoisted[j], x[first_hoisted + j], 0};
        Ly.plan(known.data(), nk, forward_only, bf16_shadows);
        Ly.state = round_up_lines(x[0].size());
        for (std::size_t p = 0; p < P; ++p) Ly.param_size[p] = Ly.shapes[info::step_params[p]].size();
        Ly.total = forward_only ? Ly.adjoints_off() : Ly.held_off() + (Ly.recompute ? round_up_lines(1) : 0);
        return Ly;
    }
    /// bf16_shadows: 1 with bf16 shadows, 2 with values kept in bf16 only too, 3 with those that
    /// VJPs read rounded too (run_info).
    static std::size_t scratch_size(const rshape&, const auto& x, bool forward_only, bool recompute, int bf16_shadows = 0) {
        return plan(x, forward_only, recompute, bf16_shadows).total;
    }
    template <class T, std::size_t K>
    static const layout& plan_of(const op_io<T, K>& c) {
        std::array<rshape, K> xs{};
        for (std::size_t k = 0; k < K; ++k) xs[k] = c.x[k].shape;
        // (remembered_plan's third key, scan's batch parts, is 1 + 1 when recomputing + 2 times the
        // bf16 level: shadows 1, values in bf16 only 2, those that VJPs read rounded 3)
        const int bf16 = bf16_frame_level(c.run.bf16_shadows, c.run.bf16_only, c.run.bf16_saved);
        return detail::remembered_plan<layout>(xs, c.run.forward_only, 1 + (c.run.recompute ? 1 : 0) + 2 * std::size_t(bf16),
                                               [](const auto& x, bool f, std::size_t r) { return plan(x, f, ((r - 1) & 1) != 0, int((r - 1) >> 1)); });
    }
    /// Which layer's values the frame of a recomputing op holds (written by forward and backward).
    template <class T>
    static std::size_t held_layer(const T* base, const layout& Ly) {
        std::size_t l;
        std::memcpy(&l, base + Ly.held_off(), sizeof l);  // (the line holds 64 bytes)
        return l;
    }
    template <class T>
    static void hold_layer(T* base, const layout& Ly, std::size_t l) { std::memcpy(base + Ly.held_off(), &l, sizeof l); }

    static constexpr bool sliced(std::size_t e) { return (SlicedMask >> e) & 1; }
    /// The bytes of one element of a value of this kind in a program over T.
    template <class T>
    static constexpr std::size_t element_bytes(element k) {
        return k == element::index ? sizeof(index_t) : k == element::bf16 ? sizeof(kernels::bf16_bits) : sizeof(T);
    }
    /// Extra argument e as layer l sees it: all of it, or its row l (elements of `bytes` each; index
    /// tensors are int32, bf16 ones 2 bytes).
    static void* slice(const view& a, std::size_t e, std::size_t l, std::size_t bytes) {
        if (!sliced(e)) return a.ptr;
        const std::size_t row = a.size() / std::size_t(L);
        return static_cast<char*>(a.ptr) + l * row * bytes;
    }

    // ---------------------------------------------------------------- one layer's views
    struct layer_views {
        std::array<view, N> val{}, adj{}, scr{};
        std::array<view, N> fscr{};          // forward scratch (layout::fs_off), with layout::only
        std::array<view, N> bscr{};          // backward scratch (layout::bs_off), set by backward
        std::array<std::uint16_t*, N> sh{};  // bf16 shadows (layout::shadows)
        std::array<std::string_view, N> label = G::label;  // placeholders renamed after the outer operands
    };
    template <class T, std::size_t K>
    static void values_at(layer_views& v, const op_io<T, K>& c, const layout& Ly, std::size_t l) {
        T* base = c.scratch.template as<T>();
        for (std::size_t i = 0; i < N; ++i) {
            v.val[i].shape = v.adj[i].shape = Ly.shapes[i];
            v.scr[i] = {base + Ly.layer_frame_off(l) + Ly.scr_off[i], rshape{1, {Ly.scr_size[i]}}};
            if (info::computed[i])
                v.val[i].ptr = !Ly.only                                       ? base + Ly.layer_frame_off(l) + Ly.val_off[i]
                               : Ly.only_plan().no_float[i]                   ? nullptr  // (the op writes its shadow alone)
                               : info::float_transient(Ly.only_plan(), i) ? base + Ly.transients_off() + Ly.tr_off[i]
                                                                              : base + Ly.layer_frame_off(l) + Ly.val_off[i];
            if (Ly.shadowed(i))  // (a remade one: where forward's readers read it; backward points it elsewhere)
                v.sh[i] = reinterpret_cast<std::uint16_t*>(base + (Ly.remade[i] ? Ly.transients_off() + Ly.tr_off[i]
                                                                                 : Ly.layer_frame_off(l) + Ly.sh_off[i]));
            if (Ly.fs_size[i]) v.fscr[i] = {base + Ly.transients_off() + Ly.fs_off[i], rshape{1, {Ly.fs_size[i]}}};
        }
        v.val[info::out].ptr = l + 1 == L ? c.y_data() : base + Ly.output_off(l);
        if constexpr (state_node >= 0) v.label[std::size_t(state_node)] = c.x_name[0];
        for (std::size_t e = 0; e < Extra; ++e)
            if (extra_nodes[e] >= 0) v.label[std::size_t(extra_nodes[e])] = c.x_name[1 + e];
        if constexpr (state_node >= 0)
            v.val[state_node].ptr = l == 0 ? c.x[0].ptr : static_cast<void*>(base + Ly.output_off(l - 1));
        for (std::size_t p = 0; p < P; ++p)
            v.val[info::step_params[p]].ptr = const_cast<T*>(c.x_data(first_param + p)) + l * Ly.param_size[p];
        for (std::size_t e = 0; e < Extra; ++e)
            if (extra_nodes[e] >= 0)
                v.val[std::size_t(extra_nodes[e])].ptr =
                    slice(c.x[1 + e], e, l, element_bytes<T>(G::elem[std::size_t(extra_nodes[e])]));
        for (std::size_t j = 0; j < info::num_hoisted; ++j) v.val[info::hoisted[j]].ptr = c.x[first_hoisted + j].ptr;
        Ly.resolve_aliases(v.val);
    }
    // state / params: which adjoints backward's first writers assign (adj_tables).
    static detail::exec_state exec_of(const layer_views& v, const layout& Ly, const run_info& run, std::size_t l,
                                      bool state = false, bool params = false) {
        return {v.val.data(), v.adj.data(), v.scr.data(), Ly.shapes.data(), info::has_adjoint.data(), G::elem.data(), v.label.data(),
                &G::operands[0][0], G::max_arity, detail::cell_run(run, l),
                &adj_tables[state][params].mode[0][0], Ly.shadows ? v.sh.data() : nullptr,
                Ly.only ? Ly.only_plan().only.data() : nullptr, Ly.only ? v.fscr.data() : nullptr, v.bscr.data(),
                Ly.only ? Ly.remade.data() : nullptr};
    }

    // ---------------------------------------------------------------- forward
    template <class T, std::size_t K>
    static void forward(op_io<T, K>& c) {
        const layout& Ly = plan_of(c);
        layer_views v;
        for (std::size_t l = 0; l < std::size_t(L); ++l) {
            values_at(v, c, Ly, l);
            detail::run_cell_forward<info, T>(exec_of(v, Ly, c.run, l), std::make_index_sequence<N>{});
        }
        if (Ly.recompute) hold_layer(c.scratch.template as<T>(), Ly, std::size_t(L) - 1);
    }

    // ---------------------------------------------------------------- backward
    template <class T, std::size_t K>
    static void backward(op_io<T, K>& c) {
        const layout& Ly = plan_of(c);
        T* base = c.scratch.template as<T>();
        T* adj_block = base + Ly.adjoints_off();
        // The operands' adjoints this backward writes first (c.fresh(k); the engine zeroes none of
        // them, assigns_adjoints): the state's and the stacked parameters' (when all of theirs are)
        // are assigned by the block's first writers; the others, which every layer adds into (the
        // extra values, the hoisted invariants, parameters some other op wrote first), zeroed here.
        bool params_fresh = P > 0;
        for (std::size_t p = 0; p < P; ++p)
            if (c.gx[first_param + p] && !c.fresh(first_param + p)) params_fresh = false;
        for (std::size_t k = 0; k < K; ++k) {
            const bool assigned = k == 0 ? state_node >= 0 && !zero_down : k >= first_param && k < first_hoisted && params_fresh;
            if (c.gx[k] && c.fresh(k) && !assigned) std::memset(c.gx[k].ptr, 0, c.gx[k].size() * sizeof(T));
        }
        layer_views v;
        for (std::size_t l = L; l-- > 0;) {
            values_at(v, c, Ly, l);
            if (Ly.recompute && held_layer(base, Ly) != l) {  // layer l's values again, from its kept input
                rerun_layer<T>(exec_of(v, Ly, c.run, l), std::make_index_sequence<N>{});
                hold_layer(base, Ly, l);
            }
            Ly.zero_orphans(adj_block);  // the others are written fresh by their first VJP
            for (std::size_t i = 0; i < N; ++i) {
                v.adj[i].ptr = nullptr;  // stays null where nothing outside needs the adjoint
                if (info::computed[i]) v.adj[i].ptr = adj_block + Ly.adj_off[i];
                v.bscr[i] = Ly.backward_scratch(adj_block, i);
                if (Ly.remade[i]) v.sh[i] = reinterpret_cast<std::uint16_t*>(adj_block + Ly.rm_off[i]);  // (made before its readers' VJPs)
            }
            // This layer's output adjoint: the loss's (top layer) or what layer l+1 sent down.
            v.adj[info::out].ptr = l + 1 == L ? c.gy_data() : base + Ly.state_adj_off(l & 1);
            for (std::size_t i = 0; i < N; ++i)  // a residual sum's branch: the output adjoint itself
                if (info::computed[i] && info::adjoint_shares_result(i)) v.adj[i].ptr = v.adj[info::out].ptr;
            if constexpr (state_node >= 0) {
                if (l > 0) {
                    T* down = base + Ly.state_adj_off((l - 1) & 1);
                    if constexpr (zero_down) std::memset(down, 0, Ly.state * sizeof(T));
                    v.adj[state_node].ptr = down;
                } else if (c.gx[0]) {
                    v.adj[state_node].ptr = c.gx[0].ptr;
                }
            }
            for (std::size_t p = 0; p < P; ++p)
                if (c.gx[first_param + p]) {
                    T* row = c.gx_data(first_param + p) + l * Ly.param_size[p];
                    if (params_fresh && adj_tables[0][1].orphan[info::step_params[p]])  // (no VJP of the block writes it)
                        std::memset(row, 0, Ly.param_size[p] * sizeof(T));
                    v.adj[info::step_params[p]].ptr = row;
                }
            for (std::size_t e = 0; e < Extra; ++e)  // whole ones: summed over the layers (the ops add)
                if (extra_nodes[e] >= 0 && c.gx[1 + e])
                    v.adj[std::size_t(extra_nodes[e])].ptr = slice(c.gx[1 + e], e, l, sizeof(T));
            for (std::size_t j = 0; j < info::num_hoisted; ++j)
                if (c.gx[first_hoisted + j]) v.adj[info::hoisted[j]].ptr = c.gx[first_hoisted + j].ptr;
            detail::run_cell_backward<info, T>(exec_of(v, Ly, c.run, l, state_node >= 0 && (l > 0 || c.fresh(0)), params_fresh),
                                               [](std::size_t) {}, std::make_index_sequence<N>{});
            if (c.run.after_layer) (*c.run.after_layer)(l);  // rows l of the stacked gradients are done
        }
    }
};

}  // namespace ops

namespace detail {
template <int L, fixed_string Prefix, class Block, class X, class... Extra>
constexpr auto repeat_checked(Block block, X x, [[maybe_unused]] Extra... extra) {
    static_assert(L >= 1, "ctg::repeat: at least one layer");
    static_assert(sizeof...(Extra) <= 64, "ctg::repeat: at most 64 extra arguments");
    static_assert(!X::is_bf16, "ctg::repeat: the carried value must be computed in floats, not a bf16_input");
    // (a bf16 X: the block is still composed over floats, so that the mistake is one error)
    using State = typename detail::placeholder_of<typename X::shape, X::is_bf16 ? element::real : element_of<X>>::template type<0>;
    using Out = decltype(detail::cell_result([]<std::size_t... E>(Block b, std::index_sequence<E...>) {
        return b(State{}, typename detail::placeholder_of<typename detail::repeat_arg<Extra>::shape,
                                                          element_of<typename detail::repeat_arg<Extra>::type>>::template type<int(2 + E)>{}...);
    }(block, std::index_sequence_for<Extra...>{})));
    if constexpr (Out::is_poison || X::is_bf16) {
        return poison{};
    } else {
        static_assert(with_shapes<std::is_same_v<typename Out::shape, typename X::shape>, typename Out::shape::pretty,
                                  typename X::shape::pretty>::value,
                      "ctg::repeat: the block must return a value of its input's shape");
        static_assert(((!detail::repeat_arg<Extra>::sliced || detail::repeat_arg<Extra>::type::shape::dims[0] == dim(L)) && ...),
                      "ctg::repeat: a per_layer argument's leading axis must be the number of layers");
        constexpr std::uint64_t sliced = [] {
            std::uint64_t m = 0, bit = 1;
            ((m |= detail::repeat_arg<Extra>::sliced ? bit : 0, bit <<= 1), ...);
            return m;
        }();
        using Op = ops::repeat_op<Out, L, sizeof...(Extra), sliced>;
        using info = typename Op::info;
        static_assert(info::variant[info::out],
                      "ctg::repeat: the block's result depends on neither its input, its other arguments nor its parameters");
        if constexpr (!info::variant[info::out]) {
            return poison{};
        } else {
            static_assert(!detail::closes_over_outer_value<typename info::G>(),
                          "ctg::repeat: the block combines data with parameters without its arguments (a value computed "
                          "outside, or an input); pass that value to repeat after x and take it as an argument");
            using params = typename detail::stacked_params<Prefix, L, typename info::step_param_list>::type;
            return detail::make_repeat_node<Op>(x, tlist<typename detail::repeat_arg<Extra>::type...>{}, params{},
                                                typename info::hoisted_list{});
        }
    }
}
}  // namespace detail

/// Applies `block` L times to `x` (see the file comment); the block's parameters are stacked
/// (L, ...) under the names Prefix + their own. block(h, extra...) receives a placeholder for each
/// extra value.
template <int L, fixed_string Prefix, class Block, expr X, class... Extra>
constexpr auto repeat(Block block, X x, Extra... extra) {
    if constexpr (any_poison<X, typename detail::repeat_arg<Extra>::type...>) return poison{};  // said where made
    else return detail::repeat_checked<L, Prefix>(block, x, extra...);
}

}  // namespace ctg
