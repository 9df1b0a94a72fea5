// Compile benchmark program (bench/compile_bench.py): a bidirectional two-layer LSTM tagger over
// padded sequences (PyTorch's nn.LSTM(bidirectional=True, num_layers=2) over a PackedSequence),
// trained in float64 with Adam.
#include <cstdio>
#include <random>
#include <vector>

#include <ctgraph/ctgraph.hpp>

using namespace ctg;
inline constexpr dim B = dyn('B'), T = dyn('T');
constexpr int V = 50, E = 24, H = 32, Tags = 5;
using lstm = nn::stacked_recurrent<nn::bidirectional<nn::lstm<"f0", E, H>, nn::lstm<"b0", E, H>>,
                                   nn::bidirectional<nn::lstm<"f1", 2 * H, H>, nn::lstm<"b1", 2 * H, H>>>;
using Tokens = index_input<"tokens", T, B>;
using Lengths = index_input<"lengths", B>;

constexpr auto logits() {
    auto hs = lstm::run(embedding(param<"embed", V, E>{}, Tokens{}), Lengths{});  // (T, B, 2H)
    return hs * param<"out.weight", 2 * H, Tags>{} + param<"out.bias", Tags>{};
}

int main() {
    auto train = compile<double>(softmax_cross_entropy(logits(), index_input<"tags", T, B>{}));
    train.params().init(6);
    optim::adam<double> opt({.lr = 1e-3});
    std::mt19937 rng(7);
    const std::size_t n = 5, t = 12;
    std::vector<index_t> tokens(t * n), tags(t * n), lengths(n);
    for (int it = 0; it < 3; ++it) {
        for (auto& v : tokens) v = index_t(rng() % V);
        for (auto& v : tags) v = index_t(rng() % Tags);
        for (auto& v : lengths) v = index_t(3 + rng() % 10);
        train.feed("tokens", tokens.data(), rshape{2, {t, n}});
        train.feed("tags", tags.data(), rshape{2, {t, n}});
        train.feed("lengths", lengths.data(), rshape{1, {n}});
        train.zero_grad();
        const double l = train.forward();
        train.backward();
        opt.step(train.params());
        std::printf("step %d loss %.4f\n", it, l);
    }
    return 0;
}
