// Compile benchmark program (bench/compile_bench.py --features): one GPT trained in float32 for a
// step, and each feature a program may ask for, one at a time, chosen by a macro, to measure what
// each costs at compile time (docs/compile-time.md, "What a feature costs"):
//   (none)            the base program
//   WITH_BF16         options{.precision = precision::bf16}: bf16 products
//   WITH_RECOMPUTE    options{.recompute = true}: the repeat's layers recomputed in backward
//   WITH_FROZEN       options{.frozen = "tok_embed blocks."}: frozen parameters
//   WITH_LORA         nn::lora adapters on the queries and values, only they train
//   WITH_KV_CACHE     nn::gpt_generator: the prefill and step programs over a KV cache
//   WITH_MPI          ctgraph/dist.hpp: the step through dist::data_parallel (one rank)
//   WITH_XTENSOR      ctgraph/xtensor.hpp: the loss read back through an xtensor view of the output
#include <cstdio>
#include <random>
#include <vector>

#include <ctgraph/ctgraph.hpp>
#if defined(WITH_MPI)
#include <ctgraph/dist.hpp>
#endif
#if defined(WITH_LORA)
#include <ctgraph/nn/lora.hpp>
#endif
#if defined(WITH_XTENSOR)
#include <ctgraph/xtensor.hpp>
#endif

using namespace ctg;
inline constexpr dim B = dyn('B'), T = dyn('T');
#if defined(WITH_LORA)
using model = nn::gpt<65, 64, 128, 4, 2, 512, void, 0.0, nn::lora<8, 16.0, "q.", "v.">>;
#else
using model = nn::gpt<65, 64, 128, 4, 2>;
#endif
#if defined(WITH_BF16)
constexpr options opt{.precision = precision::bf16};
#elif defined(WITH_RECOMPUTE)
constexpr options opt{.recompute = true};
#elif defined(WITH_FROZEN)
constexpr options opt{.frozen = "tok_embed blocks."};
#elif defined(WITH_LORA)
constexpr options opt{.trainable = "*lora_*"};
#else
constexpr options opt{};
#endif

int main(int argc, char** argv) {
#if defined(WITH_MPI)
    dist::environment env(argc, argv);
#else
    (void)argc, (void)argv;
#endif
    auto prog = compile<float, opt>(model::loss(index_input<"x", B, T>{}, index_input<"y", B, T>{}));
    auto adamw = optim::adamw<float>({.lr = 3e-4, .weight_decay = 0.1});
    prog.params().init(1);
    std::mt19937 rng(1);
    std::vector<index_t> x(4 * 32), y(4 * 32);
    for (auto& v : x) v = index_t(rng() % 65);
    for (auto& v : y) v = index_t(rng() % 65);
    prog.feed("x", x.data(), rshape{2, {4, 32}});
    prog.feed("y", y.data(), rshape{2, {4, 32}});
#if defined(WITH_MPI)
    dist::data_parallel<float> step(env.world(), prog);
    const float loss = step(prog, adamw, 0.0, 4);
#else
    prog.zero_grad();
    const float loss = prog.forward();
    prog.backward();
    adamw.step(prog.params());
#endif
    std::printf("loss %.4f\n", double(loss));
#if defined(WITH_XTENSOR)
    std::printf("loss again %.4f, tok_embed[0, 0] %.4f\n", double(prog.output()()), double(prog.param<"tok_embed">()(0, 0)));
#endif
#if defined(WITH_KV_CACHE)
    nn::gpt_generator<model> gen(prog.shared_params(), 1, 64);
    std::printf("token %d\n", int(gen.generate({{1, 2, 3}}, 8)[0][0]));
#endif
    return 0;
}
