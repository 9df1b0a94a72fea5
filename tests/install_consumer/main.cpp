// Built against an installed ctgraph: one training step of a tiny model must lower the loss.
#include <cstdio>
#include <string>

#include <ctgraph/ctgraph.hpp>
#include <ctgraph/xtensor.hpp>

using namespace ctg;

int main() {
    auto prog = compile<float>(mse_loss(input<"x", dyn('B'), 2>{} * param<"W", 2, 1>{}, input<"y", dyn('B'), 1>{}));
    prog.params().init(1);
    prog.feed<"x">(xt::xtensor<float, 2>{{1, 2}, {3, 4}});
    prog.feed<"y">(xt::xtensor<float, 2>{{1}, {2}});
    const float before = prog.forward();
    prog.backward();
    optim::sgd<float>({.lr = 0.01}).step(prog.params());
    const float after = prog.forward();
    static_assert(ctg::version_major == 0 && ctg::version_minor >= 2);
    std::printf("ctgraph %s: loss %f -> %f\n", std::string(ctg::version).c_str(), before, after);
    return after < before ? 0 : 1;
}
