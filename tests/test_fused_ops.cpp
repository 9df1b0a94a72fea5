// The fused ops of the hot paths against their composed graphs (value and every gradient, float64,
// NaN-poisoned arena) and under finite differences: affine (x W + b), the GRU and LSTM gates. In a TU of
// their own so the suites they belong to keep their compile time.
#include "recurrent_fixture.hpp"

using namespace ctg;
using namespace ctg::testing::recurrent;
using ctg::testing::check_gradients;

namespace {
using X4 = input<"x", B, 4>;

/// A fused program and the composed one over the same parameters (NaN-poisoned arenas): one step
/// each on input In = `in` and loss weights Wt = `w`; the losses must agree to `eps` (relative) and
/// dL/dIn and every parameter's gradient to `margin`.
template <fixed_string In, fixed_string Wt, class Fused, class Composed, class A, class Wv>
void check_fused_equals_composed(Fused& fused, Composed& composed, const A& in, const Wv& w, double eps, double margin) {
    fused.poison_arena(true);
    composed.poison_arena(true);
    auto step = [&](auto& prog) {
        prog.template feed<In>(in);
        prog.template feed<Wt>(w);
        prog.zero_grad();
        const double loss = prog.forward();
        prog.backward();
        auto gx = prog.template input_grad<In>();
        std::vector<double> g(gx.begin(), gx.end());
        for (std::size_t s = 0; s < prog.params().size(); ++s) {
            const double* p = prog.params().grad(s);
            g.insert(g.end(), p, p + prog.params().at(s).shape.size());
        }
        return std::pair{loss, g};
    };
    const auto [loss_f, grad_f] = step(fused);
    const auto [loss_c, grad_c] = step(composed);
    CHECK(loss_f == Approx(loss_c).epsilon(eps));
    REQUIRE(grad_f.size() == grad_c.size());
    REQUIRE(grad_f.size() > in.size());  // the input's gradient and some parameters'
    for (std::size_t i = 0; i < grad_f.size(); ++i) CHECK(grad_f[i] == Approx(grad_c[i]).margin(margin));
}

/// xt tensor of `shape` filled with f(i) over its flat index.
template <class F>
xt::xtensor<double, 3> filled(std::array<std::size_t, 3> shape, F f) {
    xt::xtensor<double, 3> t = xt::zeros<double>(shape);
    for (std::size_t i = 0; i < t.size(); ++i) t.flat(i) = f(double(i));
    return t;
}
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
        const auto x = filled({rows, 1, 4}, [](double i) { return std::sin(i + 0.5); });
        const auto g = filled({rows, 1, 5}, [](double i) { return std::cos(i); });
        check_fused_equals_composed<"x3", "g">(fused, composed, x, g, 1e-14, 1e-14);
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
    const auto xs = filled({4, 3, std::size_t(X)}, [](double i) { return std::sin(0.7 * i + 0.1); });
    const auto w = filled({4, 3, std::size_t(H)}, [](double i) { return std::cos(1.3 * i); });
    check_fused_equals_composed<"xs", "w">(fused, composed, xs, w, 1e-14, 1e-13);
    // and the same under the scalar (reference) kernels
    kernels::scalar_only() = true;
    CHECK(check_gradients(gru_gates(P{}, Q{}, Hs{}), {.dims = {{'B', 2}}}) > 0);
    kernels::scalar_only() = false;
}

