// Decoding with a KV cache: tokens and logits equal a full recompute (prompts of different lengths
// in one batch), sampling is reproducible from a seed, and bad input is refused before anything runs.
#include <catch2/catch.hpp>

#include <random>

#include <ctgraph/ctgraph.hpp>

using namespace ctg;

namespace {
using model = nn::gpt<13, 40, 16, 2, 2>;
inline constexpr dim B = dyn('B'), T = dyn('T');
using Tokens = index_input<"tokens", B, T>;

/// The model's logits for one sequence, recomputed from scratch over all of it (no cache).
struct recompute {
    decltype(compile<float, options{.inference = true}>(model::logits(Tokens{}))) prog;
    explicit recompute(std::shared_ptr<parameter_store<float>> s) : prog(std::move(s)) {}
    std::vector<float> last_logits(const std::vector<int>& seq) {
        std::vector<index_t> ids(seq.begin(), seq.end());
        prog.feed("tokens", ids.data(), rshape{2, {1, ids.size()}});
        prog.forward();
        auto z = prog.output<0>();
        std::vector<float> r(13);
        for (std::size_t v = 0; v < 13; ++v) r[v] = z(0, ids.size() - 1, v);
        return r;
    }
};

std::shared_ptr<parameter_store<float>> trained_looking_store() {
    auto store = std::make_shared<parameter_store<float>>();
    nn::gpt_generator<model> probe(store, 1, 1);  // registers the parameters
    store->init(5);
    // Gains and biases away from 1 and 0 so that every parameter matters.
    for (std::size_t s = 0; s < store->size(); ++s)
        for (std::size_t k = 0; k < store->at(s).shape.size(); ++k) store->value(s)[k] += 0.1f * std::sin(float(3 * k + s));
    return store;
}
}  // namespace

TEST_CASE("KV-cache decoding equals a full recompute, prompts of different lengths in one batch", "[generate]") {
    auto store = trained_looking_store();
    nn::gpt_generator<model> gen(store, 3, 40);
    recompute full(store);
    const std::vector<std::vector<int>> prompts = {{1, 2, 3, 4, 5}, {7, 8}, {12, 0, 3, 3, 9, 1, 2}};
    std::vector<std::vector<float>> logits;
    const auto out = gen.generate(prompts, 12, &logits);  // greedy: no random generator
    std::mt19937_64 rng(0);
    CHECK(gen.generate(prompts, 12, nn::sampling{}, rng) == out);  // the same as sampling with top_k = 1
    REQUIRE(out.size() == 3);
    for (std::size_t b = 0; b < 3; ++b) {
        REQUIRE(out[b].size() == 12);
        std::vector<int> seq = prompts[b];
        for (std::size_t t = 0; t < 12; ++t) {
            const auto want = full.last_logits(seq);
            float worst = 0, scale = 0;
            for (std::size_t v = 0; v < 13; ++v) {
                worst = std::max(worst, std::abs(logits[b][t * 13 + v] - want[v]));
                scale = std::max(scale, std::abs(want[v]));
            }
            INFO("sequence " << b << ", new token " << t);
            CHECK(worst <= 1e-5f * std::max(1.0f, scale));
            const int argmax = int(std::max_element(want.begin(), want.end()) - want.begin());
            CHECK(out[b][t] == argmax);
            seq.push_back(out[b][t]);
        }
    }
}

TEST_CASE("sampled generation is reproducible from a seed", "[generate]") {
    auto store = trained_looking_store();
    nn::gpt_generator<model> gen(store, 2, 40);
    const nn::sampling how{.top_k = 0, .temperature = 1.3, .top_p = 0.9};
    std::mt19937_64 a(9), b(9), c(10);
    const auto x = gen.generate({{1, 2}, {3}}, 20, how, a), y = gen.generate({{1, 2}, {3}}, 20, how, b);
    CHECK(x == y);
    CHECK(gen.generate({{1, 2}, {3}}, 20, how, c) != x);
}

TEST_CASE("generation refuses bad input before running anything", "[generate][errors]") {
    auto store = trained_looking_store();
    nn::gpt_generator<model> gen(store, 2, 16);
    std::mt19937_64 rng(0);
    const auto before = gen.generate({{1, 2, 3}}, 5, {}, rng);
    CHECK_THROWS_WITH(gen.generate({{1, 13, 2}}, 5, {}, rng),
                      Catch::Contains("token 13 at position 1 of prompt 0 is outside the vocabulary [0, 13)"));
    CHECK_THROWS_WITH(gen.generate({{1, 2, 3}, {4}}, 15, {}, rng),
                      Catch::Contains("prompt 0 (3 tokens) and 15 new tokens need 17 positions; the cache holds 16"));
    CHECK_THROWS_WITH(gen.generate({{1}, {2}, {3}}, 2, {}, rng), Catch::Contains("3 prompts for a batch of 2"));
    CHECK_THROWS_WITH(gen.generate({{}}, 2, {}, rng), Catch::Contains("prompt 0 is empty"));
    CHECK(gen.generate({{1, 2, 3}}, 5, {}, rng) == before);  // nothing changed
    // The step op itself checks too: a position past the cache, before writing.
    using Step = decltype(compile<float, options{.inference = true}>(nn::gpt_generator<model>::step_logits()));
    Step step(store);
    std::vector<float> cache(2 * 1 * 4 * 16, 0.0f), values(2 * 1 * 4 * 16, 0.0f);
    step.bind("cache_k", cache.data(), rshape{4, {2, 1, 16, 4}});
    step.bind("cache_v", values.data(), rshape{4, {2, 1, 4, 16}});
    const std::vector<index_t> tok = {1}, pos = {4};
    step.feed("token", tok.data(), rshape{2, {1, 1}});
    step.feed("pos", pos.data(), rshape{1, {1}});
    CHECK_THROWS_WITH(step.forward(), Catch::Contains("position 4 of sequence 0 (input 'pos') is outside the cache of 4 positions"));
    CHECK(std::all_of(cache.begin(), cache.end(), [](float v) { return v == 0.0f; }));
    CHECK(std::all_of(values.begin(), values.end(), [](float v) { return v == 0.0f; }));
}
