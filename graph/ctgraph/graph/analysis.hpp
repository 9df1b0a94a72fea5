// ctgraph/graph/analysis.hpp: graph analysis at compile time.
//
// Measured on this machine (shared/notes/dependency-stack.md, section 5): Hana folds that carry a
// growing set through the nodes blow up (N=200 does not fit in 24 GB) while constexpr arrays stay
// near-linear. So:
//   * flattening is a memoised depth-first visit over plain type lists (each (visited, node) pair is
//     instantiated once; membership is a fold of std::is_same_v, no Hana);
//   * everything after it (operand indices, consumers, which nodes need an adjoint, lifetimes, leaf
//     tables) is constexpr std::array computed by constexpr functions;
//   * execution is an index_sequence fold over the node list.
// Structural identity is type identity: two identical pure subexpressions are one node, evaluated
// once, their adjoint accumulated once.
#pragma once
#include <algorithm>
#include <array>
#include <cstddef>
#include <string_view>
#include <type_traits>
#include <utility>

#include "ctgraph/graph/node.hpp"
#include "ctgraph/op.hpp"
#include "ctgraph/names.hpp"
#include "ctgraph/tensor.hpp"

namespace ctg {

/// The arithmetic of a program's matrix products (options::precision).
enum class precision {
    f32,   ///< as the program's scalar type
    bf16,  ///< mixed precision: operands rounded to bfloat16, products accumulated in float (float programs)
};

/// Compile options of a program: `compile<float, options{.inference = true}>(out)`.
struct options {
    /// Mixed precision: precision::bf16 runs every matrix product of the program (matmul, affine,
    /// batched products, attention's score and value products, the output head, scan's deferred
    /// weight products, forward and backward) on bf16 operands with float accumulation, on the
    /// CPU's matrix engines through oneDNN (kernels/onednn.hpp). Everything else stays float: layer
    /// norm, softmax, losses, reductions, element-wise ops, the parameter store and the optimizer.
    ctg::precision precision = ctg::precision::f32;
    bool input_grads = false;  ///< also compute adjoints of floating-point inputs (dL/dx)
    /// The floating-point inputs whose adjoints to compute, by name, separated by spaces or commas
    /// (`.input_grads_for = "x h0"`): only these, so products that would feed the others' gradients
    /// do not run. Empty: every floating-point input when input_grads is set. A name that is not a
    /// floating-point input of the program is a compile error.
    char input_grads_for[96] = {};
    bool inference = false;    ///< forward only: no adjoints at all (predictors, decoders)
    /// Weight-only quantisation (inference programs of float): weight_format::int8 or q4 runs every
    /// product whose right operand is a parameter (affine, fused affine and activation, matmul by a
    /// weight, a tied output head x E^T) on the store's quantised copy of that weight, made when the
    /// program is constructed (ctg::quantize, ctgraph/quant_store.hpp) or loaded with it (ctg::load_quantized).
    /// A product by a few rows (a decoding step) reads the quantised bytes (VNNI where the CPU has
    /// it); a larger one (a prefill) dequantises blocks of columns into cache for the float engine.
    /// Everything else reads the float values. (docs/guide/quantization.md)
    ctg::weight_format weights = ctg::weight_format::f32;
    /// Inference programs place values and op scratch by lifetime: memory is reused as soon as a
    /// value's last reader has run, and only the outputs' values stay readable after forward().
    /// true keeps every node's value (prog.value_of(node) on any node, at the memory of a training
    /// program's values).
    bool keep_values = false;
    /// Anomaly detection (as torch.autograd.detect_anomaly): every node's value after its forward and
    /// every adjoint its backward wrote are checked; the first non-finite element throws
    /// numeric_error naming the node, its op, shape, the element and which operands were finite.
    /// Off: no code at all. (A scan or repeat is checked as one node: its outputs and adjoints.)
    bool detect_anomaly = false;
    /// Recomputation instead of memory, per layer of every ctg::repeat (training programs): forward
    /// keeps each layer's input (the carried value) but not the layer's intermediate values, and
    /// backward reruns layer l's forward from its input into one shared frame right before layer l's
    /// VJP. Gradients are those without it, bit for bit (the same kernels in the same order); the
    /// cost is L - 1 layers' forward again (prog.summary() prints both: the bytes saved and the
    /// FLOPs added). Inference programs keep one layer's values anyway; programs without repeat are
    /// unaffected.
    bool recompute = false;
    /// With precision::bf16, a training program keeps a bf16 copy (a shadow) of every value that a
    /// matrix product reads as an operand, rounded once, right after the op that makes the value,
    /// and the products read it instead of converting the float value each time (forward and
    /// backward). Products see the same operands, so results are the same bit for bit; the cost is
    /// the shadows' memory (half the bytes of the values they copy: gpt-m 21 MiB a layer). false:
    /// products convert their operands as they run, as before. (docs/mixed-precision.md)
    bool bf16_shadows = true;
    /// With bf16 shadows: a value that backward reads only as a product operand, through its shadow
    /// (its producer's VJP does not read it either: a layer norm's or GELU's output, attention's q,
    /// k, v and merged heads, not softmax's weights), is kept in bf16 only, its shadow; one that
    /// backward does not read at all (a projection that the head split or a residual sum reads) is
    /// not kept. Their floats have no place of their own (scratch shared with other such values
    /// while forward reads them). Products read the same operands, so results are the same bit for
    /// bit, and the program keeps less memory than a float one. Such a node's value_view() is not
    /// its value after forward. false: every value keeps its float. (docs/mixed-precision.md)
    bool bf16_only = true;
    /// With values in bf16 only: values that a VJP reads may be kept for backward as their bf16
    /// copy too, where the op that reads them says its VJP can take one (op.hpp, vjp_reads_bf16):
    /// attention's weights (the softmax's VJP reads them; their float is never made, the fused
    /// score op writes the copy) and GELU's input (the first FFN product: its VJP reads it). This
    /// changes results, within the bf16 tolerance of the products around them (a VJP reads its
    /// value rounded to bf16, as PyTorch's autocast keeps GELU's input: the product before it
    /// returns bf16); gpt-m's peak: 416 -> 350 MiB. false: backward reads every such value as
    /// float, and bf16_only changes no bit. (docs/mixed-precision.md)
    bool bf16_saved = true;
    /// Fine-tuning: the parameters that do not train, separated by spaces or commas. An entry is a
    /// parameter's name ("wte.weight"), a prefix cut at a '.' ("h." or "h": every parameter under
    /// it, not "head.weight"), or a pattern where '*' stands for any run of characters ("*.ln_1.*").
    /// A frozen parameter gets no gradient, no gradient memory and no optimizer state, and backward
    /// runs no VJP product that would lead only to frozen parameters (the x^T dY of a frozen
    /// weight; everything below a frozen embedding). A stacked parameter of ctg::repeat is frozen
    /// whole. An entry that matches no parameter of the program is a compile error.
    /// (docs/guide/fine-tuning.md)
    char frozen[160] = {};
    /// The only parameters that train (the same entries as `frozen`): every other one is frozen.
    /// `.trainable = "*lora_*"` trains the adapters of a model and nothing else; both may be given.
    char trainable[160] = {};
};

namespace detail {

// The names of a list such as options::input_grads_for ("x h0", "x,h0"), each given to f.
template <std::size_t N, class F>
constexpr void for_each_listed(const char (&list)[N], F f) {
    std::size_t n = 0;
    while (n < N && list[n]) ++n;
    for_each_entry(std::string_view(list, n), f);
}
template <std::size_t N>
constexpr bool name_listed(const char (&list)[N], std::string_view name) {
    bool found = false;
    for_each_listed(list, [&](std::string_view n) { found = found || n == name; });
    return found;
}

/// Whether some entry of a list matches parameter `name` (name_matches).
template <std::size_t N>
constexpr bool name_matched_by(const char (&list)[N], std::string_view name) {
    bool found = false;
    for_each_listed(list, [&](std::string_view e) { found = found || name_matches(e, name); });
    return found;
}

template <class L, class T>
inline constexpr bool contains_v = false;
template <class... Ts, class T>
inline constexpr bool contains_v<tlist<Ts...>, T> = (__is_same(Ts, T) || ...);  // builtin: no instantiation per pair

template <class L, class T>
struct push_back;
template <class... Ts, class T>
struct push_back<tlist<Ts...>, T> {
    using type = tlist<Ts..., T>;
};

template <class Acc, class Args>
struct visit_args;

// Post-order visit: operands first, then the node, unless it was seen already.
template <class Acc, class N, bool Seen = contains_v<Acc, N>>
struct visit {
    using type = Acc;
};
template <class Acc, class N>
struct visit<Acc, N, false> {
    using type = typename push_back<typename visit_args<Acc, typename N::args>::type, N>::type;
};
template <class Acc>
struct visit_args<Acc, tlist<>> {
    using type = Acc;
};
template <class Acc, class A, class... R>
struct visit_args<Acc, tlist<A, R...>> {
    using type = typename visit_args<typename visit<Acc, A>::type, tlist<R...>>::type;
};

/// All distinct nodes reachable from Outs, operands before users (a topological order).
template <class... Outs>
using topo_order = typename visit_args<tlist<>, tlist<Outs...>>::type;

// O(1) type-at-index through overload resolution on indexed bases.
template <std::size_t I, class T>
struct indexed {
    using type = T;
};
template <class Seq, class... Ts>
struct indexer;
template <std::size_t... I, class... Ts>
struct indexer<std::index_sequence<I...>, Ts...> : indexed<I, Ts>... {};
template <std::size_t I, class T>
indexed<I, T> select_index(const indexed<I, T>&);

// Type-to-index through deduction against the same indexed bases: the compiler finds the one base
// indexed<I, T> natively, where a constexpr loop over the list would cost the constant evaluator
// O(N) steps per lookup (O(N^2) for a graph's operand table). consteval, here and below: these
// run only at compile time, and an immediate function is never emitted.
template <class T, std::size_t I>
consteval int index_in(const indexed<I, T>*) { return int(I); }
template <class T>
consteval int index_in(const void*) { return -1; }

template <class N>
consteval std::size_t layer_axes_of() {
    if constexpr (N::kind == leaf_kind::param) return N::layer_axes; else return 0;
}
template <class N>
consteval std::string_view node_label() {
    if constexpr (N::kind == leaf_kind::param || N::kind == leaf_kind::input || N::kind == leaf_kind::index_input ||
                  N::kind == leaf_kind::placeholder)
        return N::name.view();
    else if constexpr (N::kind == leaf_kind::constant)
        return "constant";
    else
        return N::op::name;
}

/// The op of a node; leaves have none.
struct no_op {};
template <class N>
struct op_of {
    using type = no_op;
};
template <class N>
    requires(N::kind == leaf_kind::none && !N::is_poison)
struct op_of<N> {
    using type = typename N::op;
};
template <class N>
using op_of_t = typename op_of<N>::type;

/// Whether a node's value is its first operand's memory under another shape (an op declaring
/// `aliases_operand`, see op.hpp): the planners give it no memory of its own.
template <class N>
consteval bool aliases_operand() {
    using Op = op_of_t<N>;
    if constexpr (requires { Op::aliases_operand; }) return bool(Op::aliases_operand); else return false;
}

/// The operands whose adjoint is the node's own, element for element: operand 0 of an aliasing
/// node (reshape), and operand k of an op declaring bit k of `identity_vjp_operands` (add: both,
/// sub: the first; see op.hpp) where that operand has the node's shape (not broadcast). The
/// planners may give such an operand's adjoint the node's memory (adjoint_roots).
template <class Shape, class... A>
consteval std::array<bool, sizeof...(A) + 1> operand_has_shape(tlist<A...>*) {
    return {std::is_same_v<typename A::shape, Shape>..., false};
}
/// Whether a node passes no adjoint to its operand (an op declaring `stops_gradient`:
/// ctg::stop_gradient): it gets none itself, and what only it reads needs none.
template <class N>
consteval bool stops_gradient() {
    if constexpr (N::kind == leaf_kind::none && !N::is_poison) {
        using Op = op_of_t<N>;
        if constexpr (requires { Op::stops_gradient; }) return bool(Op::stops_gradient); else return false;
    } else {
        return false;
    }
}

template <class N>
consteval std::uint32_t identity_vjp_operands() {
    if constexpr (stops_gradient<N>()) {
        return 0;
    } else if constexpr (N::kind == leaf_kind::none && !N::is_poison) {
        using Op = op_of_t<N>;
        std::uint32_t m = aliases_operand<N>() ? 1u : 0u;
        if constexpr (requires { Op::identity_vjp_operands; }) {
            const auto same = operand_has_shape<typename N::shape>(static_cast<typename N::args*>(nullptr));
            for (std::size_t k = 0; k < N::args::size && k < 32; ++k)
                if (((std::uint32_t(Op::identity_vjp_operands) >> k) & 1u) && same[k]) m |= 1u << k;
        }
        return m;
    } else {
        return 0;
    }
}

template <class N>
consteval double constant_value() {
    if constexpr (N::kind == leaf_kind::constant) return N::value; else return 0.0;
}

template <class S>
consteval std::array<dim, max_rank> padded_dims() {
    std::array<dim, max_rank> r{0, 0, 0, 0};
    for (std::size_t i = 0; i < S::rank; ++i) r[i] = S::dims[i];
    return r;
}

template <std::size_t N>
consteval std::size_t count_of(const std::array<leaf_kind, N>& kind, leaf_kind k) {
    std::size_t n = 0;
    for (auto x : kind) n += x == k;
    return n;
}
template <std::size_t M, std::size_t N>
consteval std::array<std::size_t, M> indices_of(const std::array<leaf_kind, N>& kind, leaf_kind k) {
    std::array<std::size_t, M> r{};
    std::size_t n = 0;
    for (std::size_t i = 0; i < N; ++i)
        if (kind[i] == k) r[n++] = i;
    return r;
}

/// How a node's VJP writes an operand's adjoint (table adj_write_modes, one entry per operand):
///   add:   other consumers wrote it already (or it is not the engine's: a parameter's gradient, an
///          adjoint owned by an enclosing scan): the VJP adds;
///   fresh: this node is the first writer in backward order and the buffer holds garbage: an op that
///          declares `assigns_adjoints` writes it with = (op_io::fresh(k)), for any other op the engine
///          zeroes it first. Nothing zeroes the whole adjoint block up front any more.
///   zero:  the first writer reads the operand twice (mul(x, x)): the engine zeroes it, the op adds.
enum class adj_write : unsigned char { add = 0, fresh = 1, zero = 2 };

/// adj_write of every (node, operand) for a node list run backward from the last node, given which
/// adjoints the engine owns (`owned`) and which nodes run a VJP (`runs`). `orphan[j]`: an owned
/// adjoint no running node writes (an output's, or one only an index-valued op reads); the caller
/// zeroes those itself.
template <std::size_t N, std::size_t A>
struct adj_write_table {
    std::array<std::array<adj_write, A>, N> mode{};
    std::array<bool, N> orphan{};
};
// constexpr, not consteval: clang 14 rejects a consteval call on a consteval lambda's locals.
template <std::size_t N, std::size_t A>
constexpr adj_write_table<N, A> adj_write_modes(const std::array<std::size_t, N>& arity,
                                                const std::array<std::array<int, A>, N>& operands,
                                                const std::array<bool, N>& owned, const std::array<bool, N>& runs) {
    adj_write_table<N, A> t{};
    std::array<bool, N> written{};
    for (std::size_t i = N; i-- > 0;) {
        if (!runs[i]) continue;
        for (std::size_t k = 0; k < arity[i]; ++k) {
            const std::size_t j = std::size_t(operands[i][k]);
            if (!owned[j] || written[j]) continue;
            written[j] = true;
            bool twice = false;
            for (std::size_t k2 = 0; k2 < arity[i]; ++k2) twice = twice || (k2 != k && operands[i][k2] == int(j));
            t.mode[i][k] = twice ? adj_write::zero : adj_write::fresh;
        }
    }
    for (std::size_t j = 0; j < N; ++j) t.orphan[j] = owned[j] && !written[j];
    return t;
}

/// Whose adjoint memory each node's adjoint is: its own, or that of the node that is its only
/// reader and whose VJP for it is the identity (identity_vjp_operands: a reshape's operand, a
/// residual sum's branch), followed up a chain of them. The two adjoints are the same elements in
/// the same order, so that VJP, the first writer of its operand's adjoint, finds it written and
/// copies nothing (gpt-m's head split and merge copied 4 x 3 MiB a layer; its residual sums, 2 x 3
/// MiB). `planned[i]`: node i's adjoint is the planner's to place (not a leaf's or an enclosing
/// op's; an output's adjoint is seeded: `shared_root` says whether it may still be shared, as a
/// repeat's block result is, its memory then the enclosing op's).
template <std::size_t N, std::size_t A>
constexpr std::array<std::size_t, N> adjoint_roots(const std::array<std::size_t, N>& arity,
                                                   const std::array<std::array<int, A>, N>& operands,
                                                   const std::array<std::uint32_t, N>& identity_vjp,
                                                   const std::array<bool, N>& planned,
                                                   const std::array<bool, N>& shared_root = {}) {
    std::array<std::size_t, N> readers{}, root{};
    for (std::size_t i = 0; i < N; ++i)
        for (std::size_t k = 0; k < arity[i]; ++k) ++readers[std::size_t(operands[i][k])];
    for (std::size_t j = 0; j < N; ++j) root[j] = j;
    for (std::size_t i = N; i-- > 0;)  // from the last node down: a reader's own root is known first
        if (planned[i] || shared_root[i])
            for (std::size_t k = 0; k < arity[i]; ++k)
                if ((identity_vjp[i] >> k) & 1u) {
                    const std::size_t j = std::size_t(operands[i][k]);
                    if (planned[j] && readers[j] == 1) root[j] = root[i];
                }
    return root;
}

}  // namespace detail

/// Everything the compiler knows about a graph: its nodes in topological order and constexpr tables.
template <class NodeList, options Opt, std::size_t NumOutputs>
struct graph;

/// @cond CTG_GRAPH_TABLES
template <class... Ns, options Opt, std::size_t NumOutputs>
struct graph<tlist<Ns...>, Opt, NumOutputs> {
    using list = tlist<Ns...>;
    static constexpr std::size_t size = sizeof...(Ns);
    static constexpr options opts = Opt;

