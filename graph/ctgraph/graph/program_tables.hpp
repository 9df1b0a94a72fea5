// ctgraph/graph/program_tables.hpp: what a program does from its graph's tables alone: the checks of
// what is fed (rank, static extents, names, kinds), its input buffers, the dimension letters the
// inputs bind, the messages naming nodes and shapes, and pointing the nodes' views at their memory.
//
// None of this needs a graph's type, only its tables (names, kinds, declared shapes, operands), so
// it is written as ordinary functions over detail::graph_tables: each translation unit compiles them
// once, where members of ctg::program were compiled once for every program type (together a third
// of a test unit's machine code, for code that runs once per feed or per plan).
#pragma once
#include <algorithm>
#include <array>
#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "ctgraph/dim.hpp"
#include "ctgraph/error.hpp"
#include "ctgraph/graph/node.hpp"
#include "ctgraph/kernels/bf16.hpp"
#include "ctgraph/memory.hpp"
#include "ctgraph/params.hpp"
#include "ctgraph/tensor.hpp"

namespace ctg::detail {

/// What a program reads of its graph at run time, as pointers into the graph's (static constexpr)
/// tables: tables_of<G>.
struct graph_tables {
    std::size_t num_nodes = 0, num_inputs = 0, num_params = 0, num_symbols = 0;
    const std::string_view* label = nullptr;  // node -> its name (a leaf's) or its op's
    const leaf_kind* kind = nullptr;
    const bool* is_bf16 = nullptr;  // a bf16_input (or its slice)
    const std::size_t* rank = nullptr;
    const std::array<dim, max_rank>* dims = nullptr;  // declared extents: a number or a letter
    const std::size_t* input_nodes = nullptr;  // input k's node
    const unsigned long long* input_reach = nullptr;  // node -> bit k set when input k reaches it
    const std::size_t* param_nodes = nullptr;  // parameter p's node
    const std::size_t* layer_axes = nullptr;  // node -> a stacked parameter's leading layer axes
    const char* symbols = nullptr;  // the dimension letters, in order of first appearance in the inputs
    const bool* needs_grad = nullptr;  // node -> has an adjoint
    const bool* aliases = nullptr;  // node -> its value is operand 0's memory (reshape)
    const int* operands = nullptr;  // node i's operand k: operands[i * max_arity + k]
    std::size_t max_arity = 1;
    const double* constant_value = nullptr;  // a constant leaf's value

