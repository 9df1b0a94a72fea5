// Optimizers, clipping and schedules against updates computed by hand.
#include <catch2/catch.hpp>

#include <cmath>
#include <vector>

#include <ctgraph/ctgraph.hpp>

using namespace ctg;

namespace {
// A store with one parameter p = (1, -2) and gradient g = (0.5, 0.25).
parameter_store<double> store() {
    parameter_store<double> ps;
    ps.add("p", rshape{1, {2}});
    ps.value(0)[0] = 1;
    ps.value(0)[1] = -2;
    ps.grad(0)[0] = 0.5;
    ps.grad(0)[1] = 0.25;
    return ps;
}
}  // namespace

TEST_CASE("SGD: plain, weight decay, momentum, Nesterov", "[optim]") {
    auto ps = store();
    optim::sgd<double>({.lr = 0.1}).step(ps);
    CHECK(ps.value(0)[0] == Approx(1 - 0.1 * 0.5));

    ps = store();
    optim::sgd<double>({.lr = 0.1, .weight_decay = 0.01}).step(ps);
    CHECK(ps.value(0)[1] == Approx(-2 - 0.1 * (0.25 + 0.01 * -2)));

    ps = store();
    optim::sgd<double> mom({.lr = 0.1, .momentum = 0.9});
    mom.step(ps);  // buffer = g
    mom.step(ps);  // buffer = 0.9 g + g
    CHECK(ps.value(0)[0] == Approx(1 - 0.1 * 0.5 - 0.1 * 1.9 * 0.5));

    ps = store();
    optim::sgd<double> nest({.lr = 0.1, .momentum = 0.9, .nesterov = true});
    nest.step(ps);  // g + 0.9 g
    nest.step(ps);  // buffer 1.9 g; g + 0.9 * 1.9 g
    CHECK(ps.value(0)[0] == Approx(1 - 0.1 * 1.9 * 0.5 - 0.1 * 2.71 * 0.5));
    CHECK_THROWS_AS(optim::sgd<double>({.lr = 0.1, .nesterov = true}), error);
}

TEST_CASE("Adam and AdamW", "[optim]") {
    // Step 1 with bias correction: m_hat = g, v_hat = g^2, update lr * g / (|g| + eps).
    auto ps = store();
    optim::adam<double> adam({.lr = 0.01});
    adam.step(ps);
    CHECK(ps.value(0)[0] == Approx(1 - 0.01 * 0.5 / (0.5 + 1e-8)));
    CHECK(ps.value(0)[1] == Approx(-2 - 0.01 * 0.25 / (0.25 + 1e-8)));
    // Step 2, new gradient g2: m = 0.9*0.1*g... computed in full.
    ps.grad(0)[0] = -1.0;
    adam.step(ps);
    const double m = 0.9 * (0.1 * 0.5) + 0.1 * -1.0, v = 0.999 * (0.001 * 0.25) + 0.001 * 1.0;
    const double mh = m / (1 - 0.81), vh = v / (1 - 0.999 * 0.999);
    CHECK(ps.value(0)[0] == Approx(1 - 0.01 * 0.5 / (0.5 + 1e-8) - 0.01 * mh / (std::sqrt(vh) + 1e-8)));

    // Adam's weight decay is L2 (into the gradient); AdamW's is decoupled (p *= 1 - lr wd first).
    ps = store();
    optim::adam<double>({.lr = 0.01, .weight_decay = 0.1}).step(ps);
    const double g = 0.5 + 0.1 * 1.0;
    CHECK(ps.value(0)[0] == Approx(1 - 0.01 * g / (g + 1e-8)));
    ps = store();
    auto w = optim::adamw<double>(0.01, 0.1);
    w.step(ps);
    CHECK(ps.value(0)[0] == Approx(1 * (1 - 0.01 * 0.1) - 0.01 * 0.5 / (0.5 + 1e-8)));
}

