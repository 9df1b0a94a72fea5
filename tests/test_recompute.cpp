// options{.recompute = true}: repeat keeps each layer's input only and reruns the layer's forward
// in backward. Gradients and trained weights equal those without it bit for bit (float64 and float32,
// one and two threads, with dropout, a second backward after one forward, the fused train_step,
// bf16 products);
// a steady-state step allocates nothing; the summary's bytes saved and FLOPs added match hand counts,
// the GEMM counter and the arena; inference programs and programs without repeat do not change.
#include <catch2/catch.hpp>

#include <cstdint>
#include <cstdio>
#include <cstring>
#include <vector>

#include <ctgraph/ctgraph.hpp>
#include <ctgraph/xtensor.hpp>
#include <ctgraph/train.hpp>

#include "allocation_counter.hpp"
#include "pool_threads.hpp"

using namespace ctg;

namespace {
inline constexpr dim B = dyn('B'), T = dyn('T');
using Tok = index_input<"tokens", B, T>;
using Tgt = index_input<"targets", B, T>;
constexpr options rec{.recompute = true};

// A small GPT: 3 layers, so backward reruns layers 1 and 0; dropout makes the layers' random streams matter.
constexpr int V = 13, Ctx = 16, D = 16, H = 2, L = 3;
using plain_gpt = nn::gpt<V, Ctx, D, H, L>;
using dropped_gpt = nn::gpt<V, Ctx, D, H, L, 4 * D, void, 0.25>;

xt::xtensor<int, 2> tokens(std::size_t b, std::size_t t, int salt) {
    xt::xtensor<int, 2> x = xt::zeros<int>({b, t});
    for (std::size_t i = 0; i < x.size(); ++i) x.data()[i] = int((i * 7 + std::size_t(salt) * 3 + i / 5) % V);
    return x;
}

template <class Prog>
void feed(Prog& p, int salt, std::size_t b = 4, std::size_t t = 12) {
    p.template feed<"tokens">(tokens(b, t, salt));
    p.template feed<"targets">(tokens(b, t, salt + 1));
}

template <class S>
std::vector<S> grads_of(const parameter_store<S>& store) { return {store.grads().begin(), store.grads().end()}; }
template <class S>
std::vector<S> values_of(const parameter_store<S>& store) { return {store.values().begin(), store.values().end()}; }
template <class S>
bool same_bits(const std::vector<S>& a, const std::vector<S>& b) {
    return a.size() == b.size() && std::memcmp(a.data(), b.data(), a.size() * sizeof(S)) == 0;
}

/// Trains `plain` and `recomputed` side by side with AdamW through the fused step: every loss,
/// every step's gradients and the final weights the same bits. Returns the optimizer of
/// `recomputed` (its state, for further steps).
template <class P0, class P1>
auto check_same_training(P0& plain, P1& recomputed, int steps) {
    auto o0 = optim::adamw<float>({.lr = 1e-2, .weight_decay = 0.01});
    auto o1 = optim::adamw<float>({.lr = 1e-2, .weight_decay = 0.01});
    for (int step = 0; step < steps; ++step) {
        feed(plain, step);
        feed(recomputed, step);
        const float l0 = train_step(plain, o0, 1.0);
        const float l1 = train_step(recomputed, o1, 1.0);
        CHECK(std::memcmp(&l0, &l1, sizeof(float)) == 0);
        CHECK(same_bits(grads_of(plain.params()), grads_of(recomputed.params())));
    }
    CHECK(same_bits(values_of(plain.params()), values_of(recomputed.params())));
    return o1;
}

// Loss and gradients of one forward and backward (and of a second backward after the same forward:
// gradients add) in a program without and one with recomputation over the same weights.
template <class S, class Model>
void check_same_gradients(int threads) {
    ctg::testing::pool_threads pool(threads);
    auto plain = compile<S>(Model::loss(Tok{}, Tgt{}));
    decltype(compile<S, rec>(Model::loss(Tok{}, Tgt{}))) recomputed(plain.shared_params());
    plain.params().init(7);
    for (int salt = 0; salt < 3; ++salt) {
        feed(plain, salt);
        feed(recomputed, salt);
        plain.zero_grad();
        const S l0 = plain.forward();
        plain.backward();
        const std::vector<S> g0 = grads_of(plain.params());
        plain.backward();  // the same forward's values again: the gradients double
        const std::vector<S> g0twice = grads_of(plain.params());

        recomputed.zero_grad();
        const S l1 = recomputed.forward();
        recomputed.backward();
        const std::vector<S> g1 = grads_of(recomputed.params());
        recomputed.backward();  // the frame now holds layer 0: layer L-1 is rerun too
        const std::vector<S> g1twice = grads_of(recomputed.params());

        CHECK(std::memcmp(&l0, &l1, sizeof(S)) == 0);
        CHECK(same_bits(g0, g1));
        CHECK(same_bits(g0twice, g1twice));
        // And the gradients are not trivially equal (all zero).
        S norm = 0;
        for (S g : g0) norm += g * g;
        CHECK(norm > S(0));
    }
    CHECK(recomputed.arena_elements() < plain.arena_elements());
}
}  // namespace

