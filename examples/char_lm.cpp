// A character-level language model: embedding -> LSTM -> linear, trained with truncated BPTT on
// English text shipped in data/text (the GNU licences, 169 KB). Prints progress, validation loss
// and perplexity against the unigram baseline, and samples text.
//
//   char_lm [path/to/text.txt] [steps] [required gain]
//
// Exits non-zero unless the validation loss ends at least `required gain` nats/char (default 0.5)
// below the unigram baseline.
//
// Truncated BPTT: each batch is a window of T characters from B parallel streams through the text;
// the LSTM's final state is fed back as the next window's initial state through an ordinary input
// (state0), so the state carries across batches while the gradient stops at the window's start.
#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <fstream>
#include <random>
#include <sstream>
#include <string>
#include <vector>

#include <ctgraph/ctgraph.hpp>
#include <ctgraph/xtensor.hpp>
#include <ctgraph/train.hpp>
#include <xtensor/xview.hpp>

#include "chars.hpp"

using namespace ctg;

inline constexpr dim B = dyn('B'), T = dyn('T');
constexpr int V = chars::vocab;  // '\n' and printable ASCII ' '..'~' (other bytes read as ' ')
constexpr int E = 32, H = 128;
using Cell = nn::lstm<"lm", E, H>;
using Embed = param<"embed", V, E>;
using HeadW = param<"head_W", H, V>;
using HeadB = param<"head_b", V>;

// Training graph: tokens (T, B) -> states (T, B, 2H) -> logits (T, B, V).
using Tokens = index_input<"tokens", T, B>;
using Targets = index_input<"targets", T, B>;
using State0 = input<"state0", B, 2 * H>;
constexpr auto states() { return Cell::run_state(embedding(Embed{}, Tokens{}), State0{}); }
constexpr auto loss() { return softmax_cross_entropy(slice<0, H>(states()) * HeadW{} + HeadB{}, Targets{}); }

// Sampling graph: one step of the same cell on one token per sequence, same parameters by name.
using Token = index_input<"token", B>;
using State = input<"state", B, 2 * H>;
constexpr auto next_state() { return Cell::cell(State{}, embedding(Embed{}, Token{})); }
constexpr auto next_logits() { return slice<0, H>(next_state()) * HeadW{} + HeadB{}; }

using chars::decode;
using chars::encode;

// B streams through `ids`, each advancing by T per batch; fills tokens/targets (T, B).
struct streams {
    const std::vector<index_t>* ids;
    std::size_t batch, window, stride, pos = 0;
    bool next(xt::xtensor<int, 2>& x, xt::xtensor<int, 2>& y) {
        if (pos + window + 1 > stride) return false;
        for (std::size_t b = 0; b < batch; ++b)
            for (std::size_t t = 0; t < window; ++t) {
                x(t, b) = (*ids)[b * stride + pos + t];
                y(t, b) = (*ids)[b * stride + pos + t + 1];
            }
        pos += window;
        return true;
    }
};

