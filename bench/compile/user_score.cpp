// Compile benchmark program (bench/compile_bench.py): attention with a score function of the
// user's own (cosine similarity with a learned temperature) and a causal mask, in a small
// associative-recall model trained with Adam and run for inference.
#include <cstdio>
#include <random>
#include <vector>

#include <ctgraph/ctgraph.hpp>

using namespace ctg;

struct cosine_score {
    static constexpr auto scores(auto q, auto k) {
        return mul(matmul(l2_normalize(q), transpose(l2_normalize(k))), exp(param<"log_t">{}));
    }
};

inline constexpr dim B = dyn('B');
constexpr int N = 8, Keys = 16, Values = 10, D = 32;
using KeyIds = index_input<"keys", B, N>;
using ValueIds = index_input<"values", B, N>;

constexpr auto logits() {
    using key_embed = param<"key_embed", Keys, D>;
    auto q = embedding(key_embed{}, KeyIds{}) * param<"W_q", D, D>{};
    auto k = embedding(key_embed{}, KeyIds{}) * param<"W_k", D, D>{};
    auto v = embedding(param<"value_embed", Values, D>{}, ValueIds{});
    auto read = attention(q, k, v, cosine_score{}, causal{});  // (B, N, D)
    return read * param<"W_o", D, Values>{} + param<"b_o", Values>{};
}

int main() {
    auto train = compile<float>(softmax_cross_entropy(logits(), index_input<"answer", B, N>{}));
    auto predict = program_for<float, options{.inference = true}, decltype(logits())>(train.shared_params());
    train.params().init(8);
    optim::adam<float> opt({.lr = 3e-3});
    std::mt19937 rng(9);
    const std::size_t n = 16;
    std::vector<index_t> keys(n * N), values(n * N);
    for (int it = 0; it < 3; ++it) {
        for (auto& x : keys) x = index_t(rng() % Keys);
        for (auto& x : values) x = index_t(rng() % Values);
        train.feed("keys", keys.data(), rshape{2, {n, std::size_t(N)}});
        train.feed("values", values.data(), rshape{2, {n, std::size_t(N)}});
        train.feed("answer", values.data(), rshape{2, {n, std::size_t(N)}});
        train.zero_grad();
        const float l = train.forward();
        train.backward();
        opt.step(train.params());
        std::printf("step %d loss %.4f\n", it, double(l));
    }
    predict.feed("keys", keys.data(), rshape{2, {n, std::size_t(N)}});
    predict.feed("values", values.data(), rshape{2, {n, std::size_t(N)}});
    predict.forward();
    // Headers older than <ctgraph/xtensor.hpp> (bench/compile_bench.py --against) had views only.
#if __has_include(<ctgraph/xtensor.hpp>)
    const float first_logit = predict.output_data()[0];
#else
    const float first_logit = predict.output()(0, 0, 0);
#endif
    std::printf("first logit %.4f\n", double(first_logit));
    return 0;
}
