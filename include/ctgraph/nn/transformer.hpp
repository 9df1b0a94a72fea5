// ctgraph/nn/transformer.hpp: Transformer layers from primitives (every backward is generated).
//
//   nn::linear<"fc1.", 128, 512>{}(x)                  x W + b; W (in, out) "fc1.weight", b "fc1.bias"
//   nn::layer_norm<"ln1.", 128>{}(x)                   fused layer norm; gamma "ln1.weight", beta "ln1.bias"
//   nn::ffn<"", 128, 512>{}(x)                         fc2(GELU_tanh(fc1(x))) (or activation::gelu_erf, relu)
//   nn::encoder_block<"", D, Heads, F>{}(x, mask)      self-attention + FFN, residuals, pre- or post-norm
//   nn::decoder_block<"", D, Heads, F>{}(x, memory, self_mask, memory_mask)
//                                                      causal self-attention (Causal = false: self_mask
//                                                      alone), cross-attention, FFN
//   nn::gpt<V, MaxLen, D, Heads, Layers>::logits(tokens) / ::loss(tokens, targets)
//
// Depth: a stack of identical blocks is ctg::repeat (graph/repeat.hpp): one block type run Layers
// times over parameters stacked (Layers, ...), so a 12-layer model compiles like a 1-layer one.
// Parameter names follow PyTorch's module names (blocks.ln1.weight is PyTorch's blocks.{l}.ln1.weight
// stacked over l); Linear weights are stored (in, out), the transpose of PyTorch's.
#pragma once
#include "ctgraph/attention.hpp"
#include "ctgraph/graph/repeat.hpp"
#include "ctgraph/nn/adapter.hpp"
#include "ctgraph/nn/cells.hpp"  // nn::activation
#include "ctgraph/nn/checks.hpp"
#include "ctgraph/nn/multi_head_attention.hpp"
#include "ctgraph/ops/add.hpp"
#include "ctgraph/ops/affine.hpp"
#include "ctgraph/ops/dropout.hpp"
#include "ctgraph/ops/embedding.hpp"
#include "ctgraph/ops/affine_activation.hpp"
#include "ctgraph/ops/gelu.hpp"
#include "ctgraph/ops/layer_norm.hpp"
#include "ctgraph/ops/matmul.hpp"
#include "ctgraph/ops/positions.hpp"
#include "ctgraph/ops/relu.hpp"
#include "ctgraph/ops/softmax_cross_entropy.hpp"

