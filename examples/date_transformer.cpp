// Date normalisation with an encoder-decoder Transformer: the task of date_normalize (Bahdanau
// attention over a GRU encoder), solved with attention alone. Encoder: character embedding +
// sinusoidal positions, 2 pre-norm blocks (self-attention under the source's padding mask, GELU
// FFN), one ctg::repeat. Decoder: 2 pre-norm blocks (causal self-attention, cross-attention to the
// encoder's output under the same padding mask, FFN), final norm, linear head. Teacher forcing in
// training; greedy decoding recomputes the decoder over the prefix (11 output characters).
//
//   date_transformer [steps] [required exact match]
//
// Exits non-zero when the held-out exact match ends below the required fraction (default 0.99).
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <string>
#include <vector>

#include <ctgraph/ctgraph.hpp>
#include <ctgraph/xtensor.hpp>

#include "dates.hpp"

using namespace ctg;
using dates::example;

namespace {

constexpr int D = 64, Heads = 4, F = 128, Layers = 2;
inline constexpr dim B = dyn('B'), Sd = dyn('S'), Td = dyn('T');
using Src = index_input<"src", B, Sd>;       // batch-major, 0 = padding
using SrcLen = index_input<"src_len", B>;
using TgtIn = index_input<"tgt_in", B, Td>;  // <sos> y_1 .. y_{T-1}
using TgtOut = index_input<"tgt_out", B, Td>;
using Memory = input<"memory", B, Sd, D>;    // the encoder's output, fed to the decoding program

using enc_block = nn::encoder_block<"", D, Heads, F>;
using dec_block = nn::decoder_block<"", D, Heads, F>;

constexpr auto encode_source() {
    auto x = sinusoidal_positions<32>(embedding(param<"src_embed", dates::Vs, D>{}, Src{}));
    auto h = repeat<Layers, "enc.">([](auto a) { return enc_block{}(a, key_padding(SrcLen{})); }, x);
    return nn::layer_norm<"enc_ln.", D>{}(h);
}
template <expr Mem>
constexpr auto decoder_logits(Mem memory) {
    auto y = sinusoidal_positions<16>(embedding(param<"tgt_embed", dates::Vt, D>{}, TgtIn{}));
    // The memory is an argument of repeat: every layer reads it, its parameters stay the encoder's.
    auto h = repeat<Layers, "dec.">([](auto a, auto mem) { return dec_block{}(a, mem, no_mask{}, key_padding(SrcLen{})); },
                                    y, memory);
    return nn::linear<"head.", D, dates::Vt>{}(nn::layer_norm<"dec_ln.", D>{}(h));
}
[[maybe_unused]] constexpr auto training_loss() { return softmax_cross_entropy(decoder_logits(encode_source()), TgtOut{}); }

using train_program = decltype(compile<float>(training_loss()));
using encoder_program = decltype(compile<float, options{.inference = true}>(encode_source()));
using decoder_program = decltype(compile<float, options{.inference = true}>(decoder_logits(Memory{})));

struct batch_data {
    std::vector<index_t> src, len, tgt_in, tgt_out;  // src (B, S), targets (B, T): batch-major
    std::size_t n = 0, s = 0;
};
batch_data encode(const std::vector<example>& ex) {
    batch_data b;
    b.n = ex.size();
    for (const auto& e : ex) b.s = std::max(b.s, e.in.size());
    b.src.assign(b.s * b.n, 0);
    b.len.resize(b.n);
    b.tgt_in.resize(dates::T * b.n);
    b.tgt_out.resize(dates::T * b.n);
    for (std::size_t i = 0; i < b.n; ++i) {
        b.len[i] = index_t(ex[i].in.size());
        for (std::size_t t = 0; t < ex[i].in.size(); ++t) b.src[i * b.s + t] = dates::src_id(ex[i].in[t]);
        for (std::size_t t = 0; t < std::size_t(dates::T); ++t) {
            b.tgt_in[i * dates::T + t] = t == 0 ? dates::sos : dates::tgt_id(ex[i].out[t - 1]);
            b.tgt_out[i * dates::T + t] = t + 1 == std::size_t(dates::T) ? dates::eos : dates::tgt_id(ex[i].out[t]);
        }
    }
    return b;
}

struct models {
    train_program train;
    encoder_program enc{train.shared_params()};
    decoder_program dec{train.shared_params()};

    template <class P>
    static void feed_source(P& prog, const batch_data& b) {
        if constexpr (P::template has_input<"src">) prog.feed("src", b.src.data(), rshape{2, {b.n, b.s}});
        prog.feed("src_len", b.len.data(), rshape{1, {b.n}});
    }
    /// Greedy decoding: the encoder once, then the decoder over the growing prefix.
    std::vector<std::string> greedy(const batch_data& b) {
        feed_source(enc, b);
        enc.forward();
        dec.feed<"memory">(enc.output<0>());
        feed_source(dec, b);
        std::vector<index_t> prefix(b.n, dates::sos), next(b.n);
        std::vector<std::string> out(b.n);
        std::vector<bool> done(b.n, false);
        for (std::size_t t = 1; t <= std::size_t(dates::T); ++t) {
            dec.feed("tgt_in", prefix.data(), rshape{2, {b.n, t}});
            dec.forward();
            auto logits = dec.output<0>();  // (B, t, Vt): the last position predicts the next token
            std::vector<index_t> grown(b.n * (t + 1));
            for (std::size_t i = 0; i < b.n; ++i) {
                int best = 0;
                for (int v = 1; v < dates::Vt; ++v)
                    if (logits(i, t - 1, v) > logits(i, t - 1, best)) best = v;
                if (best == dates::eos) done[i] = true;
                if (!done[i]) out[i] += dates::tgt_char(best);
                std::copy(prefix.begin() + long(i * t), prefix.begin() + long((i + 1) * t), grown.begin() + long(i * (t + 1)));
                grown[i * (t + 1) + t] = best;
            }
            prefix.swap(grown);
        }
        return out;
    }
};

}  // namespace

int main(int argc, char** argv) try {
    const int steps = argc > 1 ? std::stoi(argv[1]) : 1200;
    const double required = argc > 2 ? std::stod(argv[2]) : 0.99;
    constexpr std::size_t batch = 64;

    dates::task data(1000);
    const std::vector<example>& test = data.test;
    dates::task::describe();

    models m;
    m.train.params().init(7);
    optim::adam<float> opt = optim::adamw<float>({.lr = 2e-3, .weight_decay = 0.01});
    const optim::warmup_cosine_lr schedule{2e-3, 100, steps, 2e-5};
    auto match = [&] { return dates::exact_match(test, [&](const std::vector<example>& part) { return m.greedy(encode(part)); }); };
    const auto feed = [&](const std::vector<example>& ex) {
        const batch_data b = encode(ex);
        models::feed_source(m.train, b);
        m.train.feed("tgt_in", b.tgt_in.data(), rshape{2, {b.n, std::size_t(dates::T)}});
        m.train.feed("tgt_out", b.tgt_out.data(), rshape{2, {b.n, std::size_t(dates::T)}});
    };
    const double acc = dates::train(data, steps, batch, m.train, opt, schedule, feed, match);
    const std::vector<example> few(test.begin(), test.begin() + 4);
    const auto got = m.greedy(encode(few));
    for (std::size_t k = 0; k < few.size(); ++k) std::printf("  %-26s -> %s\n", few[k].in.c_str(), got[k].c_str());
    return acc >= required ? 0 : 1;
} catch (const ctg::error& e) {
    std::fprintf(stderr, "error: %s\n", e.what());
    return 2;
}
