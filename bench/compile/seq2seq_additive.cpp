// Compile benchmark program (bench/compile_bench.py): a Seq2Seq model with Bahdanau (additive)
// attention: a bidirectional GRU encoder over padded sources, a GRU decoder attending to its
// states at every step, trained with teacher forcing, then one greedy decoding step program.
#include <cstdio>
#include <random>
#include <vector>

#include <ctgraph/ctgraph.hpp>

using namespace ctg;
inline constexpr dim B = dyn('B'), S = dyn('S'), T = dyn('T');
constexpr int V = 20, E = 16, He = 32, M = 2 * He, H = 64, A = 32;
using encoder = nn::bidirectional<nn::gru<"enc_f", E, He>, nn::gru<"enc_b", E, He>>;
using score = additive_score<"att_", H, M, A>;
using decoder = nn::attention_decoder<nn::gru<"dec", E + M, H>, H, score, M>;
using Src = index_input<"src", S, B>;
using SrcLen = index_input<"src_len", B>;
using W_out = param<"out_W", H + M, V>;
using b_out = param<"out_b", V>;

constexpr auto encode() {
    auto hs = encoder::run(embedding(param<"src_embed", V, E>{}, Src{}), SrcLen{});  // (S, B, 2 He)
    auto last = concat(slice<0, He>(at_time<-1>(hs)), slice<He, 2 * He>(at_time<0>(hs)));
    return std::pair{permute<1, 0, 2>(hs), tanh(last * param<"init_W", M, H>{} + param<"init_b", H>{})};
}
constexpr auto tgt_embed(auto ids) { return embedding(param<"tgt_embed", V, E>{}, ids); }
constexpr auto loss() {
    auto [memory, h0] = encode();
    auto outs = decoder::run(tgt_embed(index_input<"tgt_in", T, B>{}), memory, h0, key_padding(SrcLen{}));
    return softmax_cross_entropy(outs * W_out{} + b_out{}, index_input<"tgt_out", T, B>{});
}
using Memory = input<"memory", B, S, M>;
using Carried = input<"state", B, H + M>;
constexpr auto next_state() {
    return decoder::step(Carried{}, tgt_embed(index_input<"token", B>{}), Memory{}, key_padding(SrcLen{}));
}

int main() {
    auto train = compile<float>(loss());
    auto step = compile<float, options{.inference = true}>(next_state(), next_state() * W_out{} + b_out{});
    train.params().init(4);
    optim::adam<float> opt({.lr = 1e-3});
    std::mt19937 rng(5);
    const std::size_t n = 6, s = 9, t = 7;
    std::vector<index_t> src(s * n), len(n), tin(t * n), tout(t * n);
    for (int it = 0; it < 3; ++it) {
        for (auto& v : src) v = index_t(rng() % V);
        for (auto& v : len) v = index_t(4 + rng() % 6);
        for (auto& v : tin) v = index_t(rng() % V);
        for (auto& v : tout) v = index_t(rng() % V);
        train.feed("src", src.data(), rshape{2, {s, n}});
        train.feed("src_len", len.data(), rshape{1, {n}});
        train.feed("tgt_in", tin.data(), rshape{2, {t, n}});
        train.feed("tgt_out", tout.data(), rshape{2, {t, n}});
        train.zero_grad();
        const float l = train.forward();
        train.backward();
        opt.step(train.params());
        std::printf("step %d loss %.4f\n", it, double(l));
    }
    step.params() = train.params();
    std::vector<float> memory(n * s * std::size_t(M)), state(n * std::size_t(H + M));
    std::vector<index_t> token(n, 1);
    step.feed("memory", memory.data(), rshape{3, {n, s, std::size_t(M)}});
    step.feed("state", state.data(), rshape{2, {n, std::size_t(H + M)}});
    step.feed("token", token.data(), rshape{1, {n}});
    step.feed("src_len", len.data(), rshape{1, {n}});
    step.forward();
    // Headers older than <ctgraph/xtensor.hpp> (bench/compile_bench.py --against) had views only.
#if __has_include(<ctgraph/xtensor.hpp>)
    const float first_logit = step.template output_data<1>()[0];
#else
    const float first_logit = step.template output<1>()(0, 0);
#endif
    std::printf("first logit %.4f\n", double(first_logit));
    return 0;
}
