// ctgraph/graph/summary.hpp: a model summary before running (as Keras' summary() or torchinfo).
//
//   auto prog = ctg::compile<float>(model::loss(tokens, targets));
//   std::printf("%s", prog.summary({{'B', 16}, {'T', 64}}).to_string().c_str());
//
// Everything comes from the static tables and the sizes named for the dynamic dimensions: nothing
// runs, nothing is allocated but the summary itself. Rows group the nodes by module: a node that
// reads parameters directly belongs to the module their names share ("head." for head.weight and
// head.bias, "blocks." for a repeat's stacked parameters, shown once with its layer count); nodes
// without parameters form rows of their own ("-") between them. Consecutive nodes of one module are
// one row.
//
// FLOPs, counted per node from its concrete shapes:
//   * matrix products exactly as kernels::gemm runs them, 2 M N K each: matmul (batched or by a
//     weight), affine (and affine_gelu, ...), matmul_transposed, scaled_dot_weights' score product; backward counts the
//     products that run, one per operand that receives an adjoint (dA = dY B^T, dB = A^T dY: 2x
//     forward when both do). Their sum equals kernels::gemm_flop_counter() over one forward and
//     backward at the same sizes;
//   * every other op as one FLOP per element forward (of its result or of its largest operand,
//     whichever is larger: a loss or a reduction reads more than it writes), and backward one per
//     element of each operand receiving an adjoint (or of the result, if larger); affine's bias and
//     scaled_dot_weights' softmax likewise, one per element of the result, beside their products.
//     A measure of the memory-bound work, not an exact count of arithmetic;
//   * repeat and scan: their body's nodes at the body's shapes, times the layers or time steps (the
//     first step's state adjoint only where one is needed);
//   * options{.recompute = true}: the forward FLOPs backward runs again, L - 1 layers of each repeat
//     (the nodes of a layer whose values its VJPs read; flop_count::recompute, apart from forward
//     and backward).
// Memory: each row's bytes are those plan() gives its nodes in the program's arena: in a training
// program values, adjoints and op scratch (all kept from forward to backward; a repeat's or scan's
// scratch holds every layer's or step's frame); in an inference program values and scratch, which
// its lifetime plan overlaps, so the arena is smaller than their sum. `arena_bytes` is the program's
// whole arena at these sizes: arena_elements() * sizeof(T) once it has run at them. With
// options::recompute a repeat keeps one layer's frame instead of L: `recompute_saved_bytes` is what
// the arena would hold more without it.
#pragma once
#include <algorithm>
#include <array>
#include <cstddef>
#include <cstdint>
#include <initializer_list>
#include <sstream>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "ctgraph/error.hpp"
#include "ctgraph/graph/analysis.hpp"
#include "ctgraph/graph/exec.hpp"
#include "ctgraph/graph/program_tables.hpp"
#include "ctgraph/memory.hpp"

