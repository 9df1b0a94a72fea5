// A score function of one's own that returns (..., n, d) instead of (..., n, m), then a training
// loop: one error, the score's (not a second one from the product with the values).
// EXPECT: ctg::attention: a score function must return \(..., n, m\) for queries \(..., n, d_q\) and keys \(..., m, d_k\)
// EXPECT: shape_is<'B', 5, 8>, ctg::shape_is<'B', 5, 5>
#include <cstdio>

#include <ctgraph/ctgraph.hpp>
#include <ctgraph/xtensor.hpp>
#include <ctgraph/train.hpp>
using namespace ctg;
inline constexpr dim B = dyn('B');
struct temperature_score {
    static constexpr auto scores(auto q, auto) { return mul(q, exp(param<"log_t">{})); }  // the keys forgotten
};
int main() {
    auto q = input<"x", B, 5, 8>{} * param<"W_q", 8, 8>{};
    auto k = input<"x", B, 5, 8>{} * param<"W_k", 8, 8>{};
    auto v = input<"x", B, 5, 8>{} * param<"W_v", 8, 4>{};
    auto read = attention(q, k, v, temperature_score{}, causal{});
    auto prog = compile<float>(mse_loss(read, input<"y", B, 5, 4>{}));
    prog.params().init(3);
    optim::sgd<float> opt({.lr = 0.1, .momentum = 0.9});
    xt::xtensor<float, 3> x = xt::zeros<float>({2, 5, 8}), y = xt::zeros<float>({2, 5, 4});
    for (int step = 0; step < 100; ++step) {
        prog.feed<"x">(x);
        prog.feed<"y">(y);
        const float loss = train_step(prog, opt, 1.0);
        if (step % 10 == 0) std::printf("%d %f %f\n", step, loss, double(prog.value_of(read)(0, 0, 0)));
    }
}
