// The main demo: a two-layer MLP (64 -> 128 -> 10, ReLU) trained on the 8x8 handwritten digits
// shipped in data/digits (1797 images; 80 % train, 20 % test), with SGD + momentum.
//
//   mlp_digits [path/to/digits.csv] [epochs]
#include <chrono>
#include <cstdio>
#include <string>

#include <ctgraph/ctgraph.hpp>

#include "datasets.hpp"

using namespace ctg;

inline constexpr dim B = dyn('B');  // batch: dynamic
using Pixels = input<"pixels", B, 64>;
using Labels = index_input<"labels", B>;

// The model is ordinary code over symbolic values; its type is the graph.
constexpr auto logits() {
    auto hidden = relu(Pixels{} * param<"W1", 64, 128>{} + param<"b1", 128>{});
    return hidden * param<"W2", 128, 10>{} + param<"b2", 10>{};
}

int main(int argc, char** argv) try {
    const std::string path = argc > 1 ? argv[1] : CTG_SOURCE_DIR "/data/digits/digits.csv";
    const int epochs = argc > 2 ? std::stoi(argv[2]) : 30;
    const std::size_t batch = 32;

    const auto all = examples::load_digits(path);
    const std::size_t n = all.y.size(), n_train = n * 4 / 5, n_test = n - n_train;
    const auto order = examples::permutation(n, 2024);
    const auto train = examples::take(all, order, 0, n_train);
    const auto test = examples::take(all, order, n_train, n_test);
    std::printf("digits: %zu training and %zu test images from %s\n", n_train, n_test, path.c_str());

    auto trainer = compile<float>(softmax_cross_entropy(logits(), Labels{}));  // loss, for training
    auto predictor = program_for<float, options{.inference = true}, decltype(logits())>(trainer.shared_params());
    trainer.params().init(7);
    optim::sgd<float> opt({.lr = 0.05, .momentum = 0.9});
    std::printf("%s", trainer.to_text().c_str());

    auto accuracy = [&](const examples::labelled_images& d) {
        predictor.feed<"pixels">(d.x);
        predictor.forward();
        auto z = predictor.output();
        std::size_t right = 0;
        for (std::size_t i = 0; i < d.y.size(); ++i) {
            std::size_t best = 0;
            for (std::size_t c = 1; c < 10; ++c)
                if (z(i, c) > z(i, best)) best = c;
            right += int(best) == d.y(i);
        }
        return double(right) / double(d.y.size());
    };

    long step = 0;
    for (int epoch = 1; epoch <= epochs; ++epoch) {
        const auto t0 = std::chrono::steady_clock::now();
        const auto shuffled = examples::permutation(n_train, 100 + epoch);
        double loss_sum = 0;
        std::size_t batches = 0;
        for (std::size_t first = 0; first + batch <= n_train; first += batch, ++step, ++batches) {
            const auto b = examples::take(train, shuffled, first, batch);
            trainer.feed<"pixels">(b.x);
            trainer.feed<"labels">(b.y);
            trainer.zero_grad();
            loss_sum += trainer.forward();
            trainer.backward();
            opt.step(trainer.params());
        }
        const double secs = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
        if (epoch == 1 || epoch % 5 == 0 || epoch == epochs)
            std::printf("epoch %3d  step %5ld  loss %.4f  train acc %.2f%%  %.0f examples/s\n", epoch, step,
                        loss_sum / double(batches), 100 * accuracy(train), double(batches * batch) / secs);
    }
    const double acc = accuracy(test);
    std::printf("test accuracy: %.2f%% (%zu images)\n", 100 * acc, n_test);
    return acc >= 0.95 ? 0 : 1;
} catch (const ctg::error& e) {
    std::fprintf(stderr, "error: %s\n", e.what());
    return 2;
}
