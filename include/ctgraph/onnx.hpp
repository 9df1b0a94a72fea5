// ctgraph/onnx.hpp: export an inference program as an ONNX model (opset 17), for ONNX Runtime and
// every other runtime that reads ONNX.
//
//   auto prog = ctg::compile<float, ctg::options{.inference = true}>(model::logits(tokens));
//   ... load or train the weights into prog.params() ...
//   ctg::onnx::save(prog, "model.onnx", {.output_names = {"logits"}});
//
// The graph's inputs keep their names, static sizes and dynamic axes (a dimension declared with
// dyn('B') is the ONNX dim_param "B"); index inputs (token ids) are int64 in the file; every
// parameter is a float32 initializer under its store name; a repeat's layers are unrolled, layer
// l's parameters named "<prefix><l>.<name>" ("blocks.3.attn.W_q": one initializer per layer, as a
// PyTorch export names them). Each op lowers itself (its `onnx(b)` member, next to its forward and
// VJP; op.hpp); an op without one is a compile error naming it. Link ctgraph::onnx.
// Guide: docs/guide/onnx-export.md.
#pragma once
#include <cstring>
#include <functional>
#include <map>
#include <string>
#include <string_view>
#include <type_traits>
#include <utility>
#include <vector>

#include "ctgraph/ctgraph.hpp"
#include "ctgraph/onnx/ir.hpp"

namespace ctg::onnx {

/// How a program is exported.
struct export_options {
    /// The graph outputs' names, one per program output (default: "output", or "output0", ...).
    std::vector<std::string> output_names{};
    /// The model's doc_string.
    std::string doc{};
};

namespace detail {

using ctg::detail::op_of_t;

/// Whether an op declares its ONNX lowering (`template <class B> static void onnx(B&)`).
template <class Op>
concept lowerable = requires(op_lowering& b) { Op::onnx(b); };

template <class Op>
inline constexpr bool is_scan = false;
template <class C, bool H0, bool Len, bool Rows>
inline constexpr bool is_scan<ops::scan_op<C, H0, Len, Rows>> = true;
template <class Op>
concept repeat_like = ctg::detail::is_repeat<Op>;

/// Shown in the error of a program with an op that cannot be exported: the op, then the program's
/// outputs' shapes.
template <bool Ok, class Op, class... OutputShapes>
struct op_has_onnx_lowering {
    static constexpr bool value = Ok;
};

template <class G>
shape_ir shape_of(std::size_t i) {
    shape_ir s;
    s.rank = G::rank[i];
    for (std::size_t a = 0; a < s.rank; ++a) s.d[a] = G::dims[i][a];
    return s;
}

/// Float32 data of a parameter (or of one layer of a stacked one) from a store of T.
template <class T>
std::vector<float> param_data(const parameter_store<T>& store, std::string_view name, std::size_t layer, std::size_t layers) {
    const long slot = store.find(name);
    if (slot < 0) throw error("ctg::onnx::save: parameter \"" + std::string(name) + "\" is not in the program's store");
    const std::size_t n = store.at(std::size_t(slot)).shape.size() / layers;
    const T* v = store.value(std::size_t(slot)) + layer * n;
    return std::vector<float>(v, v + n);
}

/// Lowers the nodes of graph G: names[i] is node i's ONNX value once made; leaves are named on
/// demand by `leaf` (graph inputs, initializers, a repeat's per-layer values).
template <class G, class T, class OutputShapes>
struct graph_lowering {
    graph_builder& b;
    const parameter_store<T>& store;
    std::function<std::string(std::size_t)> leaf;
    std::vector<std::string> names = std::vector<std::string>(G::size);
    /// State written in place (KV caches): node -> its value after the last writer.
    std::map<std::size_t, std::string> updates{};

    /// Node j (state) now holds `value`: later readers get it, and the export its final value.
    void update(std::size_t j, const std::string& value) {
        updates[j] = value;
        names[j] = value;
    }

    const std::string& name(std::size_t i) {
        if (names[i].empty()) {
            if (G::kind[i] == leaf_kind::none) throw error("ctg::onnx::save: internal: node used before it was lowered");
            names[i] = leaf(i);
        }
        return names[i];
    }

    /// Lowers the op nodes for which `active(i)` holds, in topological order.
    template <class Active>
    void run(Active&& active) {
        [&]<std::size_t... I>(std::index_sequence<I...>) {
            ((active(I) ? lower_node<I>() : void()), ...);
        }(std::make_index_sequence<G::size>{});
    }

