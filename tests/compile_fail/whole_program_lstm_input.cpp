// An LSTM whose embedding is wider than the cell's input, used by a training program (a scan over
// (T, B, 12)) and by a one-step sampling program ((B, 12)): one error, said by the cell for its
// input weight and the one size it compares, and none from the scan, the programs or the loop.
// EXPECT: ctg::nn: a recurrent cell's input \(..., X\) must end in its input size X
// EXPECT: shape_is<12>, ctg::shape_is<8, 64>
#include <cstdio>

#include <ctgraph/ctgraph.hpp>
#include <ctgraph/xtensor.hpp>
#include <ctgraph/train.hpp>
using namespace ctg;
inline constexpr dim B = dyn('B'), T = dyn('T');
using Cell = nn::lstm<"lm", 8, 16>;
using Embed = param<"embed", 20, 12>;  // 12: the cell reads 8
using Head = param<"head", 16, 20>;
int main() {
    auto states = Cell::run(embedding(Embed{}, index_input<"tokens", T, B>{}));
    auto train = compile<float>(softmax_cross_entropy(states * Head{}, index_input<"targets", T, B>{}));
    auto next_state = Cell::cell(input<"state", B, 32>{}, embedding(Embed{}, index_input<"token", B>{}));
    auto step = compile<float, options{.inference = true}>(next_state, slice<0, 16>(next_state) * Head{});
    train.params().init(3);
    optim::adam<float> opt({.lr = 1e-3});
    xt::xtensor<int, 2> x = xt::zeros<int>({10, 4});
    for (int i = 0; i < 50; ++i) {
        train.feed<"tokens">(x);
        train.feed<"targets">(x);
        std::printf("%f\n", double(train_step(train, opt)));
    }
    step.feed<"state">(xt::xtensor<float, 2>(xt::zeros<float>({4, 32})));
    step.feed<"token">(xt::xtensor<int, 1>(xt::zeros<int>({4})));
    step.forward();
    auto logits = step.output<1>();
    std::printf("%f\n", double(logits(0, 0)));
}
