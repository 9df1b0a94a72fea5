// ctgraph/onnx/ir.hpp: the ONNX graph an export builds, as plain data, and the builder that the
// ops' lowerings write into.
//
// Nothing here depends on protobuf or on a model's types: ctgraph/onnx.hpp walks a program's graph
// and calls each op's `onnx(b)` with an op_lowering (below); ctgraph/onnx/writer.cpp (library
// ctgraph::onnx) turns the finished model_ir into onnx::ModelProto through Debian's libonnx
// (the generated C++ of onnx.proto) and writes the file.
//
// An op's lowering, declared next to its forward and VJP (op.hpp):
//
//   template <class B> static void onnx(B& b) {       // B is ctg::onnx::op_lowering
//       b.emit_y("Softmax", {b.x(0)}, {{"axis", -1}}); // the node's result is b.y()
//   }
//
// b.x(k) names operand k's value, b.xshape(k) / b.yshape() give the static shapes (dynamic axes
// carry their letter), b.emit(...) adds a node and returns the name of its (fresh) output,
// b.emit_y(...) adds the node that produces the result, b.scalar(v) / b.ints({...}) name
// constant initializers (float32 scalars, int64 vectors), shared by every node that asks.
#pragma once
#include <array>
#include <cstddef>
#include <cstdint>
#include <initializer_list>
#include <map>
#include <memory>
#include <string>
#include <string_view>
#include <utility>
#include <variant>
#include <vector>

#include "ctgraph/dim.hpp"
#include "ctgraph/error.hpp"

namespace ctg::onnx {

/// Element types of the exported tensors (values of ONNX's TensorProto.DataType).
enum class dtype : int { f32 = 1, i32 = 6, i64 = 7, boolean = 9, f64 = 11 };

struct graph_ir;

/// One attribute of a node: an integer, a float, a list of integers, a list of floats, a string,
/// or a graph (the body of a Scan).
struct attribute {
    std::string name;  ///< the attribute's name ("axis", "perm")
    std::variant<long long, double, std::vector<long long>, std::vector<float>, std::string, std::shared_ptr<const graph_ir>> value;  ///< its value
    attribute(std::string n, int v) : name(std::move(n)), value(static_cast<long long>(v)) {}  ///< an integer
    attribute(std::string n, long v) : name(std::move(n)), value(static_cast<long long>(v)) {}  ///< an integer
    attribute(std::string n, long long v) : name(std::move(n)), value(v) {}  ///< an integer
    attribute(std::string n, double v) : name(std::move(n)), value(v) {}  ///< a float
    attribute(std::string n, std::vector<long long> v) : name(std::move(n)), value(std::move(v)) {}  ///< integers
    attribute(std::string n, std::vector<float> v) : name(std::move(n)), value(std::move(v)) {}  ///< floats
    attribute(std::string n, const char* v) : name(std::move(n)), value(std::string(v)) {}  ///< a string
    attribute(std::string n, std::string v) : name(std::move(n)), value(std::move(v)) {}  ///< a string
    attribute(std::string n, std::shared_ptr<const graph_ir> g) : name(std::move(n)), value(std::move(g)) {}  ///< a graph
};

/// One node: an operator of the default domain (opset 17) applied to named values.
struct node_ir {
    std::string op_type;               ///< "MatMul", "Softmax", ...
    std::vector<std::string> inputs;   ///< the names of its inputs ("" for an omitted optional one)
    std::vector<std::string> outputs;  ///< the names of its outputs
    std::vector<attribute> attributes;  ///< its attributes
    std::string name;                  ///< the node's own name (the ctgraph op and node it lowers)
};

/// A constant tensor: a parameter or a constant a lowering needs.
struct tensor_ir {
    std::string name;                 ///< its name (a parameter's: the store's name)
    dtype type = dtype::f32;          ///< f32 or i64
    std::vector<long long> dims;      ///< its shape
    std::vector<float> f32;           ///< the elements of an f32 tensor
    std::vector<long long> i64;       ///< the elements of an i64 tensor
};

/// A graph input or output: its name, element type and shape (a dynamic axis by its letter).
struct value_ir {
    std::string name;        ///< the name a runtime feeds or returns it by
    dtype type = dtype::f32;  ///< its element type
    std::vector<dim> dims;   ///< its axes: static extents, or dynamic ones named by letter ("B", "T")
};

/// A subgraph (a Scan's body): its inputs, outputs and nodes; it reads the outer graph's values
/// (initializers, the loop invariants) by name.
struct graph_ir {
    std::string name;              ///< GraphProto.name
    std::vector<value_ir> inputs;  ///< its formal inputs (a Scan body: the states, then one slice of each scanned input)
    std::vector<value_ir> outputs;  ///< its outputs (a Scan body: the new states, then the per-step outputs)
    std::vector<node_ir> nodes;    ///< its nodes, in topological order
};

/// A whole model, ready to be written (write_model, ctgraph::onnx).
struct model_ir {
    std::vector<value_ir> inputs;         ///< graph inputs, in the order the program declares them
    std::vector<value_ir> outputs;        ///< graph outputs, in the program's output order
    std::vector<tensor_ir> initializers;  ///< parameters and constants
    std::vector<node_ir> nodes;           ///< nodes, in topological order
    std::string graph_name = "ctgraph";   ///< GraphProto.name
    std::string doc;                      ///< ModelProto.doc_string
    int opset = 17;                       ///< the default domain's opset version
    int ir_version = 8;                   ///< ONNX IR version (8: opset 17's, read by ONNX Runtime 1.30)
};

/// The shape of a value as a lowering sees it: rank and axes (static extents, dynamic letters).
struct shape_ir {
    std::size_t rank = 0;          ///< the number of axes
    std::array<dim, 8> d{};        ///< the axes, the first `rank` of them used
    /// Axis a; negative counts from the end.
    dim operator[](long a) const { return d[std::size_t(a < 0 ? long(rank) + a : a)]; }
    /// Whether every axis is static.
    bool is_static() const {
        for (std::size_t a = 0; a < rank; ++a)
            if (!d[a].is_static()) return false;
        return true;
    }
};

/// Adds nodes and constants to a model_ir, naming what it adds so that no two values clash.
class graph_builder {
public:
    /// A builder adding to `m` (its nodes, then a subgraph's while set_target says so).
    explicit graph_builder(model_ir& m) : m_(m), nodes_(&m.nodes) {}

