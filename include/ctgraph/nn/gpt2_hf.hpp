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
// lm_head.weight (tied), and the metadata {"format": "pt"} that transformers' loader asks for;
// `nn::save_hf_gpt2<small>(*store, "grads.safetensors", nn::what::gradients)` writes the gradients
// in the same names and layout (PyTorch's p.grad of GPT2Model's parameters; nn::parameter_array).
//
// This header includes ctgraph/safetensors.hpp (nlohmann-json) and is not part of ctgraph.hpp.
#pragma once
#include <algorithm>
#include <cstddef>
#include <map>
#include <set>
#include <string>
#include <string_view>
#include <type_traits>
#include <vector>

#include "ctgraph/error.hpp"
#include "ctgraph/nn/checkpoint_layout.hpp"
#include "ctgraph/nn/gpt2.hpp"
#include "ctgraph/params.hpp"
#include "ctgraph/safetensors.hpp"

namespace ctg::nn {
namespace detail {

/// The store parameters of an nn::gpt2 type Model, in the order a program over it adds them.
template <class Model>
std::vector<layout_param> gpt2_params() {
    const std::size_t V = Model::vocab, M = Model::max_len, D = Model::width, F = Model::ffn_width, L = Model::layers;
    std::vector<layout_param> p = {{"tok_embed", {V, D}}, {"pos_embed", {M, D}}};
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

/// Hugging Face's tensors of an nn::gpt2 type Model (names without "transformer."): Conv1D (in, out)
/// weights as they are, c_attn's columns split into q, k, v; the blocks' rows of stacked parameters.
template <class Model>
std::vector<layout_entry> hf_gpt2_layout() {
    const std::size_t V = Model::vocab, M = Model::max_len, D = Model::width, F = Model::ffn_width;
    std::vector<layout_entry> t = {{"wte.weight", {V, D}, {"tok_embed"}}, {"wpe.weight", {M, D}, {"pos_embed"}}};
    for (std::size_t l = 0; l < std::size_t(Model::layers); ++l) {
        const std::string h = "h." + std::to_string(l) + ".";
        auto add = [&](std::string n, std::vector<std::size_t> s, std::vector<std::string> ps) {
            for (auto& x : ps) x = "blocks." + x;
            t.push_back({h + n, std::move(s), std::move(ps), false, false, std::size_t(Model::layers), l});
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
    detail::layout_add(store, detail::gpt2_params<Model>());
}

/// Loads a Hugging Face GPT-2 checkpoint (safetensors, GPT2Model's or GPT2LMHeadModel's names)
/// into the parameters of the nn::gpt2 type Model, adding them to `store` if missing (see the file
/// comment for the mapping and the checks). All-or-nothing: on any problem the store's values are
/// unchanged and one ctg::io_error lists every problem, naming the tensor, the expected and the
/// actual shape or dtype, and the file. Once loaded, the store is strict (parameter_store::strict):
/// a program over it that needs a parameter it lacks throws instead of adding zeros (call
/// store.strict(false) first to add new ones).
template <class Model, class T>
void load_hf_gpt2(parameter_store<T>& store, const std::string& path) {
    static_assert(std::is_same_v<T, float> || std::is_same_v<T, double>, "ctg::nn::load_hf_gpt2: float or double store");
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
    const std::string accepted = " (nn::gpt2 takes F32, F64, F16 or BF16)";
    const std::vector<layout_param> params = detail::gpt2_params<Model>();
    const std::vector<layout_entry> layout = detail::hf_gpt2_layout<Model>();
    std::set<std::string> used;
    // Each checked tensor converts without failing.
    const std::vector<const safetensors::tensor*> source = detail::layout_match(store, params, layout, file, used, accepted, problem);
    // lm_head.weight: the tied head, so it must be wte.weight itself.
    if (const auto it = file.find("lm_head.weight"); it != file.end()) {
        used.insert("lm_head.weight");
        const safetensors::tensor& t = *it->second;
        const std::vector<std::size_t> want{std::size_t(Model::vocab), std::size_t(Model::width)};
        if (t.shape != want) {
            problem("tensor " + in_quotes(t.name) + " has shape " + shape_string(t.shape) +
                    " in the file; expected " + shape_string(want) + " (the head tied to wte.weight)");
        } else if (!detail::layout_dtype_ok(t)) {
            problem("tensor " + in_quotes(t.name) + " has dtype " + t.dtype + accepted);
        } else if (const safetensors::tensor* wte = source[0]; wte && (t.dtype != wte->dtype || t.bytes != wte->bytes)) {
            // The same bytes pass at once; otherwise the first element that differs in value.
            const std::vector<double> head = safetensors::to_vector<double>(t), emb = safetensors::to_vector<double>(*wte);
            const auto diff = std::mismatch(head.begin(), head.end(), emb.begin());
            if (diff.first != head.end()) {
                const std::size_t k = std::size_t(diff.first - head.begin());
                // The shortest digits of the tensors' own precision (a float's for F32, F16 and BF16,
                // whose values floats hold exactly; a double's if either is F64), so the two differ on the page.
                const bool wide = t.dtype == "F64" || wte->dtype == "F64";
                auto text = [&](double v) {
                    return wide ? ctg::detail::shortest_text(v) : ctg::detail::shortest_text(float(v));
                };
                problem("tensor " + in_quotes(t.name) + " differs from wte.weight (first at element " +
                        std::to_string(k) + ": " + text(*diff.first) + " against " + text(*diff.second) +
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
    detail::layout_load(store, params, layout, source);
}

/// Saves the parameters of the nn::gpt2 type Model as a Hugging Face GPT-2 checkpoint (GPT2Model's
/// names, Conv1D (in, out) weights, q, k, v packed into c_attn; no lm_head.weight: it is wte.weight),
/// in the store's type (F32 or F64), with the metadata {"format": "pt"}; atomically
/// (safetensors::write). A parameter missing from the store throws ctg::error naming it.
/// `array`: another per-parameter array in the same names and layout, e.g. `nn::what::gradients`,
/// PyTorch's `p.grad` of GPT2Model's parameters (wte.weight's the sum of the embedding's and the tied
/// head's, as tok_embed's), with no tensor for a frozen parameter and zeros for the frozen parts of
/// c_attn, both listed in the metadata (parameter_array, detail::layout_save).
template <class Model, class T>
void save_hf_gpt2(const parameter_store<T>& store, const std::string& path,
                  const std::type_identity_t<parameter_array<T>>& array = what::values) {
    static_assert(std::is_same_v<T, float> || std::is_same_v<T, double>, "ctg::nn::save_hf_gpt2: float or double store");
    detail::layout_save(store, detail::hf_gpt2_layout<Model>(), array, path, "ctg::nn::save_hf_gpt2");
}

}  // namespace ctg::nn
