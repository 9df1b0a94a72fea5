// scan: recurrence with BPTT, checked by finite differences (float64) and against an unrolled graph.
#include "recurrent_fixture.hpp"

using namespace ctg;
using namespace ctg::testing::recurrent;
using ctg::testing::check_gradients;

TEST_CASE("scan: an Elman cell through time, zero initial state", "[scan]") {
    CHECK(check_gradients(scan<H>(elman, Xs{}), {.dims = {{'T', 5}, {'B', 2}}}) > 0);
}

TEST_CASE("scan: an initial state and closed-over context", "[scan]") {
    using H0 = input<"h0", B, H>;
    using Ctx = input<"ctx", B, H>;  // read by every step: its adjoint sums over steps
    auto cell = [](auto h, auto x) { return tanh(mul(h, Ctx{}) + x * param<"W_x", X, H>{}); };
    CHECK(check_gradients(scan<H>(cell, Xs{}, H0{}), {.dims = {{'T', 5}, {'B', 2}}}) > 0);
}

TEST_CASE("scan: a learnable initial state shared by every sequence", "[scan]") {
    CHECK(check_gradients(scan<H>(elman, Xs{}, param<"h0", H>{}), {.dims = {{'T', 4}, {'B', 3}}}) > 0);
    using Len = index_input<"lengths", B>;
    CHECK(check_gradients(scan<H>(elman, Xs{}, param<"h0", H>{}, Len{}),
                          {.dims = {{'T', 4}, {'B', 3}}, .index_bound = {{"lengths", 5}}, .index_low = {{"lengths", 1}}}) > 0);
}

TEST_CASE("scan: variable lengths carry the state and stop the gradient", "[scan]") {
    using Len = index_input<"lengths", B>;
    // lengths drawn from [0, 5): the checker draws ids; shift them to [1, 5] by feeding by hand below
    auto hs = scan<H>(elman, Xs{}, zero_state{}, Len{});
    auto prog = compile<double, options{.input_grads = true}>(sum(mul(hs, input<"g", T, B, H>{})));
    prog.params().init(3);
    xt::xtensor<double, 3> xs = xt::ones<double>({5, 3, X}) * 0.3;
    xt::xtensor<double, 3> g = xt::ones<double>({5, 3, H});
    prog.feed<"xs">(xs);
    prog.feed<"g">(g);
    prog.feed<"lengths">(xt::xtensor<int, 1>{5, 2, 1});
    prog.forward();
    auto out = prog.output();
    // Row 1 stops after 2 steps: its state stays h_2 from then on.
    for (std::size_t t = 2; t < 5; ++t)
        for (std::size_t k = 0; k < H; ++k) CHECK(out(t, 1, k) == out(1, 1, k));
    prog.backward();
    auto gx = prog.input_grad<"xs">();
    for (std::size_t t = 2; t < 5; ++t)
        for (std::size_t k = 0; k < X; ++k) CHECK(gx(t, 1, k) == 0.0);  // padded steps get no gradient
    for (std::size_t t = 1; t < 5; ++t)
        for (std::size_t k = 0; k < X; ++k) CHECK(gx(t, 2, k) == 0.0);
    CHECK(gx(4, 0, 0) != 0.0);
    // Lengths outside [1, T] are an error naming the input and the value.
    prog.feed<"lengths">(xt::xtensor<int, 1>{5, 6, 1});
    REQUIRE_THROWS_WITH(prog.forward(), Catch::Matchers::Contains("length 6 of sequence 1 in input 'lengths'"));
    prog.feed<"lengths">(xt::xtensor<int, 1>{5, 0, 1});
    REQUIRE_THROWS_AS(prog.forward(), index_error);
}

TEST_CASE("scan: variable lengths under finite differences", "[scan]") {
    using Len = index_input<"lengths", B>;
    // Lengths drawn from [1, 4] for T = 4 over 5 sequences: some are padded, some full.
    auto hs = scan<H>(elman, Xs{}, input<"h0", B, H>{}, Len{});
    CHECK(check_gradients(hs, {.dims = {{'T', 4}, {'B', 5}}, .index_bound = {{"lengths", 5}},
                               .index_low = {{"lengths", 1}}}) > 0);
}

