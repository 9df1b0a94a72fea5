// ctgraph/nn/gpt2_hf.hpp: Hugging Face GPT-2 checkpoints (safetensors) into and out of an nn::gpt2.
//
//   using small = nn::gpt2<50257, 1024, 768, 12, 12>;
//   auto store = std::make_shared<parameter_store<float>>();
//   nn::load_hf_gpt2<small>(*store, "model.safetensors");   // adds the model's parameters if missing
//   nn::save_hf_gpt2<small>(*store, "out.safetensors");     // the same layout, F32 (F64 for a double store)
//
// The mapping is by name, each tensor in its known orientation (so a square weight cannot be read
// transposed). Hugging Face's GPT-2 stores its projections as Conv1D, (in, out), y = x W + b: the
// orientation of ctgraph's weights, so they are copied as they are; c_attn holds the queries', keys'
// and values' projections side by side along its last axis.
//
//   Hugging Face                        shape       nn::gpt2 parameter (row l of a stacked one)
//   wte.weight                          (V, D)      tok_embed (also the tied output head)
//   wpe.weight                          (MaxLen, D) pos_embed
//   h.{l}.ln_1.weight / .bias           (D)         blocks.ln1.weight / .bias
//   h.{l}.attn.c_attn.weight            (D, 3D)     blocks.q.weight | blocks.k.weight | blocks.v.weight (columns)
//   h.{l}.attn.c_attn.bias              (3D)        blocks.q.bias | blocks.k.bias | blocks.v.bias
//   h.{l}.attn.c_proj.weight / .bias    (D, D), (D) blocks.proj.weight / .bias
//   h.{l}.ln_2.weight / .bias           (D)         blocks.ln2.weight / .bias
//   h.{l}.mlp.c_fc.weight / .bias       (D, F), (F) blocks.fc1.weight / .bias
//   h.{l}.mlp.c_proj.weight / .bias     (F, D), (D) blocks.fc2.weight / .bias
//   ln_f.weight / .bias                 (D)         ln_f.weight / .bias
//
// Loading accepts every name with or without the `transformer.` prefix (GPT2LMHeadModel's
// state_dict) and `lm_head.weight` (V, D), which must equal wte.weight (the head is tied); the
// attention's mask buffers `h.{l}.attn.bias` and `h.{l}.attn.masked_bias` of older checkpoints are
// ignored. Tensors may be F32, F64, F16 or BF16 (converted to the store's type; F16 and BF16 exactly).
// Anything else is an error: a missing tensor, a wrong shape (expected and actual given), another
// dtype, a tensor the model does not have (a file of more layers), a name given with and without the
// prefix, an lm_head.weight that differs from wte.weight, a store parameter of another shape. Every
// problem is listed in one ctg::io_error naming the file, and nothing is written before all pass.
// Saving writes the table's names without the prefix (as Hugging Face's own GPT-2 files), no
// lm_head.weight (tied), and the metadata {"format": "pt"} that transformers' loader asks for.
//
// This header includes ctgraph/safetensors.hpp (nlohmann-json) and is not part of ctgraph.hpp.
#pragma once
#include <algorithm>
#include <cstddef>
#include <cstdio>
#include <map>
#include <string>
#include <string_view>
#include <vector>

#include "ctgraph/nn/gpt2.hpp"
#include "ctgraph/params.hpp"
#include "ctgraph/safetensors.hpp"