    using indexer = detail::indexer<std::index_sequence_for<Ns...>, Ns...>;
    template <std::size_t I>
    using node_t = typename decltype(detail::select_index<I>(indexer{}))::type;
    /// The position of node type E in the list, or -1. (A member, not a function template over
    /// Ns...: a specialisation of one would carry the whole list in its template arguments.)
    template <class E>
    static constexpr int index_of = detail::index_in<E>(static_cast<const indexer*>(nullptr));

    static constexpr std::size_t max_arity = std::max({std::size_t(1), Ns::args::size...});
    static constexpr std::array<std::size_t, size> arity{Ns::args::size...};
    static constexpr std::array<leaf_kind, size> kind{Ns::kind...};
    static constexpr std::array<bool, size> is_index{Ns::is_index...};
    static constexpr std::array<bool, size> is_bf16{Ns::is_bf16...};  // bf16_input and its slices
    static constexpr std::array<element, size> elem{element_of<Ns>...};
    static constexpr std::array<bool, size> aliases{detail::aliases_operand<Ns>()...};  // value = operand 0's memory
    static constexpr std::array<std::uint32_t, size> identity_vjp{detail::identity_vjp_operands<Ns>()...};  // adjoint = the node's
    static constexpr std::array<bool, size> stops{detail::stops_gradient<Ns>()...};  // no adjoint through it
    static constexpr std::array<std::string_view, size> label{detail::node_label<Ns>()...};
    static constexpr std::array<double, size> constant_value{detail::constant_value<Ns>()...};
    static constexpr std::array<std::size_t, size> layer_axes{detail::layer_axes_of<Ns>()...};  // stacked params
    static constexpr std::array<std::size_t, size> rank{Ns::shape::rank...};
    static constexpr std::array<std::array<dim, max_rank>, size> dims{detail::padded_dims<typename Ns::shape>()...};