namespace ctg::nn {

/// y = x W + b over the last axis.
template <fixed_string P, int In, int Out, bool Bias = true>
struct linear {
    using weight = param<P + fixed_string("weight"), In, Out>;  ///< `<P>weight` (In, Out): PyTorch's weight transposed
    using bias = param<P + fixed_string("bias"), Out>;            ///< `<P>bias` (Out), when Bias
    /// x (..., In) -> (..., Out). An input of another width is one compile error (and poison).
    template <expr X>
    constexpr auto operator()(X x) const {
        if constexpr (X::is_poison) return poison{};
        else if constexpr (!detail::linear_fits<weight::name, In, Out, detail::last_dim<X>>()) return poison{};
        else if constexpr (Bias) return affine(x, weight{}, bias{});  // one node: ops/affine.hpp
        else return x * weight{};
    }
};

/// Layer normalisation over the last axis with a learned scale and shift; Eps is added to the
/// variance (1e-5, PyTorch's default).
template <fixed_string P, int D, cval Eps = 1e-5>
struct layer_norm {
    using gamma = param<P + fixed_string("weight"), D>;  ///< `<P>weight` (D): the scale, initialised to ones
    using beta = param<P + fixed_string("bias"), D>;     ///< `<P>bias` (D): the shift, initialised to zeros
    /// x (..., D) -> (..., D), normalised over the last axis. Another width is one compile error.
    template <expr X>
    constexpr auto operator()(X x) const {
        if constexpr (X::is_poison) return poison{};
        else if constexpr (!detail::layer_norm_fits<gamma::name, D, detail::last_dim<X>>()) return poison{};
        else return ctg::layer_norm<Eps>(x, gamma{}, beta{});
    }
};

/// Position-wise feed-forward network: fc2(act(fc1(x))), D -> F -> D. activation::gelu is GELU's
/// tanh approximation (GPT-2), activation::gelu_erf the exact form (PyTorch's nn.GELU()). Adapt
/// makes the projections `<P>fc1.`, `<P>fc2.` (nn/adapter.hpp).
template <fixed_string P, int D, int F, activation Act = activation::gelu, class Adapt = no_adapter>
struct ffn {
    using fc1 = linear<P + fixed_string("fc1."), D, F>;  ///< `<P>fc1.weight` (D, F), `<P>fc1.bias` (F)
    using fc2 = linear<P + fixed_string("fc2."), F, D>;  ///< `<P>fc2.weight` (F, D), `<P>fc2.bias` (D)
    /// x (..., D) -> (..., D). fc1 and the activation are one node (ops/affine_activation.hpp: the
    /// same bits as the two, with the pre-activation made and consumed in one pass).
    template <expr X>
    constexpr auto operator()(X x) const {
        static_assert(Act != activation::tanh, "ctg::nn::ffn: the activation is gelu, gelu_erf or relu");
        using W1 = typename fc1::weight;
        using B1 = typename fc1::bias;
        if constexpr (X::is_poison) return poison{};
        else if constexpr (!detail::linear_fits<W1::name, D, F, detail::last_dim<X>>()) return poison{};
        else if constexpr (Adapt::template adapts<P + fixed_string("fc1.")> || Adapt::template adapts<P + fixed_string("fc2.")>)
            return adapted(x);  // (the fused fc1 and activation have no room for an adapter)
        else if constexpr (Act == activation::gelu) return fc2{}(affine_gelu(x, W1{}, B1{}));
        else if constexpr (Act == activation::gelu_erf) return fc2{}(affine_gelu_erf(x, W1{}, B1{}));
        else return fc2{}(affine_relu(x, W1{}, B1{}));
    }

private:
    template <expr X>
    static constexpr auto adapted(X x) {
        auto z = Adapt::template linear<P + fixed_string("fc1."), D, F>(x);
        auto h = [&] {
            if constexpr (Act == activation::gelu) return gelu(z);
            else if constexpr (Act == activation::gelu_erf) return gelu_erf(z);
            else return relu(z);
        }();
        return Adapt::template linear<P + fixed_string("fc2."), F, D>(h);
    }
};

/// Where a block normalises: before each sub-layer (x + f(norm(x)), GPT-2) or after the residual
/// sum (norm(x + f(x)), the original Transformer).
enum class norm_placement { pre, post };

/// A residual sub-layer in either placement, with dropout on the sub-layer's output (rate Drop,
/// training only; 0: no node).
template <norm_placement Place, class Norm, cval Drop = 0.0, expr X, class F>
constexpr auto residual(X x, F f) {
    if constexpr (Place == norm_placement::pre) return x + dropout<Drop>(f(Norm{}(x)));
    else return Norm{}(x + dropout<Drop>(f(x)));
}

/// Encoder block: self-attention (mask: padding, a window, ...) then FFN, each residual, each
/// sub-layer's output through dropout<Drop> in training. Parameters: `<P>ln1.*`, `<P>q/k/v/proj.*`,
/// `<P>ln2.*`, `<P>fc1.*`, `<P>fc2.*`. Eps: the layer norms' (PyTorch's `layer_norm_eps`).
template <fixed_string P, int D, int Heads, int F, norm_placement Place = norm_placement::pre,
          activation Act = activation::gelu, class Score = scaled_dot_score, cval Drop = 0.0, cval Eps = 1e-5,
          class Adapt = no_adapter>
struct encoder_block {
    using attn = multi_head_attention<P, D, Heads, Score, Adapt>;  ///< the self-attention: `<P>q.weight`, `<P>q.bias`, and the same for k, v and proj
    using ln1 = layer_norm<P + fixed_string("ln1."), D, Eps>;    ///< the norm of the attention sub-layer
    using ln2 = layer_norm<P + fixed_string("ln2."), D, Eps>;    ///< the norm of the FFN sub-layer
    using mlp = ffn<P, D, F, Act, Adapt>;                   ///< the FFN (`<P>fc1.weight`, `<P>fc1.bias`, `<P>fc2.weight`, `<P>fc2.bias`)
    /// x (B, T, D) -> (B, T, D), self-attention under `mask`.
    template <expr X, attention_mask Mask = no_mask>
    constexpr auto operator()(X x, Mask mask = {}) const {
        return with_attention(x, [&](auto a) { return attn::self(a, mask); });
    }
    /// The same over a prompt, storing its keys and values into the caches (B, C, D) (inference).
    template <expr X, expr Kc, expr Vc, attention_mask Mask = no_mask>
    constexpr auto prefill(X x, Kc kc, Vc vc, Mask mask = {}) const {
        return with_attention(x, [&](auto a) { return attn::self_prefill(a, kc, vc, mask); });
    }
    /// One decoding step of a causal block: x (B, 1, D) at positions pos (B) against the caches.
    template <expr X, expr Kc, expr Vc, expr Pos>
    constexpr auto step(X x, Kc kc, Vc vc, Pos pos) const {
        return with_attention(x, [&](auto a) { return attn::self_step(a, kc, vc, pos); });
    }

private:
    template <expr X, class Attend>
    constexpr auto with_attention(X x, Attend attend) const {
        auto h = residual<Place, ln1, Drop>(x, attend);
        return residual<Place, ln2, Drop>(h, [](auto a) { return mlp{}(a); });
    }
};

/// Decoder block: self-attention, cross-attention to the encoder's memory (memory_mask: source
/// padding), then FFN. Causal = true (the default): the self-attention is causal, and self_mask
/// (target padding, say) is combined with the causal mask; Causal = false: self_mask alone (PyTorch's
/// nn.TransformerDecoderLayer, which takes its tgt_mask as given). Parameters: `<P>ln1/ln2/ln3.*`,
/// `<P>q/k/v/proj.*` (self), `<P>cross.q/k/v/proj.*`, `<P>fc1/fc2.*`. Dropout<Drop> as the encoder's;
/// Eps: the layer norms'.
template <fixed_string P, int D, int Heads, int F, norm_placement Place = norm_placement::pre,
          activation Act = activation::gelu, class Score = scaled_dot_score, cval Drop = 0.0, bool Causal = true,
          cval Eps = 1e-5, class Adapt = no_adapter>
struct decoder_block {
    using self_attn = multi_head_attention<P, D, Heads, Score, Adapt>;  ///< the causal self-attention: `<P>q.weight`, `<P>q.bias`, and the same for k, v and proj
    using cross_attn = multi_head_attention<P + fixed_string("cross."), D, Heads, Score, Adapt>;  ///< the cross-attention: `<P>cross.q.weight`, ..., `<P>cross.proj.bias`
    using ln1 = layer_norm<P + fixed_string("ln1."), D, Eps>;  ///< the norm of the self-attention sub-layer
    using ln2 = layer_norm<P + fixed_string("ln2."), D, Eps>;  ///< the norm of the cross-attention sub-layer
    using ln3 = layer_norm<P + fixed_string("ln3."), D, Eps>;  ///< the norm of the FFN sub-layer
    using mlp = ffn<P, D, F, Act, Adapt>;                 ///< the FFN (`<P>fc1.weight`, `<P>fc1.bias`, `<P>fc2.weight`, `<P>fc2.bias`)
    /// x (B, T, D) attending to itself (causally when Causal, and under self_mask) and to memory
    /// (B, S, D) under memory_mask -> (B, T, D).
    template <expr X, expr Memory, attention_mask SelfMask = no_mask, attention_mask MemoryMask = no_mask>
    constexpr auto operator()(X x, Memory memory, SelfMask self_mask = {}, MemoryMask memory_mask = {}) const {
        auto h = residual<Place, ln1, Drop>(x, [&](auto a) {
            if constexpr (!Causal) return self_attn::self(a, self_mask);
            else if constexpr (std::is_same_v<SelfMask, no_mask>) return self_attn::self(a, causal{});
            else return self_attn::self(a, causal{} && self_mask);
        });
        auto c = residual<Place, ln2, Drop>(h, [&](auto a) { return cross_attn::cross(a, memory, memory_mask); });
        return residual<Place, ln3, Drop>(c, [](auto a) { return mlp{}(a); });
    }
};

/// The decoder-only GPT of the gpt-s / gpt-m workloads: token embedding + sinusoidal positions,
/// Layers pre-norm blocks (causal multi-head self-attention, GELU FFN of 4 D), final layer norm,
/// linear head (untied, with bias). Tokens are (B, T) ids, T <= MaxLen. PosRound = float rounds the
/// positional table to float first, as a PyTorch model's float32 buffer holds it. Drop: dropout
/// rate on the embeddings and on every sub-layer's output (training only; GPT-2's places). Adapt:
/// the projections' adapters (nn/adapter.hpp; nn::lora<8, 16.0, "q.", "v."> on the blocks' queries
/// and values, "head." on the head).
template <int V, int MaxLen, int D, int Heads, int Layers, int F = 4 * D, class PosRound = void, cval Drop = 0.0,
          class Adapt = no_adapter>
struct gpt {
    /// @{ the template's sizes: vocabulary, longest sequence, width, heads, layers
    static constexpr int vocab = V, max_len = MaxLen, width = D, heads = Heads, layers = Layers;
    /// @}
    using tok_embed = param<"tok_embed", V, D>;  ///< `tok_embed` (V, D): the token embedding
    /// One block; its parameters are stacked over the layers as `blocks.<name>` (Layers, ...).
    using block = encoder_block<"", D, Heads, F, norm_placement::pre, activation::gelu, scaled_dot_score, Drop, 1e-5, Adapt>;
    using ln_f = layer_norm<"ln_f.", D>;  ///< the final norm: `ln_f.weight`, `ln_f.bias` (D)
    /// The output head: `head.weight` (D, V), `head.bias` (V), as Adapt makes it.
    struct head {
        /// h (..., D) -> logits (..., V).
        template <expr H>
        constexpr auto operator()(H h) const {
            if constexpr (Adapt::template adapts<"head.">) return Adapt::template linear<"head.", D, V>(h);
            else return linear<"head.", D, V>{}(h);
        }
    };

