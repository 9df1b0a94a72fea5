// Per-layer finalisation inside repeat: program::backward_with(on_final(slot, first, count)) reports
// a stacked parameter's rows layer by layer, from the last layer down, each as soon as that layer's
// backward is done, and every other parameter whole. Checked here: every element of every slot is
// reported exactly once; a reported range already holds its final gradient (the bits the whole
// pass ends with); for_each_final lists the same calls; a stacked parameter also read outside the
// repeat is reported by layer only when that other reader's VJP runs first; train_step's range
// updates give the weights of the hand-written loop bit for bit (float and double, bf16 products,
// recomputation, one and two threads).
#include <catch2/catch.hpp>

#include <algorithm>
#include <cstring>
#include <string>
#include <vector>

#include <ctgraph/ctgraph.hpp>
#include <ctgraph/xtensor.hpp>
#include <ctgraph/train.hpp>

#include "pool_threads.hpp"

using namespace ctg;

namespace {
inline constexpr dim B = dyn('B'), T = dyn('T');
using Tok = index_input<"tokens", B, T>;
using Tgt = index_input<"targets", B, T>;
constexpr int V = 13, Ctx = 16, D = 12, H = 2, L = 3;  // D = 12: rows that are not whole SIMD batches
using gpt = nn::gpt<V, Ctx, D, H, L, 4 * D, void, 0.1>;
auto gpt_loss() { return gpt::loss(Tok{}, Tgt{}); }

xt::xtensor<int, 2> tokens(std::size_t b, std::size_t t, int salt) {
    xt::xtensor<int, 2> x = xt::zeros<int>({b, t});
    for (std::size_t i = 0; i < x.size(); ++i) x.data()[i] = int((i * 7 + std::size_t(salt) * 3 + i / 5) % V);
    return x;
}
template <class Prog>
void feed(Prog& p, int salt) {
    p.template feed<"tokens">(tokens(3, 10, salt));
    p.template feed<"targets">(tokens(3, 10, salt + 1));
}

struct report {
    std::size_t slot, first, count;
    std::vector<double> grad;  // the range's gradient when it was reported
    bool operator==(const report& o) const { return slot == o.slot && first == o.first && count == o.count; }
};

// One backward_with(range hook) of `p` after a forward: the calls, each with the gradient it saw.
template <class Prog>
std::vector<report> reports_of(Prog& p) {
    using S = typename Prog::scalar;
    std::vector<report> r;
    p.zero_grad();
    p.forward();
    p.backward_with([&](std::size_t slot, std::size_t first, std::size_t count) {
        const S* g = p.params().grad_storage(slot) + first;
        r.push_back({slot, first, count, std::vector<double>(g, g + count)});
    });
    return r;
}

// Every element of every slot once; each range's gradient as reported equals the final one.
template <class S>
void check_coverage(const parameter_store<S>& store, const std::vector<report>& r) {
    std::vector<std::vector<int>> seen(store.size());
    for (std::size_t s = 0; s < store.size(); ++s) seen[s].assign(store.at(s).shape.size(), 0);
    for (const report& x : r) {
        REQUIRE(x.slot < store.size());
        REQUIRE(x.first + x.count <= seen[x.slot].size());
        for (std::size_t i = 0; i < x.count; ++i) ++seen[x.slot][x.first + i];
        const S* g = store.grad(x.slot) + x.first;
        INFO(store.at(x.slot).name << " [" << x.first << ", " << x.first + x.count << ")");
        CHECK(std::equal(x.grad.begin(), x.grad.end(), g, [](double a, S b) { return a == double(b); }));
    }
    for (std::size_t s = 0; s < store.size(); ++s) {
        INFO(store.at(s).name);
        CHECK(std::all_of(seen[s].begin(), seen[s].end(), [](int k) { return k == 1; }));
    }
}

template <class S>
std::vector<report> listed(const auto& p) {
    std::vector<report> r;
    p.for_each_final([&](std::size_t slot, std::size_t first, std::size_t count) { r.push_back({slot, first, count, {}}); });
    return r;
}
}  // namespace

TEMPLATE_TEST_CASE("a repeat's stacked parameters are final layer by layer, last layer first", "[layer_final]", float, double) {
    using S = TestType;
    for (bool recompute : {false, true})
        for (int threads : {1, 2}) {
            INFO("recompute " << recompute << ", threads " << threads);
            testing::pool_threads pool(threads);
            auto run = [&](auto prog) {
                prog.params().add("extra", rshape{1, {5}});  // another program's: reported after the pass
                prog.params().init(3);
                prog.dropout_seed(1);
                feed(prog, 1);
                const std::vector<report> r = reports_of(prog);
                const auto& store = prog.params();
                check_coverage(store, r);
                CHECK(listed<S>(prog) == r);  // for_each_final: the same calls, in the same order
                // Stacked parameters: L rows each, layer L-1's rows (of every one) before layer L-2's.
                std::vector<std::size_t> layer_of(r.size(), std::size_t(-1));
                std::size_t stacked = 0;
                for (std::size_t k = 0; k < r.size(); ++k) {
                    const auto& e = store.at(r[k].slot);
                    if (!e.layer_axes) {
                        CHECK(r[k].count == e.shape.size());  // everything else whole
                        continue;
                    }
                    REQUIRE(r[k].count * L == e.shape.size());
                    REQUIRE(r[k].first % r[k].count == 0);
                    layer_of[k] = r[k].first / r[k].count;
                    ++stacked;
                }
                std::size_t stacked_slots = 0;
                for (const auto& e : store.entries()) stacked_slots += e.layer_axes ? 1 : 0;
                CHECK(stacked_slots >= 8);  // (two norms, attention, feed-forward: weights and biases)
                CHECK(stacked == L * stacked_slots);  // one call per layer each
                std::size_t last = L - 1, first_stacked = r.size(), last_stacked = 0;
                for (std::size_t k = 0; k < r.size(); ++k)
                    if (layer_of[k] != std::size_t(-1)) {
                        CHECK(layer_of[k] <= last);
                        last = layer_of[k];
                        first_stacked = std::min(first_stacked, k);
                        last_stacked = k;
                    }
                // The head is final before the blocks, the token embedding (read first) after them.
                auto at = [&](const std::string& n) {
                    return std::find_if(r.begin(), r.end(), [&](const report& x) { return store.at(x.slot).name == n; }) -
                           r.begin();
                };
                CHECK(std::size_t(at("head.weight")) < first_stacked);
                CHECK(std::size_t(at("tok_embed")) > last_stacked);
                CHECK(store.at(r.back().slot).name == "extra");
            };
            if (recompute) run(compile<S, options{.recompute = true}>(gpt_loss()));
            else run(compile<S>(gpt_loss()));
        }
}