TEST_CASE("at_time picks a step (the final state of an encoder)", "[scan]") {
    CHECK(check_gradients(at_time<-1>(Xs{}), {.dims = {{'T', 4}, {'B', 2}}}) > 0);
    CHECK(check_gradients(at_time<1>(Xs{}), {.dims = {{'T', 4}, {'B', 2}}}) > 0);
    using Len = index_input<"lengths", B>;
    CHECK(check_gradients(at_time<-1>(nn::gru<"enc", X, H>::run(Xs{}, zero_state{}, Len{})),
                          {.dims = {{'T', 4}, {'B', 3}}, .index_bound = {{"lengths", 5}}, .index_low = {{"lengths", 1}}}) > 0);
    auto prog = compile<float>(at_time<5>(Xs{}));
    prog.feed<"xs">(xt::xtensor<float, 3>(xt::zeros<float>({3, 1, X})));
    REQUIRE_THROWS_WITH(prog.forward(), Catch::Matchers::Contains("step 5 of a sequence of 3 steps"));
}

TEST_CASE("reverse_time with and without lengths", "[scan]") {
    using Len = index_input<"lengths", B>;
    CHECK(check_gradients(reverse_time(Xs{}), {.dims = {{'T', 4}, {'B', 2}}}) > 0);
    CHECK(check_gradients(mul(reverse_time(Xs{}, Len{}), Xs{}),
                          {.dims = {{'T', 4}, {'B', 3}}, .index_bound = {{"lengths", 5}}}) > 0);
    auto prog = compile<float>(reverse_time(Xs{}, Len{}));
    xt::xtensor<float, 3> xs = xt::zeros<float>({3, 1, X});
    for (std::size_t t = 0; t < 3; ++t) xs(t, 0, 0) = float(t);
    prog.feed<"xs">(xs);
    prog.feed<"lengths">(xt::xtensor<int, 1>{2});
    prog.forward();
    auto y = prog.output();  // (0, 1, 2) with length 2 -> (1, 0, 2)
    CHECK(y(0, 0, 0) == 1.0f);
    CHECK(y(1, 0, 0) == 0.0f);
    CHECK(y(2, 0, 0) == 2.0f);
}

TEST_CASE("the adjoint of a scan's states is dL/dh_t for every step", "[scan]") {
    // L = sum(h_T): dL/dh_T = 1, and dL/dh_t = (dL/dh_{t+1}) (1 - h_{t+1}^2) W_h^T going back.
    auto hs = scan<H>(elman, Xs{});
    auto prog = compile<double>(sum(mul(hs, input<"last", T, B, H>{})));
    prog.params().init(5);
    xt::xtensor<double, 3> xs = xt::ones<double>({4, 1, X}) * 0.5;
    xt::xtensor<double, 3> last = xt::zeros<double>({4, 1, H});
    xt::view(last, 3, xt::all(), xt::all()) = 1.0;
    prog.feed<"xs">(xs);
    prog.feed<"last">(last);
    prog.forward();
    prog.backward();
    auto g = prog.adjoint_of(hs);
    auto h = prog.value_of(hs);
    auto W = prog.param<"W_h">();
    for (std::size_t k = 0; k < H; ++k) CHECK(g(3, 0, k) == Approx(1.0));
    for (int t = 2; t >= 0; --t)
        for (std::size_t i = 0; i < H; ++i) {
            double expect = 0;
            for (std::size_t j = 0; j < H; ++j) expect += g(t + 1, 0, j) * (1 - h(t + 1, 0, j) * h(t + 1, 0, j)) * W(i, j);
            CHECK(g(t, 0, i) == Approx(expect));
        }
}