TEST_CASE("global-norm clipping", "[optim]") {
    parameter_store<float> ps;
    ps.add("a", rshape{1, {1}});
    ps.add("b", rshape{1, {1}});
    ps.grad(0)[0] = 3;
    ps.grad(1)[0] = 4;
    CHECK(optim::clip_grad_norm(ps, 10.0) == Approx(5.0));  // under the limit: unchanged
    CHECK(ps.grad(1)[0] == 4.0f);
    CHECK(optim::clip_grad_norm(ps, 1.0) == Approx(5.0));
    CHECK(ps.grad(0)[0] == Approx(0.6f));
    CHECK(ps.grad(1)[0] == Approx(0.8f));
    ps.grad(0)[0] = NAN;
    CHECK_THROWS_AS(optim::clip_grad_norm(ps, 1.0), numeric_error);
}

TEST_CASE("learning-rate schedules", "[optim]") {
    CHECK(optim::constant_lr{0.1}(1000) == 0.1);
    optim::step_lr s{1.0, 0.5, 10};
    CHECK(s(9) == 1.0);
    CHECK(s(10) == 0.5);
    CHECK(s(25) == 0.25);
    optim::warmup_cosine_lr c{1.0, 10, 110, 0.1};
    CHECK(c(0) == Approx(0.1));
    CHECK(c(9) == Approx(1.0));
    CHECK(c(10) == Approx(1.0));
    CHECK(c(60) == Approx(0.55));  // half way: min + (max - min) / 2
    CHECK(c(110) == Approx(0.1));
}

TEST_CASE("Adam/AdamW in SIMD lanes and in pieces on two threads equal the element-wise rule", "[optim][threads]") {
    // 37 elements: whole SIMD batches and a tail; 20000: split over the pool at 2 threads.
    for (std::size_t n : {std::size_t(37), std::size_t(20000)})
        for (bool decoupled : {false, true}) {
            parameter_store<double> ps;
            ps.add("p", rshape{1, {n}});
            auto reset = [&] {
                for (std::size_t i = 0; i < n; ++i) {
                    ps.value(0)[i] = std::sin(double(i));
                    ps.grad(0)[i] = std::cos(double(3 * i));
                }
            };
            const optim::adam<double>::config c{.lr = 0.01, .weight_decay = 0.1, .decoupled = decoupled};
            // The rule, element by element, three steps.
            std::vector<double> p(n), m(n, 0.0), v(n, 0.0);
            for (std::size_t i = 0; i < n; ++i) p[i] = std::sin(double(i));
            for (int t = 1; t <= 3; ++t)
                for (std::size_t i = 0; i < n; ++i) {
                    const double gi = std::cos(double(3 * i)) + (decoupled ? 0.0 : 0.1 * p[i]);
                    if (decoupled) p[i] *= 1 - 0.01 * 0.1;
                    m[i] = 0.9 * m[i] + 0.1 * gi;  // Adam: L2 decay in the gradient; AdamW: p decays first
                    v[i] = 0.999 * v[i] + 0.001 * gi * gi;
                    const double mh = m[i] / (1 - std::pow(0.9, t)), vh = v[i] / (1 - std::pow(0.999, t));
                    p[i] -= 0.01 * mh / (std::sqrt(vh) + 1e-8);
                }
            std::vector<double> results[2];
            for (int threads : {1, 2}) {
                const int before = num_threads();
                set_num_threads(threads);
                reset();
                optim::adam<double> opt(c);
                for (int t = 0; t < 3; ++t) opt.step(ps);  // the gradient stays the same each step
                set_num_threads(before);
                results[threads - 1].assign(ps.value(0), ps.value(0) + n);
            }
            INFO("n " << n << " decoupled " << decoupled);
            CHECK(results[0] == results[1]);  // pieces on two threads: the same lanes, bit for bit
            for (std::size_t i = 0; i < n; ++i) CHECK(results[0][i] == Approx(p[i]).epsilon(1e-12).margin(1e-14));
        }
}
