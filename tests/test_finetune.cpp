// Fine-tuning: frozen parameters decided at compile time (options::frozen, options::trainable) and
// stop_gradient. A frozen program's trainable gradients are the full program's bit for bit; the
// products that would lead only to frozen parameters do not run (counted by kernels::gemm, and as
// the summary predicts); frozen parameters keep their bits through training, have no gradient
// memory and no optimizer state; a checkpoint of one frozen set does not resume another.
#include <catch2/catch.hpp>

#include <cstring>
#include <random>
#include <string>
#include <vector>

#include <ctgraph/checkpoint.hpp>
#include <ctgraph/ctgraph.hpp>
#include <ctgraph/xtensor.hpp>
#include <ctgraph/train.hpp>

#include "gradcheck.hpp"
#include "random_tokens.hpp"
#include "temp_dir.hpp"

using namespace ctg;
using Catch::Matchers::Contains;

namespace {

inline constexpr dim B = dyn('B'), T = dyn('T');

using small_gpt = nn::gpt<11, 8, 8, 2, 2, 16>;
auto gpt_loss() { return small_gpt::loss(index_input<"tokens", B, T>{}, index_input<"targets", B, T>{}); }

template <class P>
void feed_tokens(P& p, std::uint64_t seed) { testing::feed_random_tokens(p, seed, 4, 6); }

template <class S>
bool same_values(const parameter_store<S>& a, std::size_t sa, const parameter_store<S>& b, std::size_t sb) {
    return a.at(sa).shape == b.at(sb).shape &&
           std::memcmp(a.value(sa), b.value(sb), a.at(sa).shape.size() * sizeof(S)) == 0;
}

// One forward and backward of a frozen program and of the full program from the same weights:
// every trainable gradient bit for bit, the frozen ones absent; the products kernels::gemm ran in
// backward as the summary predicts, and fewer than the full program's by what it says freezing saves.
// forward_only_blocks: nothing below the head trains, so no adjoint reaches the blocks' repeat,
// which then keeps one layer's values (as in inference) and the arena is smaller.
template <class S, options Frozen, class Pred>
void compare_with_full(Pred expect_frozen, bool forward_only_blocks = false) {
    auto full = compile<S>(gpt_loss());
    auto frz = compile<S, Frozen>(gpt_loss());
    full.params().init(7);
    frz.params().init(7);
    REQUIRE(full.params().size() == frz.params().size());
    auto& counter = kernels::gemm_flop_counter();
    std::uint64_t backward_products[2]{};
    int k = 0;
    for (auto* run : {static_cast<void*>(&full), static_cast<void*>(&frz)}) {
        auto go = [&](auto& p) {
            feed_tokens(p, 1);
            p.zero_grad();
            p.forward();
            counter = 0;
            p.backward();
            backward_products[k++] = counter.load();
        };
        if (run == &full) go(full); else go(frz);
    }
    const auto& fs = frz.params();
    std::size_t frozen = 0, frozen_elements = 0, wanted = 0;
    for (std::size_t s = 0; s < fs.size(); ++s) {
        const std::string& name = fs.at(s).name;
        const bool want = expect_frozen(name);
        wanted += want;
        INFO(name);
        CHECK(fs.frozen(s) == want);
        if (fs.frozen(s)) {
            ++frozen, frozen_elements += fs.at(s).shape.size();
            CHECK_THROWS_WITH(frz.params().grad(s), Contains("'" + name + "' is frozen"));
            continue;
        }
        const std::size_t f = full.params().slot(name);
        REQUIRE(std::memcmp(frz.params().grad(s), full.params().grad(f), fs.at(s).shape.size() * sizeof(S)) == 0);
    }
    CHECK(frozen == wanted);
    CHECK(frozen > 0);
    CHECK(frozen < fs.size());
    CHECK(fs.grad_elements() < full.params().grad_elements());
    // The summary: the counts, and the products as kernels::gemm ran them.
    const model_summary sf = frz.summary({{'B', 4}, {'T', 6}}), sa = full.summary({{'B', 4}, {'T', 6}});
    CHECK(sf.frozen_params == frozen_elements);
    CHECK(sf.params == sa.params);
    CHECK(sa.frozen_params == 0);
    CHECK(sf.flops.backward_products == backward_products[1]);
    CHECK(sa.flops.backward_products == backward_products[0]);
    CHECK(sf.frozen_saved_backward_products == backward_products[0] - backward_products[1]);
    CHECK(sf.flops.backward + sf.frozen_saved_backward == sa.flops.backward);
    CHECK_THAT(sf.to_string(), Contains(std::to_string(sf.params - frozen_elements) + " trainable, " +
                                        std::to_string(frozen_elements) + " frozen"));
    CHECK_THAT(sf.to_string(), Contains("freezing saves"));
    // the arena as the summary plans it; a repeat no adjoint reaches keeps one layer's values
    CHECK(frz.arena_elements() * sizeof(S) == sf.arena_bytes);
    CHECK(full.arena_elements() * sizeof(S) == sa.arena_bytes);
    if (forward_only_blocks) CHECK(double(sf.arena_bytes) < 0.75 * double(sa.arena_bytes));
}

}  // namespace

