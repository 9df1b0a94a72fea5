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
    auto w = optim::adamw<double>({.lr = 0.01, .weight_decay = 0.1});
    w.step(ps);
    CHECK(ps.value(0)[0] == Approx(1 * (1 - 0.01 * 0.1) - 0.01 * 0.5 / (0.5 + 1e-8)));
}

TEST_CASE("adamw's config: torch.optim.AdamW's fields, order and defaults", "[optim]") {
    // The fields in PyTorch's positional order (lr, betas, eps, weight_decay) and by name give the
    // same optimizer as adam's own config with decoupled decay, bit for bit over a few steps.
    auto run = [](auto opt) {
        parameter_store<double> ps;
        ps.add("w", rshape{1, {3}});
        for (int i = 0; i < 3; ++i) ps.value(0)[i] = 0.5 * (i + 1);
        for (int step = 0; step < 4; ++step) {
            for (int i = 0; i < 3; ++i) ps.grad(0)[i] = 0.1 * (i - 1) + 0.05 * step;
            opt.step(ps);
        }
        return std::vector<double>(ps.value(0), ps.value(0) + 3);
    };
    const auto expect = run(optim::adam<double>({.lr = 0.01, .beta1 = 0.8, .beta2 = 0.95, .eps = 1e-6, .weight_decay = 0.2,
                                                 .decoupled = true}));
    CHECK(run(optim::adamw<double>({0.01, {0.8, 0.95}, 1e-6, 0.2})) == expect);
    CHECK(run(optim::adamw<double>({.lr = 0.01, .betas = {0.8, 0.95}, .eps = 1e-6, .weight_decay = 0.2})) == expect);
    CHECK(run(optim::adamw<double>({.lr = 0.01, .betas = {0.8, 0.96}, .eps = 1e-6, .weight_decay = 0.2})) != expect);
    // PyTorch's defaults: lr 1e-3, betas (0.9, 0.999), eps 1e-8, weight decay 0.01
    const optim::adamw_config d{};
    CHECK((d.lr == 1e-3 && d.betas[0] == 0.9 && d.betas[1] == 0.999 && d.eps == 1e-8 && d.weight_decay == 1e-2));
    CHECK(run(optim::adamw<double>()) ==
          run(optim::adam<double>({.lr = 1e-3, .beta1 = 0.9, .beta2 = 0.999, .eps = 1e-8, .weight_decay = 1e-2, .decoupled = true})));
}

TEST_CASE("parameter groups: another learning rate or weight decay by name and by rank", "[optim]") {
    // w (3, 2) and a stacked blocks.W (2 layers of 3 x 3) are matrices; b (2) and blocks.g (2 layers
    // of 4) are vectors (a stacked parameter's rank is one layer's).
    auto store = [] {
        parameter_store<double> ps;
        ps.add("w", rshape{2, {3, 2}});
        ps.add("b", rshape{1, {2}});
        ps.add("blocks.g", rshape{2, {2, 4}}, 1);
        ps.add("blocks.W", rshape{3, {2, 3, 3}}, 1);
        for (std::size_t s = 0; s < ps.size(); ++s)
            for (std::size_t i = 0; i < ps.at(s).shape.size(); ++i) ps.value(s)[i] = 1.0 + 0.25 * double(i % 3);
        return ps;
    };
    SECTION("decay the matrices only (AdamW, zero gradients: decay alone moves a weight)") {
        auto ps = store();
        const parameter_store<double> start = ps;
        auto opt = optim::adamw<double>({.lr = 0.1, .weight_decay = 0.5, .groups = {{.max_rank = 1, .weight_decay = 0}}});
        opt.step(ps);
        for (std::size_t s = 0; s < ps.size(); ++s) {
            const bool matrix = ps.at(s).shape.rank - ps.at(s).layer_axes == 2;
            INFO(ps.at(s).name);
            for (std::size_t i = 0; i < ps.at(s).shape.size(); ++i)
                CHECK(ps.value(s)[i] == (matrix ? start.value(s)[i] * (1 - 0.1 * 0.5) : start.value(s)[i]));
        }
    }
    SECTION("a learning-rate factor by name; the first group that matches decides") {
        auto ps = store();
        const parameter_store<double> start = ps;
        for (std::size_t s = 0; s < ps.size(); ++s)
            for (std::size_t i = 0; i < ps.at(s).shape.size(); ++i) ps.grad(s)[i] = 1.0;
        optim::sgd<double> opt({.lr = 0.1, .groups = {{.names = "b blocks.g", .lr_factor = 0.5}, {.names = "b", .lr_factor = 3}}});
        opt.step(ps);
        for (std::size_t s = 0; s < ps.size(); ++s) {
            const double lr = ps.at(s).name == "b" || ps.at(s).name == "blocks.g" ? 0.05 : 0.1;
            INFO(ps.at(s).name);
            for (std::size_t i = 0; i < ps.at(s).shape.size(); ++i) CHECK(ps.value(s)[i] == start.value(s)[i] - lr * 1.0);
        }
    }
    SECTION("a group entry that matches no parameter is refused, naming it") {
        auto ps = store();
        auto opt = optim::adamw<double>({.groups = {{.names = "*.bias", .weight_decay = 0}}});
        CHECK_THROWS_WITH(opt.step(ps), Catch::Matchers::Contains("entry '*.bias' matches no parameter"));
    }
    SECTION("no groups: the optimizer's own settings, bit for bit") {
        auto a = store(), b = store();
        for (auto* ps : {&a, &b})
            for (std::size_t s = 0; s < ps->size(); ++s)
                for (std::size_t i = 0; i < ps->at(s).shape.size(); ++i) ps->grad(s)[i] = 0.1 * double(i) - 0.2;
        optim::adamw<double>({.lr = 0.1, .weight_decay = 0.5}).step(a);
        optim::adamw<double>({.lr = 0.1, .weight_decay = 0.5, .groups = {{.names = "w b"}}}).step(b);
        CHECK(std::equal(a.values().begin(), a.values().end(), b.values().begin()));
    }
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
