// Compile benchmark program (bench/compile_bench.py): a GPT trained with bf16 products (float
// weights and optimizer), then decoded with a bf16 KV cache.
#include <cstdio>
#include <random>
#include <vector>

#include <ctgraph/ctgraph.hpp>

using namespace ctg;
inline constexpr dim B = dyn('B'), T = dyn('T');
using model = nn::gpt<65, 64, 128, 4, 2>;

int main() {
    auto prog = compile<float, options{.precision = precision::bf16}>(
        model::loss(index_input<"x", B, T>{}, index_input<"y", B, T>{}));
    auto opt = optim::adamw<float>({.lr = 3e-4, .weight_decay = 0.1});
    prog.params().init(1);
    std::mt19937 rng(1);
    std::vector<index_t> x(4 * 32), y(4 * 32);
    float loss = 0;
    for (int step = 0; step < 3; ++step) {
        for (auto& v : x) v = index_t(rng() % 65);
        for (auto& v : y) v = index_t(rng() % 65);
        prog.feed("x", x.data(), rshape{2, {4, 32}});
        prog.feed("y", y.data(), rshape{2, {4, 32}});
        prog.zero_grad();
        loss = prog.forward();
        prog.backward();
        opt.step(prog.params());
    }
    nn::gpt_generator<model, float, precision::bf16> gen(prog.shared_params(), 2, 64);
    const auto tokens = gen.generate({{1, 2, 3}, {7}}, 16);
    std::printf("bf16: loss %.4f, first tokens %d %d\n", double(loss), int(tokens[0][0]), int(tokens[1][0]));
    return 0;
}