TEST_CASE("entries of options::frozen match names, prefixes cut at a dot and '*' patterns", "[finetune]") {
    using ctg::detail::name_matches;
    CHECK(name_matches("head.weight", "head.weight"));
    CHECK(name_matches("h", "h.attn.w"));
    CHECK(name_matches("h.", "h.attn.w"));
    CHECK_FALSE(name_matches("h", "head.weight"));   // a prefix is cut at a '.'
    CHECK_FALSE(name_matches("he", "head.weight"));
    CHECK_FALSE(name_matches("head.weight", "head.weights"));
    CHECK(name_matches("*lora_*", "blocks.attn.q.lora_A"));
    CHECK_FALSE(name_matches("*lora_*", "blocks.attn.q.weight"));
    CHECK(name_matches("*.bias", "head.bias"));
    CHECK_FALSE(name_matches("*.bias", "head.bias_x"));
    CHECK(name_matches("blocks.*.weight", "blocks.ln1.weight"));
    CHECK_FALSE(name_matches("blocks.*.weight", "blocks.ln1.bias"));
    CHECK(name_matches("a*b*c", "aXbYbZc"));  // backtracking over a repeated letter
    CHECK(name_matches("a*bc", "abcbc"));
    CHECK_FALSE(name_matches("a*c", "ab"));
    CHECK(name_matches("*", "x"));
    using P = decltype(compile<float, options{.frozen = "tok_embed, *.bias", .trainable = "blocks. head."}>(gpt_loss()));
    using G = P::graph_type;
    CHECK(G::param_frozen("tok_embed"));      // listed
    CHECK(G::param_frozen("head.bias"));      // listed by pattern, though trainable lists head.
    CHECK(G::param_frozen("ln_f.weight"));    // not trainable
    CHECK_FALSE(G::param_frozen("head.weight"));
    CHECK_FALSE(G::param_frozen("blocks.ln1.weight"));
    CHECK(G::unmatched_freeze_entry.data[0] == 0);
    // (a program over it would not compile: tests/compile_fail/frozen_unknown_name.cpp)
    using Q = graph<ctg::detail::topo_order<decltype(gpt_loss())>, options{.frozen = "tok_embed heads."}, 1>;
    CHECK(Q::unmatched_freeze_entry.view().substr(0, 6) == "heads.");  // what the compile error names
}

