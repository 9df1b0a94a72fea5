// The kernel pool inside ops: attention's per-matrix tasks (scaled-dot weights, batched products,
// masked softmax rows) and a recurrent training step give the same values and gradients at one
// and at two threads. (The suite runs with OPENBLAS_NUM_THREADS=1, a one-thread pool: these tests
// size the pool themselves.) Layer norm and permute over ranges of rows are tested where their
// programs are compiled anyway: test_transformer and test_attention.
#include <catch2/catch.hpp>

#include <random>
#include <vector>

#include <ctgraph/ctgraph.hpp>
#include <ctgraph/xtensor.hpp>

#include "pool_threads.hpp"

#include "transformer_fixture.hpp"

using namespace ctg;

namespace {
constexpr dim B = dyn('B');
constexpr int n = 64, m = 48, d = 16, dv = 8;  // above the split thresholds with B = 12
using Q = input<"q", B, n, d>;
using K = input<"k", B, m, d>;
using V = input<"v", B, m, dv>;
using G = input<"g", B, n, dv>;

std::vector<double> random_values(std::size_t count, unsigned seed) {
    return testing::tfm::random_values(count, seed, -1, 1);  // the shared fixture's generator
}

using ctg::testing::pool_threads;

// Loss, then dL/dq, dL/dk, dL/dv of sum(out * g) for a fresh program planned at `threads`.
template <class Out>
std::vector<double> run_attention(Out out, int threads, bool plan_at_one = false) {
    const std::size_t batch = 12;  // 12 x 64 rows of 48: the masked softmax rows split too
    auto prog = compile<double, options{.input_grads = true}>(sum(mul(out, G{})));
    prog.params().init(3);  // a score's own parameters (the same values at every thread count)
    const auto q = random_values(batch * n * d, 1), k = random_values(batch * m * d, 2), v = random_values(batch * m * dv, 3),
               g = random_values(batch * n * dv, 4);
    prog.feed("q", q.data(), rshape{3, {batch, n, d}});
    prog.feed("k", k.data(), rshape{3, {batch, m, d}});
    prog.feed("v", v.data(), rshape{3, {batch, m, dv}});
    prog.feed("g", g.data(), rshape{3, {batch, n, dv}});
    std::vector<double> r;
    {
        pool_threads pool(plan_at_one ? 1 : threads);
        r.push_back(prog.forward());  // plans the arena (scratch sized for this pool)
    }
    pool_threads pool(threads);
    r.push_back(prog.forward());
    prog.backward();
    for (auto a : {prog.template input_grad<"q">(), prog.template input_grad<"k">()}) r.insert(r.end(), a.begin(), a.end());
    auto gv = prog.template input_grad<"v">();
    r.insert(r.end(), gv.begin(), gv.end());
    const auto& gp = prog.params().grads();  // a score's own parameters
    r.insert(r.end(), gp.begin(), gp.end());
    return r;
}

void check_close(const std::vector<double>& a, const std::vector<double>& b) {
    REQUIRE(a.size() == b.size());
    for (std::size_t i = 0; i < a.size(); ++i) CHECK(a[i] == Approx(b[i]).epsilon(1e-12).margin(1e-13));
}
}  // namespace

TEST_CASE("attention: per-matrix tasks at two threads equal one thread", "[threads]") {
    SECTION("scaled dot, causal (fused weights, batched product)") {
        auto out = attention(Q{}, K{}, V{}, causal{});
        const auto one = run_attention(out, 1), two = run_attention(out, 2);
        check_close(one, two);
        check_close(one, run_attention(out, 2, /*plan_at_one=*/true));  // scratch for one thread, run at two
    }
    SECTION("heads side by side (nn::attention_over_heads: each head's columns in place)") {
        auto out = nn::attention_over_heads<2>(Q{}, K{}, V{}, causal{});  // 2 heads of 8 (values: of 4)
        const auto one = run_attention(out, 1), two = run_attention(out, 2);
        check_close(one, two);
        check_close(one, run_attention(out, 2, /*plan_at_one=*/true));
    }
    SECTION("dot score (masked softmax rows)") {
        auto out = attention(Q{}, K{}, V{}, dot_score{}, local_window<3>{});
        check_close(run_attention(out, 1), run_attention(out, 2));
    }
    SECTION("additive score (matrices as tasks; w's gradient summed per matrix, then in order)") {
        auto out = attention(Q{}, K{}, V{}, additive_score<"add_", d, d, 32>{}, causal{});
        const auto one = run_attention(out, 1), two = run_attention(out, 2);
        REQUIRE(one.size() == two.size());
        for (std::size_t i = 0; i < one.size(); ++i) CHECK(one[i] == two[i]);  // the same sums, bit for bit
    }
}

