// Decoding with a KV cache: tokens and logits equal a full recompute (prompts of different lengths
// in one batch), sampling is reproducible from a seed, and bad input is refused before anything runs.
#include <catch2/catch.hpp>

#include <random>

#include <ctgraph/ctgraph.hpp>
#include <ctgraph/xtensor.hpp>

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

/// The largest |got[offset + v] - want[v]| over the vocabulary, and the largest |want[v]| (at least `floor`).
struct logit_gap {
    float worst = 0, scale = 0;
    logit_gap(const std::vector<float>& got, std::size_t offset, const std::vector<float>& want, float floor) : scale(floor) {
        for (std::size_t v = 0; v < want.size(); ++v) {
            worst = std::max(worst, std::abs(got[offset + v] - want[v]));
            scale = std::max(scale, std::abs(want[v]));
        }
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
            const logit_gap gap(logits[b], t * 13, want, 1.0f);
            INFO("sequence " << b << ", new token " << t);
            CHECK(gap.worst <= 1e-5f * gap.scale);
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

namespace {
// A decoding step's attention against caches of 24 positions, for two sequences at different
// positions, with the caches in bfloat16 (bf16_input) and in float side by side.
inline constexpr dim Cap = dyn('C');
using Q1 = input<"q", B, 1, 8>;
using K1 = input<"k", B, 1, 8>;
using V1 = input<"v", B, 1, 8>;
using Pos1 = index_input<"pos", B>;
/// Attention of one query (8 features, 2 heads of 4) over positions 0 .. p of a cache, in double:
/// key(d, j) and value(j, d) give the cache's entries.
template <class Key, class Value>
std::vector<double> attend_reference(const float* q, std::size_t p, Key key, Value value) {
    constexpr std::size_t dh = 4;
    std::vector<double> out(8);
    for (std::size_t h = 0; h < 2; ++h) {
        std::vector<double> s(p + 1);
        double mx = -1e300, total = 0;
        for (std::size_t j = 0; j <= p; ++j) {
            double a = 0;
            for (std::size_t d = h * dh; d < (h + 1) * dh; ++d) a += double(q[d]) * key(d, j);
            mx = std::max(mx, s[j] = a / std::sqrt(double(dh)));
        }
        for (auto& e : s) total += (e = std::exp(e - mx));
        for (std::size_t d = h * dh; d < (h + 1) * dh; ++d)
            for (std::size_t j = 0; j <= p; ++j) out[d] += s[j] / total * value(j, d);
    }
    return out;
}
template <template <fixed_string, dim...> class Cache>
auto cached_step() {
    return compile<float, options{.inference = true}>(
        cached_attention<2>(Q1{}, K1{}, V1{}, Cache<"cache_k", B, 8, Cap>{}, Cache<"cache_v", B, Cap, 8>{}, Pos1{}));
}
}  // namespace

TEST_CASE("a bf16 KV cache stores keys and values rounded, and attends over them in float", "[generate][bf16]") {
    auto half = cached_step<bf16_input>();
    auto full = cached_step<input>();
    constexpr std::size_t Bn = 2, C = 24, D = 8;
    std::vector<kernels::bf16_bits> kh(Bn * D * C), vh(Bn * C * D);
    std::vector<float> kf(Bn * D * C), vf(Bn * C * D);
    half.bind("cache_k", kh.data(), rshape{3, {Bn, D, C}});
    half.bind("cache_v", vh.data(), rshape{3, {Bn, C, D}});
    full.bind("cache_k", kf.data(), rshape{3, {Bn, D, C}});
    full.bind("cache_v", vf.data(), rshape{3, {Bn, C, D}});
    std::mt19937_64 rng(3);
    std::normal_distribution<float> normal(0.0f, 1.0f);
    double differs = 0;
    for (std::size_t t = 0; t < 20; ++t) {
        std::vector<float> q(Bn * D), k(Bn * D), v(Bn * D);
        for (std::size_t i = 0; i < Bn * D; ++i) q[i] = 2 * normal(rng), k[i] = normal(rng), v[i] = 3 * normal(rng);
        const std::vector<index_t> pos = {index_t(t), index_t(t + 3)};
        half.feed("q", q.data(), rshape{3, {Bn, 1, D}});
        half.feed("k", k.data(), rshape{3, {Bn, 1, D}});
        half.feed("v", v.data(), rshape{3, {Bn, 1, D}});
        half.feed("pos", pos.data(), rshape{1, {Bn}});
        full.feed("q", q.data(), rshape{3, {Bn, 1, D}});
        full.feed("k", k.data(), rshape{3, {Bn, 1, D}});
        full.feed("v", v.data(), rshape{3, {Bn, 1, D}});
        full.feed("pos", pos.data(), rshape{1, {Bn}});
        half.forward();
        full.forward();
        auto yh = half.output<0>();
        auto yf = full.output<0>();
        for (std::size_t b = 0; b < Bn; ++b) {
            const std::size_t p = std::size_t(pos[b]);
            INFO("step " << t << ", sequence " << b);
            // The cache holds each written key and value rounded to bf16, bit for bit.
            for (std::size_t d = 0; d < D; ++d) {
                CHECK(kh[(b * D + d) * C + p] == kernels::to_bf16(k[b * D + d]));
                CHECK(vh[(b * C + p) * D + d] == kernels::to_bf16(v[b * D + d]));
                CHECK(kf[(b * D + d) * C + p] == k[b * D + d]);
            }
            // The output: softmax(q . k_j / sqrt(dh)) v_j over positions 0 .. p in double from the
            // rounded entries, per head.
            const auto want = attend_reference(
                q.data() + b * D, p, [&](std::size_t d, std::size_t j) { return kernels::from_bf16(kh[(b * D + d) * C + j]); },
                [&](std::size_t j, std::size_t d) { return kernels::from_bf16(vh[(b * C + j) * D + d]); });
            for (std::size_t d = 0; d < D; ++d) {
                CHECK(std::abs(yh(b, 0, d) - want[d]) <= 2e-6 * std::max(1.0, std::abs(want[d])));
                differs = std::max(differs, double(std::abs(yh(b, 0, d) - yf(b, 0, d))));
            }
        }
    }
    CHECK(differs > 1e-4);  // the float cache's attention is another (unrounded) computation

    // Caches fed as floats (not bound) are kept rounded: a step at positions 3 and 5 reads
    // positions before them as the fed floats rounded to bf16.
    auto fed = cached_step<bf16_input>();
    std::vector<float> ck(Bn * D * C), cv(Bn * C * D), q(Bn * D), k(Bn * D), v(Bn * D);
    for (std::size_t i = 0; i < ck.size(); ++i) ck[i] = std::sin(0.7f * float(i)) / 3, cv[i] = std::cos(0.3f * float(i)) * 5;
    for (std::size_t i = 0; i < Bn * D; ++i) q[i] = normal(rng), k[i] = normal(rng), v[i] = normal(rng);
    const std::vector<index_t> pos = {3, 5};
    fed.feed("cache_k", ck.data(), rshape{3, {Bn, D, C}});
    fed.feed("cache_v", cv.data(), rshape{3, {Bn, C, D}});
    fed.feed("q", q.data(), rshape{3, {Bn, 1, D}});
    fed.feed("k", k.data(), rshape{3, {Bn, 1, D}});
    fed.feed("v", v.data(), rshape{3, {Bn, 1, D}});
    fed.feed("pos", pos.data(), rshape{1, {Bn}});
    fed.forward();
    auto y = fed.output<0>();
    for (std::size_t b = 0; b < Bn; ++b) {
        const std::size_t p = std::size_t(pos[b]);
        const auto want = attend_reference(
            q.data() + b * D, p,
            [&](std::size_t d, std::size_t j) { return kernels::round_bf16(j == p ? k[b * D + d] : ck[(b * D + d) * C + j]); },
            [&](std::size_t j, std::size_t d) { return kernels::round_bf16(j == p ? v[b * D + d] : cv[(b * C + j) * D + d]); });
        for (std::size_t d = 0; d < D; ++d) CHECK(std::abs(y(b, 0, d) - want[d]) <= 2e-6 * std::max(1.0, std::abs(want[d])));
    }
    // Memory of the wrong kind is refused by name.
    CHECK_THROWS_WITH(half.bind("cache_k", kf.data(), rshape{3, {Bn, D, C}}),
                      Catch::Contains("input 'cache_k' is a bf16_input, given floating-point memory"));
    CHECK_THROWS_WITH(full.bind("cache_k", kh.data(), rshape{3, {Bn, D, C}}),
                      Catch::Contains("input 'cache_k' is a floating-point input, given bf16 memory"));
    CHECK_THAT(half.to_text(), Catch::Contains("bf16_input \"cache_k\""));
}

TEST_CASE("a prefill stores a prompt's keys and values in a bf16 cache, rounded, in either layout", "[generate][bf16]") {
    constexpr std::size_t Bn = 2, Tn = 5, C = 7, D = 8;
    using K3 = input<"k", B, T, 8>;
    auto prog = compile<float, options{.inference = true}>(cache_store<true>(K3{}, bf16_input<"cache_k", B, 8, Cap>{}),
                                                           cache_store(K3{}, bf16_input<"cache_v", B, Cap, 8>{}));
    std::vector<kernels::bf16_bits> kc(Bn * D * C, 0), vc(Bn * C * D, 0);
    prog.bind("cache_k", kc.data(), rshape{3, {Bn, D, C}});
    prog.bind("cache_v", vc.data(), rshape{3, {Bn, C, D}});
    std::vector<float> k(Bn * Tn * D);
    for (std::size_t i = 0; i < k.size(); ++i) k[i] = std::sin(float(i) * 0.37f) * 10.0f + 0.001f * float(i);
    prog.feed("k", k.data(), rshape{3, {Bn, Tn, D}});
    prog.forward();
    auto y = prog.output<0>();
    for (std::size_t b = 0; b < Bn; ++b)
        for (std::size_t t = 0; t < C; ++t)
            for (std::size_t d = 0; d < D; ++d) {
                const kernels::bf16_bits want = t < Tn ? kernels::to_bf16(k[(b * Tn + t) * D + d]) : 0;
                CHECK(kc[(b * D + d) * C + t] == want);
                CHECK(vc[(b * C + t) * D + d] == want);
                if (t < Tn) CHECK(y(b, t, d) == k[(b * Tn + t) * D + d]);  // the op returns k itself, unrounded
            }
}

TEST_CASE("decoding from a bf16 KV cache stays within bf16's rounding of a full recompute, in half the bytes",
          "[generate][bf16]") {
    auto store = trained_looking_store();
    nn::gpt_generator<model, float, precision::f32, precision::bf16> half(store, 3, 40);
    nn::gpt_generator<model> full(store, 3, 40);
    static_assert(std::is_same_v<decltype(half)::cache_element, kernels::bf16_bits>);
    static_assert(std::is_same_v<nn::gpt_generator<model, float, precision::bf16>::cache_element, kernels::bf16_bits>);
    static_assert(std::is_same_v<decltype(full)::cache_element, float>);
    CHECK(2 * half.cache_bytes() == full.cache_bytes());
    recompute ref(store);
    const std::vector<std::vector<int>> prompts = {{1, 2, 3, 4, 5}, {7, 8}, {12, 0, 3, 3, 9, 1, 2}};
    std::vector<std::vector<float>> logits;
    const auto out = half.generate(prompts, 12, &logits);
    float worst_ratio = 0, largest = 0;
    for (std::size_t b = 0; b < 3; ++b) {
        std::vector<int> seq = prompts[b];
        for (std::size_t t = 0; t < 12; ++t) {
            const logit_gap gap(logits[b], t * 13, ref.last_logits(seq), 1.0f);
            worst_ratio = std::max(worst_ratio, gap.worst / gap.scale);
            largest = std::max(largest, gap.worst);
            seq.push_back(out[b][t]);
        }
    }
    INFO("largest difference from the recompute " << largest << ", relative " << worst_ratio);
    CHECK(worst_ratio <= 1e-2f);  // keys and values rounded to 8 significant bits
    CHECK(largest > 1e-5f);       // more than float's own differences (1e-5 in the test above)
}
