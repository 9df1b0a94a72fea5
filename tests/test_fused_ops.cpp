// The fused ops of the hot paths against their composed graphs (value and every gradient, float64,
// NaN-poisoned arena) and under finite differences: affine (x W + b) and the GRU gates. In a TU of
// their own so the suites they belong to keep their compile time.
#include "recurrent_fixture.hpp"

using namespace ctg;
using namespace ctg::testing::recurrent;
using ctg::testing::check_gradients;

namespace {
using X4 = input<"x", B, 4>;
}  // namespace

TEST_CASE("gradcheck: affine (x W + b in one node), batched rows and a single row", "[gradcheck]") {
    CHECK(check_gradients(affine(X4{}, param<"W", 4, 3>{}, param<"b", 3>{})) > 0);
    CHECK(check_gradients(affine(input<"x3", B, T, 4>{}, param<"W", 4, 3>{}, param<"b", 3>{})) > 0);
    CHECK(check_gradients(affine(X4{}, param<"W", 4, 3>{}, param<"b", 3>{}), {.dims = {{'B', 1}}}) > 0);  // M = 1
    // x used twice: the first writer of x's adjoint is affine, the second adds.
    CHECK(check_gradients(affine(X4{}, param<"W", 4, 4>{}, param<"b", 4>{}) + tanh(X4{})) > 0);
}

TEST_CASE("affine equals the composed matmul + add, value and every gradient", "[gradcheck][fused]") {
    using W = param<"W", 4, 5>;
    using Bias = param<"b", 5>;
    using Gw = input<"g", B, T, 5>;
    using X3 = input<"x3", B, T, 4>;
    for (std::size_t rows : {1, 6}) {
        constexpr options opt{.input_grads = true};
        auto fused = compile<double, opt>(sum(mul(affine(X3{}, W{}, Bias{}), Gw{})));
        program_for<double, opt, decltype(sum(mul(X3{} * W{} + Bias{}, Gw{})))> composed(fused.shared_params());
        fused.params().init(3);
        fused.poison_arena(true);
        composed.poison_arena(true);
        xt::xtensor<double, 3> x = xt::zeros<double>({rows, std::size_t(1), std::size_t(4)});
        xt::xtensor<double, 3> g = xt::zeros<double>({rows, std::size_t(1), std::size_t(5)});
        for (std::size_t i = 0; i < x.size(); ++i) x.flat(i) = std::sin(double(i) + 0.5);
        for (std::size_t i = 0; i < g.size(); ++i) g.flat(i) = std::cos(double(i));
        std::vector<double> grads[2], xgrads[2];
        double losses[2];
        int k = 0;
        auto run = [&](auto& prog) {
            prog.template feed<"x3">(x);
            prog.template feed<"g">(g);
            prog.zero_grad();
            losses[k] = prog.forward();
            prog.backward();
            auto gx = prog.template input_grad<"x3">();
            xgrads[k].assign(gx.begin(), gx.end());
            for (std::size_t s = 0; s < prog.params().size(); ++s) {
                const double* p = prog.params().grad(s);
                grads[k].insert(grads[k].end(), p, p + prog.params().at(s).shape.size());
            }
            ++k;
        };
        run(fused);
        run(composed);
        CHECK(losses[0] == Approx(losses[1]).epsilon(1e-14));
        REQUIRE(grads[0].size() == 25);
        for (std::size_t i = 0; i < grads[0].size(); ++i) CHECK(grads[0][i] == Approx(grads[1][i]).margin(1e-14));
        for (std::size_t i = 0; i < xgrads[0].size(); ++i) CHECK(xgrads[0][i] == Approx(xgrads[1][i]).margin(1e-14));
    }
}

TEST_CASE("the fused GRU gates equal the composed step, value and every gradient, and pass finite differences",
          "[cells][fused]") {
    constexpr int Hw = 5;  // a width with a SIMD tail in float64 (8 lanes of AVX-512 or 4 of AVX2, then 1)
    using P = input<"p", B, 3 * Hw>;
    using Q = input<"q", B, 3 * Hw>;
    using Hs = input<"h", B, Hw>;
    CHECK(check_gradients(gru_gates(P{}, Q{}, Hs{}), {.dims = {{'B', 3}}}) > 0);
    // A whole GRU scan through the fused step against the same scan through the composed one.
    constexpr options opt{.input_grads = true};
    using cell = nn::gru<"gru", X, H>;
    auto fused = compile<double, opt>(sum(mul(cell::run(Xs{}), input<"w", T, B, H>{})));
    auto loss_composed = sum(mul(scan<H>([](auto h, auto p) { return cell::composed_step(h, p); }, cell::project(Xs{})),
                                 input<"w", T, B, H>{}));
    program_for<double, opt, decltype(loss_composed)> composed(fused.shared_params());
    fused.params().init(5);
    fused.poison_arena(true);
    composed.poison_arena(true);
    xt::xtensor<double, 3> xs = xt::zeros<double>({std::size_t(4), std::size_t(3), std::size_t(X)});
    xt::xtensor<double, 3> w = xt::zeros<double>({std::size_t(4), std::size_t(3), std::size_t(H)});
    for (std::size_t i = 0; i < xs.size(); ++i) xs.flat(i) = std::sin(0.7 * double(i) + 0.1);
    for (std::size_t i = 0; i < w.size(); ++i) w.flat(i) = std::cos(1.3 * double(i));
    std::vector<double> grads[2];
    double losses[2];
    int k = 0;
    auto run = [&](auto& prog) {
        prog.template feed<"xs">(xs);
        prog.template feed<"w">(w);
        prog.zero_grad();
        losses[k] = prog.forward();
        prog.backward();
        auto gx = prog.template input_grad<"xs">();
        grads[k].assign(gx.begin(), gx.end());
        for (std::size_t s = 0; s < prog.params().size(); ++s) {
            const double* g = prog.params().grad(s);
            grads[k].insert(grads[k].end(), g, g + prog.params().at(s).shape.size());
        }
        ++k;
    };
    run(fused);
    run(composed);
    CHECK(losses[0] == Approx(losses[1]).epsilon(1e-14));
    REQUIRE(grads[0].size() == grads[1].size());
    for (std::size_t i = 0; i < grads[0].size(); ++i) CHECK(grads[0][i] == Approx(grads[1][i]).margin(1e-13));
    // and the same under the scalar (reference) kernels
    kernels::scalar_only() = true;
    CHECK(check_gradients(gru_gates(P{}, Q{}, Hs{}), {.dims = {{'B', 2}}}) > 0);
    kernels::scalar_only() = false;
}
