// One GPT training program (nn::gpt: forward, loss, backward, AdamW step) and nothing else: the
// translation unit whose compile time and peak compiler memory docs/compile-time.md reports for the
// gpt-s and gpt-m workloads (scripts/gpt_compile_time.py builds it with each compiler). Sizes come
// from the command line; the defaults are gpt-s.
//   -DGPT_CONTEXT=256 -DGPT_WIDTH=384 -DGPT_HEADS=6 -DGPT_LAYERS=4   (gpt-m)
#include <cstdio>
#include <random>
#include <vector>

#include <ctgraph/ctgraph.hpp>

#ifndef GPT_CONTEXT
#define GPT_CONTEXT 64
#endif
#ifndef GPT_WIDTH
#define GPT_WIDTH 128
#endif
#ifndef GPT_HEADS
#define GPT_HEADS 4
#endif
#ifndef GPT_LAYERS
#define GPT_LAYERS 2
#endif

using namespace ctg;
inline constexpr dim B = dyn('B'), T = dyn('T');
using model = nn::gpt<65, GPT_CONTEXT, GPT_WIDTH, GPT_HEADS, GPT_LAYERS>;

int main() {
    auto prog = compile<float>(model::loss(index_input<"x", B, T>{}, index_input<"y", B, T>{}));
    auto opt = optim::adamw<float>({.lr = 3e-4, .weight_decay = 0.1});
    prog.params().init(1);
    std::mt19937 rng(2);
    std::vector<index_t> x(2 * 16), y(2 * 16);
    for (auto& v : x) v = index_t(rng() % 65);
    for (auto& v : y) v = index_t(rng() % 65);
    prog.feed("x", x.data(), rshape{2, {2, 16}});
    prog.feed("y", y.data(), rshape{2, {2, 16}});
    const float loss = prog.forward();
    prog.backward();
    opt.step(prog.params());
    std::printf("%d layers, loss %.4f\n", GPT_LAYERS, double(loss));
    return 0;
}
