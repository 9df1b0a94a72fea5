// ctgraph/nn/torch_layout.hpp: PyTorch state_dicts (safetensors) into and out of nn:: modules, by name.
//
//   using layer = nn::encoder_block<"enc.", 64, 4, 256, nn::norm_placement::post, nn::activation::gelu_erf>;
//   nn::load_torch<layer>(store, "layer.safetensors");             // nn.TransformerEncoderLayer(64, 4, 256, activation="gelu")
//   nn::load_torch<layer>(store, "model.safetensors", "encoder.layers.0.");  // one submodule of a bigger state_dict
//   nn::save_torch<layer>(store, "out.safetensors");                 // the state_dict's names and orientation
//   nn::save_torch<layer>(store, "grads.safetensors", nn::what::gradients);  // p.grad of each tensor, the same way
//
// nn::torch_layout<Module> knows, from the module's type, which PyTorch tensor holds which of its
// parameters and how: as it is (biases, layer norms, embeddings), transposed (every nn.Linear
// weight: PyTorch's (out, in), ctgraph's (in, out)), a row block of a packed tensor
// (nn.MultiheadAttention's in_proj_weight (3D, D) and in_proj_bias (3D): queries, keys, values), or
// row l of a parameter stacked over layers by ctg::repeat (blocks.{l}.X). GRU and LSTM gates are in
// PyTorch's order in ctgraph (r, z, n; i, f, g, o), so their weights are transposed whole.
//
//   module                                      PyTorch module of the same layout
//   nn::linear<P, In, Out, Bias>                nn.Linear(In, Out, bias=Bias)
//   nn::layer_norm<P, D, Eps>                   nn.LayerNorm(D, eps=Eps)
//   param<Name, V, D> (an embedding table)      nn.Embedding(V, D)
//   nn::multi_head_attention<P, D, Heads>       nn.MultiheadAttention(D, Heads, batch_first=True)
//   nn::encoder_block<P, D, Heads, F, ...>      nn.TransformerEncoderLayer(D, Heads, F)
//   nn::decoder_block<P, D, Heads, F, ...>      nn.TransformerDecoderLayer(D, Heads, F)
//   nn::gpt<V, MaxLen, D, Heads, Layers, F>     bench/torch_ref.py's GPT (tok_embed, blocks.{l}.ln1/q/k/v/proj/ln2/fc1/fc2, ln_f, head)
//   nn::gru<P, X, H>, nn::lstm<P, X, H>         nn.GRU(X, H), nn.LSTM(X, H) (one layer)
//   nn::elman<P, X, H, Phi>                     nn.RNN(X, H, nonlinearity="tanh" / "relu") (one layer)
//   nn::bidirectional<Fwd, Bwd> of those        the same with bidirectional=True
//   nn::stacked_recurrent<L0, L1, ...> of those the same with num_layers=N (*_l0, *_l1, ...)
//   nn::torch_model<nn::torch_at<"a.", A>, ...> a module whose submodules are a, ...
//   nn::torch_repeat<"layers.", L, Block>       an nn.ModuleList of L blocks (nn.TransformerEncoder's
//                                               layers), the block run by ctg::repeat<L, "layers.">
//
// Each tensor has its name, shape and one orientation, so a square weight cannot be loaded the wrong
// way round, and a tensor saved by PyTorch loads as it is. Loading is all-or-nothing (as
// nn::load_hf_gpt2): every missing tensor (with the expected shape), wrong shape (expected and
// actual), other dtype (F32, F64, F16 and BF16 are converted), tensor the module does not have, and
// store parameter of another shape is listed in one ctg::io_error naming the file, and nothing is
// written before all pass. With a prefix, only the file's tensors under it are read (the rest of a
// bigger state_dict is left alone); without one, every tensor of the file must be the module's.
// The module's hyper-parameters that hold no weights (norm placement, activation, eps, causality) are
// not in the file: they must match the PyTorch module's for equal outputs (see docs/modules.md).
//
// A layout of one's own module: specialise nn::torch_layout<M> with name() and entries() (the
// entries' torch names relative to the module; nn::torch_nested joins them).
//
// This header includes ctgraph/safetensors.hpp (nlohmann-json) and is not part of ctgraph.hpp.
#pragma once
#include <cstddef>
#include <map>
#include <set>
#include <string>
#include <type_traits>
#include <vector>