    template <class... A>
    static consteval std::array<int, max_arity> operand_indices(tlist<A...>) {
        std::array<int, max_arity> r{};
        r.fill(-1);
        std::size_t k = 0;
        ((r[k++] = index_of<A>), ...);
        return r;
    }
    static constexpr std::array<std::array<int, max_arity>, size> operands{
        operand_indices(typename Ns::args{})...};

    static constexpr bool is_leaf(std::size_t i) { return kind[i] != leaf_kind::none; }

    /// Whether the input of this name gets an adjoint (options::input_grads, input_grads_for).
    static constexpr bool input_gradient_wanted(std::string_view name) {
        if (Opt.input_grads_for[0] == 0) return Opt.input_grads;
        return detail::name_listed(Opt.input_grads_for, name);
    }
    /// Whether every name of options::input_grads_for is a floating-point input here.
    static consteval bool input_grads_for_known() {
        bool ok = true;
        detail::for_each_listed(Opt.input_grads_for, [&](std::string_view n) {
            bool found = false;
            for (std::size_t i = 0; i < size; ++i) found = found || (kind[i] == leaf_kind::input && !is_bf16[i] && label[i] == n);
            ok = ok && found;
        });
        return ok;
    }

    /// Whether parameter `name` is frozen (options::frozen, options::trainable).
    static constexpr bool param_frozen(std::string_view name) {
        if (!Opt.frozen[0] && !Opt.trainable[0]) return false;
        return detail::name_matched_by(Opt.frozen, name) || (Opt.trainable[0] && !detail::name_matched_by(Opt.trainable, name));
    }
    /// The first entry of options::frozen or options::trainable that matches no parameter here
    /// (empty: none), for the compile error that names it.
    static constexpr fixed_string<64> unmatched_freeze_entry = []() consteval {
        char r[64] = {};
        auto check = [&](std::string_view e) {
            bool found = false;
            for (std::size_t i = 0; i < size; ++i) found = found || (kind[i] == leaf_kind::param && detail::name_matches(e, label[i]));
            if (!found && !r[0])
                for (std::size_t c = 0; c < e.size() && c < 63; ++c) r[c] = e[c];
        };
        detail::for_each_listed(Opt.frozen, check);
        detail::for_each_listed(Opt.trainable, check);
        return fixed_string<64>(r);
    }();