TEMPLATE_TEST_CASE("a frozen program's gradients are the full program's bit for bit, and frozen products do not run",
                   "[finetune]", float, double) {
    using S = TestType;
    // (the expected sets by plain string tests, not by the matcher under test)
    SECTION("the embedding frozen: everything above it trains") {
        compare_with_full<S, options{.frozen = "tok_embed"}>([](const std::string& n) { return n == "tok_embed"; });
    }
    SECTION("only the head trains (options::trainable)") {
        compare_with_full<S, options{.trainable = "head."}>([](const std::string& n) { return n.rfind("head.", 0) != 0; }, true);
    }
    SECTION("a repeat's stacked parameters frozen whole: the embedding below them still trains") {
        compare_with_full<S, options{.frozen = "blocks"}>([](const std::string& n) { return n.rfind("blocks.", 0) == 0; });
    }
    SECTION("every bias and the attention's query weights frozen, by pattern") {
        compare_with_full<S, options{.frozen = "*bias, blocks.q.*"}>([](const std::string& n) {
            return n.size() >= 4 && (n.substr(n.size() - 4) == "bias" || n == "blocks.q.weight");
        });
    }
}

TEMPLATE_TEST_CASE("training keeps frozen parameters bit for bit: no update, no decay, no optimizer state", "[finetune]",
                   float, double) {
    using S = TestType;
    auto fused = compile<S, options{.frozen = "tok_embed blocks."}>(gpt_loss());
    auto plain = compile<S, options{.frozen = "tok_embed blocks."}>(gpt_loss());
    fused.params().init(3);
    plain.params().init(3);
    const parameter_store<S> start = fused.params();
    auto opt_f = optim::adamw<S>({.lr = 1e-2, .weight_decay = 0.1});
    auto opt_p = optim::adamw<S>({.lr = 1e-2, .weight_decay = 0.1});
    const double clip = GENERATE(0.0, 0.5);
    for (int step = 0; step < 3; ++step) {
        feed_tokens(fused, std::uint64_t(step));
        feed_tokens(plain, std::uint64_t(step));
        train_step(fused, opt_f, clip);  // the update fused into backward (or the plain order, clipping)
        plain.zero_grad();
        plain.forward();
        plain.backward();
        if (clip > 0) optim::clip_grad_norm(plain.params(), clip);
        opt_p.step(plain.params());
    }
    const auto& ps = fused.params();
    std::size_t moved = 0;
    for (std::size_t s = 0; s < ps.size(); ++s) {
        INFO(ps.at(s).name);
        REQUIRE(same_values(ps, s, plain.params(), s));  // fused = plain, bit for bit
        if (ps.frozen(s)) CHECK(same_values(ps, s, start, s));
        else moved += !same_values(ps, s, start, s);
    }
    CHECK(moved == 4);  // ln_f.weight, ln_f.bias, head.weight, head.bias
    std::size_t states = 0;
    opt_f.for_each_state([&](const char*, const aligned_vector<S>& v) {
        ++states;
        CHECK(v.size() == ps.grad_elements());  // the trainable parameters' elements only
    });
    CHECK(states == 2);
    CHECK(ps.grad_elements() < ps.values().size() / 4);
    CHECK_THROWS_WITH(opt_f.update(fused.params(), ps.slot("tok_embed")), Contains("'tok_embed' is frozen"));
}

TEST_CASE("finite differences: the trainable gradients of frozen programs", "[finetune][gradcheck]") {
    using X = input<"x", B, 4>;
    auto mlp = tanh(X{} * param<"l1.W", 4, 5>{} + param<"l1.b", 5>{}) * param<"l2.W", 5, 3>{} + param<"l2.b", 3>{};
    CHECK(testing::check_gradients<options{.frozen = "l1."}>(mlp) > 0);
    CHECK(testing::check_gradients<options{.trainable = "l1.b"}>(mlp) > 0);
    testing::check_config cfg;
    cfg.dims = {{'B', 2}, {'T', 3}};
    cfg.index_bound = {{"tokens", 11}, {"targets", 11}};
    cfg.tol = 2e-6;
    CHECK(testing::check_gradients<options{.frozen = "blocks."}>(gpt_loss(), cfg) > 0);
    CHECK(testing::check_gradients<options{.trainable = "blocks.fc1.*"}>(gpt_loss(), cfg) > 0);
}