// Three Adam steps of a recurrent model at 1 and at 2 threads: losses and final weights.
template <class Loss>
void check_training_at_one_and_two_threads(Loss loss, int X) {
    std::vector<double> results[2];
    for (int threads : {1, 2}) {
        pool_threads pool(threads);
        auto prog = compile<double>(loss());
        prog.params().init(7);
        optim::adam<double> opt({.lr = 1e-2});
        const auto x = random_values(12 * 16 * std::size_t(X), 5);
        prog.feed("xs", x.data(), rshape{3, {12, 16, std::size_t(X)}});
        for (int step = 0; step < 3; ++step) {
            prog.zero_grad();
            results[threads - 1].push_back(prog.forward());
            prog.backward();
            opt.step(prog.params());
        }
        auto w = prog.params().values();
        results[threads - 1].insert(results[threads - 1].end(), w.begin(), w.end());
    }
    check_close(results[0], results[1]);
}

TEST_CASE("a GRU training step at two threads equals one thread", "[threads]") {
    constexpr dim T = dyn('T');
    constexpr int X = 24, H = 96;  // the recurrent products split at two threads
    using Xs = input<"xs", T, B, X>;
    check_training_at_one_and_two_threads([] {
        auto h = nn::gru<"g", X, H>::run(Xs{}, zero_state{});
        return mean(mul(h, h));
    }, X);
}

TEST_CASE("an Elman training step at two threads equals one thread (a step's two VJP products as the two tasks)", "[threads]") {
    constexpr dim T = dyn('T');
    constexpr int X = 24, H = 96;  // 16 x 96 x 96 per step: over the split threshold
    using Xs = input<"xs", T, B, X>;
    check_training_at_one_and_two_threads([] {
        auto h = scan<H>([](auto state, auto x) { return tanh(state * param<"W_h", H, H>{} + x * param<"W_x", X, H>{}); }, Xs{});
        return mean(mul(h, h));
    }, X);
}

TEST_CASE("softmax cross-entropy over row blocks: the same loss and gradient at one and two threads, bit for bit", "[threads]") {
    using Z = input<"z", B, 65>;
    using Y = index_input<"y", B>;
    const std::size_t rows = 1000;  // 16 blocks of 64 rows (the last one short), over the split threshold
    const auto z = random_values(rows * 65, 9);
    std::vector<index_t> y(rows);
    for (std::size_t r = 0; r < rows; ++r) y[r] = r % 7 == 3 ? index_t(-100) : index_t((r * 31) % 65);  // some ignored
    std::vector<double> results[2];
    for (int threads : {1, 2}) {
        pool_threads pool(threads);
        auto prog = compile<double, options{.input_grads = true}>(softmax_cross_entropy(Z{}, Y{}));
        prog.feed("z", z.data(), rshape{2, {rows, 65}});
        prog.feed("y", y.data(), rshape{1, {rows}});
        results[threads - 1].push_back(prog.forward());
        prog.backward();
        auto g = prog.template input_grad<"z">();
        results[threads - 1].insert(results[threads - 1].end(), g.begin(), g.end());
    }
    REQUIRE(results[0].size() == results[1].size());
    for (std::size_t i = 0; i < results[0].size(); ++i) CHECK(results[0][i] == results[1][i]);
}

TEST_CASE("a product of a weight by itself at two threads: its two VJPs add into one gradient", "[threads]") {
    // matmul(W, W) and affine(W, W, b): dA = dY W^T and dB = W^T dY are both W's gradient. The two
    // products ran as two tasks of one job and added into it at the same time, now and then losing
    // one of the sums (found by the differential tests: affine(w, w, b) with w (5, 5), whose fused
    // training step differed from the plain one at two threads). Sizes from 5 to 64, many passes.
    const auto check = [](auto loss, std::size_t k) {
        pool_threads pool(2);
        auto prog = compile<double>(loss);
        prog.params().init(3);
        const std::vector<double> gv = random_values(k * k, 11);
        prog.feed("gm", gv.data(), rshape{2, {k, k}});
        const xt::xtensor<double, 2> w = prog.template param<"W">();
        // d/dW sum(G * (W W)) = G W^T + W^T G
        xt::xtensor<double, 2> want = xt::zeros<double>({k, k});
        for (std::size_t i = 0; i < k; ++i)
            for (std::size_t j = 0; j < k; ++j)
                for (std::size_t l = 0; l < k; ++l) want(i, j) += gv[i * k + l] * w(j, l) + w(l, i) * gv[l * k + j];
        int wrong = 0;
        for (int pass = 0; pass < 1000; ++pass) {
            prog.zero_grad();
            prog.forward();
            prog.backward();
            wrong += !xt::allclose(prog.template grad<"W">(), want, 1e-12, 1e-12);
        }
        CHECK(wrong == 0);
    };
    check(sum(mul(matmul(param<"W", 5, 5>{}, param<"W", 5, 5>{}), input<"gm", 5, 5>{})), 5);
    check(sum(mul(affine(param<"W", 5, 5>{}, param<"W", 5, 5>{}, param<"b", 5>{}), input<"gm", 5, 5>{})), 5);
    check(sum(mul(matmul(param<"W", 24, 24>{}, param<"W", 24, 24>{}), input<"gm", 24, 24>{})), 24);
    check(sum(mul(matmul(param<"W", 64, 64>{}, param<"W", 64, 64>{}), input<"gm", 64, 64>{})), 64);
    check(sum(mul(affine(param<"W", 64, 64>{}, param<"W", 64, 64>{}, param<"b", 64>{}), input<"gm", 64, 64>{})), 64);
}