    /// A fresh value name: hint + "_" + a counter.
    std::string fresh(std::string_view hint) { return std::string(hint) + "_" + std::to_string(counter_++); }

    /// Adds a node writing `outputs`; returns the first output's name.
    std::string node(std::string op_type, std::vector<std::string> inputs, std::vector<std::string> outputs,
                     std::vector<attribute> attrs = {}) {
        node_ir n{std::move(op_type), std::move(inputs), std::move(outputs), std::move(attrs), {}};
        n.name = (origin_.empty() ? n.op_type : origin_) + "_" + std::to_string(node_count_++);
        nodes_->push_back(std::move(n));
        return nodes_->back().outputs.empty() ? std::string() : nodes_->back().outputs[0];
    }
    /// Adds a node with one fresh output; returns its name.
    std::string emit(std::string op_type, std::vector<std::string> inputs, std::vector<attribute> attrs = {}) {
        std::string out = fresh(origin_.empty() ? std::string_view(op_type) : std::string_view(origin_));
        return node(std::move(op_type), std::move(inputs), {std::move(out)}, std::move(attrs));
    }
    /// A float32 scalar constant (a 0-d initializer), one per value.
    std::string scalar(double v) {
        const float f = float(v);
        std::uint32_t bits;
        static_assert(sizeof bits == sizeof f);
        __builtin_memcpy(&bits, &f, sizeof f);
        auto it = scalars_.find(bits);
        if (it != scalars_.end()) return it->second;
        std::string name = "const_f_" + std::to_string(scalars_.size());
        m_.initializers.push_back({name, dtype::f32, {}, {f}, {}});
        return scalars_.emplace(bits, name).first->second;
    }
    /// An int64 vector constant (shapes, axes, indices), one per value.
    std::string ints(std::vector<long long> v) {
        auto it = int_vectors_.find(v);
        if (it != int_vectors_.end()) return it->second;
        std::string name = "const_i_" + std::to_string(int_vectors_.size());
        m_.initializers.push_back({name, dtype::i64, {static_cast<long long>(v.size())}, {}, v});
        return int_vectors_.emplace(std::move(v), name).first->second;
    }
    /// An int64 scalar constant (a 0-d initializer: a Gather index that drops its axis).
    std::string int_scalar(long long v) {
        auto it = int_scalars_.find(v);
        if (it != int_scalars_.end()) return it->second;
        std::string name = "const_s_" + std::to_string(int_scalars_.size());
        m_.initializers.push_back({name, dtype::i64, {}, {}, {v}});
        return int_scalars_.emplace(v, name).first->second;
    }
    /// A float32 constant tensor of the given shape (a table a lowering computes: positions).
    std::string tensor(std::string_view hint, std::vector<long long> dims, std::vector<float> values) {
        std::string name = fresh(hint);
        m_.initializers.push_back({name, dtype::f32, std::move(dims), std::move(values), {}});
        return name;
    }
    /// The model being built.
    model_ir& model() { return m_; }
    /// Names the nodes added next after the ctgraph node they lower ("layer_norm_12").
    void set_origin(std::string o) { origin_ = std::move(o); }
    /// Adds the next nodes to `nodes` (a subgraph's) instead; returns the previous target.
    std::vector<node_ir>* set_target(std::vector<node_ir>* nodes) { return std::exchange(nodes_, nodes); }

private:
    model_ir& m_;
    std::vector<node_ir>* nodes_;
    std::size_t counter_ = 0, node_count_ = 0;
    std::string origin_;
    std::map<std::uint32_t, std::string> scalars_;
    std::map<std::vector<long long>, std::string> int_vectors_;
    std::map<long long, std::string> int_scalars_;
};

/// What an op's lowering receives: its operands' and result's names and shapes, and the builder.
class op_lowering {
public:
    /// The lowering of one node: its operands' names and shapes, its result's name and shape.
    op_lowering(graph_builder& b, std::vector<std::string> x, std::vector<shape_ir> xs, std::string y, shape_ir ys)
        : b_(b), x_(std::move(x)), xs_(std::move(xs)), y_(std::move(y)), ys_(ys) {}

