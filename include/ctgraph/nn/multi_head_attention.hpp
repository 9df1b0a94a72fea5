// ctgraph/nn/multi_head_attention.hpp: multi-head attention from primitives (backward generated).
//
//   using mha = nn::multi_head_attention<"attn_", 128, 4>;   // d_model 128, 4 heads of 32
//   auto y = mha::self(x, causal{});                          // x (B, n, 128) -> (B, n, 128)
//   auto y = mha::cross(x, memory, key_padding(len));         // queries from x, keys/values from memory
//   auto y = mha::attend(q, k, v, mask);                      // queries, keys, values from three tensors
//
// Q = x W_q + b_q, K = m W_k + b_k, V = m W_v + b_v, each (B, n, D), head j = features j*D/h ..
// (j+1)*D/h - 1 (as PyTorch's nn.MultiheadAttention and the gpt workloads); W_o, b_o project the
// concatenated heads. attention_over_heads computes every head's attention from Q, K and V as they
// are: with a dot-product score, fused ops read each head's columns in place and write its output
// columns (no copy into (B, h, n, D/h) and back); with any other score, split_heads makes the heads
// a batch axis of one attention call and merge_heads undoes it. Parameters are named as PyTorch modules name their
// Linear layers: <P>q.weight, <P>q.bias, <P>k.*, <P>v.*, <P>proj.weight, <P>proj.bias; weights are
// stored (in, out), the transpose of PyTorch's (out, in). The score is a template argument (any ctg::score_for type, per head).
#pragma once
#include "ctgraph/attention.hpp"
#include "ctgraph/nn/checks.hpp"
#include "ctgraph/ops/affine.hpp"
#include "ctgraph/ops/kv_cache.hpp"
#include "ctgraph/ops/matmul.hpp"
#include "ctgraph/ops/permute.hpp"
#include "ctgraph/nn/adapter.hpp"
#include "ctgraph/ops/reshape.hpp"

