// A whole training program around an MLP whose second weight has the wrong row count: the one
// error is the matmul's, and everything that goes on using the failed program (feeding, a training
// loop, an optimizer, clipping, train_step, value_of, param/grad, printing, saving, ctg::trainer, an
// inference program over its weights) adds none.
// EXPECT: ctg::matmul: the last dimension of the left operand must equal the row dimension
// EXPECT: shape_is<'B', 128>, ctg::shape_is<100, 10>
#include <cstdio>

#include <ctgraph/checkpoint.hpp>
#include <ctgraph/ctgraph.hpp>
#include <ctgraph/xtensor.hpp>
#include <ctgraph/npz.hpp>
#include <ctgraph/safetensors.hpp>
#include <ctgraph/train.hpp>
using namespace ctg;
inline constexpr dim B = dyn('B');
int main() {
    auto hidden = relu(input<"x", B, 64>{} * param<"W1", 64, 128>{} + param<"b1", 128>{});
    auto logits = hidden * param<"W2", 100, 10>{} + param<"b2", 10>{};  // 100: the hidden layer has 128
    auto prog = compile<float>(softmax_cross_entropy(logits, index_input<"y", B>{}));
    prog.params().init(7);
    optim::adam<float> opt({.lr = 1e-3});
    xt::xtensor<float, 2> x = xt::zeros<float>({32, 64});
    xt::xtensor<int, 1> y = xt::zeros<int>({32});
    for (int step = 0; step < 10; ++step) {
        prog.feed<"x">(x);
        prog.feed<"y">(y);
        prog.zero_grad();
        const float loss = prog.forward();
        prog.backward();
        optim::clip_grad_norm(prog.params(), 1.0);
        opt.step(prog.params());
        std::printf("step %d loss %f\n", step, loss);
    }
    const float last = train_step(prog, opt, 1.0);
    auto h = prog.value_of(hidden);
    auto z = prog.value_of(logits);
    auto w = prog.param<"W2">();
    auto g = prog.grad<"W2">();
    std::printf("%f %f %f %f %f\n", last, double(h(0, 0)), double(z(0, 0)), double(w(0, 0)), double(g(0, 0)));
    std::printf("%s%s", prog.to_text().c_str(), prog.to_dot().c_str());
    npz::save(prog.params(), "mlp.npz");
    npz::load(prog.params(), "mlp.npz");
    safetensors::save(prog.params(), "mlp.safetensors");
    checkpoint::save("mlp_ckpt.npz", prog.params(), opt, run_state{});

    dataset<float> data{{"x", x}, {"y", y}};
    trainer training(prog, opt, {.batch = 8, .epochs = 2, .out_dir = "run", .name = "mlp"});
    const train_report r = training.fit(data, data);
    auto predict = program_for<float, options{.inference = true}, decltype(logits)>(prog.shared_params());
    predict.feed<"x">(x);
    predict.forward();
    auto out = predict.output();
    std::printf("%ld %f\n", r.step, double(out(0, 0)));
}
