// A character LSTM whose one-step sampling graph forgets to slice h out of the state (c, h): the
// training program is fine and trains; the sampler fails, and decoding with it adds no error.
// EXPECT: ctg::matmul: the last dimension of the left operand must equal the row dimension
// EXPECT: shape_is<'B', 32>, ctg::shape_is<16, 20>
#include <cstdio>
#include <random>

#include <ctgraph/ctgraph.hpp>
#include <ctgraph/xtensor.hpp>
#include <ctgraph/train.hpp>
#include <xtensor/xview.hpp>
using namespace ctg;
inline constexpr dim B = dyn('B'), T = dyn('T');
constexpr int V = 20, E = 8, H = 16;
using Cell = nn::lstm<"lm", E, H>;
using Embed = param<"embed", V, E>;
using HeadW = param<"head_W", H, V>;
using HeadB = param<"head_b", V>;
using Tokens = index_input<"tokens", T, B>;
using Targets = index_input<"targets", T, B>;
using State0 = input<"state0", B, 2 * H>;
constexpr auto states() { return Cell::run_state(embedding(Embed{}, Tokens{}), State0{}); }
constexpr auto loss() { return softmax_cross_entropy(slice<0, H>(states()) * HeadW{} + HeadB{}, Targets{}); }
using Token = index_input<"token", B>;
using State = input<"state", B, 2 * H>;
constexpr auto next_state() { return Cell::cell(State{}, embedding(Embed{}, Token{})); }
constexpr auto next_logits() { return next_state() * HeadW{} + HeadB{}; }  // slice<0, H> forgotten
int main() {
    auto train = compile<float>(loss());
    auto sampler = program_for<float, options{.inference = true}, decltype(next_state()), decltype(next_logits())>(
        train.shared_params());
    train.params().init(17);
    optim::adam<float> opt({.lr = 3e-3});
    xt::xtensor<int, 2> x = xt::zeros<int>({8, 4}), y = x;
    xt::xtensor<float, 2> state = xt::zeros<float>({std::size_t(4), std::size_t(2 * H)});
    for (int step = 0; step < 100; ++step) {
        train.feed<"tokens">(x);
        train.feed<"targets">(y);
        train.feed<"state0">(state);
        const float l = train_step(train, opt);
        state = xt::view(train.value_of(states()), 7, xt::all(), xt::all());
        std::printf("%d %f\n", step, l);
    }
    std::mt19937_64 rng(1);
    const auto text = nn::decode<"token", "state">(sampler, xt::xtensor<float, 2>(xt::zeros<float>({2, 2 * H})), 0, 1,
                                                   50, nn::sampling{.top_k = 5}, rng);
    std::printf("%zu sequences\n", text.size());
}
