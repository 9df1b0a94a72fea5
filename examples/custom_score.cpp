// A score function of your own: cosine similarity with a learnable temperature,
//   S_ij = exp(t) * cos(q_i, k_j),
// written in four lines with ctgraph's primitives; its backward (through l2_normalize, the
// matmul and the temperature) is generated like any other. It trains an associative-recall model:
// given eight (key, value) pairs and a query key, answer the query's value, by attending from
// the query to the keys and reading the values.
//
//   custom_score [steps] [required accuracy]
//
// Cosine scores lie in [-1, 1], too flat for a sharp softmax at t = 0; the model has to learn a
// temperature, and the program prints it growing. Exits non-zero below the required accuracy on
// held-out batches (default 0.95).
#include <chrono>
#include <cstdio>
#include <random>
#include <string>
#include <vector>

#include <ctgraph/ctgraph.hpp>
#include <ctgraph/xtensor.hpp>

using namespace ctg;

/// The customization point: a static scores(q, k) from queries (..., n, d) and keys (..., m, d)
/// to scores (..., n, m). That is all attention() needs (ctg::score_for).
struct cosine_score {
    static constexpr auto scores(auto q, auto k) {
        return mul(matmul(l2_normalize(q), transpose(l2_normalize(k))), exp(param<"cos_log_t">{}));
    }
};

namespace {
inline constexpr dim B = dyn('B');
constexpr int pairs = 8, num_keys = 16, num_values = 10, D = 32;
using Keys = index_input<"keys", B, pairs>;
using Values = index_input<"values", B, pairs>;
using Query = index_input<"query", B, 1>;
using Answer = index_input<"answer", B>;

constexpr auto logits() {
    using key_embed = param<"key_embed", num_keys, D>;
    auto q = embedding(key_embed{}, Query{}) * param<"W_q", D, D>{};          // (B, 1, D)
    auto k = embedding(key_embed{}, Keys{}) * param<"W_k", D, D>{};           // (B, 8, D)
    auto v = embedding(param<"value_embed", num_values, D>{}, Values{});      // (B, 8, D)
    auto read = reshape<B, D>(attention(q, k, v, cosine_score{}));            // (B, D)
    return read * param<"W_o", D, num_values>{} + param<"b_o", num_values>{};  // (B, 10)
}

struct batch {
    std::vector<index_t> keys, values, query, answer;
};
batch make_batch(std::size_t n, std::mt19937_64& rng) {
    batch b;
    std::vector<int> all(num_keys);
    for (int i = 0; i < num_keys; ++i) all[std::size_t(i)] = i;
    std::uniform_int_distribution<int> value(0, num_values - 1), pick(0, pairs - 1);
    for (std::size_t i = 0; i < n; ++i) {
        std::shuffle(all.begin(), all.end(), rng);  // eight distinct keys
        std::vector<int> vals(pairs);
        for (int p = 0; p < pairs; ++p) {
            vals[std::size_t(p)] = value(rng);
            b.keys.push_back(all[std::size_t(p)]);
            b.values.push_back(vals[std::size_t(p)]);
        }
        const int asked = pick(rng);
        b.query.push_back(all[std::size_t(asked)]);
        b.answer.push_back(vals[std::size_t(asked)]);
    }
    return b;
}
void feed(auto& prog, const batch& b) {
    const std::size_t n = b.answer.size();
    prog.feed("keys", b.keys.data(), rshape{2, {n, std::size_t(pairs)}});
    prog.feed("values", b.values.data(), rshape{2, {n, std::size_t(pairs)}});
    prog.feed("query", b.query.data(), rshape{2, {n, 1}});
}
}  // namespace

int main(int argc, char** argv) try {
    const int steps = argc > 1 ? std::stoi(argv[1]) : 600;
    const double required = argc > 2 ? std::stod(argv[2]) : 0.95;
    auto train = compile<float>(softmax_cross_entropy(logits(), Answer{}));
    auto predict = program_for<float, options{.inference = true}, decltype(logits())>(train.shared_params());
    train.params().init(3);
    optim::adam<float> opt({.lr = 3e-3});
    std::mt19937_64 rng(11);

    auto accuracy = [&] {
        std::mt19937_64 held_out(99);  // the same 2,000 questions every time
        const batch b = make_batch(2000, held_out);
        feed(predict, b);
        predict.forward();
        auto z = predict.output();
        std::size_t right = 0;
        for (std::size_t i = 0; i < b.answer.size(); ++i) {
            std::size_t best = 0;
            for (std::size_t c = 1; c < std::size_t(num_values); ++c) best = z(i, c) > z(i, best) ? c : best;
            right += int(best) == b.answer[i];
        }
        return double(right) / double(b.answer.size());
    };
    std::printf("associative recall, %d pairs: accuracy %.1f%% before training (chance 10%%)\n", pairs, 100 * accuracy());
    const auto t0 = std::chrono::steady_clock::now();
    for (int step = 1; step <= steps; ++step) {
        const batch b = make_batch(64, rng);
        feed(train, b);
        train.feed("answer", b.answer.data(), rshape{1, {b.answer.size()}});
        train.zero_grad();
        const float loss = train.forward();
        train.backward();
        opt.step(train.params());
        if (step % 100 == 0)
            std::printf("step %4d  loss %.4f  temperature exp(t) %6.2f  held-out accuracy %5.1f%%\n", step, loss,
                        std::exp(double(train.param<"cos_log_t">()())), 100 * accuracy());
    }
    const double acc = accuracy();
    std::printf("held-out accuracy %.1f%% after %d steps (%.1f s); learned temperature %.2f\n", 100 * acc, steps,
                std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count(),
                std::exp(double(train.param<"cos_log_t">()())));
    return acc >= required ? 0 : 1;
} catch (const ctg::error& e) {
    std::fprintf(stderr, "error: %s\n", e.what());
    return 2;
}