    /// Nodes that need an adjoint: parameters that train, (optionally) float inputs, and whatever
    /// depends on them other than through ctg::stop_gradient; with_frozen false: as if no parameter
    /// were frozen (the summary's backward FLOPs saved).
    static constexpr std::array<bool, size> needs_grad_table(bool with_frozen) {
        std::array<bool, size> g{};
        for (std::size_t i = 0; i < size; ++i) {
            if (Opt.inference) g[i] = false;
            else if (kind[i] == leaf_kind::param) g[i] = !with_frozen || !param_frozen(label[i]);
            else if (kind[i] == leaf_kind::input) g[i] = !is_bf16[i] && input_gradient_wanted(label[i]);
            else if (kind[i] == leaf_kind::none && !is_index[i] && !stops[i])
                for (std::size_t k = 0; k < arity[i]; ++k) g[i] = g[i] || g[operands[i][k]];
        }
        return g;
    }
    static constexpr std::array<bool, size> needs_grad = needs_grad_table(true);
    /// Whether some parameter is frozen (options::frozen, options::trainable).
    static constexpr bool any_frozen = []() consteval {
        for (std::size_t i = 0; i < size; ++i)
            if (kind[i] == leaf_kind::param && param_frozen(label[i])) return true;
        return false;
    }();

