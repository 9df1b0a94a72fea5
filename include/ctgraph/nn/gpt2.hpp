// ctgraph/nn/gpt2.hpp: GPT-2's architecture exactly (Radford et al. 2019; Hugging Face's GPT2LMHeadModel).
//
//   using small = nn::gpt2<50257, 1024, 768, 12, 12>;   // GPT-2 small: 124 M parameters
//   auto prog = compile<float>(small::loss(tokens, targets));
//   nn::load_hf_gpt2<small>(*prog.shared_params(), "model.safetensors");   // nn/gpt2_hf.hpp
//   nn::gpt_generator<small> gen(prog.shared_params(), 1, 1024);          // KV-cache decoding
//
// Against nn::gpt (the gpt-s / gpt-m workloads' model): learned position embeddings (a parameter
// (MaxLen, D), Hugging Face's wpe) instead of the sinusoidal table, and the output head tied to the
// token embedding (logits = h tok_embed^T, no bias, no parameter of its own: the embedding's
// gradient is the sum of its two uses, which the graph adds). The blocks are the same pre-norm
// encoder blocks (layer norms with eps 1e-5, causal self-attention, GELU's tanh form, an FFN of
// width F = 4 D) stacked by ctg::repeat, so a 12-layer model compiles like a 1-layer one.
#pragma once
#include "ctgraph/nn/transformer.hpp"
#include "ctgraph/ops/matmul_transposed.hpp"

namespace ctg::nn {

/// GPT-2: token embedding plus learned positions, Layers pre-norm blocks (causal multi-head
/// self-attention, GELU (tanh) FFN of width F), final layer norm, and logits from the token
/// embedding itself (the tied head). Tokens are (B, T) ids, T <= MaxLen. Drop: dropout rate on the
/// embeddings and on every sub-layer's output (training only). Parameters (docs/modules.md, with
/// the Hugging Face names nn::load_hf_gpt2 maps): `tok_embed` (V, D), `pos_embed` (MaxLen, D),
/// `blocks.*` (Layers, ...) as nn::gpt's, `ln_f.weight`, `ln_f.bias` (D).
/// Adapt: the blocks' adapters (nn/adapter.hpp; nn::lora<8, 16.0, "q.", "v."> on their queries and values).
template <int V, int MaxLen, int D, int Heads, int Layers, int F = 4 * D, cval Drop = 0.0, class Adapt = no_adapter>
struct gpt2 {
    /// @{ the template's sizes: vocabulary, longest sequence, width, heads, layers, FFN width
    static constexpr int vocab = V, max_len = MaxLen, width = D, heads = Heads, layers = Layers, ffn_width = F;
    /// @}
    using tok_embed = param<"tok_embed", V, D>;      ///< `tok_embed` (V, D): the token embedding, also the output head
    using pos_embed = param<"pos_embed", MaxLen, D>;  ///< `pos_embed` (MaxLen, D): the learned position embedding
    /// One block; its parameters are stacked over the layers as `blocks.<name>` (Layers, ...).
    using block = encoder_block<"", D, Heads, F, norm_placement::pre, activation::gelu, scaled_dot_score, Drop, 1e-5, Adapt>;
    using ln_f = layer_norm<"ln_f.", D, 1e-5>;  ///< the final norm: `ln_f.weight`, `ln_f.bias` (D)

    /// The residual stream after the last block and the final norm: (B, T, D).
    template <expr Tokens>
    static constexpr auto hidden(Tokens tokens) {
        auto x = dropout<Drop>(learned_positions(embedding(tok_embed{}, tokens), pos_embed{}));
        return ln_f{}(repeat<Layers, "blocks.">([](auto h) { return block{}(h, causal{}); }, x));
    }
    /// The tied head: h (..., D) times the token embedding transposed -> logits (..., V) (one
    /// product reading the table transposed: no copy of it).
    template <expr H>
    static constexpr auto head(H h) { return matmul_transposed(h, tok_embed{}); }
    /// Next-token logits (B, T, V).
    template <expr Tokens>
    static constexpr auto logits(Tokens tokens) { return head(hidden(tokens)); }
    /// Mean next-token cross-entropy over B x T.
    template <expr Tokens, expr Targets>
    static constexpr auto loss(Tokens tokens, Targets targets) { return softmax_cross_entropy(logits(tokens), targets); }

    // Decoding with a KV cache (nn/generate.hpp drives these), as nn::gpt's: the caches are inputs,
    // keys (Layers, B, D, C) and values (Layers, B, C, D), bound to the caller's memory.
    /// Prefill: logits (B, T, V) of a prompt (B, T), its keys and values stored at rows 0 .. T-1.
    template <expr Tokens, expr Kc, expr Vc>
    static constexpr auto prefill_logits(Tokens tokens, Kc kc, Vc vc) {
        auto x = learned_positions(embedding(tok_embed{}, tokens), pos_embed{});
        auto h = repeat<Layers, "blocks.">([](auto a, auto k, auto v) { return block{}.prefill(a, k, v, causal{}); }, x,
                                           per_layer(kc), per_layer(vc));
        return head(ln_f{}(h));
    }
    /// One step: logits (B, 1, V) of one token per sequence (B, 1) at positions pos (B), each
    /// reading its own row of the position embedding.
    template <expr Token, expr Pos, expr Kc, expr Vc>
    static constexpr auto step_logits(Token token, Pos pos, Kc kc, Vc vc) {
        auto x = learned_positions(embedding(tok_embed{}, token), pos_embed{}, pos);
        auto h = repeat<Layers, "blocks.">([](auto a, auto k, auto v, auto p) { return block{}.step(a, k, v, p); }, x,
                                           per_layer(kc), per_layer(vc), pos);
        return head(ln_f{}(h));
    }
};

}  // namespace ctg::nn