TEST_CASE("recompute: a GPT's gradients equal those without it bit for bit (float64, float32, 1 and 2 threads)",
          "[recompute]") {
    for (int threads : {1, 2}) {
        INFO("threads " << threads);
        check_same_gradients<double, plain_gpt>(threads);
        check_same_gradients<float, plain_gpt>(threads);
        check_same_gradients<double, dropped_gpt>(threads);  // per-layer dropout streams reproduced
        check_same_gradients<float, dropped_gpt>(threads);
    }
}

TEST_CASE("recompute: the fused train_step trains the same weights bit for bit, and allocates nothing", "[recompute][allocation]") {
    for (int threads : {1, 2}) {
        INFO("threads " << threads);
        ctg::testing::pool_threads pool(threads);  // returns once new workers have reserved their scratch
        auto plain = compile<float>(dropped_gpt::loss(Tok{}, Tgt{}));
        auto recomputed = compile<float, rec>(dropped_gpt::loss(Tok{}, Tgt{}));
        plain.params().init(11);
        recomputed.params().init(11);
        REQUIRE(same_bits(values_of(plain.params()), values_of(recomputed.params())));
        auto o1 = check_same_training(plain, recomputed, 4);

        CHECK(allocations_during([&] {
                  feed(recomputed, 5);
                  train_step(recomputed, o1, 1.0);
              }) == 0);
    }
}

TEST_CASE("recompute: mixed precision (bf16 products) trains the same weights bit for bit", "[recompute][bf16]") {
    constexpr options bf{.precision = precision::bf16};
    constexpr options bf_rec{.precision = precision::bf16, .recompute = true};
    auto plain = compile<float, bf>(dropped_gpt::loss(Tok{}, Tgt{}));
    auto recomputed = compile<float, bf_rec>(dropped_gpt::loss(Tok{}, Tgt{}));
    plain.params().init(13);
    recomputed.params().init(13);
    check_same_training(plain, recomputed, 3);
}