#include "ctgraph/nn/cells.hpp"
#include "ctgraph/nn/checkpoint_layout.hpp"
#include "ctgraph/nn/multi_head_attention.hpp"
#include "ctgraph/nn/transformer.hpp"
#include "ctgraph/safetensors.hpp"

namespace ctg::nn {

/// The PyTorch layout of a module type: specialised below for the nn:: modules. Each specialisation
/// has `static std::string name()` (for messages) and `static std::vector<layout_entry> entries()`,
/// the module's state_dict tensors with names relative to the module.
template <class Module>
struct torch_layout {
    static_assert(sizeof(Module) == 0, "ctg::nn::torch_layout: no PyTorch layout is known for this module type");
};

/// `entries` with `torch_prefix` before every tensor's name and `param_prefix` before every
/// parameter's name: a submodule's layout inside its parent.
inline std::vector<layout_entry> torch_nested(const std::string& torch_prefix, std::vector<layout_entry> entries,
                                              const std::string& param_prefix = "") {
    for (auto& e : entries) {
        e.name = torch_prefix + e.name;
        for (auto& p : e.params) p = param_prefix + p;
    }
    return entries;
}

/// A block's layout repeated `layers` times by ctg::repeat<layers, param_prefix>: layer l's tensors
/// are torch_prefix + l + "." + the block's name (an nn.ModuleList) and hold row l of param_prefix +
/// the block's parameter.
inline std::vector<layout_entry> torch_stacked(const std::string& torch_prefix, const std::vector<layout_entry>& block,
                                               std::size_t layers, const std::string& param_prefix) {
    std::vector<layout_entry> out;
    for (std::size_t l = 0; l < layers; ++l)
        for (layout_entry e : torch_nested(torch_prefix + std::to_string(l) + ".", block, param_prefix)) {
            e.layers = layers;
            e.layer = l;
            out.push_back(std::move(e));
        }
    return out;
}

namespace detail {
template <auto S>
std::string quoted_prefix() { return "\"" + std::string(S.view()) + "\""; }
inline std::string sizes() { return ""; }
template <class... R>
std::string sizes(long long first, R... rest) { return ", " + std::to_string(first) + sizes(rest...); }
}  // namespace detail

/// nn.Linear(In, Out): `weight` (Out, In) is `<P>weight` transposed, `bias` (Out) is `<P>bias`.
template <fixed_string P, int In, int Out, bool Bias>
struct torch_layout<linear<P, In, Out, Bias>> {
    /// "nn::linear<"P", In, Out>".
    static std::string name() { return "nn::linear<" + detail::quoted_prefix<P>() + detail::sizes(In, Out) + ">"; }
    /// weight (transposed), bias.
    static std::vector<layout_entry> entries() {
        using L = linear<P, In, Out, Bias>;
        std::vector<layout_entry> e = {{"weight", {std::size_t(Out), std::size_t(In)}, {std::string(L::weight::name.view())}, false, true}};
        if (Bias) e.push_back({"bias", {std::size_t(Out)}, {std::string(L::bias::name.view())}});
        return e;
    }
};

/// nn.LayerNorm(D): `weight` and `bias` (D) as they are.
template <fixed_string P, int D, cval Eps>
struct torch_layout<layer_norm<P, D, Eps>> {
    /// "nn::layer_norm<"P", D>".
    static std::string name() { return "nn::layer_norm<" + detail::quoted_prefix<P>() + detail::sizes(D) + ">"; }
    /// weight, bias.
    static std::vector<layout_entry> entries() {
        using L = layer_norm<P, D, Eps>;
        return {{"weight", {std::size_t(D)}, {std::string(L::gamma::name.view())}},
                {"bias", {std::size_t(D)}, {std::string(L::beta::name.view())}}};
    }
};

/// nn.Embedding(V, D): `weight` (V, D) is the table param<Name, V, D> as it is.
template <fixed_string Name, dim V, dim D>
struct torch_layout<param<Name, V, D>> {
    /// "param<"Name", V, D> (an embedding)".
    static std::string name() { return "param<" + detail::quoted_prefix<Name>() + detail::sizes(V.n, D.n) + "> (an embedding)"; }
    /// weight.
    static std::vector<layout_entry> entries() {
        return {{"weight", {std::size_t(V.n), std::size_t(D.n)}, {std::string(Name.view())}}};
    }
};

/// nn.MultiheadAttention(D, Heads): `in_proj_weight` (3D, D) holds `<P>q.weight`, `<P>k.weight`,
/// `<P>v.weight` transposed as row blocks 0:D, D:2D, 2D:3D; `in_proj_bias` (3D) the biases;
/// `out_proj.weight` (D, D) is `<P>proj.weight` transposed, `out_proj.bias` `<P>proj.bias`.
template <fixed_string P, int D, int Heads, class Score>
struct torch_layout<multi_head_attention<P, D, Heads, Score>> {
    static_assert(std::is_same_v<Score, scaled_dot_score>,
                  "ctg::nn::torch_layout: nn.MultiheadAttention's score is the scaled dot product (scaled_dot_score)");
    /// "nn::multi_head_attention<"P", D, Heads>".
    static std::string name() { return "nn::multi_head_attention<" + detail::quoted_prefix<P>() + detail::sizes(D, Heads) + ">"; }
    /// in_proj_weight, in_proj_bias, out_proj.weight, out_proj.bias.
    static std::vector<layout_entry> entries() {
        const std::string p(P.view());
        const std::size_t d = D;
        std::vector<layout_entry> e = {
            {"in_proj_weight", {3 * d, d}, {p + "q.weight", p + "k.weight", p + "v.weight"}, true, true},
            {"in_proj_bias", {3 * d}, {p + "q.bias", p + "k.bias", p + "v.bias"}}};
        for (auto& x : torch_nested("out_proj.", torch_layout<linear<P + fixed_string("proj."), D, D>>::entries())) e.push_back(x);
        return e;
    }
};

/// nn.TransformerEncoderLayer(D, Heads, F): self_attn (nn.MultiheadAttention), linear1 (the
/// block's fc1), linear2 (fc2), norm1 (ln1), norm2 (ln2).
template <fixed_string P, int D, int Heads, int F, norm_placement Place, activation Act, class Score, cval Drop, cval Eps>
struct torch_layout<encoder_block<P, D, Heads, F, Place, Act, Score, Drop, Eps>> {
    using block = encoder_block<P, D, Heads, F, Place, Act, Score, Drop, Eps>;  ///< the module
    /// "nn::encoder_block<"P", D, Heads, F>".
    static std::string name() { return "nn::encoder_block<" + detail::quoted_prefix<P>() + detail::sizes(D, Heads, F) + ">"; }
    /// The state_dict's tensors, in its order.
    static std::vector<layout_entry> entries() {
        std::vector<layout_entry> e;
        auto add = [&](const std::string& n, std::vector<layout_entry> x) {
            for (auto& y : torch_nested(n, std::move(x))) e.push_back(std::move(y));
        };
        add("self_attn.", torch_layout<typename block::attn>::entries());
        add("linear1.", torch_layout<typename block::mlp::fc1>::entries());
        add("linear2.", torch_layout<typename block::mlp::fc2>::entries());
        add("norm1.", torch_layout<typename block::ln1>::entries());
        add("norm2.", torch_layout<typename block::ln2>::entries());
        return e;
    }
};

/// nn.TransformerDecoderLayer(D, Heads, F): self_attn, multihead_attn (the block's cross
/// attention), linear1, linear2 (fc1, fc2), norm1, norm2, norm3 (ln1, ln2, ln3).
template <fixed_string P, int D, int Heads, int F, norm_placement Place, activation Act, class Score, cval Drop,
          bool Causal, cval Eps>
struct torch_layout<decoder_block<P, D, Heads, F, Place, Act, Score, Drop, Causal, Eps>> {
    using block = decoder_block<P, D, Heads, F, Place, Act, Score, Drop, Causal, Eps>;  ///< the module
    /// "nn::decoder_block<"P", D, Heads, F>".
    static std::string name() { return "nn::decoder_block<" + detail::quoted_prefix<P>() + detail::sizes(D, Heads, F) + ">"; }
    /// The state_dict's tensors, in its order.
    static std::vector<layout_entry> entries() {
        std::vector<layout_entry> e;
        auto add = [&](const std::string& n, std::vector<layout_entry> x) {
            for (auto& y : torch_nested(n, std::move(x))) e.push_back(std::move(y));
        };
        add("self_attn.", torch_layout<typename block::self_attn>::entries());
        add("multihead_attn.", torch_layout<typename block::cross_attn>::entries());
        add("linear1.", torch_layout<typename block::mlp::fc1>::entries());
        add("linear2.", torch_layout<typename block::mlp::fc2>::entries());
        add("norm1.", torch_layout<typename block::ln1>::entries());
        add("norm2.", torch_layout<typename block::ln2>::entries());
        add("norm3.", torch_layout<typename block::ln3>::entries());
        return e;
    }
};

/// bench/torch_ref.py's GPT: tok_embed (V, D) as it is; block l's ln1, q, k, v, proj, ln2, fc1,
/// fc2 (Linear modules: weights transposed) are row l of the stacked blocks parameters; ln_f; head
/// (nn.Linear(D, V)). Its positions are a buffer, outside the state_dict.
template <int V, int MaxLen, int D, int Heads, int Layers, int F, class PosRound, cval Drop>
struct torch_layout<gpt<V, MaxLen, D, Heads, Layers, F, PosRound, Drop>> {
    /// "nn::gpt<V, MaxLen, D, Heads, Layers, F>".
    static std::string name() { return "nn::gpt<" + detail::sizes(V, MaxLen, D, Heads, Layers, F).substr(2) + ">"; }
    /// The state_dict's tensors, in its order.
    static std::vector<layout_entry> entries() {
        std::vector<layout_entry> e = {{"tok_embed", {std::size_t(V), std::size_t(D)}, {"tok_embed"}}};
        std::vector<layout_entry> block;
        auto add = [&](std::vector<layout_entry> x) {
            for (auto& y : x) block.push_back(std::move(y));
        };
        add(torch_nested("ln1.", torch_layout<layer_norm<"ln1.", D>>::entries()));
        add(torch_nested("q.", torch_layout<linear<"q.", D, D>>::entries()));
        add(torch_nested("k.", torch_layout<linear<"k.", D, D>>::entries()));
        add(torch_nested("v.", torch_layout<linear<"v.", D, D>>::entries()));
        add(torch_nested("proj.", torch_layout<linear<"proj.", D, D>>::entries()));
        add(torch_nested("ln2.", torch_layout<layer_norm<"ln2.", D>>::entries()));
        add(torch_nested("fc1.", torch_layout<linear<"fc1.", D, F>>::entries()));
        add(torch_nested("fc2.", torch_layout<linear<"fc2.", F, D>>::entries()));
        for (auto& x : torch_stacked("blocks.", block, std::size_t(Layers), "blocks.")) e.push_back(std::move(x));
        for (auto& x : torch_nested("ln_f.", torch_layout<layer_norm<"ln_f.", D>>::entries())) e.push_back(std::move(x));
        for (auto& x : torch_nested("head.", torch_layout<linear<"head.", D, V>>::entries())) e.push_back(std::move(x));
        return e;
    }
};

namespace detail {
/// Layer `layer` of nn.GRU / nn.LSTM: weight_ih_l<layer> (G H, X), weight_hh_l<layer> (G H, H)
/// transposed; the biases.
template <fixed_string P, int X, int H, int G>
std::vector<layout_entry> torch_recurrent_entries(std::size_t layer) {
    using W = gate_weights<P, X, H, G>;
    const std::size_t g = std::size_t(G) * H;
    const std::string l = "_l" + std::to_string(layer);
    return {{"weight_ih" + l, {g, std::size_t(X)}, {std::string(W::W_i::name.view())}, false, true},
            {"weight_hh" + l, {g, std::size_t(H)}, {std::string(W::W_h::name.view())}, false, true},
            {"bias_ih" + l, {g}, {std::string(W::b_i::name.view())}},
            {"bias_hh" + l, {g}, {std::string(W::b_h::name.view())}}};
}
}  // namespace detail

// A recurrent layer's layout has layer_entries(l): its tensors as layer l of a PyTorch nn.GRU /
// nn.LSTM / nn.RNN (suffix _l<l>), which nn::stacked_recurrent numbers; entries() is layer 0.

/// nn.GRU(X, H): `weight_ih_l0` (3H, X) is `<P>_W_i` transposed, `weight_hh_l0` (3H, H) `<P>_W_h`
/// transposed, `bias_ih_l0` / `bias_hh_l0` (3H) `<P>_b_i` / `<P>_b_h` (gates r, z, n in both).
template <fixed_string P, int X, int H>
struct torch_layout<gru<P, X, H>> {
    /// "nn::gru<"P", X, H>".
    static std::string name() { return "nn::gru<" + detail::quoted_prefix<P>() + detail::sizes(X, H) + ">"; }
    /// weight_ih_l<l>, weight_hh_l<l>, bias_ih_l<l>, bias_hh_l<l>.
    static std::vector<layout_entry> layer_entries(std::size_t l) { return detail::torch_recurrent_entries<P, X, H, 3>(l); }
    /// weight_ih_l0, weight_hh_l0, bias_ih_l0, bias_hh_l0.
    static std::vector<layout_entry> entries() { return layer_entries(0); }
};

/// nn.LSTM(X, H): as nn.GRU with 4H rows (gates i, f, g, o in both).
template <fixed_string P, int X, int H>
struct torch_layout<lstm<P, X, H>> {
    /// "nn::lstm<"P", X, H>".
    static std::string name() { return "nn::lstm<" + detail::quoted_prefix<P>() + detail::sizes(X, H) + ">"; }
    /// weight_ih_l<l>, weight_hh_l<l>, bias_ih_l<l>, bias_hh_l<l>.
    static std::vector<layout_entry> layer_entries(std::size_t l) { return detail::torch_recurrent_entries<P, X, H, 4>(l); }
    /// weight_ih_l0, weight_hh_l0, bias_ih_l0, bias_hh_l0.
    static std::vector<layout_entry> entries() { return layer_entries(0); }
};

/// nn.RNN(X, H, nonlinearity="tanh" or "relu"): `weight_ih_l0` (H, X) is `<P>_W_x` transposed,
/// `weight_hh_l0` (H, H) `<P>_W_h` transposed; PyTorch's two biases load as their sum into the one
/// bias `<P>_b`, and save as `bias_ih_l0` = `<P>_b`, `bias_hh_l0` = 0 (the same outputs).
template <fixed_string P, int X, int H, activation Phi>
struct torch_layout<elman<P, X, H, Phi>> {
    static_assert(Phi == activation::tanh || Phi == activation::relu,
                  "ctg::nn::torch_layout: nn.RNN's nonlinearity is tanh or relu");
    using cell = elman<P, X, H, Phi>;  ///< the module
    /// "nn::elman<"P", X, H>" (", relu>" for nonlinearity="relu").
    static std::string name() {
        return "nn::elman<" + detail::quoted_prefix<P>() + detail::sizes(X, H) + (Phi == activation::relu ? ", relu>" : ">");
    }
    /// weight_ih_l<l>, weight_hh_l<l>, bias_ih_l<l>, bias_hh_l<l> (added to bias_ih_l<l>).
    static std::vector<layout_entry> layer_entries(std::size_t l) {
        const std::string s = "_l" + std::to_string(l), b(cell::b::name.view());
        const std::size_t h = H;
        return {{"weight_ih" + s, {h, std::size_t(X)}, {std::string(cell::W_x::name.view())}, false, true},
                {"weight_hh" + s, {h, h}, {std::string(cell::W_h::name.view())}, false, true},
                {"bias_ih" + s, {h}, {b}},
                {.name = "bias_hh" + s, .shape = {h}, .params = {b}, .summed = true}};
    }
    /// weight_ih_l0, weight_hh_l0, bias_ih_l0, bias_hh_l0.
    static std::vector<layout_entry> entries() { return layer_entries(0); }
};

/// nn.GRU / nn.LSTM / nn.RNN with bidirectional=True: the forward cell's tensors as the one-way
/// module's, the backward cell's with the suffix `_reverse` (weight_ih_l0_reverse, ...).
template <class Fwd, class Bwd>
struct torch_layout<bidirectional<Fwd, Bwd>> {
    /// "nn::bidirectional<forward, backward>".
    static std::string name() { return "nn::bidirectional<" + torch_layout<Fwd>::name() + ", " + torch_layout<Bwd>::name() + ">"; }
    /// Layer l's: the forward cell's entries, then the backward cell's with `_reverse`.
    static std::vector<layout_entry> layer_entries(std::size_t l) {
        std::vector<layout_entry> e = torch_layout<Fwd>::layer_entries(l);
        for (layout_entry x : torch_layout<Bwd>::layer_entries(l)) {
            x.name += "_reverse";
            e.push_back(std::move(x));
        }
        return e;
    }
    /// Layer 0's.
    static std::vector<layout_entry> entries() { return layer_entries(0); }
};

/// nn.GRU / nn.LSTM / nn.RNN(X, H, num_layers=N): layer l of the stack is the tensors `*_l{l}` (and
/// `*_l{l}_reverse` when bidirectional), each layer's as its one-layer module's.
template <class... Layers>
struct torch_layout<stacked_recurrent<Layers...>> {
    /// Whether every layer has a recurrent layout (numbered tensors `*_l{l}`).
    static constexpr bool recurrent_layers = (requires { torch_layout<Layers>::layer_entries(std::size_t{}); } && ...);
    static_assert(recurrent_layers, "ctg::nn::torch_layout: each layer of nn::stacked_recurrent is nn::gru, nn::lstm, "
                                    "nn::elman or nn::bidirectional of them");
    /// "nn::stacked_recurrent<layer, ...>".
    static std::string name() {
        std::string s;
        if constexpr (recurrent_layers) ((s += (s.empty() ? "" : ", ") + torch_layout<Layers>::name()), ...);
        return "nn::stacked_recurrent<" + s + ">";
    }
    /// Layer 0's entries, then layer 1's, ...
    static std::vector<layout_entry> entries() {
        std::vector<layout_entry> e;
        if constexpr (recurrent_layers) {  // else only the static_assert speaks
            std::size_t l = 0;
            (
                [&] {
                    for (auto& x : torch_layout<Layers>::layer_entries(l)) e.push_back(std::move(x));
                    ++l;
                }(),
                ...);
        }
        return e;
    }
};

/// Block repeated Layers times by ctg::repeat<Layers, RepeatPrefix> (parameters stacked
/// (Layers, ...) under RepeatPrefix), as PyTorch's nn.ModuleList of Layers blocks at TorchPrefix:
/// nn.TransformerEncoder(layer, Layers) is `torch_repeat<"layers.", Layers, encoder_block<"", ...>>`.
template <fixed_string TorchPrefix, int Layers, class Block, fixed_string RepeatPrefix = TorchPrefix>
struct torch_repeat {};

/// The layout of a repeated block: block l's tensors at TorchPrefix + l, row l of the stacked parameters.
template <fixed_string TorchPrefix, int Layers, class Block, fixed_string RepeatPrefix>
struct torch_layout<torch_repeat<TorchPrefix, Layers, Block, RepeatPrefix>> {
    /// "Layers x block".
    static std::string name() { return std::to_string(Layers) + " x " + torch_layout<Block>::name(); }
    /// Every layer's entries in turn.
    static std::vector<layout_entry> entries() {
        return torch_stacked(std::string(TorchPrefix.view()), torch_layout<Block>::entries(), std::size_t(Layers),
                             std::string(RepeatPrefix.view()));
    }
};

/// Module as the submodule at `Prefix` of a PyTorch module (a part of nn::torch_model): its tensors'
/// names begin with Prefix, e.g. "emb." for `self.emb = nn.Embedding(...)`.
template <fixed_string Prefix, class Module>
struct torch_at {};

/// A PyTorch module made of submodules, each `nn::torch_at<prefix, module>`: its state_dict is
/// theirs, so one call loads or saves the whole of it.
///
///   using small = nn::torch_model<nn::torch_at<"emb.", param<"emb", 11, 8>>, nn::torch_at<"lin.", nn::linear<"lin.", 8, 8>>>;
template <class... Parts>
struct torch_model {};

/// The layout of a submodule under its prefix.
template <fixed_string Prefix, class Module>
struct torch_layout<torch_at<Prefix, Module>> {
    /// "Prefix: the module's name".
    static std::string name() { return std::string(Prefix.view()) + ": " + torch_layout<Module>::name(); }
    /// The module's entries under Prefix.
    static std::vector<layout_entry> entries() { return torch_nested(std::string(Prefix.view()), torch_layout<Module>::entries()); }
};

/// The layout of a module made of parts: theirs, one after another.
template <class... Parts>
struct torch_layout<torch_model<Parts...>> {
    /// "torch_model{part, part, ...}".
    static std::string name() {
        std::string s;
        ((s += (s.empty() ? "" : ", ") + torch_layout<Parts>::name()), ...);
        return "torch_model{" + s + "}";
    }
    /// The parts' entries in order.
    static std::vector<layout_entry> entries() {
        std::vector<layout_entry> e;
        (
            [&] {
                for (auto& x : torch_layout<Parts>::entries()) e.push_back(std::move(x));
            }(),
            ...);
        return e;
    }
};

/// The store parameters of a module with a PyTorch layout (name, shape, layer axes).
template <class Module>
std::vector<layout_param> torch_params() {
    return detail::layout_params(torch_layout<Module>::entries());
}

/// Loads the PyTorch state_dict in the safetensors file `path` (tensors `prefix<name>`; only those
/// are read when a prefix is given, every tensor of the file must be the module's otherwise) into
/// the parameters of Module, adding them to `store` if missing (see the file comment).
/// All-or-nothing: on any problem the store is unchanged and one ctg::io_error lists every problem,
/// naming the tensor, the expected and the actual shape or dtype, and the file. Once loaded, the
/// store is strict (parameter_store::strict): a program compiled over it that needs a parameter it
/// lacks (a prefix of repeat or of the layout unlike the other's) throws, listing the missing names
/// with the closest present, instead of adding zeros. To train new parameters beside the loaded ones
/// (a head over a loaded encoder), call store.strict(false) before compiling that program.
template <class Module, class T>
void load_torch(parameter_store<T>& store, const std::string& path, const std::string& prefix = "") {
    static_assert(std::is_same_v<T, float> || std::is_same_v<T, double>, "ctg::nn::load_torch: float or double store");
    using safetensors::detail::in_quotes;
    const std::vector<layout_entry> layout = torch_nested(prefix, torch_layout<Module>::entries());
    const std::vector<layout_param> params = detail::layout_params(layout);
    const std::map<std::string, safetensors::tensor> raw = safetensors::read(path);
    std::map<std::string, const safetensors::tensor*> file;
    for (const auto& [name, t] : raw)
        if (name.starts_with(prefix)) file.emplace(name, &t);
    std::string problems;
    auto problem = [&](const std::string& p) { problems += "\n  " + p; };
    std::set<std::string> used;
    const auto source = detail::layout_match(store, params, layout, file, used, " (load_torch takes F32, F64, F16 or BF16)", problem);
    std::string extra;
    for (const auto& [name, t] : file)
        if (!used.count(name)) extra += (extra.empty() ? "" : ", ") + in_quotes(name);
    if (!extra.empty()) problem("tensors the module does not have: " + extra);
    if (!problems.empty())
        throw io_error("ctg::nn::load_torch: " + in_quotes(path) + " does not match the PyTorch layout of " +
                       torch_layout<Module>::name() + (prefix.empty() ? "" : " under " + in_quotes(prefix)) + ":" +
                       problems);
    detail::layout_load(store, params, layout, source);
}

/// Saves the parameters of Module from `store` as the state_dict of the PyTorch module of the same
/// layout (names `prefix<name>`, PyTorch's orientation, packed tensors packed), in the store's type
/// (F32 or F64), with the metadata {"format": "pt"}; atomically (safetensors::write). A parameter
/// missing from the store throws ctg::error naming it; one of another shape, ctg::shape_error.
template <class Module, class T>
void save_torch(const parameter_store<T>& store, const std::string& path, const std::string& prefix = "") {
    save_torch<Module>(store, path, what::values, prefix);
}

/// Saves a per-parameter array of Module's parameters under the state_dict's names and in its
/// orientation, as the values above: `nn::what::gradients` writes what PyTorch's `p.grad` of each
/// tensor holds (nn.RNN's bias_ih and bias_hh both the one bias's gradient), with no tensor for a
/// frozen parameter (p.grad is None) and zeros for the frozen parts of a packed tensor
/// (in_proj_weight), both listed in the metadata (parameter_array, detail::layout_save).
template <class Module, class T>
void save_torch(const parameter_store<T>& store, const std::string& path, const std::type_identity_t<parameter_array<T>>& array,
                const std::string& prefix = "") {
    static_assert(std::is_same_v<T, float> || std::is_same_v<T, double>, "ctg::nn::save_torch: float or double store");
    detail::layout_save(store, torch_nested(prefix, torch_layout<Module>::entries()), array, path, "ctg::nn::save_torch");
}

}  // namespace ctg::nn