    template <std::size_t I>
    void lower_node() {
        if constexpr (G::kind[I] == leaf_kind::none) lower_op<I>();  // leaves are named on demand
    }
    template <std::size_t I>
    void lower_op() {
        using Op = op_of_t<typename G::template node_t<I>>;
        std::vector<std::string> x;
        std::vector<shape_ir> xs;
        for (std::size_t k = 0; k < G::arity[I]; ++k) {
            const std::size_t j = std::size_t(G::operands[I][k]);
            // (a repeat's stacked parameters become one initializer per layer, not one whole)
            if constexpr (repeat_like<Op>)
                if (Op::layered_operand(k)) {
                    x.emplace_back(), xs.push_back(shape_of<G>(j));
                    continue;
                }
            x.push_back(name(j));
            xs.push_back(shape_of<G>(j));
        }
        b.set_origin(std::string(Op::name));
        if constexpr (repeat_like<Op>) {
            names[I] = lower_repeat<Op>(I, x);
        } else if constexpr (is_scan<Op>) {
            names[I] = lower_scan<Op>(I, x, xs);
        } else {
            static_assert(op_has_onnx_lowering<lowerable<Op>, Op, OutputShapes>::value,
                          "ctg::onnx::save: this program has an op with no ONNX lowering (the first template argument "
                          "names it; the others are the program's output shapes): give the op a "
                          "`template <class B> static void onnx(B& b)` member (op.hpp), or export a program without it");
            if constexpr (lowerable<Op>) {
                std::string y = b.fresh(Op::name);
                op_lowering ctx(b, std::move(x), std::move(xs), y, shape_of<G>(I));
                Op::onnx(ctx);
                for (const auto& [k, value] : ctx.states()) update(std::size_t(G::operands[I][k]), value);
                names[I] = std::move(y);
            }
        }
    }

    /// A scan as ONNX Scan: the cell is the body (its loop invariants read from the outer graph by
    /// name); the state starts from h0 (its rows expanded over the batch) or zeros; with lengths,
    /// the step index is scanned too and a row past its length keeps its state (Where).
    template <class Op>
    std::string lower_scan(std::size_t self, const std::vector<std::string>& x, const std::vector<shape_ir>& xs) {
        using info = typename Op::info;
        using BG = typename info::G;
        constexpr bool has_h0 = Op::len_index == 2, has_len = Op::first_hoisted > Op::len_index;
        const shape_ir ys = shape_of<G>(self);  // (T, B, state...)
        const std::size_t state_rank = ys.rank - 1;
        // The state's shape at run time: the batch from xs, the rest static.
        auto state_shape = [&] {
            std::vector<std::string> parts{b.emit("Shape", {x[0]}, {{"start", 1}, {"end", 2}})};
            for (std::size_t a = 2; a < ys.rank; ++a) {
                if (!ys.d[a].is_static()) throw error("ctg::onnx::save: a scan state with a dynamic axis besides the batch cannot be exported");
                parts.push_back(b.ints({ys.d[a].n}));
            }
            return b.emit("Concat", parts, {{"axis", 0}});
        };
        std::string h0;
        if constexpr (has_h0) h0 = xs[1].rank < state_rank ? b.emit("Expand", {x[1], state_shape()}) : x[1];
        else h0 = b.emit("Expand", {b.scalar(0.0), state_shape()});
        std::vector<std::string> scanned{x[0]};
        if constexpr (has_len) {
            const std::string t = b.emit("Squeeze", {b.emit("Shape", {x[0]}, {{"start", 0}, {"end", 1}})});
            scanned.push_back(b.emit("Range", {b.int_scalar(0), t, b.int_scalar(1)}));
        }
        auto body = std::make_shared<graph_ir>();
        body->name = b.fresh("scan_body");
        const std::string state_in = b.fresh("state_in"), x_in = b.fresh("x_in"), t_in = b.fresh("t_in");
        value_ir sv{state_in, dtype::f32, {}}, xv{x_in, G::is_index[std::size_t(G::operands[self][0])] ? dtype::i64 : dtype::f32, {}};
        for (std::size_t a = 1; a < ys.rank; ++a) sv.dims.push_back(ys.d[a]);
        for (std::size_t a = 1; a < xs[0].rank; ++a) xv.dims.push_back(xs[0].d[a]);
        body->inputs = {sv, xv};
        if constexpr (has_len) body->inputs.push_back({t_in, dtype::i64, {}});
        std::vector<node_ir>* outer = b.set_target(&body->nodes);
        graph_lowering<BG, T, OutputShapes> cell{b, store, {}};
        cell.leaf = [&](std::size_t i) -> std::string {
            if (int(i) == Op::state_node) return state_in;
            if (int(i) == Op::input_node) return x_in;
            if (BG::kind[i] == leaf_kind::constant) return b.scalar(BG::constant_value[i]);
            for (std::size_t j = 0; j < info::num_hoisted; ++j)
                if (info::hoisted[j] == i) return x[Op::first_hoisted + j];
            throw error("ctg::onnx::save: a scan's cell reads a value the export cannot name: " + std::string(BG::label[i]));
        };
        for (std::size_t j = 0; j < info::num_hoisted; ++j) cell.names[info::hoisted[j]] = x[Op::first_hoisted + j];
        cell.run([](std::size_t i) { return info::computed[i]; });
        std::string next = cell.names[info::out];
        if constexpr (has_len) {  // rows past their length keep their state
            std::vector<long long> axes;
            for (std::size_t a = 1; a < state_rank; ++a) axes.push_back((long long)a);
            std::string len = x[Op::len_index];
            if (!axes.empty()) len = b.emit("Unsqueeze", {len, b.ints(axes)});
            next = b.emit("Where", {b.emit("Less", {t_in, len}), next, state_in});
        }
        const std::string state_out = b.fresh("state_out"), step_out = b.fresh("step_out");
        b.node("Identity", {next}, {state_out});
        b.node("Identity", {next}, {step_out});
        body->outputs = {{state_out, dtype::f32, sv.dims}, {step_out, dtype::f32, sv.dims}};
        b.set_target(outer);
        const std::string y = b.fresh("scan");
        std::vector<std::string> inputs{h0};
        inputs.insert(inputs.end(), scanned.begin(), scanned.end());
        b.node("Scan", inputs, {b.fresh("scan_final_state"), y},
               {{"body", std::shared_ptr<const graph_ir>(body)}, {"num_scan_inputs", (long long)scanned.size()}});
        return y;
    }