    /// Number of uses of each node by other nodes.
    static constexpr std::array<std::size_t, size> consumers = []() consteval {
        std::array<std::size_t, size> c{};
        for (std::size_t i = 0; i < size; ++i)
            for (std::size_t k = 0; k < arity[i]; ++k) ++c[operands[i][k]];
        return c;
    }();

    /// Index of the last node that reads each node's value in forward (size for outputs/unused).
    static constexpr std::array<std::size_t, size> last_use = []() consteval {
        std::array<std::size_t, size> u{};
        for (std::size_t i = 0; i < size; ++i) u[i] = i;
        for (std::size_t i = 0; i < size; ++i)
            for (std::size_t k = 0; k < arity[i]; ++k) u[operands[i][k]] = std::max(u[operands[i][k]], i);
        return u;
    }();

    static constexpr std::size_t num_params = detail::count_of(kind, leaf_kind::param);
    static constexpr std::size_t num_inputs =
        detail::count_of(kind, leaf_kind::input) + detail::count_of(kind, leaf_kind::index_input);
    static constexpr std::array<std::size_t, num_params> param_nodes = detail::indices_of<num_params>(kind, leaf_kind::param);
    static constexpr std::array<std::size_t, num_inputs> input_nodes = []() consteval {
        std::array<std::size_t, num_inputs> r{};
        std::size_t n = 0;
        for (std::size_t i = 0; i < size; ++i)
            if (kind[i] == leaf_kind::input || kind[i] == leaf_kind::index_input) r[n++] = i;
        return r;
    }();