TEMPLATE_TEST_CASE("stop_gradient: the operand's value, and no gradient through it", "[finetune]", float, double) {
    using S = TestType;
    using X = input<"x", B, 4>;
    using Y = input<"y", B, 3>;
    using W1 = param<"W1", 4, 5>;
    using W2 = param<"W2", 5, 3>;
    using W3 = param<"W3", 5, 3>;
    std::vector<S> x(2 * 4), y(2 * 3);
    std::mt19937_64 rng(5);
    std::uniform_real_distribution<double> u(-1, 1);
    for (auto& v : x) v = S(u(rng));
    for (auto& v : y) v = S(u(rng));
    SECTION("in a program: the same gradients as with the stopped value fed as an input") {
        auto h = tanh(X{} * W1{});
        auto prog = compile<S>(mse_loss(stop_gradient(h) * W2{} + h * W3{}, Y{}));
        using H = input<"hs", B, 5>;
        auto ref = compile<S>(mse_loss(H{} * W2{} + h * W3{}, Y{}));
        prog.params().init(2);
        ref.params().init(2);
        prog.feed("x", x.data(), rshape{2, {2, 4}});
        prog.feed("y", y.data(), rshape{2, {2, 3}});
        prog.forward();
        auto hv = prog.value_of(h);
        CHECK(std::memcmp(prog.value_of(stop_gradient(h)).data(), hv.data(), hv.size() * sizeof(S)) == 0);
        std::vector<S> hs(hv.begin(), hv.end());
        ref.feed("x", x.data(), rshape{2, {2, 4}});
        ref.feed("y", y.data(), rshape{2, {2, 3}});
        ref.feed("hs", hs.data(), rshape{2, {2, 5}});
        CHECK(prog.forward() == ref.forward());
        prog.backward();
        ref.backward();
        for (const char* name : {"W1", "W2", "W3"}) {
            INFO(name);
            const std::size_t a = prog.params().slot(name), b = ref.params().slot(name);
            CHECK(std::memcmp(prog.params().grad(a), ref.params().grad(b), prog.params().at(a).shape.size() * sizeof(S)) == 0);
        }
        // A parameter read only through stop_gradient trains, with a gradient of zero.
        auto only = compile<S>(mse_loss(stop_gradient(X{} * W1{}) * W2{}, Y{}));
        only.params().init(2);
        only.feed("x", x.data(), rshape{2, {2, 4}});
        only.feed("y", y.data(), rshape{2, {2, 3}});
        only.forward();
        only.backward();
        const S* g1 = only.params().grad(only.params().slot("W1"));
        CHECK(std::all_of(g1, g1 + 20, [](S v) { return v == S(0); }));
        const S* g2 = only.params().grad(only.params().slot("W2"));
        CHECK(std::any_of(g2, g2 + 15, [](S v) { return v != S(0); }));
    }
    SECTION("in a repeat's block: the residual's identity alone carries the adjoint down") {
        using V = param<"V", 4, 4>;
        // y = x + sg(tanh(x V)) per layer: dL/dx = dL/dy through three layers, V's gradient zero.
        auto out = repeat<3, "layers.">([](auto h) { return h + stop_gradient(tanh(h * V{})); }, X{});
        using G = input<"g", B, 4>;
        auto prog = compile<S, options{.input_grads_for = "x"}>(sum(mul(out, G{})));
        prog.params().init(4);
        std::vector<S> g(2 * 4);
        for (auto& v : g) v = S(u(rng));
        prog.feed("x", x.data(), rshape{2, {2, 4}});
        prog.feed("g", g.data(), rshape{2, {2, 4}});
        prog.forward();
        prog.backward();
        auto dx = prog.template input_grad<"x">();
        CHECK(std::equal(dx.begin(), dx.end(), g.begin()));
        const S* gv = prog.params().grad(prog.params().slot("layers.V"));
        CHECK(std::all_of(gv, gv + 3 * 16, [](S v) { return v == S(0); }));
        // and its forward is the composed value: x + tanh(x V) per layer
        std::vector<S> h(x);
        const S* v = prog.params().value(prog.params().slot("layers.V"));
        for (int l = 0; l < 3; ++l) {
            std::vector<S> next(h);
            for (int r = 0; r < 2; ++r)
                for (int j = 0; j < 4; ++j) {
                    S acc = 0;
                    for (int i = 0; i < 4; ++i) acc += h[std::size_t(r * 4 + i)] * v[l * 16 + i * 4 + j];
                    next[std::size_t(r * 4 + j)] += std::tanh(acc);
                }
            h = next;
        }
        auto y_out = prog.value_of(out);
        for (std::size_t i = 0; i < h.size(); ++i) CHECK(double(y_out[i]) == Approx(double(h[i])).epsilon(1e-5));
    }
}