TEST_CASE("recompute: the summary's bytes saved and FLOPs added, against hand counts, the GEMM counter and the arena",
          "[recompute][summary]") {
    // gpt-s's shapes with 3 layers: V = 65, D = 128, 4 heads, F = 4 D; batch 8 of 64 tokens.
    constexpr std::uint64_t V2 = 65, D2 = 128, H2 = 4, L2 = 3, F2 = 4 * D2, b = 8, t = 64, M = b * t;
    using model = nn::gpt<int(V2), 64, int(D2), int(H2), int(L2)>;
    auto plain = compile<float>(model::loss(Tok{}, Tgt{}));
    decltype(compile<float, rec>(model::loss(Tok{}, Tgt{}))) recomputed(plain.shared_params());
    plain.params().init(3);
    const model_summary s0 = plain.summary({{'B', b}, {'T', t}});
    const model_summary s1 = recomputed.summary({{'B', b}, {'T', t}});
    std::printf("%s%s", s0.to_string().c_str(), s1.to_string().c_str());

    // FLOPs: forward and backward as without; the recomputed ones are the forward of L - 1 layers
    // but for what no VJP reads (fc2's product and bias, the residual sum after it): per layer q, k,
    // v, proj (2 M D D each), fc1 (2 M D F), scores and values (2 B T T D each).
    const std::uint64_t layer_products = 8 * M * D2 * D2 + 2 * M * D2 * F2 + 4 * b * t * t * D2;
    CHECK(!s0.recompute);
    CHECK(s1.recompute);
    CHECK(s0.flops.recompute == 0);
    CHECK(s1.flops.forward == s0.flops.forward);
    CHECK(s1.flops.backward == s0.flops.backward);
    CHECK(s1.flops.recompute_products == (L2 - 1) * layer_products);
    REQUIRE(s1.rows.size() == 6);
    CHECK(s1.rows[2].name == "blocks.");
    CHECK(s1.rows[2].flops.recompute == (L2 - 1) * (s0.rows[2].flops.forward / L2 - 2 * M * D2 * F2 - 2 * M * D2));
    CHECK(s1.to_string().find("recompute: activations kept") != std::string::npos);
    CHECK(s0.to_string().find("recompute:") == std::string::npos);

    // Bytes: the repeat keeps one layer's frame instead of L (and one line noting which layer it
    // holds). A frame holds at least, per layer: the attention weights (B, heads, T, T), the FFN's
    // hidden values before and after GELU (M, F), and q, k, v, the attention output and its
    // projection, both layer norms and the residual sums, (M, D) each.
    const std::size_t saved = s1.recompute_saved_bytes;
    CHECK(s0.recompute_saved_bytes == 0);
    CHECK(s1.arena_bytes + saved == s0.arena_bytes);
    CHECK(s1.rows[2].scratch_bytes + saved == s0.rows[2].scratch_bytes);
    const std::size_t frame = (saved + 16 * sizeof(float)) / (L2 - 1);
    CHECK(frame * (L2 - 1) == saved + 16 * sizeof(float));
    CHECK(frame >= (b * H2 * t * t + 2 * M * F2 + 9 * M * D2) * sizeof(float));
    CHECK(frame <= (b * H2 * t * t + 2 * M * F2 + 9 * M * D2) * sizeof(float) * 3 / 2);
    // The activations a layer keeps: its input, (M, D), against a frame without recomputation.
    CHECK(s0.rows[2].scratch_bytes >= L2 * frame + (L2 - 1) * M * D2 * sizeof(float));

    // One real step: the GEMM counter sees the rerun products, and the arenas are the summaries'.
    auto run = [&](auto& prog) {
        feed(prog, 1, b, t);
        prog.zero_grad();
        auto& counter = kernels::gemm_flop_counter();
        counter = 0;
        prog.forward();
        const std::uint64_t f = counter.exchange(0);
        prog.backward();
        return std::pair{f, counter.exchange(0)};
    };
    const auto [f0, g0] = run(plain);
    const auto [f1, g1] = run(recomputed);
    CHECK(f0 == s0.flops.forward_products);
    CHECK(g0 == s0.flops.backward_products);
    CHECK(f1 == s1.flops.forward_products);
    CHECK(g1 == s1.flops.backward_products + s1.flops.recompute_products);
    CHECK(plain.arena_elements() * sizeof(float) == s0.arena_bytes);
    CHECK(recomputed.arena_elements() * sizeof(float) == s1.arena_bytes);
}

TEST_CASE("recompute: inference programs and programs without repeat are unaffected", "[recompute]") {
    auto train = compile<float>(plain_gpt::loss(Tok{}, Tgt{}));
    train.params().init(5);
    using logits_t = decltype(plain_gpt::logits(Tok{}));
    auto i0 = program_for<float, options{.inference = true}, logits_t>(train.shared_params());
    auto i1 = program_for<float, options{.inference = true, .recompute = true}, logits_t>(train.shared_params());
    i0.feed<"tokens">(tokens(4, 12, 0));
    i1.feed<"tokens">(tokens(4, 12, 0));
    i0.forward();
    i1.forward();
    CHECK(i0.arena_elements() == i1.arena_elements());
    CHECK(xt::all(xt::equal(i0.output<0>(), i1.output<0>())));
    CHECK(i1.summary({{'B', 4}, {'T', 12}}).recompute_saved_bytes == 0);
    CHECK(!i1.summary({{'B', 4}, {'T', 12}}).recompute);

    // No repeat: the same arena, the same gradients.
    using X = input<"x", B, 8>;
    using Y = index_input<"y", B>;
    auto mlp = [] { return softmax_cross_entropy(relu(X{} * param<"W1", 8, 16>{}) * param<"W2", 16, 4>{}, Y{}); };
    auto m0 = compile<double>(mlp());
    decltype(compile<double, rec>(mlp())) m1(m0.shared_params());
    m0.params().init(1);
    xt::xtensor<double, 2> x = xt::ones<double>({6, 8});
    xt::xtensor<int, 1> y = xt::zeros<int>({6});
    m0.feed<"x">(x), m0.feed<"y">(y), m1.feed<"x">(x), m1.feed<"y">(y);
    m0.zero_grad();
    m0.forward();
    m0.backward();
    const auto g0 = grads_of(m0.params());
    m1.zero_grad();
    m1.forward();
    m1.backward();
    CHECK(same_bits(g0, grads_of(m1.params())));
    CHECK(m0.arena_elements() == m1.arena_elements());
    CHECK(m1.summary({{'B', 6}}).recompute_saved_bytes == 0);
}