    /// The residual stream after the last block and the final norm: (B, T, D).
    template <expr Tokens>
    static constexpr auto hidden(Tokens tokens) {
        auto x = dropout<Drop>(sinusoidal_positions<MaxLen, PosRound>(embedding(tok_embed{}, tokens)));
        return ln_f{}(repeat<Layers, "blocks.">([](auto h) { return block{}(h, causal{}); }, x));
    }
    /// Next-token logits (B, T, V).
    template <expr Tokens>
    static constexpr auto logits(Tokens tokens) { return head{}(hidden(tokens)); }
    /// Mean next-token cross-entropy over B x T.
    template <expr Tokens, expr Targets>
    static constexpr auto loss(Tokens tokens, Targets targets) { return softmax_cross_entropy(logits(tokens), targets); }

    // Decoding with a KV cache (nn/generate.hpp drives these). The caches are inputs, keys (Layers,
    // B, D, C) and values (Layers, B, C, D), one row per layer (per_layer), bound to the caller's
    // memory and written in place.
    /// Prefill: logits (B, T, V) of a prompt (B, T), its keys and values stored at rows 0 .. T-1.
    template <expr Tokens, expr Kc, expr Vc>
    static constexpr auto prefill_logits(Tokens tokens, Kc kc, Vc vc) {
        auto x = sinusoidal_positions<MaxLen, PosRound>(embedding(tok_embed{}, tokens));
        auto h = repeat<Layers, "blocks.">([](auto a, auto k, auto v) { return block{}.prefill(a, k, v, causal{}); }, x,
                                           per_layer(kc), per_layer(vc));
        return head{}(ln_f{}(h));
    }
    /// One step: logits (B, 1, V) of one token per sequence (B, 1) at positions pos (B).
    template <expr Token, expr Pos, expr Kc, expr Vc>
    static constexpr auto step_logits(Token token, Pos pos, Kc kc, Vc vc) {
        auto x = sinusoidal_positions<MaxLen, PosRound>(embedding(tok_embed{}, token), pos);
        auto h = repeat<Layers, "blocks.">([](auto a, auto k, auto v, auto p) { return block{}.step(a, k, v, p); }, x,
                                           per_layer(kc), per_layer(vc), pos);
        return head{}(ln_f{}(h));
    }
};

}  // namespace ctg::nn