TEST_CASE("a checkpoint of one frozen set does not resume another, and nothing changes", "[finetune]") {
    testing::temp_dir dir;
    auto a = compile<double, options{.trainable = "head."}>(gpt_loss());
    a.params().init(1);
    auto opt = optim::adamw<double>({.lr = 1e-2});
    feed_tokens(a, 0);
    train_step(a, opt);
    checkpoint::save(dir / "a.ckpt", a.params(), opt, run_state{});
    {  // the same frozen set resumes
        auto same = compile<double, options{.trainable = "head."}>(gpt_loss());
        auto o = optim::adamw<double>({.lr = 1e-2});
        checkpoint::load(dir / "a.ckpt", same.params(), o);
        CHECK(o.steps() == 1);
        CHECK(same_values(same.params(), 0, a.params(), 0));
    }
    SECTION("a parameter that trains now was frozen then") {
        auto more = compile<double, options{.trainable = "head. ln_f."}>(gpt_loss());
        more.params().init(9);
        const parameter_store<double> before = more.params();
        auto o = optim::adamw<double>({.lr = 1e-2});
        CHECK_THROWS_WITH(checkpoint::load(dir / "a.ckpt", more.params(), o),
                          Contains("'ln_f.") && Contains("trains in this run but has no optimizer state"));
        for (std::size_t s = 0; s < before.size(); ++s) CHECK(same_values(before, s, more.params(), s));
        CHECK(o.steps() == 0);
    }
    SECTION("other parameter groups") {
        auto same = compile<double, options{.trainable = "head."}>(gpt_loss());
        auto o = optim::adamw<double>({.lr = 1e-2, .groups = {{.max_rank = 1, .weight_decay = 0}}});
        CHECK_THROWS_WITH(checkpoint::load(dir / "a.ckpt", same.params(), o),
                          Contains("the checkpoint's parameter groups are [none], this run's are [names ''"));
        // and saved with groups, resumed with the same groups
        feed_tokens(same, 0);
        train_step(same, o);
        checkpoint::save(dir / "g.ckpt", same.params(), o, run_state{});
        auto p = optim::adamw<double>({.lr = 1e-2, .groups = {{.max_rank = 1, .weight_decay = 0}}});
        checkpoint::load(dir / "g.ckpt", same.params(), p);
        CHECK(p.steps() == 1);
        auto q = optim::adamw<double>({.lr = 1e-2, .groups = {{.max_rank = 1, .weight_decay = 0.01}}});
        CHECK_THROWS_WITH(checkpoint::load(dir / "g.ckpt", same.params(), q), Contains("weight decay 0.01"));
    }
    SECTION("a parameter that is frozen now trained then") {
        auto fewer = compile<double, options{.trainable = "head.weight"}>(gpt_loss());
        auto o = optim::adamw<double>({.lr = 1e-2});
        CHECK_THROWS_WITH(checkpoint::load(dir / "a.ckpt", fewer.params(), o),
                          Contains("'head.bias' is frozen in this run"));
    }
}

