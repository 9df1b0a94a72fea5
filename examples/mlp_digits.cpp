// A complete training program: a two-layer MLP on the 8x8 handwritten digits in data/digits, trained
// by ctg::trainer (shuffled epochs, test loss each epoch, progress, curves, checkpoint); >= 95 %.
#include <ctgraph/ctgraph.hpp>
#include <ctgraph/xtensor.hpp>
#include <ctgraph/train.hpp>
#include <xtensor/xsort.hpp>
#include "datasets.hpp"  // load_digits, split: 1797 images of 64 pixels and their labels
using namespace ctg;
inline constexpr dim B = dyn('B');  // the batch size: known at run time

int main() try {
    auto logits = relu(input<"pixels", B, 64>{} * param<"W1", 64, 128>{} + param<"b1", 128>{}) *
                      param<"W2", 128, 10>{} + param<"b2", 10>{};
    auto prog = compile<float>(softmax_cross_entropy(logits, index_input<"labels", B>{}));
    prog.params().init(7);
    optim::sgd<float> opt({.lr = 0.05, .momentum = 0.9});
    const auto digits = examples::load_digits(CTG_SOURCE_DIR "/data/digits/digits.csv");
    const auto [train, test] = examples::split(digits, 0.8, 2024);  // 1437 training and 360 test images
    dataset<float> train_set{{"pixels", train.x}, {"labels", train.y}};
    dataset<float> test_set{{"pixels", test.x}, {"labels", test.y}};
    trainer training(prog, opt, {.batch = 32, .epochs = 30, .out_dir = "digits_run", .name = "mlp"});
    const train_report r = training.fit(train_set, test_set);  // also writes digits_run/mlp{.npz,_loss.csv,_loss.png}
    auto predict = program_for<float, options{.inference = true}, decltype(logits)>(prog.shared_params());
    predict.feed<"pixels">(test.x);
    predict.forward();
    const double accuracy = xt::mean(xt::equal(xt::argmax(predict.output(), 1), test.y))();
    std::printf("test accuracy %.2f %% after %ld steps\n", 100 * accuracy, r.step);
    return accuracy >= 0.95 ? 0 : 1;
} catch (const std::exception& e) {
    std::fprintf(stderr, "error: %s\n", e.what());
    return 2;
}
