// LoRA adapters (nn/lora.hpp): the adapted projection's value, PEFT's initialisation, a GPT with
// adapters on its queries and values inside repeat (stacked per layer) that starts as the base
// model bit for bit and trains only its adapters, finite differences, merge (the base model's
// program over the merged weights gives the adapted logits), and the adapters' own file.
#include <catch2/catch.hpp>

#include <cmath>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include <ctgraph/ctgraph.hpp>
#include <ctgraph/xtensor.hpp>
#include <ctgraph/nn/lora.hpp>
#include <ctgraph/train.hpp>

#include "gradcheck.hpp"
#include "random_tokens.hpp"
#include "temp_dir.hpp"

using namespace ctg;
using Catch::Matchers::Contains;

namespace {

inline constexpr dim B = dyn('B'), T = dyn('T');

using adapters = nn::lora<4, 8.0, "q.", "v.">;
using base_gpt = nn::gpt<11, 8, 8, 2, 2, 16>;
using lora_gpt = nn::gpt<11, 8, 8, 2, 2, 16, void, 0.0, adapters>;
using Tokens = index_input<"tokens", B, T>;
using Targets = index_input<"targets", B, T>;

template <class P>
void feed_tokens(P& p, std::uint64_t seed) {
    testing::feed_random_tokens(p, seed, 3, 6, 11, "tokens", P::template has_input<"targets"> ? "targets" : "");
}

template <class S>
void copy_common(const parameter_store<S>& from, parameter_store<S>& to) {
    for (std::size_t s = 0; s < to.size(); ++s)
        if (const long f = from.find(to.at(s).name); f >= 0)
            std::copy_n(from.value(std::size_t(f)), to.at(s).shape.size(), to.value(s));
}

}  // namespace

TEST_CASE("a LoRA projection is x W + b + (alpha / r) (x A) B", "[lora]") {
    using lin = nn::lora<2, 3.0, "lin.">;
    STATIC_REQUIRE(lin::adapts<"enc.lin.">);
    STATIC_REQUIRE_FALSE(lin::adapts<"lin.x.">);
    auto prog = compile<double>(lin::linear<"lin.", 3, 5>(input<"x", B, 3>{}));
    auto& ps = prog.params();
    std::mt19937_64 rng(1);
    std::uniform_real_distribution<double> u(-1, 1);
    for (std::size_t s = 0; s < ps.size(); ++s)
        for (std::size_t i = 0; i < ps.at(s).shape.size(); ++i) ps.value(s)[i] = u(rng);
    std::vector<double> x(4 * 3);
    for (auto& v : x) v = u(rng);
    prog.feed("x", x.data(), rshape{2, {4, 3}});
    prog.forward();
    auto y = prog.output();
    const double *W = ps.value(ps.slot("lin.weight")), *b = ps.value(ps.slot("lin.bias")),
                 *A = ps.value(ps.slot("lin.lora_A")), *Bm = ps.value(ps.slot("lin.lora_B"));
    REQUIRE(ps.at(ps.slot("lin.lora_A")).shape == rshape{2, {3, 2}});
    REQUIRE(ps.at(ps.slot("lin.lora_B")).shape == rshape{2, {2, 5}});
    for (std::size_t r = 0; r < 4; ++r)
        for (std::size_t j = 0; j < 5; ++j) {
            double want = b[j];
            for (std::size_t i = 0; i < 3; ++i) want += x[r * 3 + i] * W[i * 5 + j];
            for (std::size_t k = 0; k < 2; ++k) {
                double xa = 0;
                for (std::size_t i = 0; i < 3; ++i) xa += x[r * 3 + i] * A[i * 2 + k];
                want += 1.5 * xa * Bm[k * 5 + j];
            }
            CHECK(y(r, j) == Approx(want).epsilon(1e-13));
        }
    CHECK(testing::check_gradients(lin::linear<"lin.", 3, 5>(input<"x", B, 3>{})) > 0);
    CHECK(testing::check_gradients<options{.trainable = "*lora_*"}>(lin::linear<"lin.", 3, 5>(input<"x", B, 3>{})) > 0);
}

