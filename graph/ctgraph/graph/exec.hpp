// ctgraph/graph/exec.hpp: running one node.
//
// These are free functions templated on the op, its arity and the scalar type only, never on the
// graph or the node's position. A function templated on the node index would carry the whole graph
// type in its mangled name (about 10 KB for a 300-node graph), and g++ spends most of its time on
// such names: measured 64 s / 1.4 GB for 300 nodes with per-index member functions against a few
// seconds with this layout. Identical ops at different places also share one instantiation.
#pragma once
#include <array>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <string>
#include <string_view>
#include <type_traits>
#include <utility>

#include "ctgraph/graph/analysis.hpp"
#include "ctgraph/kernels/bf16.hpp"
#include "ctgraph/kernels/simd.hpp"
#include "ctgraph/memory.hpp"
#include "ctgraph/op.hpp"

namespace ctg::detail {

/// Where a program keeps its per-node views and tables, as plain pointers.
struct exec_state {
    const view* val;
    const view* adj;
    const view* scratch;
    const rshape* shapes;
    const bool* needs_grad;
    const element* elem;  // what node i's elements are (only element::real values are of type T)
    const std::string_view* label;
    const int* operands;  // node i's operands: operands[i * stride + k]
    std::size_t stride;
    run_info run{};       // the pass; each node's stream is derived from run.stream and its index
    const adj_write* adj_mode = nullptr;  // adj_mode[i * stride + k] (adj_write_modes); null: all add
    // Node i's bf16 shadow (shadow[i], null where it has none; the array null where no node has
    // one): its value rounded to bf16, written right after its forward (exec_forward), read by the
    // products that take the value as an operand (op_io::xb). See bf16_shadowed().
    std::uint16_t* const* shadow = nullptr;
    // Node i keeps no float for backward (bf16_only[i]; the array null where none does): its float
    // memory is scratch shared with others, valid only while forward reads it (bf16_only_values()). A
    // product that reads it only as a bf16 operand (op.hpp, bf16_operands_only) gets c.x[k] null
    // and its shadow in c.xb[k].
    const bool* bf16_only = nullptr;
    // Node i's forward scratch (op.hpp, forward_scratch_size; forward_transient[i]), memory valid
    // during its forward alone; the array null where none is placed (the op then takes its own).
    const view* forward_transient = nullptr;
    // Node i's backward scratch (op.hpp, backward_scratch_size; backward_transient[i]), memory valid
    // during its VJP alone; the array null where none is placed.
    const view* backward_transient = nullptr;
    // Node i's shadow is made again before its first reader's VJP (remade[i]; a repeat's layer:
    // graph/cell.hpp, cell_frame::remade); the array null where none is.
    const bool* remade = nullptr;
    // A program's training pass: a node without an adjoint (one that leads only to frozen
    // parameters, options::frozen) runs as in an inference pass (run_info::forward_only: a repeat or
    // scan keeps one layer's or step's values, not every one's), its scratch sized so.
    bool forward_only_without_adjoint = false;
};

/// The operands an op reads as matrix-product operands (op.hpp, bf16_operands): none unless it says.
template <class Op>
inline constexpr std::uint32_t bf16_operands_of = [] {
    if constexpr (requires { Op::bf16_operands; }) return std::uint32_t(Op::bf16_operands); else return std::uint32_t(0);
}();

/// Which nodes of a graph keep a bf16 shadow of their value in a mixed-precision program: nodes
/// that `eligible` allows (op nodes whose values are kept for backward) and that a node `reads`
/// allows (one that runs) takes as a product operand (bf16_operands; prod[j] is node j's mask).
/// Such a product rounds the operand to bf16 whatever it reads, so a copy rounded once, when the
/// value is made, gives it the same operand (the same bits) and spares a conversion of the float
/// at every product, forward and backward, which read it back from memory (gpt-m: 14.5 % of a
/// step). Every other reader (layer norm, a softmax's VJP, element-wise ops) reads the float
/// value, which is kept as before.
template <std::size_t N, std::size_t MaxArity, class Eligible, class Reads>
constexpr std::array<bool, N> bf16_shadowed(const std::array<std::size_t, N>& arity,
                                            const std::array<std::array<int, MaxArity>, N>& operands,
                                            const std::array<std::uint32_t, N>& prod, Eligible eligible, Reads reads) {
    std::array<bool, N> sh{};
    for (std::size_t j = 0; j < N; ++j)
        if (reads(j))
            for (std::size_t k = 0; k < arity[j] && k < 32; ++k)
                if ((prod[j] >> k) & 1) {
                    const std::size_t i = std::size_t(operands[j][k]);
                    if (eligible(i)) sh[i] = true;
                }
    return sh;
}

/// The operands an op reads nowhere but as bf16 product operands, forward and VJP (op.hpp,
/// bf16_operands_only): none unless it says.
template <class Op>
inline constexpr std::uint32_t bf16_operands_only_of = [] {
    if constexpr (requires { Op::bf16_operands_only; }) return std::uint32_t(Op::bf16_operands_only); else return std::uint32_t(0);
}();

/// Whether an op's forward writes its result's bf16 shadow itself (op.hpp, writes_bf16_result).
template <class Op>
inline constexpr bool writes_bf16_result_of = [] {
    if constexpr (requires { Op::writes_bf16_result; }) return bool(Op::writes_bf16_result); else return false;
}();

/// Whether an op's VJP reads its own result c.y (op.hpp, vjp_reads_result): as it says, else as its
/// backward_reads says (reads_result), else yes.
template <class Op>
inline constexpr bool vjp_reads_result_of = [] {
    if constexpr (requires { Op::vjp_reads_result; }) return bool(Op::vjp_reads_result);
    else if constexpr (requires { Op::backward_reads; }) return (std::uint32_t(Op::backward_reads) & reads_result) != 0;
    else return true;
}();

/// The values an op's VJP can read as their bf16 shadow (op.hpp, vjp_reads_bf16; bit 31 = reads_result): none unless it says.
template <class Op>
inline constexpr std::uint32_t vjp_reads_bf16_of = [] {
    if constexpr (requires { Op::vjp_reads_bf16; }) return std::uint32_t(Op::vjp_reads_bf16); else return std::uint32_t(0);
}();

/// The operands an op is handed as their shadow alone (c.x[k] null) where they are kept in bf16
/// only (build_io's `only`): those it reads only in products, and those its VJP reads rounded, to
/// which forward and a remake (exec_remake) read the same rounded operand.
template <class Op>
inline constexpr std::uint32_t shadow_only_operands_of = bf16_operands_only_of<Op> | (vjp_reads_bf16_of<Op> & ~reads_result);

/// Which values a mixed-precision program keeps no float of for backward: those that backward
/// reads only as bf16 product operands, through their shadow, or not at all. Their float gets no
/// place of its own, only scratch shared with other such values while forward still reads it.
/// Node i (allowed by `eligible`: an op node kept for backward, not an output, not an aliasing
/// node) qualifies when its own VJP does not read its result (vjp_reads_result: GELU's and layer
/// norm's read their input; softmax's reads its output, so attention weights stay float), when it
/// has readers, and when each reader j
///  - takes it only as a product operand (bf16_operands_only, only[j]): the product reads its
///    shadow (a layer norm's output, q, k, v, GELU's output), or
///  - reads it in forward only: j's VJP does not read that operand (backward_reads, bwd[j]; an
///    attention projection's output read by the head split, a sub-layer's output read by the
///    residual sum), or
///  - is an aliasing node (reshape) that is not an output, whose VJP reads neither its operand nor
///    its result, and whose readers are all of the first two kinds (the merged heads that the
///    output projection reads); the alias then keeps the shadow, made when it runs from i's
///    float, and is marked too.
/// A product rounds its operands to bf16 anyway, so it computes the same bits from the shadow
/// alone. `last[i]` is the last forward step that reads i's float (i itself, a forward reader, or
/// an alias). `no_float[i]`: not even that, the value has a shadow that its op writes itself
/// (writes[i], op.hpp writes_bf16_result) and nothing reads its float: the op gets a null c.y and
/// writes the shadow alone (a layer norm's or GELU's output, q, k, v).
/// With `saved` (options::bf16_saved; saved[j] is node j's vjp_reads_bf16, zero when off), a VJP
/// that reads a value may read it rounded, from a shadow: node i qualifies too when its own VJP
/// reads it only so (the attention weights), and a reader j whose VJP reads it (bwd) does so (GELU
/// reading the first FFN product); such a value gets a shadow for backward if products did not
/// give it one (`shadow`: the shadows the program keeps, those of `shadowed` and these). These
/// change results: the VJPs read rounded values.
template <std::size_t N>
struct bf16_only_plan {
    std::array<bool, N> only{}, no_float{}, shadow{};
    std::array<std::size_t, N> last{};
};
template <std::size_t N, std::size_t MaxArity, class Eligible>
constexpr bf16_only_plan<N> bf16_only_values(const std::array<std::size_t, N>& arity,
                                             const std::array<std::array<int, MaxArity>, N>& operands,
                                             const std::array<bool, N>& aliases, const std::array<bool, N>& shadowed,
                                             const std::array<std::uint32_t, N>& only, const std::array<std::uint32_t, N>& bwd,
                                             const std::array<bool, N>& vjp_y, const std::array<bool, N>& writes,
                                             const std::array<std::uint32_t, N>& saved, Eligible eligible) {
    bf16_only_plan<N> r{};
    r.shadow = shadowed;
    auto bit = [](std::uint32_t mask, std::size_t k) { return k < 31 && ((mask >> k) & 1) != 0; };
    // Whether the reads of node i by non-aliasing nodes are all products' or forward-only; `last`
    // grows to the last forward reader, `read` says whether anything reads it.
    auto plain_readers = [&](std::size_t i, std::size_t& last, bool& read) {
        for (std::size_t j = i + 1; j < N; ++j)
            for (std::size_t k = 0; k < arity[j]; ++k)
                if (std::size_t(operands[j][k]) == i) {
                    read = true;
                    if (bit(only[j], k) && shadowed[i]) continue;
                    if (aliases[j] || k >= 31 || bit(bwd[j], k)) return false;
                    last = std::max(last, j);
                }
        return true;
    };
    for (std::size_t i = 0; i < N; ++i) {
        if (!eligible(i) || aliases[i]) continue;
        // Whether backward reads the value rounded, from a shadow products did not ask for.
        bool rounded_read = vjp_y[i] && (saved[i] & reads_result) != 0;
        if (vjp_y[i] && !rounded_read) continue;
        bool ok = true, read = false;
        std::size_t last = i;
        for (std::size_t j = i + 1; j < N && ok; ++j)
            for (std::size_t k = 0; k < arity[j] && ok; ++k) {
                if (std::size_t(operands[j][k]) != i) continue;
                read = true;
                if (bit(only[j], k) && shadowed[i]) continue;
                if (aliases[j]) {
                    bool alias_read = false;
                    ok = k == 0 && eligible(j) && !vjp_y[j] && !bit(bwd[j], 0) && plain_readers(j, last, alias_read) && alias_read;
                    last = std::max(last, j);
                } else {
                    const bool rounded = bit(bwd[j], k) && bit(saved[j], k);  // j's VJP reads the shadow
                    ok = k < 31 && (!bit(bwd[j], k) || rounded);
                    rounded_read = rounded_read || rounded;
                    last = std::max(last, j);
                }
            }
        if (!ok || !read) continue;
        r.only[i] = true;
        r.last[i] = last;
        r.shadow[i] = shadowed[i] || rounded_read;
        r.no_float[i] = last == i && r.shadow[i] && writes[i];
        for (std::size_t j = i + 1; j < N; ++j)
            if (aliases[j] && std::size_t(operands[j][0]) == i) r.only[j] = true, r.last[j] = last;
    }
    return r;
}

/// Whether an op's backward can write a fresh adjoint with = (see op.hpp).
template <class Op>
inline constexpr bool assigns_adjoints = [] {
    if constexpr (requires { Op::assigns_adjoints; }) return bool(Op::assigns_adjoints); else return false;
}();

/// The values an op's backward reads (op.hpp, backward_reads): all of them unless it says.
template <class Op>
inline constexpr std::uint32_t backward_reads_of = [] {
    if constexpr (requires { Op::backward_reads; }) return std::uint32_t(Op::backward_reads); else return ~std::uint32_t(0);
}();

/// bf16_only_values for graph G (a program's or a cell's), its ops' traits gathered from its nodes;
/// Saved: with options::bf16_saved.
template <class G, bool Saved, std::size_t N, class Eligible>
constexpr bf16_only_plan<N> bf16_only_values_of(const std::array<bool, N>& shadowed, Eligible eligible) {
    return [&]<std::size_t... I>(std::index_sequence<I...>) {
        return bf16_only_values(G::arity, G::operands, G::aliases, shadowed,
                                std::array<std::uint32_t, N>{bf16_operands_only_of<op_of_t<typename G::template node_t<I>>>...},
                                std::array<std::uint32_t, N>{backward_reads_of<op_of_t<typename G::template node_t<I>>>...},
                                std::array<bool, N>{vjp_reads_result_of<op_of_t<typename G::template node_t<I>>>...},
                                std::array<bool, N>{writes_bf16_result_of<op_of_t<typename G::template node_t<I>>>...},
                                std::array<std::uint32_t, N>{(Saved ? vjp_reads_bf16_of<op_of_t<typename G::template node_t<I>>> : 0u)...},
                                eligible);
    }(std::make_index_sequence<N>{});
}

/// program::backward() without a per-parameter hook.
struct no_final_hook {
    void operator()(std::size_t) const {}
};

/// Whether a backward_with hook takes element ranges, on_final(slot, first, count): it then hears
/// of each layer's rows of a stacked parameter as soon as that layer's backward is done.
template <class F>
concept range_final_hook = requires(F& f, std::size_t s) { f(s, s, s); };

/// A stream number from a parent stream and an index (a node, a step): splitmix64 of both.
constexpr std::uint64_t sub_stream(std::uint64_t parent, std::uint64_t index) {
    std::uint64_t z = parent * 0x9E3779B97F4A7C15ULL + index + 0x632BE59BD9B4E019ULL;
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ULL;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBULL;
    return z ^ (z >> 31);
}

/// The same pass with the stream of child `index` (a node, a step, a layer).
constexpr run_info sub_run(const run_info& run, std::uint64_t index) {
    run_info r = run;
    r.stream = sub_stream(run.stream, index);
    return r;
}

/// The run of a cell's step or layer (scan, repeat): the stream of child `index`, and no
/// recomputation for the ops inside (a cell plans them without it).
constexpr run_info cell_run(const run_info& run, std::uint64_t index) {
    run_info r = sub_run(run, index);
    r.recompute = false;
    r.bf16_shadows = false;  // (as recompute: the ops inside plan without it)
    r.bf16_only = false;
    r.after_layer = nullptr;  // (the enclosing op reports its own layers)
    return r;
}

/// An op's layer count when its backward reports layers (run_info::after_layer), else 0.
template <class Op>
inline constexpr std::size_t op_layers = [] {
    if constexpr (requires { Op::layered_operand(std::size_t(0)); }) return std::size_t(Op::layers); else return std::size_t(0);
}();
/// Whether operand k's adjoint rows are final layer by layer (see op_layers).
template <class Op>
constexpr bool op_layered_operand(std::size_t k) {
    if constexpr (op_layers<Op> > 0) return Op::layered_operand(k); else return false;
}

/// only: the operands the op reads only as bf16 product operands (bf16_operands_only); those kept in
/// bf16 only (exec_state::bf16_only) are handed over as their shadow alone (c.x[k] null).
template <class T, std::size_t K>
inline op_io<T, K> build_io(const exec_state& s, std::size_t i, std::uint32_t only = 0) {
    op_io<T, K> c;
    c.y = s.val[i];
    c.gy = s.adj[i];
    for (std::size_t k = 0; k < K; ++k) {
        const std::size_t j = std::size_t(s.operands[i * s.stride + k]);
        c.x[k] = s.val[j];
        c.gx[k] = s.needs_grad[j] ? s.adj[j] : view{nullptr, s.shapes[j]};
        c.x_name[k] = s.label[j];
        if (s.shadow) c.xb[k] = s.shadow[j];
        if (s.bf16_only && k < 32 && ((only >> k) & 1) && s.bf16_only[j] && c.xb[k]) c.x[k].ptr = nullptr;
    }
    c.scratch = s.scratch[i];
    c.node_name = s.label[i];
    c.run = sub_run(s.run, i);
    if (s.forward_only_without_adjoint && !s.needs_grad[i]) c.run.forward_only = true;
    return c;
}

// ---------------------------------------------------------------- anomaly detection
/// Index of the first non-finite element of a floating-point view, or -1.
template <class T>
long first_non_finite(const view& v) {
    const T* p = v.template as<T>();
    if (!p) return -1;
    for (std::size_t k = 0; k < v.size(); ++k)
        if (!std::isfinite(p[k])) return long(k);
    return -1;
}

inline std::string node_words(const exec_state& s, std::size_t j) {
    return "%" + std::to_string(j) + " '" + std::string(s.label[j]) + "' " + to_string(s.shapes[j]);
}

/// Throws numeric_error for a non-finite element `e` of `where` (node i's value, or the adjoint of its
/// operand k), listing which of node i's operand values (and, in backward, its own adjoint) were finite.
template <class T, std::size_t K>
[[noreturn]] void anomaly(const exec_state& s, std::size_t i, std::string_view op, bool backward, int k, long e,
                          const view& where) {
    std::string m = std::string("ctg anomaly: ") + (backward ? "backward" : "forward") + " of node " +
                    node_words(s, i) + " (op " + std::string(op) + "): ";
    m += backward ? "the adjoint it gave operand " + std::to_string(k) + " (" +
                        node_words(s, std::size_t(s.operands[i * s.stride + std::size_t(k)])) + ")"
                  : std::string("its value");
    m += " is not finite at flat index " + std::to_string(e) + " (" + std::to_string(where.template as<T>()[e]) +
         "); operand values:";
    for (std::size_t a = 0; a < K; ++a) {
        const std::size_t j = std::size_t(s.operands[i * s.stride + a]);
        m += " " + std::to_string(a) + " (" + node_words(s, j) + ") " +
             (s.elem[j] == element::index  ? "index data"
              : s.elem[j] == element::bf16 ? "bf16 data"
              : first_non_finite<T>(s.val[j]) < 0 ? "finite"
                                                  : "NOT finite") + ";";
    }
    if (backward) m += std::string(" the node's own adjoint ") + (first_non_finite<T>(s.adj[i]) < 0 ? "finite" : "NOT finite");
    else m.pop_back();
    throw numeric_error(m);
}

// noinline: one out-of-line body per distinct (op, arity, T), shared by every node using it; the
// program's forward is then a list of calls, cheap to optimise (a 300-node graph: 9.1 s -> see
// docs/compile-time.md), at the cost of one call per node per step (nanoseconds against kernels).
template <class Op, std::size_t K, class T, bool Anomaly = false>
[[gnu::noinline]] void exec_forward(const exec_state& s, std::size_t i) {
    if constexpr (!std::is_same_v<Op, no_op>) {
        // An operand that the VJP reads rounded, kept in bf16 only, comes as its shadow alone in
        // forward too (op.hpp, vjp_reads_bf16): the value and its derivative see one operand.
        auto c = build_io<T, K>(s, i, shadow_only_operands_of<Op>);
        if (s.forward_transient) c.transient = s.forward_transient[i];
        if constexpr (std::is_same_v<T, float> && writes_bf16_result_of<Op>)  // the op writes its shadow itself
            if (s.shadow) c.yb = s.shadow[i];  // (c.y null where nothing reads the float: bf16_only_plan::no_float)
        Op::template forward<T>(c);
        if constexpr (std::is_same_v<T, float> && !writes_bf16_result_of<Op>)  // the value's bf16 shadow, made while it is in cache
            if (s.shadow && s.shadow[i]) kernels::pack_bf16_on_pool(false, c.y.shape.rows(), c.y.shape.cols(), c.y_data(), c.y.shape.cols(), s.shadow[i]);
        if constexpr (Anomaly)
            if (s.elem[i] == element::real)
                if (const long e = first_non_finite<T>(c.y); e >= 0) anomaly<T, K>(s, i, Op::name, false, -1, e, c.y);
    }
}

template <class Op, std::size_t K, bool NeedsGrad, class T, bool Anomaly = false>
[[gnu::noinline]] void exec_backward(const exec_state& s, std::size_t i) {
    if constexpr (!std::is_same_v<Op, no_op> && NeedsGrad) {
        // A value kept in bf16 only has no float in backward: the operands (and the result) that the
        // VJP can read rounded come as their shadow alone (vjp_reads_bf16).
        auto c = build_io<T, K>(s, i, shadow_only_operands_of<Op>);
        if (s.backward_transient) c.transient = s.backward_transient[i];
        if constexpr (std::is_same_v<T, float> && (vjp_reads_bf16_of<Op> & reads_result) != 0)
            if (s.bf16_only && s.bf16_only[i] && s.shadow && s.shadow[i]) c.y.ptr = nullptr, c.yb = s.shadow[i];
        if (s.adj_mode)
            for (std::size_t k = 0; k < K; ++k) {
                const adj_write m = s.adj_mode[i * s.stride + k];
                if (m == adj_write::add || !c.gx[k]) continue;
                if (m == adj_write::fresh && assigns_adjoints<Op>) c.assign[k] = true;
                else std::memset(c.gx[k].ptr, 0, c.gx[k].size() * sizeof(T));
            }
        Op::template backward<T>(c);
        if constexpr (Anomaly)
            for (std::size_t k = 0; k < K; ++k)
                if (c.gx[k])
                    if (const long e = first_non_finite<T>(c.gx[k]); e >= 0)
                        anomaly<T, K>(s, i, Op::name, true, int(k), e, c.gx[k]);
    }
}

/// Whether an op can make its result's bf16 shadow again from what its VJP reads (op.hpp,
/// remakes_bf16_result).
template <class Op>
inline constexpr bool remakes_bf16_result_of = [] {
    if constexpr (requires { Op::remakes_bf16_result; }) return bool(Op::remakes_bf16_result); else return false;
}();

/// Node i's bf16 shadow made again into s.shadow[i] before backward reads it (op.hpp,
/// remakes_bf16_result; graph/cell.hpp, cell_frame::remade): its operands and scratch as its VJP
/// gets them.
template <class Op, std::size_t K, class T>
[[gnu::noinline]] void exec_remake(const exec_state& s, std::size_t i) {
    if constexpr (std::is_same_v<T, float> && remakes_bf16_result_of<Op>) {
        auto c = build_io<T, K>(s, i, shadow_only_operands_of<Op>);
        c.y.ptr = nullptr;
        c.yb = s.shadow[i];
        Op::template remake_bf16_result<T>(c);
    }
}

template <class Op, std::size_t K>
inline std::size_t scratch_size_of(const rshape* shapes, const int* operands, std::size_t stride, std::size_t i,
                                   bool forward_only, bool recompute = false, int bf16 = 0) {
    std::array<rshape, K> xs{};
    for (std::size_t k = 0; k < K; ++k) xs[k] = shapes[std::size_t(operands[i * stride + k])];
    if constexpr (requires(const rshape& y, const std::array<rshape, K>& x) { Op::scratch_size(y, x, forward_only, recompute, bf16); })
        return Op::scratch_size(shapes[i], xs, forward_only, recompute, bf16);  // repeat: bf16 shadows (1), and values in bf16 only (2)
    else if constexpr (requires(const rshape& y, const std::array<rshape, K>& x) { Op::scratch_size(y, x, forward_only, recompute); })
        return Op::scratch_size(shapes[i], xs, forward_only, recompute);  // repeat: one frame with options::recompute
    else if constexpr (requires(const rshape& y, const std::array<rshape, K>& x) { Op::scratch_size(y, x, forward_only); })
        return Op::scratch_size(shapes[i], xs, forward_only);  // scan, repeat: less in a forward-only pass
    else if constexpr (requires(const rshape& y, const std::array<rshape, K>& x) { Op::scratch_size(y, x); })
        return Op::scratch_size(shapes[i], xs);
    else
        return 0;
}

/// Op::forward_scratch_size (op.hpp) of node i at bf16 level `bf16`, or its backward_scratch_size
/// (Backward); 0 where it declares none.
template <class Op, std::size_t K, bool Backward = false>
inline std::size_t transient_size_of(const rshape* shapes, const int* operands, std::size_t stride, std::size_t i, int bf16) {
    std::array<rshape, K> xs{};
    for (std::size_t k = 0; k < K; ++k) xs[k] = shapes[std::size_t(operands[i * stride + k])];
    if constexpr (Backward) {
        if constexpr (requires(const rshape& y, const std::array<rshape, K>& x) { Op::backward_scratch_size(y, x, bf16); })
            return Op::backward_scratch_size(shapes[i], xs, bf16);
    } else {
        if constexpr (requires(const rshape& y, const std::array<rshape, K>& x) { Op::forward_scratch_size(y, x, bf16); })
            return Op::forward_scratch_size(shapes[i], xs, bf16);
    }
    return 0;
}

/// The memory a pass's forward alone uses, first fit by lifetime from offset 0: the floats kept
/// in bf16 only (node i with transient(i), `elems(i)` elements, from its forward to last[i], its
/// last forward reader's; at value_offset[i]) and the ops' forward scratch (fs_size[i] elements,
/// rounded by `round`, during node i's forward; at fs_offset[i]). A node may have both: an
/// affine_gelu whose activation a sum also reads. Returns the extent. program::plan() and a
/// repeat's frame (cell_frame) lay their memory out so, and program::summary() counts it so.
template <std::size_t N, class Transient, class Elems, class Round>
inline std::size_t place_forward_transients(Transient&& transient, const std::array<std::size_t, N>& last, Elems&& elems,
                                            const std::array<std::size_t, N>& fs_size, Round&& round,
                                            std::array<std::size_t, N>& value_offset, std::array<std::size_t, N>& fs_offset) {
    std::array<lifetime, 2 * N> blocks{};
    std::array<std::size_t, 2 * N> slot{}, at{};  // slot: i for node i's float, N + i for its forward scratch
    std::array<std::pair<std::size_t, std::size_t>, 2 * N> taken{};
    std::size_t n = 0;
    for (std::size_t i = 0; i < N; ++i) {
        if (transient(i)) blocks[n] = {i, last[i], elems(i)}, slot[n++] = i;
        if (fs_size[i]) blocks[n] = {i, i, round(fs_size[i])}, slot[n++] = N + i;
    }
    const std::size_t extent = place_by_lifetime(n, blocks.data(), at.data(), taken.data());
    for (std::size_t a = 0; a < n; ++a) (slot[a] < N ? value_offset[slot[a]] : fs_offset[slot[a] - N]) = at[a];
    return extent;
}

/// The op's printed name with its attributes ("scale[0.5]"); empty for leaves.
template <class Op>
inline std::string describe_op() {
    if constexpr (std::is_same_v<Op, no_op>) {
        return {};
    } else {
        std::string s(Op::name);
        if constexpr (requires { Op::describe(); }) s += "[" + Op::describe() + "]";
        return s;
    }
}

}  // namespace ctg::detail
