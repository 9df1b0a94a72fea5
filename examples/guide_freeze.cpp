// Freezing parameters to adapt a trained model, checked: a small character GPT is trained on the
// first part of the shipped text, then adapted to the last part (other licences) twice from the
// same weights: once with the embedding and every block frozen (options::frozen; the final norm
// and the head train) and once in full. Prints each program's trainable and frozen parameters and
// the backward FLOPs freezing saves (prog.summary), the step times and the validation losses on
// the new text. Exits non-zero unless the frozen parameters keep every bit, the frozen program's
// step is faster than the full one's, and adapting lowers the loss on the new text.
//
//   guide_freeze [pretrain_steps] [adapt_steps]      (default 300 150)
//
// docs/guide/fine-tuning.md walks through it.
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include <ctgraph/ctgraph.hpp>
#include <ctgraph/train.hpp>

#include "chars.hpp"

using namespace ctg;

inline constexpr dim B = dyn('B'), T = dyn('T');
constexpr std::size_t batch = 16, context = 64;

// [model]
using model = nn::gpt<chars::vocab, context, 64, 4, 2>;
constexpr auto loss() { return model::loss(index_input<"tokens", B, T>{}, index_input<"targets", B, T>{}); }
using full_program = decltype(compile<float>(loss()));
// The embedding and both blocks frozen: they get no gradient, no optimizer state, and backward runs
// none of their weight products (nor anything below the blocks, which only the embedding needed).
using frozen_program = decltype(compile<float, options{.frozen = "tok_embed blocks."}>(loss()));
// [model]

// Feeds `batch` windows of `context` tokens from ids[lo, hi) (targets: the next tokens).
template <class P>
void feed_windows(P& prog, const std::vector<index_t>& ids, std::size_t lo, std::size_t hi, std::mt19937_64& rng) {
    std::vector<index_t> x(batch * context), y(batch * context);
    std::uniform_int_distribution<std::size_t> at(lo, hi - context - 1);
    for (std::size_t b = 0; b < batch; ++b) {
        const std::size_t s = at(rng);
        std::copy_n(ids.begin() + long(s), context, x.begin() + long(b * context));
        std::copy_n(ids.begin() + long(s + 1), context, y.begin() + long(b * context));
    }
    prog.feed("tokens", x.data(), rshape{2, {batch, context}});
    prog.feed("targets", y.data(), rshape{2, {batch, context}});
}

// The mean loss over consecutive windows of ids[lo, hi), with an inference program over `store`.
double validation_loss(std::shared_ptr<parameter_store<float>> store, const std::vector<index_t>& ids, std::size_t lo,
                       std::size_t hi) {
    program_for<float, options{.inference = true}, decltype(loss())> prog(std::move(store));
    double sum = 0;
    std::size_t n = 0;
    std::vector<index_t> x(context), y(context);
    for (std::size_t s = lo; s + context + 1 <= hi; s += context, ++n) {
        std::copy_n(ids.begin() + long(s), context, x.begin());
        std::copy_n(ids.begin() + long(s + 1), context, y.begin());
        prog.feed("tokens", x.data(), rshape{2, {1, context}});
        prog.feed("targets", y.data(), rshape{2, {1, context}});
        sum += prog.forward();
    }
    return sum / double(n);
}

// [adapt]
// `steps` AdamW steps on ids[lo, hi) from the weights in `start` (copied: both adaptations begin
// from the same ones); returns the adapted store and the median step time in milliseconds.
template <class Program>
std::pair<std::shared_ptr<parameter_store<float>>, double> adapt(const parameter_store<float>& start,
                                                                  const std::vector<index_t>& ids, std::size_t lo,
                                                                  std::size_t hi, int steps) {
    Program prog(std::make_shared<parameter_store<float>>(start));  // marks the frozen parameters in its store
    std::printf("%s", prog.summary({{'B', batch}, {'T', context}}).to_string().c_str());
    auto opt = optim::adamw<float>({.lr = 3e-3, .betas = {0.9, 0.95}, .weight_decay = 0.1});
    std::mt19937_64 rng(11);
    std::vector<double> ms;
    for (int step = 0; step < steps; ++step) {
        feed_windows(prog, ids, lo, hi, rng);
        const auto t0 = std::chrono::steady_clock::now();
        train_step(prog, opt);
        ms.push_back(std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count());
    }
    std::nth_element(ms.begin(), ms.begin() + long(ms.size() / 2), ms.end());
    return {prog.shared_params(), ms[ms.size() / 2]};
}
// [adapt]

int main(int argc, char** argv) {
    const int pretrain_steps = argc > 1 ? std::atoi(argv[1]) : 300, adapt_steps = argc > 2 ? std::atoi(argv[2]) : 150;
    const std::vector<index_t> ids = chars::read_text(CTG_SOURCE_DIR "/data/text/gnu-licenses.txt", 100000, "guide_freeze");
    // The first 60 % to train on, the last 40 % (other licences) to adapt to: 85 % of that part for
    // adapting and its last 15 % for validation.
    const std::size_t n = ids.size(), split = n * 6 / 10, adapt_end = split + (n - split) * 85 / 100;

    full_program base;
    base.params().init(1);
    auto opt = optim::adamw<float>({.lr = 3e-3, .betas = {0.9, 0.95}, .weight_decay = 0.1});
    std::mt19937_64 rng(5);
    for (int step = 0; step < pretrain_steps; ++step) {
        feed_windows(base, ids, 0, split, rng);
        train_step(base, opt);
    }
    const parameter_store<float> trained = base.params();
    const double before = validation_loss(std::make_shared<parameter_store<float>>(trained), ids, adapt_end, n);
    std::printf("trained %d steps on the first part; validation loss on the new text: %.3f\n\n", pretrain_steps, before);

    std::printf("adapting with the embedding and the blocks frozen:\n");
    auto [frozen_store, frozen_ms] = adapt<frozen_program>(trained, ids, split, adapt_end, adapt_steps);
    std::printf("\nadapting every parameter:\n");
    auto [full_store, full_ms] = adapt<full_program>(trained, ids, split, adapt_end, adapt_steps);
    const double after_frozen = validation_loss(frozen_store, ids, adapt_end, n);
    const double after_full = validation_loss(full_store, ids, adapt_end, n);
    std::printf("\nvalidation loss on the new text: %.3f before, %.3f adapted with frozen parameters (%.2f ms a step), "
                "%.3f adapted in full (%.2f ms a step)\n",
                before, after_frozen, frozen_ms, after_full, full_ms);

    // [check]
    bool ok = true;
    std::size_t frozen = 0;
    for (std::size_t s = 0; s < trained.size(); ++s)
        if (frozen_store->frozen(s)) {
            ++frozen;
            if (std::memcmp(frozen_store->value(s), trained.value(s), trained.at(s).shape.size() * sizeof(float)) != 0) {
                std::printf("FAILED: frozen parameter '%s' changed\n", trained.at(s).name.c_str());
                ok = false;
            }
        }
    // [check]
    if (frozen != trained.size() - 4) {  // all but ln_f.weight, ln_f.bias, head.weight, head.bias
        std::printf("FAILED: %zu parameters frozen, expected %zu\n", frozen, trained.size() - 4);
        ok = false;
    }
    if (!(after_frozen < before)) std::printf("FAILED: adapting with frozen parameters did not lower the loss\n"), ok = false;
    if (!(frozen_ms < full_ms)) std::printf("FAILED: the frozen program's step is not faster than the full one's\n"), ok = false;
    return ok ? 0 : 1;
}
