// A GPT-like model whose output layer reads the wrong width, trained and then generating with a KV
// cache: the layer is applied in three graphs (the training loss, the generator's prefill and its
// one-token step, on inputs (B,T,32), (B,T,32) and (B,1,32)), and the mistake is one error, said
// by nn::linear for its weight and the one size it compares.
// NO_PCH: clang (clang 14 crashes instantiating repeat from a precompiled header)
// EXPECT: ctg::nn::linear: the input \(..., in\) must end in the weight's row count \(in, out\)
// EXPECT: (fixed_string<12>{"head.weight"}|{{104, 101, 97, 100, 46, 119, 101, 105, 103, 104, ...}}).*shape_is<32>, ctg::shape_is<48, 65>
#include <cstdio>
#include <random>

#include <ctgraph/ctgraph.hpp>
#include <ctgraph/train.hpp>
using namespace ctg;
inline constexpr dim B = dyn('B'), T = dyn('T');
struct model {
    static constexpr int vocab = 65, max_len = 64, width = 32, heads = 4, layers = 2;
    using base = nn::gpt<65, 64, 32, 4, 2>;
    using head = nn::linear<"head.", 48, 65>;  // 48: the model is 32 wide
    template <expr Tokens>
    static constexpr auto loss(Tokens tokens, auto targets) {
        return softmax_cross_entropy(head{}(base::hidden(tokens)), targets);
    }
    template <expr Tokens, expr Kc, expr Vc>
    static constexpr auto prefill_logits(Tokens tokens, Kc kc, Vc vc) {
        auto x = sinusoidal_positions<64>(embedding(base::tok_embed{}, tokens));
        auto h = repeat<2, "blocks.">([](auto a, auto k, auto v) { return base::block{}.prefill(a, k, v, causal{}); }, x,
                                      per_layer(kc), per_layer(vc));
        return head{}(base::ln_f{}(h));
    }
    template <expr Token, expr Pos, expr Kc, expr Vc>
    static constexpr auto step_logits(Token token, Pos pos, Kc kc, Vc vc) {
        auto x = sinusoidal_positions<64>(embedding(base::tok_embed{}, token), pos);
        auto h = repeat<2, "blocks.">([](auto a, auto k, auto v, auto p) { return base::block{}.step(a, k, v, p); }, x,
                                      per_layer(kc), per_layer(vc), pos);
        return head{}(base::ln_f{}(h));
    }
};
int main() {
    auto prog = compile<float>(model::loss(index_input<"tokens", B, T>{}, index_input<"targets", B, T>{}));
    prog.params().init(1);
    optim::adam<float> opt({.lr = 3e-4});
    token_windows data(std::vector<index_t>(1000, 1), 32);
    trainer training(prog, opt, {.batch = 8, .epochs = 1});
    training.fit(data, data);
    nn::gpt_generator<model> gen(prog.shared_params(), 2, 64);
    std::mt19937_64 rng(0);
    const auto tokens = gen.generate({{1, 2, 3}}, 20, nn::sampling{.top_k = 0, .temperature = 0.8}, rng);
    std::printf("%zu tokens\n", tokens[0].size());
}
