// Compile benchmark program (bench/compile_bench.py): a user's GPT, trained in float64 and in
// float32 with AdamW, then decoded with the KV cache in both precisions. What a user writes to try
// a model: nothing here asks for bf16, recomputation, frozen parameters, adapters or MPI.
#include <cstdio>
#include <random>
#include <vector>

#include <ctgraph/ctgraph.hpp>

using namespace ctg;
inline constexpr dim B = dyn('B'), T = dyn('T');
using model = nn::gpt<65, 64, 128, 4, 2>;

template <class F>
double train_and_decode(unsigned seed) {
    auto prog = compile<F>(model::loss(index_input<"x", B, T>{}, index_input<"y", B, T>{}));
    auto opt = optim::adamw<F>({.lr = 3e-4, .weight_decay = 0.1});
    prog.params().init(seed);
    std::mt19937 rng(seed);
    std::vector<index_t> x(4 * 32), y(4 * 32);
    F loss = 0;
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
    nn::gpt_generator<model, F> gen(prog.shared_params(), 2, 64);
    const auto tokens = gen.generate({{1, 2, 3}, {7}}, 16);
    std::printf("%s: loss %.4f, first tokens %d %d\n", sizeof(F) == 8 ? "float64" : "float32", double(loss),
                int(tokens[0][0]), int(tokens[1][0]));
    return double(loss);
}

int main() {
    train_and_decode<double>(1);
    train_and_decode<float>(1);
    return 0;
}
