// scan: recurrence with BPTT, checked by finite differences (float64) and against an unrolled graph.
#include "gradcheck.hpp"

#include <xtensor/xview.hpp>

#include <random>

using namespace ctg;
using ctg::testing::check_gradients;

namespace {
inline constexpr dim B = dyn('B');
inline constexpr dim T = dyn('T');
constexpr int X = 3, H = 4;
using Xs = input<"xs", T, B, X>;

auto elman = [](auto h, auto x) { return tanh(h * param<"W_h", H, H>{} + x * param<"W_x", X, H>{} + param<"b", H>{}); };
}  // namespace

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

TEST_CASE("cells through scan: Elman (tanh, relu), GRU, LSTM, stacked and bidirectional", "[scan][cells]") {
    const ctg::testing::check_config cfg{.dims = {{'T', 5}, {'B', 2}}};
    CHECK(check_gradients(nn::elman<"rnn", X, H>::run(Xs{}), cfg) > 0);
    CHECK(check_gradients(nn::elman<"rnn", X, H, nn::activation::relu>::run(Xs{}),
                          {.values = {-1.5, 1.5, 0.05}, .dims = {{'T', 5}, {'B', 2}}}) > 0);
    CHECK(check_gradients(nn::gru<"gru", X, H>::run(Xs{}), cfg) > 0);
    CHECK(check_gradients(nn::lstm<"lstm", X, H>::run(Xs{}), cfg) > 0);
    // The raw-input form (projection inside the step) is the same function.
    CHECK(check_gradients(scan<H>([](auto h, auto x) { return nn::gru<"gru", X, H>::cell(h, x); }, Xs{}), cfg) > 0);
    // Two stacked layers, and a bidirectional encoder with variable lengths.
    CHECK(check_gradients(nn::gru<"l2", H, H>::run(nn::elman<"l1", X, H>::run(Xs{})), cfg) > 0);
    using Len = index_input<"lengths", B>;
    CHECK(check_gradients(nn::bidirectional<nn::gru<"f", X, H>, nn::gru<"b", X, H>>::run(Xs{}, Len{}),
                          {.dims = {{'T', 4}, {'B', 3}}, .index_bound = {{"lengths", 5}}, .index_low = {{"lengths", 1}}}) > 0);
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

TEST_CASE("all three cells under finite differences with variable lengths, T = 6", "[scan][cells]") {
    using Len = index_input<"lengths", B>;
    const ctg::testing::check_config cfg{
        .dims = {{'T', 6}, {'B', 4}}, .index_bound = {{"lengths", 7}}, .index_low = {{"lengths", 1}}};
    CHECK(check_gradients(nn::elman<"rnn", X, H>::run(Xs{}, zero_state{}, Len{}), cfg) > 0);
    CHECK(check_gradients(nn::gru<"gru", X, H>::run(Xs{}, zero_state{}, Len{}), cfg) > 0);
    CHECK(check_gradients(nn::lstm<"lstm", X, H>::run(Xs{}, zero_state{}, Len{}), cfg) > 0);
}

TEST_CASE("scan inputs that disagree on the batch size are named", "[scan][errors]") {
    using Len = index_input<"lengths", B>;
    auto prog = compile<float>(sum(nn::gru<"gru", X, H>::run(Xs{}, zero_state{}, Len{})));
    prog.feed<"xs">(xt::xtensor<float, 3>(xt::zeros<float>({5, 3, X})));
    prog.feed<"lengths">(xt::xtensor<int, 1>{5, 5});
    REQUIRE_THROWS_WITH(prog.forward(), Catch::Matchers::Contains("dimension 'B' disagrees between input 'xs' of shape (5,3,3)") &&
                                            Catch::Matchers::Contains("input 'lengths' of shape (2)") &&
                                            Catch::Matchers::Contains("op 'scan'"));
}

TEST_CASE("a token outside the vocabulary inside a recurrent model is named", "[scan][errors]") {
    using Tok = index_input<"tokens", T, B>;
    auto hs = nn::elman<"rnn", 4, H>::run(embedding(param<"embed", 10, 4>{}, Tok{}));
    auto prog = compile<float>(sum(hs));
    prog.feed<"tokens">(xt::xtensor<int, 2>{{1, 2}, {3, 12}});
    REQUIRE_THROWS_WITH(prog.forward(), Catch::Matchers::Contains("id 12 at position 3 of input 'tokens'"));
}

TEST_CASE("choose: greedy, top-k sampling at a temperature, bad arguments", "[decode]") {
    std::mt19937_64 rng(3);
    const std::vector<double> logits = {0.0, std::log(3.0), -50.0};
    auto row = [&](std::size_t v) { return logits[v]; };
    CHECK(nn::choose(row, 3, {1, 1.0}, rng) == 1);
    int ones = 0;
    for (int i = 0; i < 4000; ++i) {
        const int c = nn::choose(row, 3, {2, 1.0}, rng);
        REQUIRE(c != 2);  // outside the top 2
        ones += c == 1;
    }
    CHECK(ones / 4000.0 == Approx(0.75).margin(0.03));  // softmax of (0, log 3)
    ones = 0;
    for (int i = 0; i < 4000; ++i) ones += nn::choose(row, 3, {2, 2.0}, rng) == 1;
    CHECK(ones / 4000.0 == Approx(std::sqrt(3.0) / (1 + std::sqrt(3.0))).margin(0.03));  // temperature 2
    CHECK_THROWS_AS(nn::choose(row, 3, {0, 1.0}, rng), error);
    CHECK_THROWS_AS(nn::choose(row, 3, {1, 0.0}, rng), error);
}

TEST_CASE("decode: greedy generation with a one-step program matches a hand-run loop", "[decode]") {
    using Tok = index_input<"token", B>;
    using S = input<"state", B, H>;
    using Cell = nn::gru<"dec", 3, H>;
    auto next_state = Cell::cell(S{}, embedding(param<"emb", 5, 3>{}, Tok{}));
    auto logits = next_state * param<"out", H, 5>{};
    auto step = compile<double>(next_state, logits);
    step.params().init(9);
    std::mt19937_64 rng(1);
    xt::xtensor<double, 2> s0 = xt::zeros<double>({std::size_t(2), std::size_t(H)});
    s0(1, 0) = 1.0;
    const auto got = nn::decode<"token", "state">(step, s0, 0, 4, 6, {1, 1.0}, rng);
    // The same by hand, one sequence at a time.
    for (std::size_t b = 0; b < 2; ++b) {
        xt::xtensor<double, 2> s = xt::zeros<double>({std::size_t(1), std::size_t(H)});
        s(0, 0) = s0(b, 0);
        xt::xtensor<int, 1> tok = {0};
        std::vector<int> want;
        for (int t = 0; t < 6; ++t) {
            step.feed<"token">(tok);
            step.feed<"state">(s);
            step.forward();
            s = step.output<0>();
            auto z = step.output<1>();
            int best = 0;
            for (int v = 1; v < 5; ++v)
                if (z(0, v) > z(0, best)) best = v;
            if (best == 4) break;
            want.push_back(best);
            tok(0) = best;
        }
        CHECK(got[b] == want);
    }
    CHECK(got[0].size() <= 6);
}