    /// Where each parameter's gradient is complete in the backward pass: the node after whose VJP no
    /// other node adds to it (its consumer of lowest index, as backward runs from the last node), or
    /// `size` for a parameter nothing reads. Parameters complete at node i are final_order[final_begin[i]
    /// .. final_begin[i] + final_count[i]) (param ordinals); ctg::train_step updates them there.
    static constexpr std::array<std::size_t, num_params + 1> param_final_at = []() consteval {
        std::array<std::size_t, num_params + 1> f{};
        std::array<std::size_t, size> ordinal{};  // node -> param ordinal
        for (std::size_t p = 0; p < num_params; ++p) f[p] = size, ordinal[param_nodes[p]] = p;
        for (std::size_t i = size; i-- > 0;)
            for (std::size_t k = 0; k < arity[i]; ++k)
                if (kind[std::size_t(operands[i][k])] == leaf_kind::param) f[ordinal[std::size_t(operands[i][k])]] = i;
        return f;
    }();
    static constexpr std::array<std::size_t, size + 1> final_count = []() consteval {
        std::array<std::size_t, size + 1> c{};
        for (std::size_t p = 0; p < num_params; ++p) ++c[param_final_at[p]];
        return c;
    }();
    static constexpr std::array<std::size_t, size + 1> final_begin = []() consteval {
        std::array<std::size_t, size + 1> b{};
        std::size_t n = 0;
        for (std::size_t i = 0; i <= size; ++i) b[i] = n, n += final_count[i];
        return b;
    }();
    static constexpr std::array<std::size_t, num_params + 1> final_order = []() consteval {
        std::array<std::size_t, num_params + 1> r{};
        std::array<std::size_t, size + 1> fill{};
        for (std::size_t p = 0; p < num_params; ++p) {
            const std::size_t i = param_final_at[p];
            r[final_begin[i] + fill[i]++] = p;
        }
        return r;
    }();