TEST_CASE("a hook of slots only hears of every parameter whole, once", "[layer_final]") {
    auto prog = compile<double>(gpt_loss());
    prog.params().init(3);
    feed(prog, 2);
    prog.forward();
    std::vector<std::size_t> slots;
    prog.backward_with([&](std::size_t slot) { slots.push_back(slot); });
    std::sort(slots.begin(), slots.end());
    REQUIRE(slots.size() == prog.params().size());
    for (std::size_t s = 0; s < slots.size(); ++s) CHECK(slots[s] == s);
}

namespace {
// A stacked parameter read inside a repeat (as the block's "w") and by a node outside it, placed
// before the repeat in topological order (its VJP runs after the repeat's: the rows are not final
// there) or after it (its VJP runs first: rows final layer by layer).
using W = layered_param<"b.w", L, 4>;
auto block = [](auto h) { return tanh(h + param<"w", 4>{}); };
auto outside_before() { return sum(tanh(W{})) + sum(repeat<L, "b.">(block, input<"x", B, 4>{})); }
auto outside_after() { return sum(repeat<L, "b.">(block, input<"x", B, 4>{})) + sum(tanh(W{})); }
template <class Prog>
std::vector<report> shared_reports(Prog& p) {
    p.params().init(5);
    xt::xtensor<double, 2> x = {{0.5, -1, 0.25, 2}, {1, 0.5, -0.5, 0.1}};
    p.template feed<"x">(x);
    return reports_of(p);
}
}  // namespace

TEST_CASE("a stacked parameter also read outside its repeat is reported by layer only when that is right", "[layer_final]") {
    {
        auto p = compile<double>(outside_before());
        const auto r = shared_reports(p);
        check_coverage(p.params(), r);
        const std::size_t w = p.params().slot("b.w");
        CHECK(std::count_if(r.begin(), r.end(), [&](const report& x) { return x.slot == w; }) == 1);  // whole, at the end
    }
    {
        auto p = compile<double>(outside_after());
        const auto r = shared_reports(p);
        check_coverage(p.params(), r);  // the outside term is in each row when it is reported
        const std::size_t w = p.params().slot("b.w");
        std::vector<std::size_t> firsts;
        for (const report& x : r)
            if (x.slot == w) firsts.push_back(x.first);
        CHECK(firsts == std::vector<std::size_t>{8, 4, 0});
    }
}

namespace {
// train_step (range updates inside backward) against zero_grad, forward, backward, opt.step: the
// same loss and weights, bit for bit, every step.
template <class Prog, class MakeOpt>
void compare_training(MakeOpt make) {
    using S = typename Prog::scalar;
    Prog plain, fused;
    plain.params().init(4);
    fused.params().init(4);
    plain.dropout_seed(2);
    fused.dropout_seed(2);
    auto opt_a = make(), opt_b = make();
    for (int step = 0; step < 4; ++step) {
        feed(plain, step);
        feed(fused, step);
        plain.zero_grad();
        const S la = plain.forward();
        plain.backward();
        opt_a.step(plain.params());
        const S lb = train_step(fused, opt_b);
        CHECK(std::memcmp(&la, &lb, sizeof la) == 0);
        REQUIRE(std::memcmp(plain.params().values().data(), fused.params().values().data(),
                            plain.params().values().size() * sizeof(S)) == 0);
    }
    Prog fresh;
    fresh.params().init(4);
    CHECK(std::memcmp(fresh.params().values().data(), fused.params().values().data(),
                      fresh.params().values().size() * sizeof(S)) != 0);  // and the weights moved
}
template <class S, options O = options{}>
using gpt_program = program_for<S, O, decltype(gpt_loss())>;
}  // namespace

TEMPLATE_TEST_CASE("train_step's layer-by-layer updates equal the plain step bit for bit", "[layer_final][train]", float, double) {
    using S = TestType;
    auto sgd = [] { return optim::sgd<S>({.lr = 0.05, .momentum = 0.9, .weight_decay = 0.01}); };
    auto adamw = [] { return optim::adamw<S>({.lr = 0.01, .weight_decay = 0.05}); };
    static_assert(optim::range_optimizer_for<optim::adam<S>, S> && optim::range_optimizer_for<optim::sgd<S>, S>);
    for (int threads : {1, 2}) {
        INFO("threads " << threads);
        testing::pool_threads pool(threads);
        compare_training<gpt_program<S>>(sgd);
        compare_training<gpt_program<S>>(adamw);
        compare_training<gpt_program<S, options{.recompute = true}>>(adamw);
        if constexpr (std::is_same_v<S, float>)  // the bf16 copies each range update rewrites
            compare_training<gpt_program<S, options{.precision = precision::bf16}>>(adamw);
    }
}