namespace ctg::nn {
namespace detail {

/// One Hugging Face tensor and where it goes: `params` split its last axis evenly (c_attn: q, k, v),
/// each the whole parameter or its row `layer` when `layered`.
struct hf_gpt2_entry {
    std::string name;                  // without the "transformer." prefix
    std::vector<std::size_t> shape;    // as Hugging Face stores it
    std::vector<std::string> params;   // store names, in column order
    bool layered = false;
    std::size_t layer = 0;
};

/// A store parameter of the model: name, shape (with the layer axis when stacked), layer axes.
struct gpt2_param {
    std::string name;
    std::vector<std::size_t> shape;
    std::size_t layer_axes = 0;
};

template <class Model>
std::vector<gpt2_param> gpt2_params() {
    const std::size_t V = Model::vocab, M = Model::max_len, D = Model::width, F = Model::ffn_width, L = Model::layers;
    std::vector<gpt2_param> p = {{"tok_embed", {V, D}}, {"pos_embed", {M, D}}};
    auto stacked = [&](std::string n, std::vector<std::size_t> s) {
        s.insert(s.begin(), L);
        p.push_back({"blocks." + n, s, 1});
    };
    stacked("ln1.weight", {D}), stacked("ln1.bias", {D});
    for (const char* x : {"q", "k", "v", "proj"}) stacked(std::string(x) + ".weight", {D, D}), stacked(std::string(x) + ".bias", {D});
    stacked("ln2.weight", {D}), stacked("ln2.bias", {D});
    stacked("fc1.weight", {D, F}), stacked("fc1.bias", {F});
    stacked("fc2.weight", {F, D}), stacked("fc2.bias", {D});
    p.push_back({"ln_f.weight", {D}});
    p.push_back({"ln_f.bias", {D}});
    return p;
}

template <class Model>
std::vector<hf_gpt2_entry> hf_gpt2_layout() {
    const std::size_t V = Model::vocab, M = Model::max_len, D = Model::width, F = Model::ffn_width;
    std::vector<hf_gpt2_entry> t = {{"wte.weight", {V, D}, {"tok_embed"}}, {"wpe.weight", {M, D}, {"pos_embed"}}};
    for (std::size_t l = 0; l < std::size_t(Model::layers); ++l) {
        const std::string h = "h." + std::to_string(l) + ".";
        auto add = [&](std::string n, std::vector<std::size_t> s, std::vector<std::string> ps) {
            for (auto& x : ps) x = "blocks." + x;
            t.push_back({h + n, std::move(s), std::move(ps), true, l});
        };
        add("ln_1.weight", {D}, {"ln1.weight"}), add("ln_1.bias", {D}, {"ln1.bias"});
        add("attn.c_attn.weight", {D, 3 * D}, {"q.weight", "k.weight", "v.weight"});
        add("attn.c_attn.bias", {3 * D}, {"q.bias", "k.bias", "v.bias"});
        add("attn.c_proj.weight", {D, D}, {"proj.weight"}), add("attn.c_proj.bias", {D}, {"proj.bias"});
        add("ln_2.weight", {D}, {"ln2.weight"}), add("ln_2.bias", {D}, {"ln2.bias"});
        add("mlp.c_fc.weight", {D, F}, {"fc1.weight"}), add("mlp.c_fc.bias", {F}, {"fc1.bias"});
        add("mlp.c_proj.weight", {F, D}, {"fc2.weight"}), add("mlp.c_proj.bias", {D}, {"fc2.bias"});
    }
    t.push_back({"ln_f.weight", {D}, {"ln_f.weight"}});
    t.push_back({"ln_f.bias", {D}, {"ln_f.bias"}});
    return t;
}

/// Copies between an HF tensor's elements (rows x cols, cols its last axis) and its parameters:
/// part j takes columns [j c, (j + 1) c), c = cols / parts, of every row. ToStore: hf -> store.
template <bool ToStore, class T, class Store>
void hf_gpt2_copy(const hf_gpt2_entry& e, Store& store, std::conditional_t<ToStore, const T*, T*> hf) {
    const std::size_t cols = e.shape.back(), rows = e.shape.size() == 2 ? e.shape[0] : 1;
    const std::size_t c = cols / e.params.size();
    for (std::size_t j = 0; j < e.params.size(); ++j) {
        const std::size_t s = store.slot(e.params[j]);
        const std::size_t off = e.layered ? e.layer * rows * c : 0;
        if constexpr (ToStore) {
            T* p = store.value(s) + off;
            for (std::size_t r = 0; r < rows; ++r) std::copy_n(hf + r * cols + j * c, c, p + r * c);
        } else {
            const T* p = store.value(s) + off;
            for (std::size_t r = 0; r < rows; ++r) std::copy_n(p + r * c, c, hf + r * cols + j * c);
        }
    }
}

/// "h.{l}.attn.bias" or "h.{l}.attn.masked_bias": the mask buffers old checkpoints hold.
inline bool hf_gpt2_mask_buffer(std::string_view n) {
    if (!n.starts_with("h.")) return false;
    n.remove_prefix(2);
    std::size_t i = 0;
    while (i < n.size() && n[i] >= '0' && n[i] <= '9') ++i;
    if (i == 0) return false;
    n.remove_prefix(i);
    return n == ".attn.bias" || n == ".attn.masked_bias";
}

/// The layer index of an "h.{l}...." name, or -1.
inline long hf_gpt2_layer_of(std::string_view n) {
    if (!n.starts_with("h.")) return -1;
    long l = 0;
    std::size_t i = 2;
    for (; i < n.size() && n[i] >= '0' && n[i] <= '9'; ++i) l = l * 10 + (n[i] - '0');
    return i > 2 && i < n.size() && n[i] == '.' ? l : -1;
}

}  // namespace detail

/// Adds the parameters of an nn::gpt2 type Model to `store` (those already there must have their
/// shapes; another shape throws ctg::shape_error): what a program over the model would add.
template <class Model, class T>
void add_gpt2_params(parameter_store<T>& store) {
    for (const auto& p : detail::gpt2_params<Model>()) {
        rshape s{p.shape.size(), {}};
        std::copy(p.shape.begin(), p.shape.end(), s.d.begin());
        store.add(p.name, s, p.layer_axes);
    }
}

/// Loads a Hugging Face GPT-2 checkpoint (safetensors, GPT2Model's or GPT2LMHeadModel's names)
/// into the parameters of the nn::gpt2 type Model, adding them to `store` if missing (see the file
/// comment for the mapping and the checks). All-or-nothing: on any problem the store's values are
/// unchanged and one ctg::io_error lists every problem, naming the tensor, the expected and the
/// actual shape or dtype, and the file.
template <class Model, class T>
void load_hf_gpt2(parameter_store<T>& store, const std::string& path) {
    static_assert(std::is_same_v<T, float> || std::is_same_v<T, double>, "ctg::nn::load_hf_gpt2: float or double store");
    using detail::hf_gpt2_entry;
    using safetensors::detail::in_quotes;
    using safetensors::detail::shape_string;
    const std::map<std::string, safetensors::tensor> raw = safetensors::read(path);
    std::string problems;
    auto problem = [&](const std::string& p) { problems += "\n  " + p; };

    // Names without the prefix; a name given both ways is ambiguous.
    const std::string prefix = "transformer.";
    std::map<std::string, const safetensors::tensor*> file;
    for (const auto& [name, t] : raw) {
        const std::string bare = name.starts_with(prefix) ? name.substr(prefix.size()) : name;
        if (!file.emplace(bare, &t).second)
            problem("tensor " + in_quotes(bare) + " is in the file both with and without the " + in_quotes(prefix) +
                    " prefix");
    }
    auto dtype_ok = [](const safetensors::tensor& t) {
        return t.dtype == "F32" || t.dtype == "F64" || t.dtype == "F16" || t.dtype == "BF16";
    };
    const std::string accepted = " (nn::gpt2 takes F32, F64, F16 or BF16)";

    // The store's existing parameters must have the model's shapes.
    for (const auto& p : detail::gpt2_params<Model>())
        if (const long s = store.find(p.name); s >= 0 && store.at(std::size_t(s)).shape.to_vector() != p.shape)
            problem("parameter " + in_quotes(p.name) + " has shape " + to_string(store.at(std::size_t(s)).shape) +
                    " in the store; the model needs " + shape_string(p.shape));

    const std::vector<hf_gpt2_entry> layout = detail::hf_gpt2_layout<Model>();
    std::vector<const safetensors::tensor*> source(layout.size(), nullptr);  // each checked: converts without failing
    std::map<std::string, bool> used;
    for (std::size_t i = 0; i < layout.size(); ++i) {
        const hf_gpt2_entry& e = layout[i];
        const auto it = file.find(e.name);
        if (it == file.end()) {
            problem("tensor " + in_quotes(e.name) + " is missing (expected shape " + shape_string(e.shape) + ")");
            continue;
        }
        used[e.name] = true;
        const safetensors::tensor& t = *it->second;
        if (t.shape != e.shape)
            problem("tensor " + in_quotes(t.name) + " has shape " + shape_string(t.shape) + " in the file; expected " +
                    shape_string(e.shape));
        else if (!dtype_ok(t))
            problem("tensor " + in_quotes(t.name) + " has dtype " + t.dtype + accepted);
        else
            source[i] = &t;
    }
    // lm_head.weight: the tied head, so it must be wte.weight itself.
    if (const auto it = file.find("lm_head.weight"); it != file.end()) {
        used["lm_head.weight"] = true;
        const safetensors::tensor& t = *it->second;
        const std::vector<std::size_t> want{std::size_t(Model::vocab), std::size_t(Model::width)};
        if (t.shape != want) {
            problem("tensor " + in_quotes(t.name) + " has shape " + shape_string(t.shape) +
                    " in the file; expected " + shape_string(want) + " (the head tied to wte.weight)");
        } else if (!dtype_ok(t)) {
            problem("tensor " + in_quotes(t.name) + " has dtype " + t.dtype + accepted);
        } else if (const safetensors::tensor* wte = source[0]; wte && (t.dtype != wte->dtype || t.bytes != wte->bytes)) {
            // The same bytes pass at once; otherwise the first element that differs in value.
            const std::vector<double> head = safetensors::to_vector<double>(t), emb = safetensors::to_vector<double>(*wte);
            const auto diff = std::mismatch(head.begin(), head.end(), emb.begin());
            if (diff.first != head.end()) {
                const std::size_t k = std::size_t(diff.first - head.begin());
                char a[32], b[32];
                std::snprintf(a, sizeof a, "%.9g", *diff.first);
                std::snprintf(b, sizeof b, "%.9g", *diff.second);
                problem("tensor " + in_quotes(t.name) + " differs from wte.weight (first at element " +
                        std::to_string(k) + ": " + a + " against " + b +
                        "); nn::gpt2's output head is tied to the token embedding");
            }
        }
    }
    // Whatever is left must be a mask buffer; anything else is a tensor the model does not have.
    long layers_in_file = 0;
    std::string extra;
    for (const auto& [name, t] : file) {
        layers_in_file = std::max(layers_in_file, detail::hf_gpt2_layer_of(name) + 1);
        if (used.count(name) || detail::hf_gpt2_mask_buffer(name)) continue;
        extra += (extra.empty() ? "" : ", ") + in_quotes(t->name);
    }
    if (!extra.empty()) {
        std::string hint;
        if (layers_in_file > long(Model::layers))
            hint = " (the file has " + std::to_string(layers_in_file) + " layers, the model " +
                   std::to_string(Model::layers) + ")";
        problem("tensors the model does not have: " + extra + hint);
    }
    if (!problems.empty())
        throw io_error("ctg::nn::load_hf_gpt2: " + in_quotes(path) + " does not match nn::gpt2<V=" +
                       std::to_string(Model::vocab) + ", MaxLen=" + std::to_string(Model::max_len) +
                       ", D=" + std::to_string(Model::width) + ", Heads=" + std::to_string(Model::heads) +
                       ", Layers=" + std::to_string(Model::layers) + ", F=" + std::to_string(Model::ffn_width) +
                       ">:" + problems);

    // Every tensor passed: converted one at a time (peak memory: the file, the store and one tensor).
    add_gpt2_params<Model>(store);
    for (std::size_t i = 0; i < layout.size(); ++i)
        detail::hf_gpt2_copy<true, T>(layout[i], store, safetensors::to_vector<T>(*source[i]).data());
}

/// Saves the parameters of the nn::gpt2 type Model as a Hugging Face GPT-2 checkpoint (GPT2Model's
/// names, Conv1D (in, out) weights, q, k, v packed into c_attn; no lm_head.weight: it is wte.weight),
/// in the store's type (F32 or F64), with the metadata {"format": "pt"}; atomically
/// (safetensors::write). A parameter missing from the store throws ctg::error naming it.
template <class Model, class T>
void save_hf_gpt2(const parameter_store<T>& store, const std::string& path) {
    static_assert(std::is_same_v<T, float> || std::is_same_v<T, double>, "ctg::nn::save_hf_gpt2: float or double store");
    for (const auto& p : detail::gpt2_params<Model>())
        if (store.at(store.slot(p.name)).shape.to_vector() != p.shape)
            throw shape_error("ctg::nn::save_hf_gpt2: parameter '" + p.name + "' has shape " +
                              to_string(store.at(store.slot(p.name)).shape) + " in the store; the model needs " +
                              safetensors::detail::shape_string(p.shape));
    std::vector<safetensors::tensor> out;
    std::vector<T> buf;
    for (const auto& e : detail::hf_gpt2_layout<Model>()) {
        std::size_t n = 1;
        for (std::size_t d : e.shape) n *= d;
        buf.assign(n, T(0));
        detail::hf_gpt2_copy<false, T>(e, store, buf.data());
        out.push_back(safetensors::from_data(e.name, buf.data(), e.shape));
    }
    safetensors::write(path, out, {{"format", "pt"}});
}

}  // namespace ctg::nn