    /// The outputs are the last NumOutputs distinct roots given to compile(), see program.
    static constexpr std::size_t num_outputs = NumOutputs;

    /// Distinct dynamic-dimension letters, in order of first appearance in the inputs.
    static constexpr auto symbols_and_count = []() consteval {
        std::array<char, max_rank * (num_inputs + 1)> s{};
        std::size_t n = 0;
        for (std::size_t i : input_nodes)
            for (std::size_t a = 0; a < rank[i]; ++a) {
                char c = dims[i][a].sym;
                if (!c) continue;
                bool seen = false;
                for (std::size_t j = 0; j < n; ++j) seen = seen || s[j] == c;
                if (!seen) s[n++] = c;
            }
        return std::pair{s, n};
    }();
    static constexpr std::size_t num_symbols = symbols_and_count.second;
    static constexpr int symbol_index(char c) {
        for (std::size_t j = 0; j < num_symbols; ++j)
            if (symbols_and_count.first[j] == c) return int(j);
        return -1;
    }

    /// Every dynamic dimension of every node is bound by some input.
    static constexpr bool dims_bound_by_inputs = []() consteval {
        for (std::size_t i = 0; i < size; ++i)
            for (std::size_t a = 0; a < rank[i]; ++a)
                if (dims[i][a].sym && symbol_index(dims[i][a].sym) < 0) return false;
        return true;
    }();

    /// Leaves with the same name must be the same leaf (same kind and shape). Returns a clash or -1.
    /// Only named leaves are compared (a few dozen even in a deep model, against hundreds of nodes),
    /// which keeps the pairwise test far inside clang's constexpr step limit.
    static constexpr std::size_t num_named = []() consteval {
        std::size_t n = 0;
        for (std::size_t i = 0; i < size; ++i) n += is_leaf(i) && kind[i] != leaf_kind::constant;
        return n;
    }();
    static constexpr std::pair<int, int> name_clash = []() consteval {
        std::array<std::size_t, num_named + 1> named{};
        std::size_t n = 0;
        for (std::size_t i = 0; i < size; ++i)
            if (is_leaf(i) && kind[i] != leaf_kind::constant) named[n++] = i;
        for (std::size_t a = 0; a < n; ++a)
            for (std::size_t b = a + 1; b < n; ++b)
                if (label[named[a]] == label[named[b]]) return std::pair{int(named[a]), int(named[b])};
        return std::pair{-1, -1};
    }();

    /// Bit k is set when input k (in input_nodes order) reaches node i; used to name the op where
    /// two inputs that disagree at run time meet.
    static constexpr std::array<unsigned long long, size> input_reach = []() consteval {
        std::array<unsigned long long, size> m{};
        for (std::size_t k = 0; k < num_inputs && k < 64; ++k) m[input_nodes[k]] |= 1ULL << k;
        for (std::size_t i = 0; i < size; ++i)
            for (std::size_t a = 0; a < arity[i]; ++a) m[i] |= m[operands[i][a]];
        return m;
    }();
};
/// @endcond

}  // namespace ctg