// ---------------------------------------------------------------------------------------- accumulation
namespace {

// 30 sequences of 6 tokens and their targets, as dataset columns and as raw rows.
struct token_rows {
    xt::xtensor<int, 2> tokens = xt::zeros<int>({std::size_t(30), std::size_t(6)});
    xt::xtensor<int, 2> targets = xt::zeros<int>({std::size_t(30), std::size_t(6)});
    token_rows() {
        std::mt19937_64 rng(21);
        for (auto& v : tokens) v = int(rng() % 11);
        for (auto& v : targets) v = int(rng() % 11);
    }
    template <class P>
    void feed(P& p, std::size_t first, std::size_t n) const {
        std::vector<index_t> a(n * 6), b(n * 6);
        for (std::size_t i = 0; i < n * 6; ++i) a[i] = tokens.data()[first * 6 + i], b[i] = targets.data()[first * 6 + i];
        p.feed("tokens", a.data(), rshape{2, {n, 6}});
        p.feed("targets", b.data(), rshape{2, {n, 6}});
    }
};

// The largest difference of two arrays relative to the largest element of the second.
template <class A>
double max_relative_difference(const A& a, const A& b) {
    double worst = 0, scale = 0;
    for (std::size_t i = 0; i < b.size(); ++i) {
        worst = std::max(worst, std::abs(double(a[i]) - double(b[i])));
        scale = std::max(scale, std::abs(double(b[i])));
    }
    return worst / scale;
}

}  // namespace

TEMPLATE_TEST_CASE("k micro-batches are one step on the k-times batch", "[finetune][accumulate]", float, double) {
    using S = TestType;
    const double tol = std::is_same_v<S, double> ? 1e-12 : 2e-5;
    const token_rows data;
    const double clip = GENERATE(0.0, 0.05);  // fused into the last backward, or after it, on the accumulated gradient
    const std::size_t threads = GENERATE(1, 2);
    set_num_threads(threads);
    INFO("clip " << clip << ", " << threads << " threads");
    auto whole = compile<S, options{.frozen = "tok_embed"}>(gpt_loss());
    auto micro = compile<S, options{.frozen = "tok_embed"}>(gpt_loss());
    whole.params().init(5);
    micro.params().init(5);
    // (SGD: a step is linear in the gradient; Adam's first steps are sign(g) for every element, so a
    // gradient of 1e-16 against -1e-16 moves a weight by the whole learning rate either way)
    optim::sgd<S> opt_w({.lr = 0.1, .momentum = 0.9, .weight_decay = 0.1}), opt_m({.lr = 0.1, .momentum = 0.9, .weight_decay = 0.1});
    for (int step = 0; step < 2; ++step) {
        // 11 samples: micro-batches of 4, 4 and a shorter last one of 3
        data.feed(whole, std::size_t(step) * 11, 11);
        const S lw = train_step(whole, opt_w, clip);
        const std::size_t sizes[] = {4, 4, 3};
        const S lm = train_step(micro, opt_m, std::span<const std::size_t>(sizes),
                                [&](std::size_t i) { data.feed(micro, std::size_t(step) * 11 + i * 4, sizes[i]); }, clip);
        CHECK(std::abs(double(lm) - double(lw)) <= tol * std::abs(double(lw)));
        CHECK(max_relative_difference(micro.params().grads(), whole.params().grads()) <= tol);  // the accumulated gradient
        CHECK(max_relative_difference(micro.params().values(), whole.params().values()) <= tol);
    }
    // the weights moved, and the frozen embedding did not
    const auto fresh = [] {
        auto p = compile<S>(gpt_loss());
        p.params().init(5);
        return p.params();
    }();
    CHECK(max_relative_difference(micro.params().values(), fresh.values()) > 1e-3);
    const std::size_t e = micro.params().slot("tok_embed");
    CHECK(same_values(micro.params(), e, fresh, fresh.slot("tok_embed")));
    set_num_threads(1);
}