namespace ctg::nn {

/// (B, n, D) -> (B, h, n, D/h).
template <int Heads, expr X>
constexpr auto split_heads(X x) {
    using S = typename X::shape;
    static_assert(with_shapes<any_poison<X> || (S::rank == 3 && S::dims[2].is_static() && S::dims[2].n % Heads == 0),
                              typename S::pretty, shape_is<Heads>>::value,
                  "ctg::nn::split_heads: the operand must be (B, n, D) with D a multiple of the number of heads");
    if constexpr (any_poison<X> || !(S::rank == 3 && S::dims[2].is_static() && S::dims[2].n % Heads == 0)) return poison{};
    else return permute<0, 2, 1, 3>(reshape<S::dims[0], S::dims[1], Heads, S::dims[2].n / Heads>(x));
}

/// (B, h, n, d) -> (B, n, h*d): the heads side by side.
template <expr X>
constexpr auto merge_heads(X x) {
    using S = typename X::shape;
    static_assert(with_shapes<any_poison<X> || (S::rank == 4 && S::dims[1].is_static() && S::dims[3].is_static()),
                              typename S::pretty>::value,
                  "ctg::nn::merge_heads: the operand must be (B, h, n, d) with static h and d");
    if constexpr (any_poison<X> || !(S::rank == 4)) return poison{};
    else return reshape<S::dims[0], S::dims[2], S::dims[1].n * S::dims[3].n>(permute<0, 2, 1, 3>(x));
}

/// The attention of each of Heads heads side by side: q (B, n, D), k (B, m, D), v (B, m, D_v), head
/// j of q and k = features j D/Heads .. (j+1) D/Heads - 1 (of v likewise by D_v) -> (B, n, D_v),
/// head j's output in its columns. Equal to merge_heads(attention(split_heads<Heads>(q),
/// split_heads<Heads>(k), split_heads<Heads>(v), score, mask)); with a score that has fused
/// per-head weights (dot_score, scaled_dot_score: head_weights) it reads and writes each head's
/// columns in place, with no copies of the split or the merge.
template <int Heads, expr Q, expr K, expr V, class Score = scaled_dot_score, attention_mask Mask = no_mask>
    requires(!attention_mask<Score>)
constexpr auto attention_over_heads(Q q, K k, V v, Score score = {}, Mask mask = {}) {
    if constexpr (any_poison<Q, K, V>) return poison{};
    else if constexpr (requires { Score::template head_weights<Heads>(q, k, mask); })
        return ctg::detail::make_attention_values<Mask, Heads>(Score::template head_weights<Heads>(q, k, mask), v,
                                                               typename Mask::operands{});
    else return merge_heads(attention(split_heads<Heads>(q), split_heads<Heads>(k), split_heads<Heads>(v), score, mask));
}
/// Scaled dot-product attention over heads with a mask: attention_over_heads<Heads>(q, k, v, causal{}).
template <int Heads, expr Q, expr K, expr V, attention_mask Mask>
constexpr auto attention_over_heads(Q q, K k, V v, Mask mask) {
    return attention_over_heads<Heads>(q, k, v, scaled_dot_score{}, mask);
}
/// The weights (B, Heads, n, m) of attention_over_heads(q, k, v, score, mask): the same node.
template <int Heads, expr Q, expr K, class Score = scaled_dot_score, attention_mask Mask = no_mask>
    requires(!attention_mask<Score>)
constexpr auto attention_weights_over_heads(Q q, K k, Score score = {}, Mask mask = {}) {
    if constexpr (any_poison<Q, K>) return poison{};
    else if constexpr (requires { Score::template head_weights<Heads>(q, k, mask); }) return Score::template head_weights<Heads>(q, k, mask);
    else return attention_weights(split_heads<Heads>(q), split_heads<Heads>(k), score, mask);
}
/// The weights of scaled dot-product attention over heads with a mask.
template <int Heads, expr Q, expr K, attention_mask Mask>
constexpr auto attention_weights_over_heads(Q q, K k, Mask mask) {
    return attention_weights_over_heads<Heads>(q, k, scaled_dot_score{}, mask);
}

/// Multi-head attention with Heads heads over model width D; parameter names start with P. Its
/// checks (nn/checks.hpp) are said once however many graphs use it; a failed one gives poison.
/// Adapt makes the projections `<P>q.`, `<P>k.`, `<P>v.`, `<P>proj.` (nn/adapter.hpp: no_adapter,
/// or nn::lora on some of them).
template <fixed_string P, int D, int Heads, class Score = scaled_dot_score, class Adapt = no_adapter>
struct multi_head_attention {
    static constexpr bool width_ok = detail::heads_divide_width<D, Heads>();  ///< whether Heads divides D (else one compile error and poison)
    static constexpr int head_dim = width_ok ? D / Heads : 1;  ///< D / Heads
    using W_q = param<P + fixed_string("q.weight"), D, D>;  ///< <P>q.weight (D, D), input by output
    using b_q = param<P + fixed_string("q.bias"), D>;  ///< <P>q.bias (D)
    using W_k = param<P + fixed_string("k.weight"), D, D>;  ///< <P>k.weight (D, D)
    using b_k = param<P + fixed_string("k.bias"), D>;  ///< <P>k.bias (D)
    using W_v = param<P + fixed_string("v.weight"), D, D>;  ///< <P>v.weight (D, D)
    using b_v = param<P + fixed_string("v.bias"), D>;  ///< <P>v.bias (D)
    using W_o = param<P + fixed_string("proj.weight"), D, D>;  ///< <P>proj.weight (D, D), the output projection
    using b_o = param<P + fixed_string("proj.bias"), D>;  ///< <P>proj.bias (D)

    /// The per-head queries, keys and values (B, h, n, D/h).
    template <expr X>
    static constexpr auto queries(X x) { return split(project<"q.">(x)); }
    /// The per-head keys (B, h, m, D/h) of x (B, m, D).
    template <expr X>
    static constexpr auto keys(X x) { return split(project<"k.">(x)); }
    /// The per-head values (B, h, m, D/h) of x (B, m, D).
    template <expr X>
    static constexpr auto values(X x) { return split(project<"v.">(x)); }