int main(int argc, char** argv) try {
    const std::string path = argc > 1 ? argv[1] : CTG_SOURCE_DIR "/data/text/gnu-licenses.txt";
    const int total_steps = argc > 2 ? std::stoi(argv[2]) : 600;
    const double required_gain = argc > 3 ? std::stod(argv[3]) : 0.5;
    const std::size_t batch = 32, window = 64;

    const auto ids = chars::read_text(path, 10000, "char_lm");
    const std::size_t n_val = ids.size() / 10;
    const std::vector<index_t> train(ids.begin(), ids.end() - long(n_val)), val(ids.end() - long(n_val), ids.end());
    // Unigram baseline: the entropy of the training text's character frequencies (nats/char).
    std::vector<double> freq(V, 0);
    for (auto c : train) freq[std::size_t(c)] += 1;
    double unigram = 0;
    for (double f : freq)
        if (f > 0) unigram -= f / double(train.size()) * std::log(f / double(train.size()));
    std::printf("text: %zu training and %zu validation characters; unigram baseline %.3f nats/char (perplexity %.1f)\n",
                train.size(), val.size(), unigram, std::exp(unigram));

    auto trainer = compile<float>(loss());
    auto evaluator = decltype(trainer)(trainer.shared_params());
    auto sampler = program_for<float, options{.inference = true}, decltype(next_state()), decltype(next_logits())>(
        trainer.shared_params());
    auto& params = trainer.params();
    params.init(17);
    for (const char* b : {"lm_b_i", "lm_b_h"})  // forget-gate bias 1 (gates i, f, g, o): remember by default
        params.init(b, [](std::mt19937_64&, std::size_t i) { return (i >= H && i < 2 * H) ? 0.5f : 0.0f; });
    params.init("embed", [](std::mt19937_64& rng, std::size_t) { return float(std::normal_distribution<double>(0, 1)(rng)); });
    optim::adam<float> opt({.lr = 3e-3});
    const optim::warmup_cosine_lr schedule{3e-3, 50, total_steps, 3e-4};

    auto validate = [&] {
        streams s{&val, 8, window, val.size() / 8};
        xt::xtensor<int, 2> x = xt::xtensor<int, 2>::from_shape({window, 8}), y = x;
        xt::xtensor<float, 2> state = xt::zeros<float>({std::size_t(8), std::size_t(2 * H)});
        double sum = 0;
        std::size_t n = 0;
        while (s.next(x, y)) {
            evaluator.feed<"tokens">(x);
            evaluator.feed<"targets">(y);
            evaluator.feed<"state0">(state);
            sum += evaluator.forward();
            ++n;
            state = xt::view(evaluator.value_of(states()), window - 1, xt::all(), xt::all());
        }
        return sum / double(n);
    };

    streams s{&train, batch, window, train.size() / batch};
    xt::xtensor<int, 2> x = xt::xtensor<int, 2>::from_shape({window, batch}), y = x;
    xt::xtensor<float, 2> state = xt::zeros<float>({batch, std::size_t(2 * H)});
    auto t0 = std::chrono::steady_clock::now();
    double recent = 0;
    for (int step = 0; step < total_steps; ++step) {
        if (!s.next(x, y)) {  // an epoch ends: start the streams again from a zero state
            s.pos = 0;
            state.fill(0);
            s.next(x, y);
        }
        trainer.feed<"tokens">(x);
        trainer.feed<"targets">(y);
        trainer.feed<"state0">(state);
        trainer.zero_grad();
        const float l = trainer.forward();
        trainer.backward();
        optim::clip_grad_norm(params, 1.0);
        opt.set_lr(schedule(step));
        opt.step(params);
        state = xt::view(trainer.value_of(states()), window - 1, xt::all(), xt::all());
        recent += l;
        if ((step + 1) % 100 == 0 || step + 1 == total_steps) {
            const double secs = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
            const double v = validate();
            std::printf("step %5d  train loss %.3f  val loss %.3f  val perplexity %.2f  %.0f chars/s\n", step + 1,
                        recent / ((step % 100) + 1), v, std::exp(v), double((step % 100) + 1) * batch * window / secs);
            recent = 0;
            t0 = std::chrono::steady_clock::now();
        }
    }
    const double final_val = validate();
    std::printf("validation: %.3f nats/char (perplexity %.2f) against the unigram baseline %.3f (%.1f)\n", final_val,
                std::exp(final_val), unigram, std::exp(unigram));

    // Sample 400 characters, temperature 0.8, top-k 10, starting from a newline.
    std::mt19937_64 rng(5);
    const auto ids_out = nn::decode<"token", "state">(sampler, xt::xtensor<float, 2>(xt::zeros<float>({1, 2 * H})),
                                                      encode('\n'), -1, 400, {10, 0.8}, rng);
    std::string text;
    for (int id : ids_out[0]) text += decode(index_t(id));
    std::printf("--- sample ---\n%s\n--------------\n", text.c_str());
    return final_val < unigram - required_gain ? 0 : 1;
} catch (const ctg::error& e) {
    std::fprintf(stderr, "error: %s\n", e.what());
    return 2;
}