TEST_CASE("scan and repeat: a cell that returns one of its arguments unchanged", "[scan]") {
    // A step's output is written through the cell's result node, which an argument of the cell is
    // not: such cells gave zeros, values and gradients. The last case is the differential tests'
    // minimal program: a repeat block reduced to `return h;` (loss 0, gradient 0).
    using Xh = input<"xh", T, B, H>;
    using H0 = input<"h0", B, H>;
    using G = input<"g", T, B, H>;
    xt::xtensor<double, 3> xh = xt::reshape_view(xt::arange<double>(0, 5 * 2 * H) * 0.1 - 1.5, {5, 2, H});
    xt::xtensor<double, 2> h0 = xt::reshape_view(xt::arange<double>(0, 2 * H) * 0.25 - 0.5, {2, H});
    xt::xtensor<double, 3> g = xt::reshape_view(xt::arange<double>(0, 5 * 2 * H) * 0.05 + 0.5, {5, 2, H});
    SECTION("a scan carrying its state unchanged: every step's state is h0") {
        auto prog = compile<double, options{.input_grads = true}>(
            sum(mul(scan<H>([](auto h, auto) { return h; }, Xh{}, H0{}), G{})));
        prog.feed<"xh">(xh);
        prog.feed<"h0">(h0);
        prog.feed<"g">(g);
        CHECK(prog.forward() == Approx(xt::sum(g * h0)()).epsilon(1e-14));
        prog.backward();
        const xt::xtensor<double, 2> want = xt::sum(g, {0});
        CHECK(xt::allclose(prog.input_grad<"h0">(), want, 1e-14, 0));
    }
    SECTION("a scan whose state is its step input") {
        auto prog = compile<double, options{.input_grads = true}>(
            sum(mul(scan<H>([](auto, auto x) { return x; }, Xh{}), G{})));
        prog.feed<"xh">(xh);
        prog.feed<"g">(g);
        CHECK(prog.forward() == Approx(xt::sum(g * xh)()).epsilon(1e-14));
        prog.backward();
        CHECK(xt::allclose(prog.input_grad<"xh">(), g, 1e-14, 0));
    }
    SECTION("repeat blocks returning their input, or another argument") {
        using X2 = input<"x", B, H>;
        using G2 = input<"g", B, H>;
        auto x = xt::view(xh, 0);
        auto g2 = xt::view(g, 0);
        auto ident = compile<double, options{.input_grads = true}>(
            sum(repeat<1, "r2.">([](auto h, auto) { return h; }, X2{}, X2{})));
        ident.feed<"x">(x);
        CHECK(ident.forward() == Approx(xt::sum(x)()).epsilon(1e-14));
        ident.backward();
        CHECK(xt::all(xt::equal(ident.input_grad<"x">(), 1.0)));
        auto other = compile<double, options{.input_grads = true}>(
            sum(mul(repeat<2, "r.">([](auto, auto e) { return e; }, X2{}, H0{}), G2{})));
        other.feed<"x">(x);
        other.feed<"h0">(h0);
        other.feed<"g">(g2);
        CHECK(other.forward() == Approx(xt::sum(g2 * h0)()).epsilon(1e-14));
        other.backward();
        CHECK(xt::allclose(other.input_grad<"h0">(), g2, 1e-14, 0));  // read by the last layer only
        CHECK(xt::all(xt::equal(other.input_grad<"x">(), 0.0)));
    }
}

TEST_CASE("scan: a cell that reads neither its step input nor a value with the batch axis", "[scan]") {
    // The steps' rows come from the sequence's batch, which the cell's own nodes did not name: the
    // letter was left unbound and no step computed anything (a training program's zeroed arena hid
    // it; the differential tests found it as an inference program over an identity cell, whose
    // memory reused by lifetime still held other values). h_t = tanh(h_{t-1} W + b) from h = 0.
    auto cell = [](auto h, auto) { return tanh(h * param<"W_h", H, H>{} + param<"b", H>{}); };
    auto hs = scan<H>(cell, Xs{});
    auto prog = compile<double>(sum(mul(hs, input<"g", T, B, H>{})));
    prog.params().init(5);
    auto W = prog.param<"W_h">();
    auto bias = prog.param<"b">();
    for (std::size_t k = 0; k < H; ++k) bias(k) = 0.25 * double(k) - 0.3;
    xt::xtensor<double, 3> xs = xt::zeros<double>({4, 2, X});
    xt::xtensor<double, 3> g = xt::reshape_view(xt::arange<double>(0, 4 * 2 * H) * 0.1 - 1.0, {4, 2, H});
    prog.feed<"xs">(xs);
    prog.feed<"g">(g);
    prog.forward();
    xt::xtensor<double, 2> h = xt::zeros<double>({2, H});
    for (std::size_t t = 0; t < 4; ++t) {
        xt::xtensor<double, 2> next = xt::zeros<double>({2, H});
        for (std::size_t b = 0; b < 2; ++b)
            for (std::size_t j = 0; j < H; ++j) {
                double s = bias(j);
                for (std::size_t k = 0; k < H; ++k) s += h(b, k) * W(k, j);
                next(b, j) = std::tanh(s);
            }
        h = next;
        CHECK(xt::allclose(xt::view(prog.value_of(hs), t), h, 1e-14, 1e-15));
    }
    CHECK(check_gradients(hs, {.dims = {{'T', 4}, {'B', 2}}}) > 0);
    // An inference program (memory placed by lifetime, here poisoned with NaN) over an identity cell
    // equals the training program.
    auto id = affine(scan<H>([](auto s, auto) { return s; }, Xs{}), param<"W", H, H>{}, param<"c", H>{});
    auto train = compile<double>(sum(id));
    train.params().init(3);
    auto inf = program_for<double, options{.inference = true}, decltype(sum(id))>(train.shared_params());
    inf.poison_arena(true);
    train.feed<"xs">(xs);
    inf.feed<"xs">(xs);
    const double want = train.forward();
    CHECK(inf.forward() == want);
    CHECK(want == Approx(4.0 * 2.0 * xt::sum(train.param<"c">())()).epsilon(1e-14));  // the state stays 0
}

