// examples/date_model.hpp: the model of date_normalize (a bidirectional GRU encoder, a GRU decoder
// with additive attention), its batches and its three programs (training; encoder and one decoding
// step, inference), shared with onnx_export, which exports the two inference programs.
#pragma once
#include <algorithm>
#include <random>
#include <string>
#include <vector>

#include <xtensor/xview.hpp>

#include <ctgraph/ctgraph.hpp>
#include <ctgraph/xtensor.hpp>

#include "dates.hpp"

namespace date_model {
using namespace ctg;
using namespace dates;

// ---------------------------------------------------------------------------- batches
struct batch_data {
    std::vector<index_t> src, len, tgt_in, tgt_out;  // src (S, B), len (B), targets (T, B): time-major
    std::size_t n = 0;
};
batch_data encode(const std::vector<example>& ex) {
    batch_data b;
    b.n = ex.size();
    b.src.assign(S * b.n, 0);
    b.len.resize(b.n);
    b.tgt_in.resize(T * b.n);
    b.tgt_out.resize(T * b.n);
    for (std::size_t i = 0; i < b.n; ++i) {
        b.len[i] = index_t(ex[i].in.size());
        for (std::size_t t = 0; t < ex[i].in.size(); ++t) b.src[t * b.n + i] = src_id(ex[i].in[t]);
        for (std::size_t t = 0; t < std::size_t(T); ++t) {
            b.tgt_in[t * b.n + i] = t == 0 ? sos : tgt_id(ex[i].out[t - 1]);
            b.tgt_out[t * b.n + i] = t + 1 == std::size_t(T) ? eos : tgt_id(ex[i].out[t]);
        }
    }
    return b;
}

// ---------------------------------------------------------------------------- model
constexpr int E = 32, He = 64, H = 128, M = 2 * He, A = 64, Et = 16;
inline constexpr dim B = dyn('B');
inline constexpr dim Sd = dyn('S');
inline constexpr dim Td = dyn('T');
using Src = index_input<"src", Sd, B>;
using SrcLen = index_input<"src_len", B>;
using encoder = nn::bidirectional<nn::gru<"enc_f", E, He>, nn::gru<"enc_b", E, He>>;
using score = additive_score<"att_", H, M, A>;
using decoder = nn::attention_decoder<nn::gru<"dec", Et + M, H>, H, score, M>;
using W_out = param<"out_W", H + M, Vt>;
using b_out = param<"out_b", Vt>;
using W_init = param<"init_W", M, H>;
using b_init = param<"init_b", H>;

/// Encoder states, batch-major (B, S, 2 He), and the decoder's first state h0 = tanh([fwd_last; bwd_first] W + b).
constexpr auto encode_source() {
    auto hs = encoder::run(embedding(param<"src_embed", Vs, E>{}, Src{}), SrcLen{});  // (S, B, 2 He)
    auto last = concat(slice<0, He>(at_time<-1>(hs)), slice<He, 2 * He>(at_time<0>(hs)));
    return std::pair{permute<1, 0, 2>(hs), tanh(last * W_init{} + b_init{})};
}
constexpr auto tgt_embed(auto ids) { return embedding(param<"tgt_embed", Vt, Et>{}, ids); }

[[maybe_unused]] constexpr auto training_loss() {
    auto [memory, h0] = encode_source();
    auto outs = decoder::run(tgt_embed(index_input<"tgt_in", Td, B>{}), memory, h0, key_padding(SrcLen{}));
    return softmax_cross_entropy(outs * W_out{} + b_out{}, index_input<"tgt_out", Td, B>{});
}
// Decoding: the encoder once per batch, then one step per output character.
using Memory = input<"memory", B, Sd, M>;
using Carried = input<"state", B, H + M>;
using Token = index_input<"token", B>;
constexpr auto next_state() { return decoder::step(Carried{}, tgt_embed(Token{}), Memory{}, key_padding(SrcLen{})); }
[[maybe_unused]] constexpr auto next_logits() { return next_state() * W_out{} + b_out{}; }
[[maybe_unused]] constexpr auto step_weights() { return decoder::weights(slice<0, H>(Carried{}), Memory{}, key_padding(SrcLen{})); }

using train_program = decltype(compile<float>(training_loss()));
using encoder_program = decltype(compile<float, options{.inference = true}>(encode_source().first, encode_source().second));
using step_program = decltype(compile<float, options{.inference = true}>(next_state(), next_logits(), step_weights()));

struct models {
    train_program train;
    encoder_program enc{train.shared_params()};
    step_program step{train.shared_params()};

    void feed_source(const batch_data& b, auto& prog) {
        prog.feed("src", b.src.data(), rshape{2, {std::size_t(S), b.n}});
        prog.feed("src_len", b.len.data(), rshape{1, {b.n}});
    }
    /// Encodes the batch and readies the step program: returns the initial carried state [h0; 0].
    xt::xtensor<float, 2> start(const batch_data& b) {
        feed_source(b, enc);
        enc.forward();
        step.feed<"memory">(enc.output<0>());
        step.feed("src_len", b.len.data(), rshape{1, {b.n}});
        xt::xtensor<float, 2> carried = xt::zeros<float>({b.n, std::size_t(H + M)});
        xt::view(carried, xt::all(), xt::range(0, H)) = enc.output<1>();
        return carried;
    }
    /// Greedy decoding (top_k = 1), or sampling among the top_k at a temperature.
    std::vector<std::string> decode(const batch_data& b, nn::sampling how = {}, unsigned long long seed = 0) {
        std::mt19937_64 rng(seed);
        const auto ids = nn::decode<"token", "state">(step, start(b), sos, eos, T + 2, how, rng);
        std::vector<std::string> out;
        for (const auto& seq : ids) {
            std::string s;
            for (int id : seq) s += tgt_char(id);
            out.push_back(s);
        }
        return out;
    }
    /// Greedy decoding of one input, keeping the attention weights of every step (rows: outputs).
    std::pair<std::string, std::vector<double>> align(const std::string& in) {
        const batch_data b = encode({{in, std::string(10, '0')}});
        auto carried = start(b);
        xt::xtensor<int, 1> tok = {sos};
        std::string out;
        std::vector<double> w;
        for (int t = 0; t < T; ++t) {
            step.feed<"token">(tok);
            step.feed<"state">(carried);
            step.forward();
            auto att = step.output<2>();  // (1, 1, S)
            auto logits = step.output<1>();
            const int next = int(std::max_element(logits.begin(), logits.end()) - logits.begin());
            if (next == eos) break;
            for (std::size_t j = 0; j < in.size(); ++j) w.push_back(att(0, 0, j));
            out += tgt_char(next);
            carried = step.output<0>();
            tok(0) = next;
        }
        return {out, w};
    }
};

}  // namespace date_model
