// Recurrent cells through scan (Elman, GRU, LSTM, stacked, bidirectional), their errors, and
// generation with nn::decode.
#include "recurrent_fixture.hpp"

using namespace ctg;
using namespace ctg::testing::recurrent;
using ctg::testing::check_gradients;

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

TEST_CASE("choose: greedy, top-k and top-p sampling at a temperature, bad arguments", "[decode]") {
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
    // top_p: probabilities (0.25, 0.75, ~0): a nucleus of 0.7 is token 1 alone, 0.9 takes both.
    for (int i = 0; i < 200; ++i) REQUIRE(nn::choose(row, 3, {0, 1.0, 0.7}, rng) == 1);
    ones = 0;
    for (int i = 0; i < 4000; ++i) ones += nn::choose(row, 3, {0, 1.0, 0.9}, rng) == 1;
    CHECK(ones / 4000.0 == Approx(0.75).margin(0.03));
    CHECK_THROWS_AS(nn::choose(row, 3, {-1, 1.0}, rng), error);
    CHECK_THROWS_AS(nn::choose(row, 3, {1, 0.0}, rng), error);
    CHECK_THROWS_AS(nn::choose(row, 3, {0, 1.0, 0.0}, rng), error);
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