TEST_CASE("the fused LSTM gates equal the composed step, value and every gradient, and pass finite differences",
          "[cells][fused]") {
    constexpr int Hw = 5;  // a SIMD tail in float64
    using P = input<"p", B, 4 * Hw>;
    using Q = input<"q", B, 4 * Hw>;
    using S = input<"s", B, 2 * Hw>;
    CHECK(check_gradients(lstm_gates(P{}, Q{}, S{}), {.dims = {{'B', 3}}}) > 0);
    constexpr options opt{.input_grads = true};
    using cell = nn::lstm<"lstm", X, H>;
    auto fused = compile<double, opt>(sum(mul(cell::run_state(Xs{}), input<"w", T, B, 2 * H>{})));
    auto loss_composed = sum(mul(scan<2 * H>([](auto s, auto p) { return cell::composed_step(s, p); }, cell::project(Xs{})),
                                 input<"w", T, B, 2 * H>{}));
    program_for<double, opt, decltype(loss_composed)> composed(fused.shared_params());
    fused.params().init(6);
    const auto xs = filled({4, 3, std::size_t(X)}, [](double i) { return std::sin(0.3 * i + 0.2); });
    const auto w = filled({4, 3, std::size_t(2 * H)}, [](double i) { return std::cos(0.9 * i); });
    check_fused_equals_composed<"xs", "w">(fused, composed, xs, w, 1e-14, 1e-13);
    kernels::scalar_only() = true;
    CHECK(check_gradients(lstm_gates(P{}, Q{}, S{}), {.dims = {{'B', 2}}}) > 0);
    kernels::scalar_only() = false;
}

TEST_CASE("fresh adjoints of a broadcast operand are written even for an empty batch", "[fused]") {
    // The bias is computed (so its adjoint is the engine's, written fresh by its first writer);
    // with no rows, affine and add must still write it (zeros) instead of leaving the poison.
    using Xe = input<"x", B, 4>;
    auto bias = tanh(param<"b", 3>{});
    auto prog = compile<double>(sum(affine(Xe{}, param<"W", 4, 3>{}, bias) + (Xe{} * param<"V", 4, 3>{} + bias)));
    prog.params().init(1);
    prog.poison_arena(true);
    prog.feed<"x">(xt::xtensor<double, 2>(xt::zeros<double>({std::size_t(0), std::size_t(4)})));
    prog.zero_grad();
    CHECK(prog.forward() == 0.0);
    prog.backward();
    auto gb = prog.grad<"b">();
    for (double v : gb) CHECK(v == 0.0);
}

TEST_CASE("the fused gates in float with SIMD lanes at unaligned offsets equal their scalar path", "[fused]") {
    // H = 20: each gate block starts 80 bytes after the previous one, not on a vector boundary.
    constexpr int Hw = 20;
    // One forward and backward with SIMD kernels, then with the scalar ones: loss, dL/dp and dL/dq agree.
    auto run = [](auto loss, const char* state, std::size_t gates_width, std::size_t state_width) {
        auto prog = compile<float, options{.input_grads = true}>(loss);
        auto fill = [](std::size_t n, float s) {
            std::vector<float> t(3 * n);
            for (std::size_t i = 0; i < t.size(); ++i) t[i] = std::sin(s * float(i) + 0.3f);
            return t;
        };
        const auto p = fill(gates_width, 0.37f), q = fill(gates_width, 0.53f), h = fill(state_width, 0.71f),
                   g = fill(state_width, 1.1f);
        std::vector<float> simd;
        for (bool scalar : {false, true}) {
            kernels::scalar_only() = scalar;
            prog.feed("p", p.data(), rshape{2, {3, gates_width}});
            prog.feed("q", q.data(), rshape{2, {3, gates_width}});
            prog.feed(state, h.data(), rshape{2, {3, state_width}});
            prog.feed("g", g.data(), rshape{2, {3, state_width}});
            std::vector<float> r{prog.forward()};
            prog.backward();
            auto gp = prog.template input_grad<"p">();
            auto gq = prog.template input_grad<"q">();
            r.insert(r.end(), gp.begin(), gp.end());
            r.insert(r.end(), gq.begin(), gq.end());
            if (!scalar) simd = r;
            else
                for (std::size_t i = 0; i < r.size(); ++i) CHECK(simd[i] == Approx(r[i]).epsilon(1e-5).margin(1e-5));
        }
        kernels::scalar_only() = false;
    };
    run(sum(mul(gru_gates(input<"p", B, 3 * Hw>{}, input<"q", B, 3 * Hw>{}, input<"h", B, Hw>{}), input<"g", B, Hw>{})),
        "h", 3 * Hw, Hw);
    run(sum(mul(lstm_gates(input<"p", B, 4 * Hw>{}, input<"q", B, 4 * Hw>{}, input<"s", B, 2 * Hw>{}), input<"g", B, 2 * Hw>{})),
        "s", 4 * Hw, 2 * Hw);
}
