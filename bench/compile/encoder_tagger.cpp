// Compile benchmark program (bench/compile_bench.py): a token tagger over a stack of Transformer
// encoder blocks (PyTorch's nn.TransformerEncoder with post-norm and ReLU, key padding), trained
// with Adam and run for inference.
#include <cstdio>
#include <random>
#include <vector>

#include <ctgraph/ctgraph.hpp>

using namespace ctg;
inline constexpr dim B = dyn('B'), T = dyn('T');
constexpr int V = 100, D = 64, Heads = 4, F = 128, Tags = 9, Layers = 2;
using block = nn::encoder_block<"", D, Heads, F, nn::norm_placement::post, nn::activation::relu>;
using Tokens = index_input<"tokens", B, T>;
using Lengths = index_input<"lengths", B>;

constexpr auto logits() {
    auto x = embedding(param<"embed", V, D>{}, Tokens{});
    auto h = repeat<Layers, "layers.">([](auto a, auto len) { return block{}(a, key_padding(len)); }, x, Lengths{});
    return h * param<"tag.weight", D, Tags>{} + param<"tag.bias", Tags>{};
}

int main() {
    auto train = compile<float>(softmax_cross_entropy(logits(), index_input<"tags", B, T>{}));
    auto tag = program_for<float, options{.inference = true}, decltype(logits())>(train.shared_params());
    train.params().init(2);
    optim::adam<float> opt({.lr = 1e-3});
    std::mt19937 rng(3);
    std::vector<index_t> tokens(8 * 20), tags(8 * 20), lengths(8);
    for (int step = 0; step < 3; ++step) {
        for (auto& v : tokens) v = index_t(rng() % V);
        for (auto& v : tags) v = index_t(rng() % Tags);
        for (auto& v : lengths) v = index_t(10 + rng() % 11);
        train.feed("tokens", tokens.data(), rshape{2, {8, 20}});
        train.feed("tags", tags.data(), rshape{2, {8, 20}});
        train.feed("lengths", lengths.data(), rshape{1, {8}});
        train.zero_grad();
        const float loss = train.forward();
        train.backward();
        opt.step(train.params());
        std::printf("step %d loss %.4f\n", step, double(loss));
    }
    tag.feed("tokens", tokens.data(), rshape{2, {8, 20}});
    tag.feed("lengths", lengths.data(), rshape{1, {8}});
    tag.forward();
    // Headers older than <ctgraph/xtensor.hpp> (bench/compile_bench.py --against) had views only.
#if __has_include(<ctgraph/xtensor.hpp>)
    const float first_logit = tag.output_data()[0];
#else
    const float first_logit = tag.output()(0, 0, 0);
#endif
    std::printf("first logit %.4f\n", double(first_logit));
    return 0;
}
