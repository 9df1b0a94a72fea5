// A GPT whose width is not a multiple of its number of heads, trained by ctg::trainer and then
// generating text with a KV cache: one error, the width's, however many of the attention's entry
// points (training, prefill, decoding step; float and bf16 caches) the program instantiates.
// NO_PCH: clang (clang 14 crashes instantiating repeat from a precompiled header)
// EXPECT: ctg::nn::multi_head_attention: the width must be a multiple of the number of heads
#include <cstdio>
#include <random>

#include <ctgraph/ctgraph.hpp>
#include <ctgraph/train.hpp>
using namespace ctg;
inline constexpr dim B = dyn('B'), T = dyn('T');
using model = nn::gpt<65, 64, 30, 4, 2>;  // width 30, 4 heads
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
    nn::gpt_generator<model, float, precision::bf16> gen16(prog.shared_params(), 2, 64);
    const auto greedy = gen16.generate({{1, 2, 3}}, 20);
    std::printf("%zu and %zu tokens, %zu and %zu cache bytes\n", tokens[0].size(), greedy[0].size(), gen.cache_bytes(),
                gen16.cache_bytes());
}