namespace ctg {

namespace ops {
template <class CellOut, int L, std::size_t Extra, std::uint64_t SlicedMask>
struct repeat_op;
}  // namespace ops

/// Floating-point operations of a node, a row or a model: forward and backward, and of those the
/// matrix products' (what kernels::gemm_flop_counter() counts).
struct flop_count {
    std::uint64_t forward = 0;            ///< all forward FLOPs (products + element work)
    std::uint64_t backward = 0;           ///< all backward FLOPs
    std::uint64_t forward_products = 0;   ///< the forward matrix products' FLOPs (2 M N K each)
    std::uint64_t backward_products = 0;  ///< the backward matrix products' FLOPs
    /// Forward FLOPs that backward runs again (options::recompute: a repeat's layers but the last)
    std::uint64_t recompute = 0;
    std::uint64_t recompute_products = 0;  ///< of which matrix products'
    /// Adds another count.
    flop_count& operator+=(const flop_count& o) {
        forward += o.forward, backward += o.backward;
        forward_products += o.forward_products, backward_products += o.backward_products;
        recompute += o.recompute, recompute_products += o.recompute_products;
        return *this;
    }
    /// The count k times (layers, time steps).
    flop_count times(std::uint64_t k) const {
        return {forward * k, backward * k, forward_products * k, backward_products * k, recompute * k, recompute_products * k};
    }
};

/// One row of a model_summary: consecutive nodes of one module.
struct summary_row {
    std::string name;            ///< the module: its parameters' common prefix, or "-" (no parameters)
    std::string ops;             ///< the distinct ops of its nodes, in order
    std::string shape;           ///< the output shape of its last node at the named sizes, "(16,64,128)"
    std::size_t layers = 1;      ///< the layer count of a repeat row (1 otherwise)
    std::size_t nodes = 0;       ///< graph nodes in the row (a repeat or scan counts as one)
    std::uint64_t params = 0;    ///< parameter elements first read in this row
    flop_count flops;            ///< its FLOPs
    std::size_t bytes = 0;       ///< arena bytes of its nodes (values, adjoints, scratch: see the file comment)
    std::size_t value_bytes = 0;    ///< of which its values'
    std::size_t adjoint_bytes = 0;  ///< of which its adjoints' (training)
    std::size_t scratch_bytes = 0;  ///< of which its op scratch (a repeat's or scan's frames)
};

/// What prog.summary(sizes) returns: the rows, the totals and the arena, without running.
struct model_summary {
    std::vector<summary_row> rows;                       ///< the modules in topological order
    std::vector<std::pair<char, std::size_t>> sizes;     ///< the dynamic dimensions' values used
    bool inference = false;                              ///< an inference program (no backward, lifetime plan)
    std::size_t scalar_bytes = 4;                        ///< sizeof(T)
    std::uint64_t params = 0;                            ///< parameter elements
    std::size_t param_bytes = 0;                         ///< their bytes (values; gradients as many again in training)
    /// Of the parameter elements, those frozen (options::frozen, options::trainable): no gradient
    std::uint64_t frozen_params = 0;
    /// The backward FLOPs freezing saves: the VJP products of frozen weights and everything that
    /// would lead only to frozen parameters (the backward of the same program without frozen
    /// parameters is flops.backward + this; products likewise)
    std::uint64_t frozen_saved_backward = 0;
    std::uint64_t frozen_saved_backward_products = 0;  ///< of which matrix products'
    flop_count flops;                                    ///< the whole program's FLOPs (one forward, one backward)
    std::size_t value_bytes = 0;                         ///< arena bytes of the values (training: all of them)
    std::size_t adjoint_bytes = 0;                       ///< arena bytes of the adjoints
    std::size_t scratch_bytes = 0;                       ///< arena bytes of op scratch (repeat/scan frames)
    std::size_t arena_bytes = 0;                         ///< the whole arena: arena_elements() * sizeof(T)
    bool recompute = false;                              ///< options::recompute (training programs)
    /// Arena bytes options::recompute saves: the repeats' layer frames not kept (arena_bytes + this
    /// is the arena of the same program without it)
    std::size_t recompute_saved_bytes = 0;