TEST_CASE("adapters are initialised as PEFT's (A Kaiming-uniform, B zero), and init_matching leaves the rest", "[lora]") {
    auto prog = compile<float>(lora_gpt::loss(Tokens{}, Targets{}));
    auto& ps = prog.params();
    ps.init(3);
    const std::size_t a = ps.slot("blocks.q.lora_A"), b = ps.slot("blocks.v.lora_B");
    REQUIRE(ps.at(a).shape == rshape{3, {2, 8, 4}});  // stacked per layer: (L, In, r)
    REQUIRE(ps.at(b).shape == rshape{3, {2, 4, 8}});
    const float bound = 1.0f / std::sqrt(8.0f);
    float largest = 0;
    for (std::size_t i = 0; i < ps.at(a).shape.size(); ++i) largest = std::max(largest, std::abs(ps.value(a)[i]));
    CHECK(largest <= bound);
    CHECK(largest > 0.5f * bound);
    const float* bv = ps.value(b);
    CHECK(std::all_of(bv, bv + ps.at(b).shape.size(), [](float v) { return v == 0.0f; }));
    // init_matching: only the adapters
    const parameter_store<float> before = ps;
    CHECK(ps.init_matching("*lora_*", 9) == 4);
    for (std::size_t s = 0; s < ps.size(); ++s) {
        const bool adapter = ps.at(s).name.find("lora_") != std::string::npos;
        const bool same = std::memcmp(ps.value(s), before.value(s), ps.at(s).shape.size() * sizeof(float)) == 0;
        INFO(ps.at(s).name);
        CHECK(same == (!adapter || ps.at(s).name.ends_with("lora_B")));
    }
}

TEMPLATE_TEST_CASE("a GPT with adapters on q and v: the base model at first, then only the adapters train",
                   "[lora]", float, double) {
    using S = TestType;
    auto base = compile<S>(base_gpt::logits(Tokens{}));
    auto adapted = compile<S, options{.trainable = "*lora_*"}>(lora_gpt::loss(Tokens{}, Targets{}));
    auto adapted_logits = compile<S, options{.inference = true}>(lora_gpt::logits(Tokens{}));
    base.params().init(4);
    adapted.params().init(4);
    copy_common(base.params(), adapted.params());
    // B = 0: the adapted model's logits are the base model's, bit for bit
    program_for<S, options{.inference = true}, decltype(lora_gpt::logits(Tokens{}))> view(adapted.shared_params());
    feed_tokens(base, 1);
    feed_tokens(view, 1);
    base.forward();
    view.forward();
    auto lb = base.output();
    auto la = view.output();
    CHECK(std::memcmp(lb.data(), la.data(), lb.size() * sizeof(S)) == 0);
    // only the adapters train; the rest keeps every bit
    const parameter_store<S> start = adapted.params();
    CHECK(adapted.params().num_trainable_elements() == 4 * 2 * 8 * 4);
    auto opt = optim::adamw<S>({.lr = 1e-2});
    S first = 0, last = 0;
    for (int step = 0; step < 20; ++step) {
        feed_tokens(adapted, 7);
        const S l = train_step(adapted, opt);
        (step == 0 ? first : last) = l;
    }
    CHECK(last < first);
    const auto& ps = adapted.params();
    for (std::size_t s = 0; s < ps.size(); ++s) {
        const bool same = std::memcmp(ps.value(s), start.value(s), ps.at(s).shape.size() * sizeof(S)) == 0;
        INFO(ps.at(s).name);
        CHECK(same == (ps.at(s).name.find("lora_") == std::string::npos));
    }
    const model_summary sum = adapted.summary({{'B', 3}, {'T', 6}});
    CHECK(sum.params - sum.frozen_params == 4 * 2 * 8 * 4);
    CHECK(sum.frozen_saved_backward_products > 0);
    (void)adapted_logits;
}

TEST_CASE("finite differences: a GPT's adapters, the base frozen", "[lora][gradcheck]") {
    testing::check_config cfg;
    cfg.dims = {{'B', 2}, {'T', 3}};
    cfg.index_bound = {{"tokens", 11}, {"targets", 11}};
    cfg.tol = 2e-6;
    CHECK(testing::check_gradients<options{.trainable = "*lora_*"}>(lora_gpt::loss(Tokens{}, Targets{}), cfg) > 0);
}

TEMPLATE_TEST_CASE("merge folds the adapters into the weights: the base model's program gives the adapted logits",
                   "[lora]", float, double) {
    using S = TestType;
    auto adapted = compile<S, options{.inference = true}>(lora_gpt::logits(Tokens{}));
    auto& ps = adapted.params();
    ps.init(2);
    std::mt19937_64 rng(3);
    std::uniform_real_distribution<double> u(-0.3, 0.3);
    for (const char* name : {"blocks.q.lora_B", "blocks.v.lora_B"})  // (trained adapters: B not zero)
        for (std::size_t i = 0; i < ps.at(ps.slot(name)).shape.size(); ++i) ps.value(ps.slot(name))[i] = S(u(rng));
    const parameter_store<S> merged = adapters::merge(ps);
    CHECK(merged.size() == ps.size() - 4);
    CHECK(merged.find("blocks.q.lora_A") < 0);
    program_for<S, options{.inference = true}, decltype(base_gpt::logits(Tokens{}))> base(std::make_shared<parameter_store<S>>(merged));
    CHECK(base.params().size() == merged.size());  // nothing added: the merged store is the base model's
    feed_tokens(adapted, 2);
    feed_tokens(base, 2);
    adapted.forward();
    base.forward();
    auto la = adapted.output();
    auto lb = base.output();
    double worst = 0, scale = 0;
    for (std::size_t i = 0; i < la.size(); ++i) {
        worst = std::max(worst, std::abs(double(la.data()[i]) - double(lb.data()[i])));
        scale = std::max(scale, std::abs(double(la.data()[i])));
    }
    CHECK(worst <= (std::is_same_v<S, double> ? 1e-13 : 2e-6) * scale);
    // and the adapters did change the weights they fold into (the comparison is not trivial)
    const std::size_t w = ps.slot("blocks.q.weight");
    CHECK(std::memcmp(ps.value(w), merged.value(std::size_t(merged.find("blocks.q.weight"))),
                      ps.at(w).shape.size() * sizeof(S)) != 0);
}