TEST_CASE("the trainer accumulates: batch 4 x 3 micro-batches equals batch 12, and resumes exactly", "[finetune][accumulate]") {
    const token_rows data;
    dataset<double> train{{"tokens", data.tokens}, {"targets", data.targets}};
    auto run = [&](std::size_t batch, std::size_t accumulate, long max_steps, const std::string& dir, bool resume) {
        auto prog = compile<double>(gpt_loss());
        prog.params().init(3);
        optim::sgd<double> opt({.lr = 0.1, .momentum = 0.9});
        trainer t(prog, opt,
                  {.batch = batch, .accumulate = accumulate, .epochs = 2, .max_steps = max_steps, .seed = 4,
                   .checkpoint_every = dir.empty() ? 0 : 1, .out_dir = dir, .name = "acc", .log = nullptr});
        if (resume) REQUIRE(t.resume_latest());
        t.fit(train);
        return std::pair{prog.params(), t.history()};
    };
    // 30 samples: steps of 12, 12 and 6 (micro-batches 4, 4 | 4, 4, 4 | 4, 2), two epochs
    const auto [whole, hw] = run(12, 1, 0, "", false);
    const auto [micro, hm] = run(4, 3, 0, "", false);
    CHECK(max_relative_difference(micro.values(), whole.values()) <= 1e-12);
    REQUIRE(hw.size() == hm.size());
    for (std::size_t i = 0; i < hw.size(); ++i) {
        CHECK(hm[i].step == hw[i].step);
        CHECK(hm[i].train_loss == Approx(hw[i].train_loss).epsilon(1e-12));
    }
    // interrupted after 4 of the 6 steps and resumed from its checkpoint: the uninterrupted weights, bit for bit
    testing::temp_dir dir;
    run(4, 3, 4, dir / "run", false);
    const auto [resumed, hr] = run(4, 3, 0, dir / "run", true);
    CHECK(std::memcmp(resumed.values().data(), micro.values().data(), micro.values().size() * sizeof(double)) == 0);
    // a resume with another accumulation is refused
    auto prog = compile<double>(gpt_loss());
    optim::sgd<double> opt({.lr = 0.1, .momentum = 0.9});
    trainer t(prog, opt, {.batch = 4, .accumulate = 2, .epochs = 2, .seed = 4, .out_dir = dir / "run", .name = "acc", .log = nullptr});
    CHECK_THROWS_WITH(t.resume_latest(), Contains("accumulate 3"));
}

TEST_CASE("set_frozen lays the gradients out again: the parameters that trained keep theirs", "[finetune]") {
    parameter_store<double> ps;
    ps.add("a", rshape{1, {3}});
    ps.add("b", rshape{1, {5}});
    ps.add("c", rshape{1, {2}});
    for (std::size_t s = 0; s < 3; ++s)
        for (std::size_t i = 0; i < ps.at(s).shape.size(); ++i) ps.grad(s)[i] = double(10 * (s + 1) + i);
    const std::size_t all = ps.grad_elements();
    ps.set_frozen(1, true);
    CHECK(ps.grad_elements() < all);
    CHECK_THROWS_WITH(ps.grad(1), Contains("'b' is frozen"));
    CHECK(ps.grad(0)[2] == 12.0);
    CHECK(ps.grad(2)[1] == 31.0);
    // a frozen and b trained again, in one call: b's gradient starts at zero, c keeps its own
    const std::size_t slots[] = {0, 1};
    ps.set_frozen(2, slots, [](std::size_t k) { return k == 0; });
    CHECK(ps.frozen(0));
    CHECK_FALSE(ps.frozen(1));
    CHECK(std::all_of(ps.grad(1), ps.grad(1) + 5, [](double v) { return v == 0.0; }));
    CHECK(ps.grad(2)[0] == 30.0);
    CHECK(ps.grad(2)[1] == 31.0);
    CHECK(ps.num_trainable_elements() == 7);
}