    /// The table: one line per row, then the totals.
    std::string to_string() const {
        std::ostringstream os;
        os << "model summary (" << (scalar_bytes == 8 ? "double" : "float") << ", "
           << (inference ? "inference" : "training") << ")";
        if (!sizes.empty()) {
            os << " at";
            for (std::size_t j = 0; j < sizes.size(); ++j) os << (j ? ", " : " ") << sizes[j].first << "=" << sizes[j].second;
        }
        os << "\n";
        std::size_t wn = 6, wo = 3, ws = 5;
        std::vector<std::string> names;
        for (const summary_row& r : rows) {
            names.push_back(r.layers > 1 ? r.name + " x" + std::to_string(r.layers) : r.name);
            wn = std::max(wn, names.back().size());
            wo = std::max(wo, std::min<std::size_t>(r.ops.size(), 40));
            ws = std::max(ws, r.shape.size());
        }
        auto pad = [&os](const std::string& s, std::size_t w, bool right = false) {
            const std::string t = s.size() > w ? s.substr(0, w - 3) + "..." : s;
            if (right) os << std::string(w - t.size(), ' ') << t; else os << t << std::string(w - t.size(), ' ');
        };
        pad("module", wn), os << "  ", pad("ops", wo), os << "  ", pad("output", ws);
        os << "  ", pad("params", 11, true), os << "  ", pad("fwd FLOPs", 9, true);
        if (!inference) os << "  ", pad("bwd FLOPs", 9, true);
        os << "  ", pad(inference ? "memory" : "kept", 9, true), os << "\n";
        for (std::size_t k = 0; k < rows.size(); ++k) {
            const summary_row& r = rows[k];
            pad(names[k], wn), os << "  ", pad(r.ops, wo), os << "  ", pad(r.shape, ws);
            os << "  ", pad(std::to_string(r.params), 11, true), os << "  ", pad(si(double(r.flops.forward)), 9, true);
            if (!inference) os << "  ", pad(si(double(r.flops.backward)), 9, true);
            os << "  ", pad(bytes_text(r.bytes), 9, true), os << "\n";
        }
        os << "parameters: " << params << " (" << bytes_text(param_bytes) << ")";
        if (frozen_params) os << ": " << params - frozen_params << " trainable, " << frozen_params << " frozen";
        os << "\n";
        os << "forward: " << si(double(flops.forward)) << "FLOP (products " << si(double(flops.forward_products)) << "FLOP)";
        if (!inference)
            os << ", backward: " << si(double(flops.backward)) << "FLOP (products " << si(double(flops.backward_products)) << "FLOP)";
        if (!inference && (frozen_params || frozen_saved_backward))
            os << "; freezing saves " << si(double(frozen_saved_backward)) << "FLOP of backward (products "
               << si(double(frozen_saved_backward_products)) << "FLOP)";
        os << "\narena: " << bytes_text(arena_bytes) << " (values " << bytes_text(value_bytes);
        if (!inference) os << ", adjoints " << bytes_text(adjoint_bytes);
        os << ", scratch " << bytes_text(scratch_bytes) << (inference ? "; overlapped by lifetime" : "") << ")\n";
        if (recompute)
            os << "recompute: activations kept " << bytes_text(value_bytes + scratch_bytes) << " instead of "
               << bytes_text(value_bytes + scratch_bytes + recompute_saved_bytes) << " (arena " << bytes_text(arena_bytes)
               << " instead of " << bytes_text(arena_bytes + recompute_saved_bytes) << "); backward reruns "
               << si(double(flops.recompute)) << "FLOP of forward (products " << si(double(flops.recompute_products)) << "FLOP)\n";
        return os.str();
    }

private:
    static std::string si(double v) {
        const char* unit[] = {"", "k", "M", "G", "T", "P"};
        std::size_t u = 0;
        while (v >= 999.95 && u < 5) v /= 1000, ++u;
        std::ostringstream o;
        o.precision(u ? 3 : 0);
        o << std::fixed << v;
        std::string s = o.str();
        if (u && s.find('.') != std::string::npos) {  // 3 significant digits
            const std::size_t digits = s.find('.');
            s = digits >= 3 ? s.substr(0, digits) : s.substr(0, 4);
        }
        return s + (u ? std::string(" ") + unit[u] : std::string(" "));
    }
    static std::string bytes_text(std::size_t b) {
        const char* unit[] = {"B", "KiB", "MiB", "GiB", "TiB"};
        double v = double(b);
        std::size_t u = 0;
        while (v >= 1024 && u < 4) v /= 1024, ++u;
        std::ostringstream o;
        o.precision(u ? 1 : 0);
        o << std::fixed << v << " " << unit[u];
        return o.str();
    }
};

namespace detail {

template <class Op>
struct repeat_layers {
    static constexpr std::size_t value = 1;
};
template <class C, int L, std::size_t E, std::uint64_t M>
struct repeat_layers<ops::repeat_op<C, L, E, M>> {
    static constexpr std::size_t value = std::size_t(L);
};
template <class Op>
inline constexpr bool is_repeat = false;
template <class C, int L, std::size_t E, std::uint64_t M>
inline constexpr bool is_repeat<ops::repeat_op<C, L, E, M>> = true;

/// How a node's FLOPs are counted (see the file comment): the op's flops (op.hpp), else one per
/// element; a table per graph, so that one non-template function counts every node and only
/// repeat and scan instantiate code of their own.
template <class Op>
consteval flop_rule flop_rule_of() {
    if constexpr (requires { Op::flops; }) return flop_rule(Op::flops); else return flop_rule::elements;
}

/// The FLOPs of a node of rule r (all but nested) from its shapes: y its result, x[0..k) its
/// operands, gx[j] whether operand j receives an adjoint, vjp whether its backward runs.
inline flop_count rule_flops(flop_rule r, const rshape& y, const rshape* x, const bool* gx, std::size_t k, bool vjp) {
    flop_count f;
    std::uint64_t p = 0;  // one forward product's FLOPs
    switch (r) {
        case flop_rule::matmul: {  // as ops::matmul_op::sizes_of
            const rshape &a = x[0], &b = x[1];
            if (b.rank <= 2) p = 2ULL * a.rows() * a.cols() * (b.rank == 2 ? b.d[1] : 1);
            else p = 2ULL * (a.size() / (a[-2] * a[-1])) * a[-2] * a[-1] * b[-1];
            break;
        }
        case flop_rule::matmul_transposed: p = 2ULL * x[0].rows() * x[0].cols() * x[1].d[0]; break;
        case flop_rule::affine:
        case flop_rule::affine_activation: p = 2ULL * x[0].rows() * x[0].cols() * x[1].d[1]; break;
        case flop_rule::scaled_dot: p = 2ULL * x[0].rows() * x[1][-2] * x[0][-1]; break;  // matrices x n x m x d
        case flop_rule::head_values:  // P (B, h, n, m) by V (B, m, h d_v): each of the B h matrices by its head's d_v columns
            p = 2ULL * x[0].size() * (x[0][-3] ? x[1][-1] / x[0][-3] : 0);
            break;
        default: {  // one per element of the larger of the result and the operand (a reduction reads more)
            std::uint64_t most = y.size();
            for (std::size_t j = 0; j < k; ++j) most = std::max<std::uint64_t>(most, x[j].size());
            f.forward = most;
            for (std::size_t j = 0; j < k && vjp; ++j)
                if (gx[j]) f.backward += std::max<std::uint64_t>(y.size(), x[j].size());
            return f;
        }
    }
    const std::uint64_t products = vjp ? std::uint64_t(gx[0]) + std::uint64_t(gx[1]) : 0;
    f.forward = f.forward_products = p;
    f.backward = f.backward_products = p * products;
    if (r == flop_rule::affine || r == flop_rule::affine_activation) {  // the bias: added forward, summed over the rows backward
        f.forward += y.size();
        if (vjp && gx[2]) f.backward += y.size();
    }
    if (r == flop_rule::affine_activation) {  // the activation and its VJP, as the element-wise op of the composed graph
        f.forward += y.size();
        if (vjp && (gx[0] || gx[1] || gx[2])) f.backward += y.size();
    } else if (r == flop_rule::scaled_dot) {  // the (masked) softmax
        f.forward += y.size();
        if (products) f.backward += y.size();
    }
    return f;
}

/// A repeat's or scan's FLOPs (function of the shapes of its result and operands and of which
/// operands receive adjoints); null for every other op.
using nested_flops_fn = flop_count (*)(const rshape* x, const bool* gx, bool vjp, bool forward_only, bool recompute);
template <class Op, std::size_t K>
flop_count nested_flops(const rshape* x, const bool* gx, bool vjp, bool forward_only, bool recompute);
template <class Op, std::size_t K>
consteval nested_flops_fn nested_flops_of() {
    if constexpr (flop_rule_of<Op>() == flop_rule::nested) return &nested_flops<Op, K>; else return nullptr;
}

/// The FLOPs of the nodes of graph G marked in `counted`, at `shapes`, with grad[i] whether node i
/// receives an adjoint and vjp[i] whether its backward runs; recompute: options::recompute.
template <class G>
flop_count graph_flops(const rshape* shapes, const bool* counted, const bool* grad, const bool* vjp, bool forward_only,
                       bool recompute = false, flop_count* per_node = nullptr) {
    static constexpr auto tables = []<std::size_t... I>(std::index_sequence<I...>) {
        return std::pair{std::array<flop_rule, sizeof...(I)>{flop_rule_of<op_of_t<typename G::template node_t<I>>>()...},
                         std::array<nested_flops_fn, sizeof...(I)>{
                             nested_flops_of<op_of_t<typename G::template node_t<I>>, G::arity[I]>()...}};
    }(std::make_index_sequence<G::size>{});
    flop_count total;
    for (std::size_t i = 0; i < G::size; ++i) {
        if (!counted[i] || G::kind[i] != leaf_kind::none) continue;
        std::array<rshape, G::max_arity> xs{};
        std::array<bool, G::max_arity> gs{};
        for (std::size_t k = 0; k < G::arity[i]; ++k) {
            xs[k] = shapes[std::size_t(G::operands[i][k])];
            gs[k] = grad[std::size_t(G::operands[i][k])];
        }
        const flop_count f = tables.first[i] == flop_rule::nested ? tables.second[i](xs.data(), gs.data(), vjp[i], forward_only, recompute)
                                                                   : rule_flops(tables.first[i], shapes[i], xs.data(), gs.data(),
                                                                                G::arity[i], vjp[i]);
        if (per_node) per_node[i] = f;
        total += f;
    }
    return total;
}

template <class Op, std::size_t K>
flop_count nested_flops(const rshape* xp, const bool* gx, bool vjp, bool forward_only, bool recompute) {
    using info = typename Op::info;
    using BG = typename info::G;
    constexpr std::size_t BN = info::N;
    std::array<rshape, K> x{};
    std::copy(xp, xp + K, x.begin());
    // The body once, given whether its state (the carried value) receives an adjoint.
    auto body = [&](const auto& Ly, bool state_grad) {
        std::array<bool, BN> g{}, runs{};
        for (std::size_t i = 0; i < BN; ++i) g[i] = info::computed[i], runs[i] = vjp && info::vjp_runs[i];
        if constexpr (Op::state_node >= 0) g[std::size_t(Op::state_node)] = state_grad;
        if constexpr (is_repeat<Op>) {
            for (std::size_t e = 0; e + 1 < Op::extra_nodes.size(); ++e)
                if (Op::extra_nodes[e] >= 0) g[std::size_t(Op::extra_nodes[e])] = gx[1 + e];
            for (std::size_t p = 0; p < Op::P; ++p) g[info::step_params[p]] = gx[Op::first_param + p];
        } else {
            if constexpr (Op::input_node >= 0) g[std::size_t(Op::input_node)] = gx[0];
        }
        for (std::size_t j = 0; j != info::num_hoisted; ++j) g[info::hoisted[j]] = gx[Op::first_hoisted + j];
        for (std::size_t i = 0; i < BN; ++i) g[i] = g[i] && info::has_adjoint[i];
        return graph_flops<BG>(Ly.shapes.data(), info::computed.data(), g.data(), runs.data(), forward_only);
    };
    flop_count f;
    if constexpr (is_repeat<Op>) {  // layer 0's input adjoint is the operand's; the others' the layer below's
        const auto Ly = Op::plan(x, forward_only, recompute);
        constexpr std::size_t L = repeat_layers<Op>::value;
        f = body(Ly, true).times(L - 1);
        f += body(Ly, gx[0]);
        if (Ly.recompute && vjp) {  // backward reruns every layer's forward but the last's (the frame holds it)
            std::array<bool, BN> none{};
            const flop_count once = graph_flops<BG>(Ly.shapes.data(), Op::rerun.data(), none.data(), none.data(), forward_only);
            f.recompute = once.forward * (L - 1);
            f.recompute_products = once.forward_products * (L - 1);
        }
    } else {  // scan: the first step's state adjoint is h0's (none without a differentiable h0)
        const auto Ly = Op::plan(x, forward_only, 1);
        if (Ly.steps) {
            f = body(Ly, true).times(Ly.steps - 1);
            bool h0_grad = false;
            if constexpr (Op::len_index == 2) h0_grad = gx[1];
            f += body(Ly, h0_grad);
        }
    }
    return f;
}

/// The module of a parameter set: the prefix their names share, cut after its last '.' or '_'
/// (one parameter: its whole name).
inline std::string module_of(const std::vector<std::string_view>& names) {
    if (names.empty()) return "-";
    std::string_view p = names[0];
    for (std::string_view n : names) {
        std::size_t k = 0;
        while (k < p.size() && k < n.size() && p[k] == n[k]) ++k;
        p = p.substr(0, k);
    }
    bool one = true;
    for (std::string_view n : names) one = one && n == names[0];
    if (one) return std::string(names[0]);
    const std::size_t cut = p.find_last_of("._");
    if (cut == std::string_view::npos) {
        std::string s;
        for (std::string_view n : names)
            if (s.find(std::string(n)) == std::string::npos) s += (s.empty() ? "" : ",") + std::string(n);
        return s;
    }
    return std::string(p.substr(0, cut + 1));
}

/// The summary of program type P at the named sizes (see the file comment).
template <class P>
model_summary summarize(std::initializer_list<std::pair<char, std::size_t>> sizes) {
    using G = typename P::graph_type;
    using T = typename P::scalar;
    constexpr std::size_t N = G::size;
    constexpr options Opt = G::opts;
    constexpr bool by_lifetime = Opt.inference && !Opt.keep_values;
    model_summary s;
    s.inference = Opt.inference;
    s.scalar_bytes = sizeof(T);

    // The dynamic dimensions' values.
    std::array<std::size_t, G::num_symbols + 1> env{};
    std::array<bool, G::num_symbols + 1> named{};
    for (const auto& [c, v] : sizes) {
        const int j = G::symbol_index(c);
        if (j < 0)
            throw error(std::string("ctg::program::summary: the program has no dynamic dimension '") + c + "'");
        env[std::size_t(j)] = v, named[std::size_t(j)] = true;
    }
    for (std::size_t j = 0; j < G::num_symbols; ++j) {
        const char c = G::symbols_and_count.first[j];
        if (!named[j])
            throw error(std::string("ctg::program::summary: give a size for dynamic dimension '") + c + "'");
        s.sizes.emplace_back(c, env[j]);
    }
    std::array<rshape, N> shapes{};
    for (std::size_t i = 0; i < N; ++i) shapes[i] = concrete_shape(tables_of<G>, i, env.data());

    // Per node: FLOPs, scratch (the functions program::plan() calls), and the arena as plan() lays it out.
    static constexpr auto scratch_fns = []<std::size_t... I>(std::index_sequence<I...>) {
        return std::array<std::size_t (*)(const rshape*, const int*, std::size_t, std::size_t, bool, bool, int), N>{
            &scratch_size_of<op_of_t<typename G::template node_t<I>>, G::arity[I]>...};
    }(std::make_index_sequence<N>{});
    constexpr bool recompute = Opt.recompute && !Opt.inference;
    // bf16 shadows (options::bf16_shadows): a repeat's are in its scratch, the program's own values' in
    // the values; values in bf16 only likewise (program::bf16_frames).
    constexpr int shadows = P::bf16_frames;
    s.recompute = recompute;
    std::array<std::size_t, N> scratch{}, val{}, adj{};
    for (std::size_t i = 0; i < N; ++i) {
        // (a node without an adjoint runs forward only, as program::scratch_sizes sizes it)
        const bool forward_only = Opt.inference || !G::needs_grad[i];
        scratch[i] = scratch_fns[i](shapes.data(), &G::operands[0][0], G::max_arity, i, forward_only, recompute, shadows);
        if constexpr (recompute)  // what the same op would keep without recomputation
            s.recompute_saved_bytes +=
                (round_up_elems<T>(scratch_fns[i](shapes.data(), &G::operands[0][0], G::max_arity, i, forward_only, false, shadows)) -
                 round_up_elems<T>(scratch[i])) *
                sizeof(T);
    }
    std::array<flop_count, N> flops{};
    std::array<bool, N> all{};
    all.fill(true);
    const flop_count total_flops = graph_flops<G>(shapes.data(), all.data(), G::needs_grad.data(), G::needs_grad.data(),
                                                  Opt.inference, recompute, flops.data());
    if constexpr (G::any_frozen && !Opt.inference) {  // the same program with every parameter trained
        static constexpr auto unfrozen = G::needs_grad_table(false);
        const flop_count all_trained = graph_flops<G>(shapes.data(), all.data(), unfrozen.data(), unfrozen.data(), false, recompute);
        s.frozen_saved_backward = all_trained.backward - total_flops.backward;
        s.frozen_saved_backward_products = all_trained.backward_products - total_flops.backward_products;
    }
    std::size_t value_elems = 0, adjoint_elems = 0, scratch_elems = 0;
    for (std::size_t i = 0; i < N; ++i) {
        if ((G::kind[i] == leaf_kind::none && !G::aliases[i]) || G::kind[i] == leaf_kind::constant)
            val[i] = round_up_elems<T>(shapes[i].size());
        if (G::needs_grad[i] && G::kind[i] != leaf_kind::param && P::adjoint_root[i] == i) adj[i] = round_up_elems<T>(shapes[i].size());
        if (P::bf16_only_nodes[i] && !G::aliases[i]) val[i] = 0;  // (its float: below)
        if (P::bf16_shadowed_nodes[i]) val[i] += round_up_elems<T>((shapes[i].size() + 1) / 2);
        scratch[i] = round_up_elems<T>(scratch[i]);
        value_elems += val[i], adjoint_elems += adj[i], scratch_elems += scratch[i];
    }
    // those floats and the ops' forward scratch, by lifetime in forward, where values are kept in
    // bf16 only; the ops' backward scratch in the same region, one VJP at a time (as program::plan)
    // node i's forward (Backward false) or backward scratch at these shapes (op.hpp)
    auto transient_size = [&]<bool Backward>(std::size_t i) {
        static constexpr auto fns = []<std::size_t... I>(std::index_sequence<I...>) {
            return std::array<std::size_t (*)(const rshape*, const int*, std::size_t, std::size_t, int), N>{
                &transient_size_of<op_of_t<typename G::template node_t<I>>, G::arity[I], Backward>...};
        }(std::make_index_sequence<N>{});
        return fns[i](shapes.data(), &G::operands[0][0], G::max_arity, i, shadows);
    };
    std::size_t backward_scratch = 0;
    if constexpr (!Opt.inference)
        for (std::size_t i = 0; i < N; ++i)
            if (G::needs_grad[i])
                backward_scratch = std::max(backward_scratch, round_up_elems<T>(transient_size.template operator()<true>(i)));
    if constexpr (std::find(P::bf16_only_nodes.begin(), P::bf16_only_nodes.end(), true) != P::bf16_only_nodes.end()) {
        std::array<std::size_t, N> fs_size{}, offset{}, fs_offset{};
        for (std::size_t i = 0; i < N; ++i) fs_size[i] = transient_size.template operator()<false>(i);
        const std::size_t forward = place_forward_transients(
            [](std::size_t i) { return P::bf16_only_nodes[i] && !G::aliases[i] && !P::bf16_no_float_nodes[i]; }, P::bf16_only_last,
            [&](std::size_t i) { return round_up_elems<T>(shapes[i].size()); }, fs_size, [](std::size_t e) { return round_up_elems<T>(e); },
            offset, fs_offset);
        value_elems += forward;
        backward_scratch -= std::min(backward_scratch, forward);  // (what does not fit where forward's were)
    }
    scratch_elems += backward_scratch;
    std::size_t arena = value_elems + adjoint_elems + scratch_elems;
    if constexpr (by_lifetime) {
        std::array<std::size_t, N> until = G::last_use;  // as program::value_until
        for (std::size_t o : P::output_nodes) until[o] = N;
        for (std::size_t i = N; i-- > 0;)
            if (G::aliases[i]) until[std::size_t(G::operands[i][0])] = std::max(until[std::size_t(G::operands[i][0])], until[i]);
        for (std::size_t i = 0; i < N; ++i)
            if (G::aliases[i]) until[i] = until[std::size_t(G::operands[i][0])];
        std::array<std::size_t, N> val_off{}, scr_off{};
        std::size_t constants = 0;
        for (std::size_t i = 0; i < N; ++i)
            if (G::kind[i] == leaf_kind::constant) constants += val[i];
        arena = constants + place_forward_frame(
                                until, [](std::size_t i) { return G::kind[i] == leaf_kind::none && !G::aliases[i]; },
                                [&val](std::size_t i) { return val[i]; }, [&scratch](std::size_t i) { return scratch[i]; },
                                val_off, scr_off);
    }
    s.value_bytes = value_elems * sizeof(T);
    s.adjoint_bytes = adjoint_elems * sizeof(T);
    s.scratch_bytes = scratch_elems * sizeof(T);
    s.arena_bytes = arena * sizeof(T);

    // Rows: the module of each node, consecutive nodes of one module together.
    static constexpr std::array<std::size_t, N> layer_counts = []<std::size_t... I>(std::index_sequence<I...>) {
        return std::array<std::size_t, N>{repeat_layers<op_of_t<typename G::template node_t<I>>>::value...};
    }(std::make_index_sequence<N>{});
    std::array<bool, N> counted{};
    std::string current;
    bool open = false;
    for (std::size_t i = 0; i < N; ++i) {
        if (G::kind[i] == leaf_kind::param || G::kind[i] == leaf_kind::input || G::kind[i] == leaf_kind::index_input)
            continue;
        std::vector<std::string_view> pnames;
        std::uint64_t params = 0;
        for (std::size_t k = 0; k < G::arity[i]; ++k) {
            const std::size_t j = std::size_t(G::operands[i][k]);
            if (G::kind[j] != leaf_kind::param) continue;
            pnames.push_back(G::label[j]);
            if (!counted[j]) {
                counted[j] = true;
                std::uint64_t n = 1;
                for (std::size_t a = 0; a < G::rank[j]; ++a) n *= std::uint64_t(G::dims[j][a].n);
                params += n;
                if (G::param_frozen(G::label[j])) s.frozen_params += n;
            }
        }
        std::string mod = module_of(pnames);
        const std::size_t layers = layer_counts[i];
        if (!open || mod != current || layers > 1 || s.rows.back().layers > 1) {
            s.rows.push_back({});
            s.rows.back().name = mod;
            current = mod, open = true;
        }
        summary_row& r = s.rows.back();
        r.layers = std::max(r.layers, layers);
        const std::string op = G::kind[i] == leaf_kind::constant ? "constant" : std::string(G::label[i]);
        if ((", " + r.ops + ", ").find(", " + op + ", ") == std::string::npos)
            r.ops += (r.ops.empty() ? "" : ", ") + op;
        r.shape = to_string(shapes[i]);
        ++r.nodes;
        r.params += params;
        r.flops += flops[i];
        r.bytes += (val[i] + adj[i] + scratch[i]) * sizeof(T);
        r.value_bytes += val[i] * sizeof(T), r.adjoint_bytes += adj[i] * sizeof(T), r.scratch_bytes += scratch[i] * sizeof(T);
        s.params += params;
        s.flops += flops[i];
    }
    s.param_bytes = std::size_t(s.params) * sizeof(T);
    return s;
}

}  // namespace detail
}  // namespace ctg