TEST_CASE("adapters saved and loaded on their own, another model's or other adapters refused", "[lora]") {
    testing::temp_dir dir;
    auto a = compile<float, options{.trainable = "*lora_*"}>(lora_gpt::loss(Tokens{}, Targets{}));
    a.params().init(5);
    auto opt = optim::adamw<float>({.lr = 1e-2});
    feed_tokens(a, 0);
    train_step(a, opt);
    adapters::save(a.params(), dir / "adapters.safetensors");
    // only the adapters are in the file, under their names in the store
    const auto file = safetensors::read(dir / "adapters.safetensors");
    CHECK(file.size() == 4);
    CHECK(file.count("blocks.q.lora_A") == 1);
    // into a new model with the same base: equal adapters
    auto b = compile<float, options{.trainable = "*lora_*"}>(lora_gpt::loss(Tokens{}, Targets{}));
    b.params().init(6);
    adapters::load(b.params(), dir / "adapters.safetensors");
    for (const char* n : {"blocks.q.lora_A", "blocks.q.lora_B", "blocks.v.lora_A", "blocks.v.lora_B"})
        CHECK(std::memcmp(a.params().value(a.params().slot(n)), b.params().value(b.params().slot(n)),
                          a.params().at(a.params().slot(n)).shape.size() * sizeof(float)) == 0);
    SECTION("another rank") {
        using other = nn::lora<2, 8.0, "q.", "v.">;
        auto c = compile<float>(nn::gpt<11, 8, 8, 2, 2, 16, void, 0.0, other>::loss(Tokens{}, Targets{}));
        c.params().init(6);
        const parameter_store<float> before = c.params();
        CHECK_THROWS_WITH(other::load(c.params(), dir / "adapters.safetensors"), Contains("ctgraph.lora.rank 4, these have ctgraph.lora.rank 2"));
        CHECK(std::equal(before.values().begin(), before.values().end(), c.params().values().begin()));
    }
    SECTION("another model (other widths)") {
        using wide = nn::gpt<11, 8, 16, 2, 2, 32, void, 0.0, adapters>;
        auto c = compile<float>(wide::loss(Tokens{}, Targets{}));
        c.params().init(6);
        const parameter_store<float> before = c.params();
        CHECK_THROWS_WITH(adapters::load(c.params(), dir / "adapters.safetensors"),
                          Contains("tensor 'blocks.q.lora_A' has shape (2,8,4) in the file, (2,16,4) in the store"));
        CHECK(std::equal(before.values().begin(), before.values().end(), c.params().values().begin()));
    }
}

TEST_CASE("a strict (loaded) store takes new adapters, and still refuses any other new parameter", "[lora]") {
    auto base = compile<float>(base_gpt::loss(Tokens{}, Targets{}));
    base.params().init(1);
    auto loaded = std::make_shared<parameter_store<float>>(base.params());
    loaded->strict(true);
    program_for<float, options{.trainable = "*lora_*"}, decltype(lora_gpt::loss(Tokens{}, Targets{}))> adapted(loaded);
    CHECK(loaded->find("blocks.q.lora_A") >= 0);
    using other_head = nn::gpt<11, 8, 8, 2, 2, 16, void, 0.0, nn::lora<4, 8.0, "q.", "head.">>;
    auto fresh = std::make_shared<parameter_store<float>>(base.params());
    fresh->strict(true);
    CHECK_NOTHROW((program_for<float, options{}, decltype(other_head::loss(Tokens{}, Targets{}))>(fresh)));
    auto typo = std::make_shared<parameter_store<float>>(base.params());
    typo->strict(true);
    using renamed = nn::gpt<11, 8, 8, 2, 2, 16, void, 0.0>;
    CHECK_THROWS_WITH((program_for<float, options{}, decltype(renamed::loss(index_input<"tokens", B, T>{}, Targets{}) +
                                                              sum(param<"extra", 1>{}))>(typo)),
                      Contains("'extra'"));
}
