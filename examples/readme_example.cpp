// The README's first example: an Elman cell in row-vector form, its loss, the generated backward.
#include <cstdio>

#include <ctgraph/ctgraph.hpp>
#include <ctgraph/xtensor.hpp>

using namespace ctg;

inline constexpr dim B = dyn('B');  // batch size: known at run time
constexpr int X = 3, H = 4;          // feature sizes: known to the compiler

int main() {
    // h_t = tanh(h_{t-1} W_h + x_t W_x + b): the seed's W_h h + W_x x + b, rows instead of columns.
    auto cell = [](auto h, auto x) {
        return tanh(h * param<"W_h", H, H>{} + x * param<"W_x", X, H>{} + param<"b", H>{});
    };
    auto h1 = cell(input<"h0", B, H>{}, input<"x1", B, X>{});
    auto h2 = cell(h1, input<"x2", B, X>{});  // same names: the same weights
    auto loss = mse_loss(h2, input<"target", B, H>{});

    auto prog = compile<float>(loss);  // forward and backward are generated here
    prog.params().init(42);
    prog.feed<"h0">(xt::xtensor<float, 2>(xt::zeros<float>({2, H})));
    prog.feed<"x1">(xt::xtensor<float, 2>{{1, 0, 0}, {0, 1, 0}});
    prog.feed<"x2">(xt::xtensor<float, 2>{{0, 0, 1}, {1, 1, 1}});
    prog.feed<"target">(xt::xtensor<float, 2>{{0.5, -0.5, 0.5, -0.5}, {0.1, 0.2, 0.3, 0.4}});

    optim::sgd<float> opt({.lr = 0.5});
    for (int step = 0; step <= 100; ++step) {
        prog.zero_grad();
        const float l = prog.forward();
        prog.backward();
        opt.step(prog.params());
        if (step % 25 == 0) std::printf("step %3d  loss %.6f\n", step, l);
    }
    std::printf("%s", prog.to_text().c_str());
}