    /// A repeat, unrolled: the block's nodes once per layer, its parameters sliced per layer.
    template <class Op>
    std::string lower_repeat(std::size_t self, const std::vector<std::string>& x) {
        using info = typename Op::info;
        using BG = typename info::G;
        std::string state = x[0];
        std::vector<std::string> extra(x.begin() + 1, x.begin() + 1 + std::ptrdiff_t(Op::extra_nodes.size() - 1));
        std::vector<std::vector<std::string>> written(extra.size());  // a sliced extra's layers, once one is written
        for (int l = 0; l < Op::layers; ++l) {
            graph_lowering<BG, T, OutputShapes> body{b, store, {}};
            body.leaf = [&, l](std::size_t i) -> std::string {
                switch (BG::kind[i]) {
                    case leaf_kind::placeholder: {
                        if (int(i) == Op::state_node) return state;
                        for (std::size_t e = 0; e + 1 < Op::extra_nodes.size(); ++e)
                            if (Op::extra_nodes[e] == int(i)) {
                                if (!Op::sliced(e)) return extra[e];
                                return b.emit("Gather", {extra[e], b.int_scalar(l)}, {{"axis", 0}});
                            }
                        break;
                    }
                    case leaf_kind::param:
                        for (std::size_t p = 0; p < Op::P; ++p)
                            if (info::step_params[p] == i) {
                                const std::size_t outer = std::size_t(G::operands[self][Op::first_param + p]);
                                const std::string_view stacked = G::label[outer], own = BG::label[i];
                                const std::string prefix(stacked.substr(0, stacked.size() - own.size()));
                                std::vector<long long> dims;
                                for (std::size_t a = 0; a < BG::rank[i]; ++a) dims.push_back(BG::dims[i][a].n);
                                const std::string n = prefix + std::to_string(l) + "." + std::string(own);
                                b.model().initializers.push_back(
                                    {n, dtype::f32, dims, param_data(store, stacked, std::size_t(l), std::size_t(Op::layers)), {}});
                                return n;
                            }
                        break;
                    case leaf_kind::constant: return b.scalar(BG::constant_value[i]);
                    default: break;
                }
                for (std::size_t j = 0; j < info::num_hoisted; ++j)
                    if (info::hoisted[j] == i) return x[Op::first_hoisted + j];
                throw error("ctg::onnx::save: a repeat's block reads a value the export cannot name: " + std::string(BG::label[i]));
            };
            for (std::size_t j = 0; j < info::num_hoisted; ++j) body.names[info::hoisted[j]] = x[Op::first_hoisted + j];
            body.run([](std::size_t i) { return info::computed[i]; });
            state = body.names[info::out];
            // State the layer wrote (its KV cache): a whole extra is the next layer's to read; a
            // sliced one's layers are stacked again below.
            for (std::size_t e = 0; e < extra.size(); ++e) {
                const int node = Op::extra_nodes[e];
                if (node < 0) continue;
                const auto it = body.updates.find(std::size_t(node));
                if (!Op::sliced(e)) {
                    if (it != body.updates.end()) extra[e] = it->second, written[e].push_back(it->second);
                    continue;
                }
                const std::string now = it != body.updates.end() ? it->second : body.names[std::size_t(node)];
                if (it != body.updates.end() && written[e].empty())  // the layers before this one, unchanged
                    for (int k = 0; k < l; ++k) written[e].push_back(b.emit("Gather", {extra[e], b.int_scalar(k)}, {{"axis", 0}}));
                if (!written[e].empty() || it != body.updates.end()) written[e].push_back(now);
            }
        }
        for (std::size_t e = 0; e < extra.size(); ++e) {
            if (written[e].empty()) continue;
            const std::size_t outer = std::size_t(G::operands[self][1 + e]);
            if (!Op::sliced(e)) {
                update(outer, extra[e]);
                continue;
            }
            std::vector<std::string> rows;
            for (const std::string& v : written[e]) rows.push_back(b.emit("Unsqueeze", {v, b.ints({0})}));
            update(outer, b.emit("Concat", rows, {{"axis", 0}}));
        }
        return state;
    }
};

template <class Prog>
struct output_shapes;
template <class T, options Opt, class... Outs>
struct output_shapes<program<T, Opt, Outs...>> {
    using type = tlist<typename Outs::shape::pretty...>;
};

}  // namespace detail

/// The ONNX model of an inference program, as data (what save writes).
template <class Prog>
model_ir to_model(const Prog& prog, const export_options& opt = {}) {
    using G = typename Prog::graph_type;
    using T = typename Prog::scalar;
    static_assert(G::opts.inference,
                  "ctg::onnx::save: export an inference program (compile with options{.inference = true}): a training "
                  "program's dropout and losses have no meaning in a runtime that only runs forward");
    model_ir m;
    m.doc = opt.doc;
    graph_builder b(m);
    const auto& store = prog.params();
    detail::graph_lowering<G, T, typename detail::output_shapes<Prog>::type> g{b, store, {}};
    // Graph inputs, in the program's order.
    for (std::size_t i : G::input_nodes) {
        // (a bf16_input, a KV cache kept in bfloat16, is a float32 input of the file)
        value_ir v{std::string(G::label[i]), G::is_index[i] ? dtype::i64 : dtype::f32, {}};
        for (std::size_t a = 0; a < G::rank[i]; ++a) v.dims.push_back(G::dims[i][a]);
        m.inputs.push_back(v);
        g.names[i] = v.name;
    }
    g.leaf = [&](std::size_t i) -> std::string {
        switch (G::kind[i]) {
            case leaf_kind::param: {
                const std::string n(G::label[i]);
                std::vector<long long> dims;
                for (std::size_t a = 0; a < G::rank[i]; ++a) dims.push_back(G::dims[i][a].n);
                m.initializers.push_back({n, dtype::f32, dims, detail::param_data(store, n, 0, 1), {}});
                return n;
            }
            case leaf_kind::constant: return b.scalar(G::constant_value[i]);
            default: throw error("ctg::onnx::save: a leaf the export cannot name: " + std::string(G::label[i]));
        }
    };
    g.run([](std::size_t) { return true; });
    for (std::size_t k = 0; k < Prog::num_outputs; ++k) {
        const std::size_t i = Prog::output_nodes[k];
        std::string name = k < opt.output_names.size() ? opt.output_names[k]
                           : Prog::num_outputs == 1   ? std::string("output")
                                                      : "output" + std::to_string(k);
        value_ir v{name, dtype::f32, {}};
        for (std::size_t a = 0; a < G::rank[i]; ++a) v.dims.push_back(G::dims[i][a]);
        b.set_origin("output");
        b.node("Identity", {g.name(i)}, {name});
        m.outputs.push_back(v);
    }
    // State inputs written in place (KV caches): their new values are outputs, "<input>_out".
    for (const auto& [i, value] : g.updates) {
        if (G::kind[i] != leaf_kind::input) throw error("ctg::onnx::save: state written in place that is not an input: " + std::string(G::label[i]));
        value_ir v{std::string(G::label[i]) + "_out", dtype::f32, {}};
        for (std::size_t a = 0; a < G::rank[i]; ++a) v.dims.push_back(G::dims[i][a]);
        b.node("Identity", {value}, {v.name});
        m.outputs.push_back(v);
    }
    return m;
}

/// Writes an inference program as an ONNX file (see the file comment); atomic: a failed write
/// leaves `path` as it was. Throws ctg::io_error (the file) or ctg::error (the program).
template <class Prog>
void save(const Prog& prog, const std::string& path, const export_options& opt = {}) {
    write_model(to_model(prog, opt), path);
}

}  // namespace ctg::onnx
