// ctgraph/nn/seq2seq.hpp: a recurrent decoder that attends to the encoder's states at every step
// (Bahdanau, Cho and Bengio, 2015), built from primitives (backward generated, BPTT by scan).
//
//   c_t = sum_i a_{t,i} h_i,  a_t = masked softmax_i(score(s_{t-1}, h_i))      the context
//   s_t = Cell(s_{t-1}, [y_{t-1}; c_t])                                         the decoder state
//   out_t = [s_t; c_t]                                                          for the logits
//
//   using dec = nn::attention_decoder<nn::gru<"dec", E + M, H>, H, additive_score<"att_", H, M, A>, M>;
//   auto memory = permute<1, 0, 2>(encoder_states);          // (S, B, M) -> (B, S, M)
//   auto outs = dec::run(embedded_targets, memory, h0, key_padding(src_len));   // (T, B, H + M)
//
// H is the decoder's state width, M the memory's (H by default; 2H' for a bidirectional encoder of
// width H'). The scan's carried state is [s_t; c_t] (B, H + M), so run() returns what the logits
// need at every step; step() reads only its s part. Everything the step reads that does not change over time
// (the memory, its projection for an additive score, the lengths) is hoisted out of the loop by
// scan and computed once; its gradient flows back into the encoder.
#pragma once
#include "ctgraph/attention.hpp"
#include "ctgraph/graph/scan.hpp"
#include "ctgraph/ops/concat.hpp"
#include "ctgraph/ops/full.hpp"
#include "ctgraph/ops/matmul.hpp"
#include "ctgraph/ops/reshape.hpp"
#include "ctgraph/ops/slice.hpp"

namespace ctg::nn {

/// A decoder over Cell (state width H: nn::elman or nn::gru, input width E + M) attending with
/// Score (any ctg::score_for type; additive for Bahdanau) to memory (B, S, M).
template <class Cell, int H, class Score, int M = H>
struct attention_decoder {
    /// The attention weights (B, 1, S) of decoder state s (B, H) over memory (B, S, M).
    template <expr State, expr Memory, attention_mask Mask = no_mask>
    static constexpr auto weights(State s, Memory memory, Mask mask = {}) {
        constexpr dim b = State::shape::dims[0];
        return attention_weights(reshape<b, 1, H>(s), memory, Score{}, mask);
    }
    /// The context c (B, M) for decoder state s (B, H).
    template <expr State, expr Memory, attention_mask Mask = no_mask>
    static constexpr auto context(State s, Memory memory, Mask mask = {}) {
        constexpr dim b = State::shape::dims[0];
        return reshape<b, M>(matmul(weights(s, memory, mask), memory));
    }
    /// One step: carried [s; c] (B, H + M) and the previous target's embedding y (B, E) -> [s'; c'].
    template <expr Carried, expr Y, expr Memory, attention_mask Mask = no_mask>
    static constexpr auto step(Carried carried, Y y, Memory memory, Mask mask = {}) {
        auto s = slice<0, H>(carried);
        auto c = context(s, memory, mask);
        return concat(Cell::cell(s, concat(y, c)), c);
    }
    /// The initial carried state [h0; 0] (B, H + M) for decoder state h0 (B, H) (c_0 is never read:
    /// each step computes its own context).
    template <expr H0>
    static constexpr auto initial(H0 h0) {
        constexpr dim b = H0::shape::dims[0];
        return concat(h0, zeros<b, M>());
    }
    /// Teacher forcing over the target embeddings ys (T, B, E) from the initial state h0 (B, H):
    /// (T, B, H + M), row t = [s_t; c_t].
    template <expr Ys, expr Memory, expr H0, attention_mask Mask = no_mask>
    static constexpr auto run(Ys ys, Memory, H0 h0, Mask = {}) {
        return scan<H + M>([](auto carried, auto y) { return step(carried, y, Memory{}, Mask{}); }, ys, initial(h0));
    }
};

}  // namespace ctg::nn
