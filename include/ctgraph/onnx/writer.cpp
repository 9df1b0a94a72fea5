// ctgraph/onnx/writer.cpp: model_ir -> onnx::ModelProto -> a file. The library ctgraph::onnx.
//
// The protobuf is built through Debian's libonnx-dev (1.12: onnx.proto's generated C++, linked
// with libprotobuf), not by a hand-written encoder: the field numbers, packed encodings and
// version rules are those of the ONNX project's own definition.
#include <onnx/onnx_pb.h>

#include <string>
#include <type_traits>

#include "ctgraph/binary_file.hpp"
#include "ctgraph/onnx/ir.hpp"

namespace ctg::onnx {
namespace {

void set_type(::onnx::ValueInfoProto& v, const value_ir& in) {
    v.set_name(in.name);
    auto* t = v.mutable_type()->mutable_tensor_type();
    t->set_elem_type(static_cast<int>(in.type));
    auto* shape = t->mutable_shape();
    for (const dim& d : in.dims) {
        auto* sd = shape->add_dim();
        if (d.is_static()) sd->set_dim_value(d.n);
        else sd->set_dim_param(std::string(1, d.sym));
    }
}

void fill_graph(::onnx::GraphProto& g, const std::string& name, const std::vector<value_ir>& inputs,
                const std::vector<value_ir>& outputs, const std::vector<node_ir>& nodes);

void set_attribute(::onnx::AttributeProto& a, const attribute& in) {
    a.set_name(in.name);
    std::visit(
        [&](const auto& v) {
            using V = std::decay_t<decltype(v)>;
            if constexpr (std::is_same_v<V, long long>) {
                a.set_type(::onnx::AttributeProto::INT);
                a.set_i(v);
            } else if constexpr (std::is_same_v<V, double>) {
                a.set_type(::onnx::AttributeProto::FLOAT);
                a.set_f(float(v));
            } else if constexpr (std::is_same_v<V, std::vector<long long>>) {
                a.set_type(::onnx::AttributeProto::INTS);
                for (long long x : v) a.add_ints(x);
            } else if constexpr (std::is_same_v<V, std::vector<float>>) {
                a.set_type(::onnx::AttributeProto::FLOATS);
                for (float x : v) a.add_floats(x);
            } else if constexpr (std::is_same_v<V, std::string>) {
                a.set_type(::onnx::AttributeProto::STRING);
                a.set_s(v);
            } else {
                a.set_type(::onnx::AttributeProto::GRAPH);
                fill_graph(*a.mutable_g(), v->name, v->inputs, v->outputs, v->nodes);
            }
        },
        in.value);
}

void set_tensor(::onnx::TensorProto& t, const tensor_ir& in) {
    t.set_name(in.name);
    t.set_data_type(static_cast<int>(in.type));
    for (long long d : in.dims) t.add_dims(d);
    // raw_data: little-endian bytes, what every runtime reads fastest (and x86 is little-endian).
    if (in.type == dtype::f32) t.set_raw_data(in.f32.data(), in.f32.size() * sizeof(float));
    else t.set_raw_data(in.i64.data(), in.i64.size() * sizeof(long long));
}

void fill_graph(::onnx::GraphProto& g, const std::string& name, const std::vector<value_ir>& inputs,
                const std::vector<value_ir>& outputs, const std::vector<node_ir>& nodes) {
    g.set_name(name);
    for (const value_ir& v : inputs) set_type(*g.add_input(), v);
    for (const value_ir& v : outputs) set_type(*g.add_output(), v);
    for (const node_ir& n : nodes) {
        auto* pn = g.add_node();
        pn->set_op_type(n.op_type);
        pn->set_name(n.name);
        for (const std::string& s : n.inputs) pn->add_input(s);
        for (const std::string& s : n.outputs) pn->add_output(s);
        for (const attribute& a : n.attributes) set_attribute(*pn->add_attribute(), a);
    }
}

::onnx::ModelProto to_proto(const model_ir& m) {
    ::onnx::ModelProto p;
    p.set_ir_version(m.ir_version);
    p.set_producer_name("ctgraph");
    p.set_producer_version(CTG_ONNX_PRODUCER_VERSION);
    if (!m.doc.empty()) p.set_doc_string(m.doc);
    auto* op = p.add_opset_import();
    op->set_domain("");
    op->set_version(m.opset);
    auto* g = p.mutable_graph();
    fill_graph(*g, m.graph_name, m.inputs, m.outputs, m.nodes);
    for (const tensor_ir& t : m.initializers) set_tensor(*g->add_initializer(), t);
    return p;
}

}  // namespace

std::string serialize_model(const model_ir& model) {
    std::string bytes;
    // protobuf refuses messages over 2 GiB: a model that large needs ONNX's external data.
    if (!to_proto(model).SerializeToString(&bytes))
        throw io_error("ctg::onnx: the model could not be serialized (over protobuf's 2 GiB limit?)");
    return bytes;
}

void write_model(const model_ir& model, const std::string& path) {
    const std::string bytes = serialize_model(model);
    binary_file::write_atomically(path, bytes.data(), bytes.size(), "ctg::onnx::save");
}

}  // namespace ctg::onnx