    std::size_t arity() const { return x_.size(); }  ///< the number of operands
    const std::string& x(std::size_t k) const { return x_.at(k); }  ///< operand k's value name
    const shape_ir& xshape(std::size_t k) const { return xs_.at(k); }  ///< operand k's shape
    const std::string& y() const { return y_; }  ///< the result's value name (some node must write it)
    const shape_ir& yshape() const { return ys_; }  ///< the result's shape

    /// Adds a node with a fresh output; returns the output's name.
    std::string emit(std::string op_type, std::vector<std::string> inputs, std::vector<attribute> attrs = {}) {
        return b_.emit(std::move(op_type), std::move(inputs), std::move(attrs));
    }
    /// Adds the node that writes the result y().
    void emit_y(std::string op_type, std::vector<std::string> inputs, std::vector<attribute> attrs = {}) {
        b_.node(std::move(op_type), std::move(inputs), {y_}, std::move(attrs));
    }
    /// Adds a node that writes the value named `out` (an element function writing the result).
    void emit_to(std::string op_type, std::vector<std::string> inputs, const std::string& out, std::vector<attribute> attrs = {}) {
        b_.node(std::move(op_type), std::move(inputs), {out}, std::move(attrs));
    }
    /// Adds a node with several outputs of the given names (fresh ones where empty); returns them.
    std::vector<std::string> emit_n(std::string op_type, std::vector<std::string> inputs, std::size_t outputs,
                                    std::vector<attribute> attrs = {}) {
        std::vector<std::string> outs;
        for (std::size_t i = 0; i < outputs; ++i) outs.push_back(b_.fresh(op_type));
        b_.node(std::move(op_type), std::move(inputs), outs, std::move(attrs));
        return outs;
    }
    std::string scalar(double v) { return b_.scalar(v); }  ///< a float32 scalar constant
    std::string ints(std::vector<long long> v) { return b_.ints(std::move(v)); }  ///< an int64 vector constant
    std::string int_scalar(long long v) { return b_.int_scalar(v); }  ///< an int64 0-d constant
    /// A float32 constant tensor.
    std::string tensor(std::string_view hint, std::vector<long long> dims, std::vector<float> values) {
        return b_.tensor(hint, std::move(dims), std::move(values));
    }
    /// The extent of axis a of operand k as a 1-element int64 value: a constant where static, else
    /// read from the value at run time (Shape with start/end).
    std::string extent(std::size_t k, long a) {
        const shape_ir& s = xshape(k);
        const long ax = a < 0 ? long(s.rank) + a : a;
        if (s.d[std::size_t(ax)].is_static()) return ints({s.d[std::size_t(ax)].n});
        return emit("Shape", {x(k)}, {{"start", ax}, {"end", ax + 1}});
    }
    /// A shape for Reshape from axes that are constants (>= 0 static extents), or operand axes read
    /// at run time: each entry either {extent, -1} or {-1, axis of operand k}.
    std::string shape_of(std::size_t k, const std::vector<std::pair<long long, long>>& axes) {
        bool all_static = true;
        std::vector<long long> c;
        for (auto [n, a] : axes) {
            if (n < 0) {
                const dim d = xshape(k)[a];
                if (!d.is_static()) all_static = false;
                c.push_back(d.n);
            } else {
                c.push_back(n);
            }
        }
        if (all_static) return ints(c);
        std::vector<std::string> parts;
        for (auto [n, a] : axes) parts.push_back(n < 0 ? extent(k, a) : ints({n}));
        return emit("Concat", parts, {{"axis", 0}});
    }
    graph_builder& builder() { return b_; }  ///< the builder (for what the helpers above do not cover)
    /// Operand k is state this op writes in place (a KV cache): `value` is its content after the
    /// op. The export makes it an output of the graph (its input's name + "_out") and later nodes
    /// read the new value.
    void set_state(std::size_t k, std::string value) { states_.emplace_back(k, std::move(value)); }
    /// The state writes set_state recorded.
    const std::vector<std::pair<std::size_t, std::string>>& states() const { return states_; }

private:
    graph_builder& b_;
    std::vector<std::string> x_;
    std::vector<shape_ir> xs_;
    std::string y_;
    shape_ir ys_;
    std::vector<std::pair<std::size_t, std::string>> states_;
};

/// Writes the model as an ONNX file (protobuf, through libonnx), atomically: to a temporary file
/// beside `path`, renamed over it when complete; on failure `path` is left as it was and the
/// temporary removed. Throws ctg::io_error naming the path. Defined in the ctgraph::onnx library.
void write_model(const model_ir& model, const std::string& path);

/// The serialized ModelProto, without writing a file (ctgraph::onnx).
std::string serialize_model(const model_ir& model);

}  // namespace ctg::onnx
