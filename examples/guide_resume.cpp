// Checkpoints and resuming a training run, checked: an MLP with dropout on the shipped digits is
// trained once without interruption, and once in two parts, as if the process had died between two
// checkpoints: the first part stops at step 70, its newest checkpoint (step 70) is deleted, and a
// new program, optimizer and trainer resume from the one before (step 60) and train to the end.
// Then a prediction program loads the final checkpoint's weights. Exits non-zero unless the
// resumed run's weights and history equal the uninterrupted run's bit for bit and the loaded
// weights reach 90 % test accuracy.
//
//   guide_resume [directory]      (default: guide_resume_run; emptied first)
//
// docs/guide/checkpoints.md walks through it.
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <memory>
#include <string>

#include <ctgraph/ctgraph.hpp>
#include <ctgraph/xtensor.hpp>
#include <ctgraph/train.hpp>
#include <xtensor/xsort.hpp>

#include "datasets.hpp"  // load_digits, split

using namespace ctg;

inline constexpr dim B = dyn('B');

// [model]
constexpr auto logits() {
    auto hidden = dropout<0.2>(relu(input<"pixels", B, 64>{} * param<"W1", 64, 64>{} + param<"b1", 64>{}));
    return hidden * param<"W2", 64, 10>{} + param<"b2", 10>{};
}
constexpr auto loss() { return softmax_cross_entropy(logits(), index_input<"labels", B>{}); }
using train_program = decltype(compile<float>(loss()));
// [model]

constexpr long total_steps = 270;  // 6 epochs of 45 batches of 32 (1,437 images, the last batch partial)

struct outcome {
    train_report report;
    std::vector<history_row> history;
    std::shared_ptr<parameter_store<float>> weights;
    bool resumed;
};

// [run]
/// One training process: a new program, optimizer and trainer. If out_dir holds a checkpoint of
/// this run, it goes on from there (its weights replace the initial ones); it stops after
/// max_steps steps (0: at the end of the epochs).
outcome run(const std::string& out_dir, long max_steps, unsigned init_seed, dataset<float>& train_set,
            dataset<float>& test_set) {
    train_program prog;
    prog.params().init(init_seed);
    prog.dropout_seed(1);
    auto opt = optim::adamw<float>({.lr = 1e-2, .weight_decay = 0.01});
    trainer training(prog, opt,
                     {.batch = 32, .epochs = 6, .max_steps = max_steps, .seed = 5, .eval_every = 45,
                      .checkpoint_every = 20, .keep_last = 2, .out_dir = out_dir, .name = "mlp", .log = nullptr},
                     optim::warmup_cosine_lr{1e-2, 20, total_steps, 1e-4});
    const bool resumed = training.resume_latest();
    if (resumed) std::printf("%s: resuming from %s\n", out_dir.c_str(), checkpoint::latest(out_dir, "mlp")->c_str());
    const train_report r = training.fit(train_set, test_set);
    std::printf("%s: step %ld, validation loss %.6f\n", out_dir.c_str(), r.step, r.metric);
    return {r, training.history(), prog.shared_params(), resumed};
}
// [run]

bool same_bits(const parameter_store<float>& a, const parameter_store<float>& b) {
    if (a.size() != b.size()) return false;
    for (std::size_t p = 0; p < a.size(); ++p)
        if (a.at(p).name != b.at(p).name ||
            std::memcmp(a.value(p), b.value(p), a.at(p).shape.size() * sizeof(float)) != 0)
            return false;
    return true;
}

int main(int argc, char** argv) try {
    const std::string root = argc > 1 ? argv[1] : "guide_resume_run";
    std::filesystem::remove_all(root);
    std::filesystem::create_directories(root);
    const auto digits = examples::load_digits(CTG_SOURCE_DIR "/data/digits/digits.csv");
    const auto [train, test] = examples::split(digits, 0.8, 2024);
    dataset<float> train_set{{"pixels", train.x}, {"labels", train.y}};
    dataset<float> test_set{{"pixels", test.x}, {"labels", test.y}};

    // [interrupt]
    const outcome whole = run(root + "/whole", 0, 7, train_set, test_set);

    const std::string dir = root + "/interrupted";
    run(dir, 70, 7, train_set, test_set);  // checkpoints at steps 20, 40, 60 and 70; keep_last = 2 keeps 60 and 70
    std::filesystem::remove(dir + "/mlp-step00000070.npz");  // as if killed between steps 60 and 70
    const outcome resumed = run(dir, 0, 99, train_set, test_set);  // other initial weights: the checkpoint's win
    // [interrupt]

    int failures = 0;
    const bool weights_equal = same_bits(*whole.weights, *resumed.weights);
    bool history_equal = whole.history.size() == resumed.history.size();
    for (std::size_t i = 0; history_equal && i < whole.history.size(); ++i)
        history_equal = whole.history[i].step == resumed.history[i].step &&
                        whole.history[i].train_loss == resumed.history[i].train_loss &&
                        whole.history[i].metric == resumed.history[i].metric;
    std::printf("resumed run against the uninterrupted one: weights %s, %zu evaluations %s\n",
                weights_equal ? "bit-identical" : "DIFFER", whole.history.size(), history_equal ? "identical" : "DIFFER");
    failures += !resumed.resumed + !weights_equal + !history_equal;

    // [load]
    auto store = std::make_shared<parameter_store<float>>();
    auto predict = program_for<float, options{.inference = true}, decltype(logits())>(store);  // registers W1, b1, ...
    checkpoint::load_weights(*checkpoint::latest(dir, "mlp"), *store);
    predict.feed<"pixels">(test.x);
    predict.forward();
    const double accuracy = xt::mean(xt::equal(xt::argmax(predict.output(), 1), test.y))();
    // [load]
    std::printf("weights loaded from %s: test accuracy %.1f %%\n", checkpoint::latest(dir, "mlp")->c_str(), 100 * accuracy);
    failures += !(accuracy >= 0.9);
    std::printf("%s\n", failures ? "FAILED" : "all checks passed");
    return failures ? 1 : 0;
} catch (const std::exception& e) {
    std::fprintf(stderr, "error: %s\n", e.what());
    return 2;
}
