// ctgraph/attention.hpp: the general attention O = softmax(score(Q, K) + M) V.
//
//   auto O = attention(Q, K, V);                                  scaled dot product, no mask
//   auto O = attention(Q, K, V, causal{});                        scaled dot product, causal
//   auto O = attention(Q, K, V, additive_score<"att_", D, D, 64>{}, key_padding(len));
//   auto P = attention_weights(Q, K, score, mask);                the (..., n, m) weights
//
// Shapes are row-major as in the seed: row i of Q is q_i^T. Q (..., n, d_q), K (..., m, d_k),
// V (..., m, d_v) -> O (..., n, d_v); the leading axes (batch, heads) are equal and every matrix
// is computed separately (heads are a batch axis: Q (B, h, n, d_h)). Cross-attention has Q from
// one sequence and K, V from another; self-attention all three from one.
//
// Scores are a customization point (the concept score_for below): the built-ins dot_score,
// scaled_dot_score, bilinear_score and additive_score, or any type with a static scores(q, k)
// written with ctgraph ops, whose backward is then generated:
//
//   struct cosine_score {   // S_ij = exp(t) cos(q_i, k_j), t learnable
//       static constexpr auto scores(auto q, auto k) {
//           return mul(matmul(l2_normalize(q), transpose(l2_normalize(k))), exp(param<"cos_t">{}));
//       }
//   };
//
// A score may also provide weights(q, k, mask), a fused equivalent of masked_softmax(scores(q, k),
// mask): the dot-product scores use ops/scaled_dot_weights.hpp, additive_score computes its scores
// with ops/additive_scores.hpp (a user's weights() must likewise be 0 where the mask hides a key).
// Masks: ops/masks.hpp. With a mask, the value product is ops/attention_values.hpp: P V computed
// only on the blocks of P whose rows may see their keys (a causal mask's lower triangle).
//
// Reading the weights after forward: the weights are a node like any other, and the same
// expression is the same node, so prog.value_of(attention_weights(Q, K, score, mask)) is the
// matrix the program's attention(Q, K, V, score, mask) used.
#pragma once
#include <type_traits>

#include "ctgraph/graph/node.hpp"
#include "ctgraph/ops/additive_scores.hpp"
#include "ctgraph/ops/add.hpp"
#include "ctgraph/ops/masked_softmax.hpp"
#include "ctgraph/ops/masks.hpp"
#include "ctgraph/ops/matmul.hpp"
#include "ctgraph/ops/scale.hpp"
#include "ctgraph/ops/attention_values.hpp"
#include "ctgraph/ops/scaled_dot_weights.hpp"
#include "ctgraph/ops/transpose.hpp"