    /// The index of dimension letter c among the symbols; -1 when no input declares it.
    int symbol_index(char c) const {
        for (std::size_t j = 0; j < num_symbols; ++j)
            if (symbols[j] == c) return int(j);
        return -1;
    }
};

/// The tables of graph G (ctg::graph<...>).
template <class G>
inline constexpr graph_tables tables_of{G::size,
                                        G::num_inputs,
                                        G::num_params,
                                        G::num_symbols,
                                        G::label.data(),
                                        G::kind.data(),
                                        G::is_bf16.data(),
                                        G::rank.data(),
                                        G::dims.data(),
                                        G::input_nodes.data(),
                                        G::input_reach.data(),
                                        G::param_nodes.data(),
                                        G::layer_axes.data(),
                                        G::symbols_and_count.first.data(),
                                        G::needs_grad.data(),
                                        G::aliases.data(),
                                        &G::operands[0][0],
                                        G::max_arity,
                                        G::constant_value.data()};

/// "(B,256)": node i's declared shape, its letters unbound.
template <class = void>  // (compiled once in the library: CTG_TABLES_INSTANCES)
std::string declared_shape(const graph_tables& g, std::size_t i) {
    std::string s = "(";
    for (std::size_t a = 0; a < g.rank[i]; ++a) {
        if (a) s += ',';
        if (g.dims[i][a].sym) s += g.dims[i][a].sym;
        else s += std::to_string(g.dims[i][a].n);
    }
    return s + ")";
}

/// Node i's shape: its numbers, and each dimension letter's value env[j] (the letter symbols[j]).
/// Without env, a letter's axis is 0: the declared shape of a parameter, which has no letters.
inline rshape concrete_shape(const graph_tables& g, std::size_t i, const std::size_t* env = nullptr) {
    rshape s;
    s.rank = g.rank[i];
    for (std::size_t a = 0; a < s.rank; ++a) {
        const dim d = g.dims[i][a];
        s.d[a] = d.sym && env ? env[std::size_t(g.symbol_index(d.sym))] : std::size_t(d.n);
    }
    return s;
}

/// "%7 attn": node i as messages name it.
template <class = void>  // (compiled once in the library: CTG_TABLES_INSTANCES)
std::string node_name(const graph_tables& g, std::size_t i) {
    return "%" + std::to_string(i) + " " + std::string(g.label[i]);
}

/// s, when it fits input node i's declaration (its rank, and its numbers where it declares numbers);
/// else throws shape_error naming the input, what it declares and what it was given.
template <class = void>  // (compiled once in the library: CTG_TABLES_INSTANCES)
const rshape& check_input_shape(const graph_tables& g, std::size_t i, const rshape& s) {
    bool ok = s.rank == g.rank[i];
    for (std::size_t a = 0; ok && a < s.rank; ++a) ok = g.dims[i][a].sym || std::size_t(g.dims[i][a].n) == s.d[a];
    if (!ok)
        throw shape_error("ctg::program::feed: input '" + std::string(g.label[i]) + "' is declared " +
                          declared_shape(g, i) + " but was given " + to_string(s));
    return s;
}

/// An xtensor shape (any container of extents) as an rshape, checked against input node i.
template <class S>
rshape input_shape_of(const graph_tables& g, std::size_t i, const S& shp) {
    if (shp.size() > max_rank)
        throw shape_error("ctg::program::feed: input '" + std::string(g.label[i]) + "' is declared " +
                          declared_shape(g, i) + " but was given rank " + std::to_string(shp.size()));
    rshape s;
    s.rank = shp.size();
    for (std::size_t a = 0; a < s.rank; ++a) s.d[a] = shp[a];
    return check_input_shape(g, i, s);
}

/// The ordinal (in input_nodes order) of the input named `name`; throws ctg::error when there is
/// none, or when it is an index input and `index` is false (floating-point data given) or the reverse.
template <class = void>  // (compiled once in the library: CTG_TABLES_INSTANCES)
std::size_t input_by_name(const graph_tables& g, std::string_view name, bool index) {
    for (std::size_t k = 0; k < g.num_inputs; ++k) {
        const std::size_t i = g.input_nodes[k];
        if (g.label[i] != name) continue;
        if ((g.kind[i] == leaf_kind::index_input) != index)
            throw error("ctg::program::feed: input '" + std::string(name) + "' is " +
                        (index ? "a floating-point input, given index data" : "an index input, given floating-point data"));
        return k;
    }
    throw error("ctg::program::feed: this program has no input named '" + std::string(name) + "'");
}

/// One input's buffers: what was fed (values, indices or bf16 halves, by the input's kind) or the
/// caller's memory it was bound to, and the shape it was fed with.
template <class T>
struct input_slot {
    aligned_vector<T> values;
    std::vector<index_t> indices;
    aligned_vector<kernels::bf16_bits> halves;  // a bf16_input's fed values
    void* external = nullptr;  // bind(): the caller's memory instead of values (or halves)
    rshape shape{};
    bool fed = false;
};

/// Input k about to be fed with shape s: its buffer of the input's kind grown to hold s (never
/// shrunk: feeding the same sizes again allocates nothing), its binding to outside memory dropped.
template <class T>
input_slot<T>& set_input_shape(const graph_tables& g, input_slot<T>* inputs, std::size_t k, const rshape& s) {
    input_slot<T>& slot = inputs[k];
    const std::size_t i = g.input_nodes[k];
    slot.external = nullptr;
    if (g.kind[i] == leaf_kind::index_input) {
        if (slot.indices.size() < s.size()) slot.indices.resize(s.size());
    } else if (g.is_bf16[i]) {
        if (slot.halves.size() < s.size()) slot.halves.resize(s.size());
    } else if (slot.values.size() < s.size()) {
        slot.values.resize(s.size());
    }
    slot.shape = s;
    slot.fed = true;
    return slot;
}

/// Throws shape_error: dimension letter c has different values in inputs k1 and k2 (given shapes s1
/// and s2); names the first op both reach, where the mismatch would have shown.
template <class = void>  // (compiled once in the library: CTG_TABLES_INSTANCES)
[[noreturn]] void dimension_conflict(const graph_tables& g, char c, std::size_t k1, std::size_t k2,
                                            const rshape& s1, const rshape& s2) {
    std::string meet = "no op";
    for (std::size_t i = 0; i < g.num_nodes; ++i)
        if (((g.input_reach[i] >> k1) & 1) && ((g.input_reach[i] >> k2) & 1)) {
            meet = "op '" + std::string(g.label[i]) + "' (node %" + std::to_string(i) + ")";
            break;
        }
    throw shape_error(std::string("ctg::program::forward: dimension '") + c + "' disagrees between input '" +
                      std::string(g.label[g.input_nodes[k1]]) + "' of shape " + to_string(s1) + " and input '" +
                      std::string(g.label[g.input_nodes[k2]]) + "' of shape " + to_string(s2) + "; they meet at " + meet);
}

/// The dimension letters' values (env[j] for symbols[j]) from the fed inputs' shapes; throws
/// ctg::error for an input not fed and shape_error when two inputs disagree on a letter.
/// bound_by: num_symbols ints of scratch.
template <class T>
void bind_dimensions(const graph_tables& g, const input_slot<T>* inputs, std::size_t* env, int* bound_by) {
    for (std::size_t j = 0; j < g.num_symbols; ++j) env[j] = 0, bound_by[j] = -1;
    for (std::size_t k = 0; k < g.num_inputs; ++k) {
        const std::size_t i = g.input_nodes[k];
        if (!inputs[k].fed) throw error("ctg::program::forward: input '" + std::string(g.label[i]) + "' was not fed");
        for (std::size_t a = 0; a < g.rank[i]; ++a) {
            const char c = g.dims[i][a].sym;
            if (!c) continue;
            const std::size_t j = std::size_t(g.symbol_index(c));
            const std::size_t v = inputs[k].shape.d[a];
            if (bound_by[j] < 0) {
                env[j] = v;
                bound_by[j] = int(k);
            } else if (env[j] != v) {
                const std::size_t k1 = std::size_t(bound_by[j]);
                dimension_conflict(g, c, k1, k, inputs[k1].shape, inputs[k].shape);
            }
        }
    }
}

/// The Levenshtein distance between two names (insertions, deletions and substitutions of characters).
template <class = void>  // (compiled once in the library: CTG_TABLES_INSTANCES)
std::size_t edit_distance(std::string_view a, std::string_view b) {
    std::vector<std::size_t> row(b.size() + 1);
    for (std::size_t j = 0; j <= b.size(); ++j) row[j] = j;
    for (std::size_t i = 1; i <= a.size(); ++i) {
        std::size_t diag = row[0];  // row i-1, column j-1
        row[0] = i;
        for (std::size_t j = 1; j <= b.size(); ++j) {
            const std::size_t up = row[j];
            row[j] = std::min({up + 1, row[j - 1] + 1, diag + (a[i - 1] != b[j - 1] ? 1 : 0)});
            diag = up;
        }
    }
    return row[b.size()];
}

/// Whether two parameter names differ only in leading dot-components: one is the other with
/// components before it ('layers.q.weight', 'encoder.layers.q.weight'), or both are the same after
/// their first component, two components or more ('enc.fc1.weight', 'encoder.fc1.weight'; not
/// 'fc1.weight' and 'fc2.weight', which share only a last component, as most weights do).
template <class = void>  // (compiled once in the library: CTG_TABLES_INSTANCES)
bool same_but_prefix(std::string_view a, std::string_view b) {
    auto under = [](std::string_view x, std::string_view y) {  // x = <components>.y
        return x.size() > y.size() && x.ends_with(y) && x[x.size() - y.size() - 1] == '.';
    };
    auto tail = [](std::string_view x) {
        const std::size_t d = x.find('.');
        return d == std::string_view::npos ? std::string_view{} : x.substr(d + 1);
    };
    return under(a, b) || under(b, a) || (tail(a).find('.') != std::string_view::npos && tail(a) == tail(b));
}

/// Throws ctg::error: the strict store (names `present`) lacks the graph's parameters `missing`
/// (ordinals); lists each with its shape and the (up to 3) closest names present: those that differ
/// from it only in leading dot-components first (a prefix typo), then by edit distance.
template <class = void>  // (compiled once in the library: CTG_TABLES_INSTANCES)
[[noreturn]] void refuse_new_parameters(const graph_tables& g, const std::vector<std::size_t>& missing,
                                               const std::vector<std::string_view>& present) {
    std::string m = "ctg::program: the parameter store is strict (as one loaded from a file is) and lacks " +
                    std::to_string(missing.size()) + (missing.size() == 1 ? " parameter" : " parameters") +
                    " this program needs; nothing was added:";
    std::vector<std::size_t> order(present.size());
    for (std::size_t p : missing) {
        const std::size_t i = g.param_nodes[p];
        const std::string_view name = g.label[i];
        m += "\n  '" + std::string(name) + "' " + to_string(concrete_shape(g, i));
        if (present.empty()) {
            m += ": the store is empty";
            continue;
        }
        std::vector<std::pair<std::size_t, std::size_t>> key(present.size());  // (not a prefix variant, distance)
        for (std::size_t s = 0; s < present.size(); ++s)
            key[s] = {same_but_prefix(name, present[s]) ? 0 : 1, edit_distance(name, present[s])};
        for (std::size_t s = 0; s < order.size(); ++s) order[s] = s;
        const std::size_t shown = std::min<std::size_t>(3, order.size());
        std::partial_sort(order.begin(), order.begin() + long(shown), order.end(),
                          [&](std::size_t a, std::size_t b) { return key[a] != key[b] ? key[a] < key[b] : a < b; });
        m += ": closest present ";
        for (std::size_t k = 0; k < shown; ++k) m += (k ? ", '" : "'") + std::string(present[order[k]]) + "'";
    }
    throw error(m + "\n(a prefix unlike the file's? To let programs add new parameters to this store, "
                    "zero-initialised, call strict(false) on it first)");
}

/// Adds the graph's parameters to a store (slots[p]: parameter p's slot there); a parameter the
/// store already holds must have the same shape. A strict store (parameter_store::strict) adds
/// none but adapters (nn::lora's `*lora_A`, `*lora_B`: new by nature, over loaded weights): when
/// it lacks any other, ctg::error lists them all and the store is unchanged.
template <class T>
void add_parameters(parameter_store<T>& store, const graph_tables& g, std::size_t* slots) {
    if (store.strict()) {
        std::vector<std::size_t> missing;
        for (std::size_t p = 0; p < g.num_params; ++p) {
            const std::string_view name = g.label[g.param_nodes[p]];
            if (store.find(name) < 0 && !name.ends_with("lora_A") && !name.ends_with("lora_B")) missing.push_back(p);
        }
        if (!missing.empty()) {
            std::vector<std::string_view> present;
            for (const auto& e : store.entries()) present.push_back(e.name);
            refuse_new_parameters(g, missing, present);
        }
    }
    for (std::size_t p = 0; p < g.num_params; ++p) {
        const std::size_t i = g.param_nodes[p];
        slots[p] = store.add(g.label[i], concrete_shape(g, i), g.layer_axes[i]);
    }
}

/// Points the leaves' views at their memory: parameters at the store's values (and their gradients,
/// when the program has a backward: an inference program never touches them, so a store read only
/// by inference programs never allocates them), inputs at what was fed or bound, and nodes that
/// alias their operand (reshape) at its memory, wherever it is this time.
template <class T>
void bind_leaves(const graph_tables& g, view* val, view* adj, parameter_store<T>& store, const std::size_t* param_slot,
                 input_slot<T>* inputs, bool with_gradients) {
    for (std::size_t p = 0; p < g.num_params; ++p) {
        const std::size_t i = g.param_nodes[p];
        val[i].ptr = store.value_storage(param_slot[p]);  // (reads: the bf16 copy stays current)
        // (a pending zero_grad stays pending; a frozen parameter, options::frozen, has no gradient)
        if (with_gradients && g.needs_grad[i]) adj[i].ptr = store.grad_storage(param_slot[p]);
    }
    for (std::size_t k = 0; k < g.num_inputs; ++k) {
        const std::size_t i = g.input_nodes[k];
        val[i].ptr = g.kind[i] == leaf_kind::index_input ? static_cast<void*>(inputs[k].indices.data())
                     : inputs[k].external                ? inputs[k].external
                     : g.is_bf16[i]                      ? static_cast<void*>(inputs[k].halves.data())
                                                         : static_cast<void*>(inputs[k].values.data());
    }
    for (std::size_t i = 0; i < g.num_nodes; ++i)
        if (g.aliases[i]) val[i].ptr = val[std::size_t(g.operands[i * g.max_arity])].ptr;
}

/// Where program::plan put each node's memory in the arena: element offsets and sizes, per node.
struct arena_placement {
    const std::size_t* value = nullptr;  // a computed value's or a constant's offset
    const std::size_t* adjoint = nullptr;  // a non-parameter adjoint's offset
    const std::size_t* scratch = nullptr;  // the op's scratch (kept from forward to backward): size
    const std::size_t* scratch_at = nullptr;  // ... and offset
    const std::size_t* forward = nullptr;  // the op's forward scratch (op.hpp): size
    const std::size_t* forward_at = nullptr;  // ... and offset
    const std::size_t* backward = nullptr;  // the op's backward scratch (op.hpp): size, all at backward_at
    std::size_t backward_at = 0;
    const bool* no_float = nullptr;  // the op writes its bf16 shadow alone: no float value
    const bool* shadowed = nullptr;  // keeps a bf16 shadow, at shadow_at (null: no node does)
    const std::size_t* shadow_at = nullptr;
};

/// A program's views of every node, pointed into its arena.
struct node_views {
    view* value;
    view* adjoint;
    view* scratch;
    view* forward_scratch;  // program::transient_
    view* backward_scratch;  // program::backward_transient_
    std::uint16_t** shadow;  // null: no node keeps a bf16 shadow
};

/// Points every node's views at the arena at `base` as `at` places them (leaves: bind_leaves), and
/// writes the constants' values.
template <class T>
void point_views(const graph_tables& g, const arena_placement& at, T* base, const rshape* shapes, const node_views& v) {
    for (std::size_t i = 0; i < g.num_nodes; ++i) {
        v.value[i] = {nullptr, shapes[i]};
        v.adjoint[i] = {nullptr, shapes[i]};
        v.scratch[i] = {at.scratch[i] ? base + at.scratch_at[i] : nullptr, rshape{1, {at.scratch[i]}}};
        v.forward_scratch[i] = {at.forward[i] ? base + at.forward_at[i] : nullptr, rshape{1, {at.forward[i]}}};
        v.backward_scratch[i] = {at.backward[i] ? base + at.backward_at : nullptr, rshape{1, {at.backward[i]}}};
        if (g.kind[i] == leaf_kind::none || g.kind[i] == leaf_kind::constant)
            v.value[i].ptr = at.no_float[i] ? nullptr : base + at.value[i];
        if (g.needs_grad[i] && g.kind[i] != leaf_kind::param) v.adjoint[i].ptr = base + at.adjoint[i];
        if (at.shadowed) v.shadow[i] = at.shadowed[i] ? reinterpret_cast<std::uint16_t*>(base + at.shadow_at[i]) : nullptr;
    }
    for (std::size_t i = 0; i < g.num_nodes; ++i)
        if (g.kind[i] == leaf_kind::constant) *v.value[i].template as<T>() = T(g.constant_value[i]);
}

// What reads only a graph's tables is compiled once, in the library (include/ctgraph/compiled.cpp),
// where CTG_SEPARATE_COMPILATION is defined: the checks, messages and bindings above for float and
// double. (The functions without a scalar type are templates for this only.)
#define CTG_TABLES_INSTANCES(how)                                                                               \
    how std::string declared_shape<void>(const graph_tables&, std::size_t);                                     \
    how std::string node_name<void>(const graph_tables&, std::size_t);                                          \
    how const rshape& check_input_shape<void>(const graph_tables&, std::size_t, const rshape&);                 \
    how std::size_t input_by_name<void>(const graph_tables&, std::string_view, bool);                           \
    how void dimension_conflict<void>(const graph_tables&, char, std::size_t, std::size_t, const rshape&,        \
                                      const rshape&);                                                           \
    how std::size_t edit_distance<void>(std::string_view, std::string_view);                                   \
    how bool same_but_prefix<void>(std::string_view, std::string_view);                                        \
    how void refuse_new_parameters<void>(const graph_tables&, const std::vector<std::size_t>&,                  \
                                         const std::vector<std::string_view>&);                                 \
    CTG_TABLES_INSTANCES_OF(how, float) CTG_TABLES_INSTANCES_OF(how, double)
#define CTG_TABLES_INSTANCES_OF(how, T)                                                                         \
    how input_slot<T>& set_input_shape<T>(const graph_tables&, input_slot<T>*, std::size_t, const rshape&);     \
    how void bind_dimensions<T>(const graph_tables&, const input_slot<T>*, std::size_t*, int*);                 \
    how void add_parameters<T>(parameter_store<T>&, const graph_tables&, std::size_t*);                         \
    how void bind_leaves<T>(const graph_tables&, view*, view*, parameter_store<T>&, const std::size_t*,         \
                            input_slot<T>*, bool);                                                              \
    how void point_views<T>(const graph_tables&, const arena_placement&, T*, const rshape*, const node_views&);
#if defined(CTG_SEPARATE_COMPILATION)
CTG_TABLES_INSTANCES(extern template)
#endif

}  // namespace ctg::detail