    /// Queries from xq (B, n, D), keys and values from xkv (B, m, D) -> (B, n, D).
    template <expr Xq, expr Xkv, attention_mask Mask = no_mask>
    static constexpr auto cross(Xq xq, Xkv xkv, Mask mask = {}) {
        return attend(xq, xkv, xkv, mask);
    }
    /// Queries from xq (B, n, D), keys from xk (B, m, D) and values from xv (B, m, D) -> (B, n, D):
    /// PyTorch's nn.MultiheadAttention(query, key, value). cross(xq, m) is attend(xq, m, m).
    template <expr Xq, expr Xk, expr Xv, attention_mask Mask = no_mask>
    static constexpr auto attend(Xq xq, Xk xk, Xv xv, Mask mask = {}) {
        if constexpr (!(fits<Xq>() && fits<Xk>() && fits<Xv>())) return poison{};
        else return project<"proj.">(over_heads(project<"q.">(xq), project<"k.">(xk), project<"v.">(xv), mask));
    }
    /// Self-attention: queries, keys and values from x (B, n, D) -> (B, n, D).
    template <expr X, attention_mask Mask = no_mask>
    static constexpr auto self(X x, Mask mask = {}) { return cross(x, x, mask); }
    /// Self-attention over a prompt x (B, T, D) that also stores its keys and values (heads side by
    /// side) into the caches, keys (B, D, C) and values (B, C, D): the prefill of decoding with a KV cache.
    template <expr X, expr Kc, expr Vc, attention_mask Mask = no_mask>
    static constexpr auto self_prefill(X x, Kc kc, Vc vc, Mask mask = {}) {
        if constexpr (!fits<X>()) {
            return poison{};
        } else {
            auto k = cache_store<true>(project<"k.">(x), kc);
            auto v = cache_store(project<"v.">(x), vc);
            return project<"proj.">(over_heads(project<"q.">(x), k, v, mask));
        }
    }
    /// One decoding step: x (B, 1, D) at positions pos (B) appends its key and value to the caches
    /// and attends over them (causal by construction: the cache holds positions 0 .. pos).
    template <expr X, expr Kc, expr Vc, expr Pos>
    static constexpr auto self_step(X x, Kc kc, Vc vc, Pos pos) {
        static_assert(std::is_same_v<Score, scaled_dot_score>,
                      "ctg::nn::multi_head_attention: KV-cache decoding is implemented for the scaled-dot score");
        if constexpr (!fits<X>()) return poison{};
        else return project<"proj.">(cached_attention<Heads>(project<"q.">(x), project<"k.">(x),
                                                   project<"v.">(x), kc, vc, pos));
    }
    /// The weights (B, h, n, m) of cross(xq, xkv, mask): read them with prog.value_of(...).
    template <expr Xq, expr Xkv, attention_mask Mask = no_mask>
    static constexpr auto weights(Xq xq, Xkv xkv, Mask mask = {}) {
        if constexpr (!(fits<Xq>() && fits<Xkv>())) return poison{};
        else return attention_weights_over_heads<Heads>(project<"q.">(xq), project<"k.">(xkv), Score{}, mask);
    }

private:
    // Projection Name ("q.", ...) of x, as Adapt makes it: x <P><Name>weight + bias (+ an adapter).
    template <fixed_string Name, expr X>
    static constexpr auto project(X x) { return Adapt::template linear<P + Name, D, D>(x); }
    // The width and an input's last dimension (false for poison, whose error was said).
    template <expr X>
    static constexpr bool fits() {
        if constexpr (X::is_poison) return false;
        else return width_ok && detail::attention_input_fits<W_q::name, D, detail::last_dim<X>>();
    }
    template <expr X>
    static constexpr auto split(X x) {
        if constexpr (!width_ok) return poison{};
        else return split_heads<Heads>(x);
    }
    template <expr Q, expr K, expr V, attention_mask Mask>
    static constexpr auto over_heads(Q q, K k, V v, Mask mask) {
        if constexpr (!width_ok) return poison{};
        else return attention_over_heads<Heads>(q, k, v, Score{}, mask);
    }
};

}  // namespace ctg::nn