TEST_CASE("scan: variable lengths with a cell that does not read its state", "[scan]") {
    // A padding step keeps the previous state: the previous step's output, also when the cell reads
    // only its step input. Such a scan has no state node, yet its lengths and h0 were bound to it and
    // padding rows were copied from it (out of bounds: the differential tests' runner crashed on a
    // scan returning its step input, with lengths).
    using Len = index_input<"lengths", B>;
    using Xh = input<"xh", T, B, H>;
    using H0 = input<"h0", B, H>;
    using G = input<"g", T, B, H>;
    xt::xtensor<double, 3> xh = xt::reshape_view(xt::arange<double>(0, 4 * 3 * H) * 0.1 - 1.5, {4, 3, H});
    xt::xtensor<double, 2> h0 = xt::reshape_view(xt::arange<double>(0, 3 * H) * 0.25 - 0.5, {3, H});
    xt::xtensor<double, 3> g = xt::reshape_view(xt::arange<double>(0, 4 * 3 * H) * 0.05 + 0.5, {4, 3, H});
    const std::vector<index_t> len{1, 4, 2};
    // hs[t][b] = xh[min(t, len[b] - 1)][b]; dL/dxh[t][b] = g[t][b] before the last real step, the sum
    // of g over the last real step and the padding after it, 0 in the padding.
    xt::xtensor<double, 3> want_hs = xt::zeros<double>({4, 3, H}), want_dx = xt::zeros<double>({4, 3, H});
    for (std::size_t t = 0; t < 4; ++t)
        for (std::size_t b = 0; b < 3; ++b) {
            const std::size_t last = std::size_t(len[b]) - 1;
            xt::view(want_hs, t, b) = xt::view(xh, std::min(t, last), b);
            xt::view(want_dx, std::min(t, last), b) += xt::view(g, t, b);
        }
    auto check = [&](auto prog) {
        prog.template feed<"xh">(xh);
        if constexpr (decltype(prog)::template has_input<"h0">) prog.template feed<"h0">(h0);
        prog.feed("lengths", len.data(), rshape{1, {3}});
        prog.template feed<"g">(g);
        CHECK(prog.forward() == Approx(xt::sum(g * want_hs)()).epsilon(1e-14));
        prog.backward();
        CHECK(xt::allclose(prog.template input_grad<"xh">(), want_dx, 1e-14, 0));
        if constexpr (decltype(prog)::template has_input<"h0">)
            CHECK(xt::all(xt::equal(prog.template input_grad<"h0">(), 0.0)));  // no step reads it
    };
    SECTION("a cell returning its step input") {
        check(compile<double, options{.input_grads = true}>(
            sum(mul(scan<H>([](auto, auto x) { return x; }, Xh{}, zero_state{}, Len{}), G{}))));
    }
    SECTION("with an initial state, which no step reads") {
        check(compile<double, options{.input_grads = true}>(
            sum(mul(scan<H>([](auto, auto x) { return x; }, Xh{}, H0{}, Len{}), G{}))));
    }
    SECTION("a computed cell, by finite differences") {
        auto cell = [](auto, auto x) { return tanh(x * param<"W_x", X, H>{} + param<"b", H>{}); };
        CHECK(check_gradients(scan<H>(cell, Xs{}, zero_state{}, Len{}),
                              {.dims = {{'T', 4}, {'B', 3}}, .index_bound = {{"lengths", 5}}, .index_low = {{"lengths", 1}}}) > 0);
    }
}