namespace ctg {

namespace detail {
/// sqrt at compile time (Newton's method to a fixed point), for 1/sqrt(d_k).
constexpr double const_sqrt(double x) {
    if (x <= 0) return 0;
    double r = x > 1 ? x : 1;
    for (int i = 0; i < 200; ++i) {
        const double next = 0.5 * (r + x / r);
        if (next == r) break;
        r = next;
    }
    return r;
}
template <class Q, class K>
inline constexpr bool same_leading = [] {
    if (Q::rank != K::rank || Q::rank < 2) return false;
    for (std::size_t i = 0; i + 2 < Q::rank; ++i)
        if (!(Q::dims[i] == K::dims[i])) return false;
    return true;
}();
/// The scores' shape (..., n, m) for queries (..., n, d_q) and keys (..., m, d_k).
template <class Q, class K>
struct score_dims {
    static constexpr auto value = [] {
        auto r = Q::dims;
        r[Q::rank - 1] = K::dims[K::rank - 2];
        return r;
    }();
};
template <class Q, class K>
inline constexpr bool same_features = Q::rank >= 1 && K::rank >= 1 && Q::dims[Q::rank - 1] == K::dims[K::rank - 1];
}  // namespace detail

/// A score function for queries Q and keys K: a type S with
///   static auto scores(q, k)
/// taking queries (..., n, d_q) and keys (..., m, d_k) with equal leading axes and returning the
/// scores (..., n, m), S_ij = score(q_i, k_j), built from ctgraph ops (so its backward is
/// generated). Its parameters are param<> leaves it names; the same names are the same weights.
/// Optionally `static auto weights(q, k, mask)`, a fused masked_softmax(scores(q, k), mask).
template <class S, class Q, class K>
concept score_for = requires(Q q, K k) {
    { S::scores(q, k) } -> expr;
};

/// Luong's dot product: S = Q K^T.
struct dot_score {
    /// The scores Q K^T: (..., n, d) and (..., m, d) -> (..., n, m). Different d is a compile error.
    template <expr Q, expr K>
    static constexpr auto scores(Q q, K k) {
        static_assert(with_shapes<any_poison<Q, K> || detail::same_features<typename Q::shape, typename K::shape>,
                                  typename Q::shape::pretty, typename K::shape::pretty>::value,
                      "ctg::dot_score: queries and keys need the same feature size d_k");
        return matmul(q, transpose(k));
    }
    /// softmax(Q K^T + M) in one fused node (ctg::scaled_dot_weights).
    template <expr Q, expr K, attention_mask Mask>
    static constexpr auto weights(Q q, K k, Mask) {
        return detail::make_scaled_dot_weights<cval(1.0), Mask>(q, k, typename Mask::operands{});
    }
    /// The same per head, for queries (B, n, D) and keys (B, m, D) holding Heads heads side by side
    /// (nn::attention_over_heads): -> (B, Heads, n, m).
    template <int Heads, expr Q, expr K, attention_mask Mask>
    static constexpr auto head_weights(Q q, K k, Mask) {
        return detail::make_scaled_dot_weights<cval(1.0), Mask, Heads>(q, k, typename Mask::operands{});
    }
};

/// The Transformer's scaled dot product: S = Q K^T / sqrt(d_k).
struct scaled_dot_score {
    /// 1 / sqrt(d_k), d_k the queries' last dimension, or its share per head where Heads heads sit
    /// side by side in it (head_weights).
    template <class Q, int Heads = 1>
    static constexpr double factor = 1.0 / detail::const_sqrt(double(Q::shape::dims[Q::shape::rank - 1].n) / Heads);
    /// The scores Q K^T / sqrt(d_k): (..., n, d) and (..., m, d) -> (..., n, m). Different d is a compile error.
    template <expr Q, expr K>
    static constexpr auto scores(Q q, K k) {
        static_assert(with_shapes<any_poison<Q, K> || detail::same_features<typename Q::shape, typename K::shape>,
                                  typename Q::shape::pretty, typename K::shape::pretty>::value,
                      "ctg::scaled_dot_score: queries and keys need the same feature size d_k");
        return scale<factor<Q>>(matmul(q, transpose(k)));
    }
    /// softmax(Q K^T / sqrt(d_k) + M) in one fused node (ctg::scaled_dot_weights).
    template <expr Q, expr K, attention_mask Mask>
    static constexpr auto weights(Q q, K k, Mask) {
        return detail::make_scaled_dot_weights<cval(factor<Q>), Mask>(q, k, typename Mask::operands{});
    }
    /// The same per head, for queries (B, n, D) and keys (B, m, D) holding Heads heads side by side
    /// (nn::attention_over_heads): -> (B, Heads, n, m), each head's scores scaled by 1/sqrt(D / Heads).
    template <int Heads, expr Q, expr K, attention_mask Mask>
    static constexpr auto head_weights(Q q, K k, Mask) {
        return detail::make_scaled_dot_weights<cval(factor<Q, Heads>), Mask, Heads>(q, k, typename Mask::operands{});
    }
};

/// Bilinear: S_ij = q_i^T W k_j, i.e. S = Q W K^T, with W = param<Name, Dq, Dk>.
template <fixed_string Name, int Dq, int Dk>
struct bilinear_score {
    using W = param<Name, Dq, Dk>;  ///< the bilinear form's parameter (Dq, Dk)
    /// The scores Q W K^T: (..., n, Dq) and (..., m, Dk) -> (..., n, m).
    template <expr Q, expr K>
    static constexpr auto scores(Q q, K k) { return matmul(matmul(q, W{}), transpose(k)); }
    /// softmax(Q W K^T + M), the dot-product kernel on the projected queries Q W.
    template <expr Q, expr K, attention_mask Mask>
    static constexpr auto weights(Q q, K k, Mask mask) { return dot_score::weights(matmul(q, W{}), k, mask); }
};

/// Additive (Bahdanau) scores over given parameters: S_ij = w^T tanh(q_i W_q + k_j W_k + b), with
/// Wq (d_q, A), Wk (d_k, A), Bias (A) or void for none, and Wv = w (A). Computed by the fused
/// additive_scores (no n x m x A tensor in forward or backward). The bias joins the keys' side,
/// which a decoder projects once for all its steps.
template <class Wq, class Wk, class Bias, class Wv>
struct additive_score_of {
    /// The projected queries q W_q.
    template <expr Q>
    static constexpr auto queries_of(Q q) { return matmul(q, Wq{}); }
    /// The projected keys k W_k + b. A decoder attending to the same keys at every step computes
    /// them once, outside its loop (scan hoists them).
    template <expr K>
    static constexpr auto keys_of(K k) {
        if constexpr (std::is_void_v<Bias>) return matmul(k, Wk{}); else return matmul(k, Wk{}) + Bias{};
    }
    /// The scores w^T tanh(q_i W_q + k_j W_k + b): (..., n, d_q) and (..., m, d_k) -> (..., n, m).
    template <expr Q, expr K>
    static constexpr auto scores(Q q, K k) { return additive_scores(queries_of(q), keys_of(k), Wv{}); }
};

/// Additive scores with parameters named by a prefix: <P>W_q (Dq, A), <P>W_k (Dk, A), <P>b (A,
/// when HasBias) and <P>w (A).
template <fixed_string P, int Dq, int Dk, int A, bool HasBias = true>
struct additive_score
    : additive_score_of<param<P + fixed_string("W_q"), Dq, A>, param<P + fixed_string("W_k"), Dk, A>,
                        std::conditional_t<HasBias, param<P + fixed_string("b"), A>, void>, param<P + fixed_string("w"), A>> {
    using w = param<P + fixed_string("w"), A>;  ///< the scoring vector <P>w (A)
};

/// The attention weights softmax(score(Q, K) + M): (..., n, m). See the file comment.
template <expr Q, expr K, class Score = scaled_dot_score, attention_mask Mask = no_mask>
    requires(!attention_mask<Score>)
constexpr auto attention_weights(Q q, K k, Score = {}, Mask mask = {}) {
    static_assert(with_shapes<any_poison<Q, K> || detail::same_leading<typename Q::shape, typename K::shape>,
                              typename Q::shape::pretty, typename K::shape::pretty>::value,
                  "ctg::attention: queries (..., n, d_q) and keys (..., m, d_k) need the same rank and the same "
                  "leading dimensions");
    if constexpr (any_poison<Q, K> || !detail::same_leading<typename Q::shape, typename K::shape>) {
        return poison{};
    } else if constexpr (requires { Score::weights(q, k, mask); }) {  // a fused path: its own checks
        return Score::weights(q, k, mask);
    } else {
        static_assert(score_for<Score, Q, K>,
                      "ctg::attention: the score type must provide static scores(q, k) returning the scores (..., n, "
                      "m) of queries (..., n, d_q) and keys (..., m, d_k) (see ctg::score_for)");
        if constexpr (!score_for<Score, Q, K>) {
            return poison{};
        } else {
            auto s = Score::scores(q, k);
            using S = decltype(s);
            using want = shape_from<detail::score_dims<typename Q::shape, typename K::shape>>;
            constexpr bool fits = S::is_poison || std::is_same_v<typename S::shape, want>;
            static_assert(with_shapes<fits, typename S::shape::pretty, typename want::pretty>::value,
                          "ctg::attention: a score function must return (..., n, m) for queries (..., n, d_q) and "
                          "keys (..., m, d_k)");
            if constexpr (!fits) return poison{};  // said once, here: not again by the ops it would feed
            else return masked_softmax(s, mask);
        }
    }
}

/// O = softmax(score(Q, K) + M) V: (..., n, d_v). See the file comment.
template <expr Q, expr K, expr V, class Score = scaled_dot_score, attention_mask Mask = no_mask>
    requires(!attention_mask<Score>)
constexpr auto attention(Q q, K k, V v, Score score = {}, Mask mask = {}) {
    constexpr bool kv_ok = any_poison<K, V> || (detail::same_leading<typename K::shape, typename V::shape> &&
                                                K::shape::dims[K::shape::rank - 2] == V::shape::dims[V::shape::rank - 2]);
    static_assert(with_shapes<kv_ok, typename K::shape::pretty, typename V::shape::pretty>::value,
                  "ctg::attention: keys (..., m, d_k) and values (..., m, d_v) need the same leading dimensions and "
                  "the same length m");
    if constexpr (!kv_ok) return poison{};
    else if constexpr (std::is_same_v<Mask, no_mask>) return matmul(attention_weights(q, k, score, mask), v);
    else return detail::make_attention_values<Mask>(attention_weights(q, k, score, mask), v, typename Mask::operands{});
}
/// Scaled dot-product attention with a mask: attention(Q, K, V, causal{}).
template <expr Q, expr K, expr V, attention_mask Mask>
constexpr auto attention(Q q, K k, V v, Mask mask) {
    return attention(q, k, v, scaled_dot_score{}, mask);
}
/// The weights of scaled dot-product attention with a mask.
template <expr Q, expr K, attention_mask Mask>
constexpr auto attention_weights(Q q, K k, Mask mask) {
    return attention_weights(q, k, scaled_dot_score{}, mask);
}

}  // namespace ctg
