// Transformer pieces: the fused layer norm against its composed form, positional encodings (values,
// bounds), repeat (depth as a loop) against the same blocks written out, parameter initialisation
// of stacked parameters, and the bad-input paths.
#include <catch2/catch.hpp>

#include <cmath>
#include <limits>

#include <xtensor/xview.hpp>

#include "pool_threads.hpp"
#include "transformer_fixture.hpp"

using namespace ctg;
using namespace ctg::testing::tfm;

namespace {
constexpr options grads{.input_grads = true};

using gamma_p = param<"ln.weight", D>;
using beta_p = param<"ln.bias", D>;

/// Layer norm written with primitives: means as products with a (D, D) matrix of 1/D, the inverse
/// square root as exp(-log(v) / 2).
template <cval Eps = 1e-5, expr E>
constexpr auto composed_layer_norm(E x) {
    auto avg = full<1.0 / D, D, D>();
    auto centred = x - x * avg;  // operator* is the matrix product
    auto var = mul(centred, centred) * avg;
    auto inv_std = exp(mul(log(var + constant<Eps>{}), constant<-0.5>{}));
    return mul(mul(centred, inv_std), gamma_p{}) + beta_p{};
}

void copy_same(parameter_store<double>& a, parameter_store<double>& b) {
    a.init(5);
    for (std::size_t s = 0; s < a.size(); ++s) {  // random gains and shifts, not just 1 and 0
        for (std::size_t k = 0; k < a.at(s).shape.size(); ++k) a.value(s)[k] += 0.3 * std::sin(double(7 * k + s));
        std::copy(a.value(s), a.value(s) + a.at(s).shape.size(), b.value(b.slot(a.at(s).name)));
    }
}
void compare_same(parameter_store<double>& a, parameter_store<double>& b) {
    REQUIRE(a.size() == b.size());
    for (std::size_t s = 0; s < a.size(); ++s) {
        const double* gb = b.grad(b.slot(a.at(s).name));
        for (std::size_t k = 0; k < a.at(s).shape.size(); ++k) CHECK(a.grad(s)[k] == Approx(gb[k]).margin(1e-12));
    }
}
}  // namespace

TEST_CASE("fused layer norm equals the composed graph, values and gradients", "[transformer]") {
    auto pa = compile<double, grads>(sum(mul(layer_norm(X{}, gamma_p{}, beta_p{}), Gw{})));
    auto pb = compile<double, grads>(sum(mul(composed_layer_norm(X{}), Gw{})));
    compare_programs(pa, pb, 2, 3, 1e-12, copy_same, compare_same);
    // 150 rows: gamma's and beta's adjoints summed in three blocks of 64 rows, the last one short
    compare_programs(pa, pb, 3, 50, 1e-12, copy_same, compare_same);
    // The normalisation itself, with gamma 1 and beta 0: every row has mean 0 and variance ~1. A
    // forward-only (inference) program: it keeps the output and (mean, 1/std) per row, not room for
    // backward's per-block sums of gamma's and beta's adjoints (2 D per 64 rows).
    auto pn = compile<double, options{.inference = true}>(layer_norm(X{}, gamma_p{}, beta_p{}));
    pn.params().init(0);  // gain "weight" -> ones, bias -> zeros
    const auto x = random_values(2 * 3 * D, 9, -3, 5);
    pn.poison_arena(true);  // an element read before it is written would show as NaN
    pn.feed("x", x.data(), rshape{3, {2, 3, D}});
    pn.forward();
    const std::size_t rows = 6, alignment = 8;  // each buffer starts on 8 elements
    CHECK(pn.arena_elements() < rows * D + 2 * rows + 2 * D);
    CHECK(pn.arena_elements() <= rows * D + 2 * rows + 2 * alignment);
    const auto y = xt::eval(pn.value_of(layer_norm(X{}, gamma_p{}, beta_p{})));
    for (std::size_t r = 0; r < 6; ++r) {
        double mean = 0, sq = 0;
        for (int k = 0; k < D; ++k) mean += y.data()[r * D + k] / D;
        for (int k = 0; k < D; ++k) sq += (y.data()[r * D + k] - mean) * (y.data()[r * D + k] - mean) / D;
        CHECK(mean == Approx(0).margin(1e-12));
        CHECK(sq == Approx(1).margin(1e-4));  // var / (var + eps)
    }
}

TEST_CASE("layer norm's eps: layer_norm<0.5> equals the composed graph with 0.5 added to the variance", "[transformer]") {
    auto pa = compile<double, grads>(sum(mul(layer_norm<0.5>(X{}, gamma_p{}, beta_p{}), Gw{})));
    auto pb = compile<double, grads>(sum(mul(composed_layer_norm<0.5>(X{}), Gw{})));
    compare_programs(pa, pb, 2, 3, 1e-12, copy_same, compare_same);
    // and the eps really is used: the default one gives another loss on the same data
    auto pd = compile<double, grads>(sum(mul(layer_norm(X{}, gamma_p{}, beta_p{}), Gw{})));
    copy_same(pa.params(), pd.params());
    const auto x = random_values(2 * 3 * D, 3), g = random_values(2 * 3 * D, 4, -1, 1);
    auto loss = [&](auto& p) {
        p.feed("x", x.data(), rshape{3, {2, 3, D}});
        p.feed("g", g.data(), rshape{3, {2, 3, D}});
        return p.forward();
    };
    CHECK(std::abs(loss(pa) - loss(pd)) > 1e-3);
}

TEST_CASE("decoder block: Causal = false takes self_mask alone (causal{} given: the causal block's values and gradients)", "[transformer]") {
    // The decoder's memory is x itself here (cross-attention over the same sequence).
    using causal_dec = nn::decoder_block<"dec.", D, 2, 6>;
    using open_dec = nn::decoder_block<"dec.", D, 2, 6, nn::norm_placement::pre, nn::activation::gelu, scaled_dot_score, 0.0, false>;
    auto pc = compile<double, grads>(sum(mul(causal_dec{}(X{}, X{}), Gw{})));
    auto po = compile<double, grads>(sum(mul(open_dec{}(X{}, X{}, causal{}), Gw{})));
    compare_programs(pc, po, 2, 5, 1e-12, copy_same, compare_same);
    // Without a mask the non-causal block attends to later positions: position 0's output changes
    // when the last position's input does; the causal block's does not.
    using Mem = input<"mem", B, 4, D>;
    constexpr auto yc = causal_dec{}(X{}, Mem{});
    constexpr auto yo = open_dec{}(X{}, Mem{});
    auto first_position = [](auto& p, auto y, const std::vector<double>& x) {
        const auto mem = random_values(4 * D, 8);
        p.feed("x", x.data(), rshape{3, {1, 3, D}});
        p.feed("mem", mem.data(), rshape{3, {1, 4, D}});
        p.forward();
        const xt::xtensor<double, 3> v = p.value_of(y);
        return std::vector<double>(v.begin(), v.begin() + D);
    };
    auto c = compile<double>(sum(yc));
    decltype(compile<double>(sum(yo))) o(c.shared_params());  // the same weights
    c.params().init(3);
    auto x = random_values(3 * D, 6);
    const auto c0 = first_position(c, yc, x), o0 = first_position(o, yo, x);
    for (int k = 0; k < D; ++k) x[2 * D + k] *= -1.5;  // the last position only (not by a constant: layer norm would remove it)
    const auto c1 = first_position(c, yc, x), o1 = first_position(o, yo, x);
    CHECK(c0 == c1);
    double moved = 0;
    for (int k = 0; k < D; ++k) moved = std::max(moved, std::abs(o1[k] - o0[k]));
    CHECK(moved > 1e-3);
}

TEST_CASE("layer norm over ranges of rows: the same values and gradients at one and two threads, bit for bit", "[transformer][threads]") {
    // 8 x 1100 rows of D, over the split threshold: rows as pool tasks, gamma's and beta's adjoints
    // summed per block of 64 rows (138 blocks, the last one short) and the blocks added in order.
    const std::size_t batch = 8, len = 1100;
    auto p1 = compile<double, grads>(sum(mul(layer_norm(X{}, gamma_p{}, beta_p{}), Gw{})));
    decltype(p1) p2;
    copy_same(p1.params(), p2.params());  // gains and shifts not all 1 and 0: gamma matters
    const auto x = random_values(batch * len * D, 11, -3, 5), g = random_values(batch * len * D, 12, -1, 1);
    std::vector<double> results[2];
    for (auto [prog, threads] : {std::pair{&p1, 1}, std::pair{&p2, 2}}) {
        ctg::testing::pool_threads pool(threads);
        prog->feed("x", x.data(), rshape{3, {batch, len, D}});
        prog->feed("g", g.data(), rshape{3, {batch, len, D}});
        auto& r = results[threads - 1];
        r.push_back(prog->forward());
        prog->backward();
        auto gx = prog->template input_grad<"x">();
        r.insert(r.end(), gx.begin(), gx.end());
        const auto& gp = prog->params().grads();
        r.insert(r.end(), gp.begin(), gp.end());
    }
    REQUIRE(results[0].size() == results[1].size());
    std::size_t differ = 0;
    for (std::size_t i = 0; i < results[0].size(); ++i) differ += results[0][i] != results[1][i];
    CHECK(differ == 0);
}

TEST_CASE("sinusoidal positions follow the reference formula, too long a sequence is an error", "[transformer]") {
    auto prog = compile<double>(sinusoidal_positions<6>(X{}));
    const std::vector<double> zeros(1 * 5 * D, 0.0);
    prog.feed("x", zeros.data(), rshape{3, {1, 5, D}});
    prog.forward();
    const auto pe = xt::eval(prog.output<0>());
    for (std::size_t p = 0; p < 5; ++p)
        for (int i = 0; i < D; i += 2) {
            const double angle = double(p) / std::pow(10000.0, double(i) / D);
            CHECK(pe(0, p, i) == Approx(std::sin(angle)).margin(1e-15));
            CHECK(pe(0, p, i + 1) == Approx(std::cos(angle)).margin(1e-15));
        }
    // Rounded to float first (a PyTorch float32 buffer), in a float64 program.
    const auto& rounded = ops::sinusoidal_table<double, 6, D, float>();
    for (std::size_t k = 0; k < 5 * D; ++k) {
        volatile float f = float(pe.data()[k]);  // volatile: keep the compiler from folding the rounding away
        CHECK(rounded[k] == double(f));
    }
    const std::vector<double> longer(1 * 7 * D, 0.0);
    prog.feed("x", longer.data(), rshape{3, {1, 7, D}});
    CHECK_THROWS_AS(prog.forward(), index_error);
    CHECK_THROWS_WITH(prog.forward(), Catch::Contains("a sequence of 7 positions in 'x' is longer than the positional "
                                                      "table (6 positions)"));
}

TEST_CASE("learned positions: table rows by position, gradient summed over the batch, bounds", "[transformer]") {
    using table = param<"pos", 6, D>;
    auto prog = compile<double, grads>(sum(mul(learned_positions(X{}, table{}), Gw{})));
    prog.params().init(1);
    const std::vector<double> before(prog.params().values().begin(), prog.params().values().end());
    const auto x = random_values(2 * 4 * D, 2), g = random_values(2 * 4 * D, 3);
    prog.feed("x", x.data(), rshape{3, {2, 4, D}});
    prog.feed("g", g.data(), rshape{3, {2, 4, D}});
    prog.forward();
    prog.backward();
    auto gt = prog.grad<"pos">();
    for (std::size_t p = 0; p < 6; ++p)
        for (int k = 0; k < D; ++k) {
            const double want = p < 4 ? g[(0 * 4 + p) * D + k] + g[(1 * 4 + p) * D + k] : 0.0;
            CHECK(gt(p, k) == Approx(want).margin(1e-14));
        }
    const std::vector<double> longer(2 * 7 * D, 0.0), gl(2 * 7 * D, 1.0);
    prog.feed("x", longer.data(), rshape{3, {2, 7, D}});
    prog.feed("g", gl.data(), rshape{3, {2, 7, D}});
    CHECK_THROWS_WITH(prog.forward(), Catch::Contains("longer than the positional table (6 positions)"));
    CHECK(std::equal(before.begin(), before.end(), prog.params().values().begin()));  // nothing changed
}

TEST_CASE("learned positions and cross-entropy assign their fresh adjoints: stale gradients ignored after zero_grad, "
          "added to without it",
          "[transformer]") {
    // After zero_grad the table's and the logits' gradients are fresh: the VJPs assign them (the
    // store does not zero them first), so what the memory held must not show, in rows no sequence
    // reads either.
    // Without zero_grad, a second backward adds: exactly twice the gradient.
    const double stale = std::numeric_limits<double>::quiet_NaN();
    auto check_table = [&](auto& prog, const std::vector<double>& want) {
        for (int twice = 1; twice <= 2; ++twice) {
            if (twice == 1) {  // stale values in the memory, then a pending zero_grad (lazy: see params.hpp)
                auto gt = prog.template grad<"pos">();
                std::fill(gt.begin(), gt.end(), stale);
                prog.zero_grad();
            }
            prog.forward();
            prog.backward();
            auto gt = prog.template grad<"pos">();
            std::size_t wrong = 0;
            for (std::size_t k = 0; k < want.size(); ++k) wrong += !(gt.data()[k] == twice * want[k]);
            INFO((twice == 1 ? "after zero_grad" : "a second backward"));
            CHECK(wrong == 0);
        }
    };
    SECTION("positions 0 .. T-1") {
        using table = param<"pos", 6, D>;
        auto prog = compile<double>(sum(mul(learned_positions(X{}, table{}), Gw{})));
        prog.params().init(1);
        const auto x = random_values(2 * 4 * D, 2), g = random_values(2 * 4 * D, 3);
        prog.feed("x", x.data(), rshape{3, {2, 4, D}});
        prog.feed("g", g.data(), rshape{3, {2, 4, D}});
        std::vector<double> want(6 * D, 0.0);  // rows 4 and 5 read by no sequence: zero
        for (std::size_t p = 0; p < 4; ++p)
            for (int k = 0; k < D; ++k) want[p * D + k] = g[(0 * 4 + p) * D + k] + g[(1 * 4 + p) * D + k];
        check_table(prog, want);
    }
    SECTION("from a start per sequence") {
        auto prog = compile<double>(sum(mul(learned_positions(X{}, param<"pos", 6, D>{}, index_input<"start", B>{}), Gw{})));
        prog.params().init(1);
        const auto x = random_values(3 * 2 * D, 4), g = random_values(3 * 2 * D, 5);
        const std::vector<index_t> start{3, 0, 2};  // rows 3-4, 0-1, 2-3: row 3 read twice, row 5 never
        prog.feed("x", x.data(), rshape{3, {3, 2, D}});
        prog.feed("g", g.data(), rshape{3, {3, 2, D}});
        prog.feed("start", start.data(), rshape{1, {3}});
        std::vector<double> want(6 * D, 0.0);
        for (std::size_t o = 0; o < 3; ++o)
            for (std::size_t p = 0; p < 2; ++p)
                for (int k = 0; k < D; ++k) want[(std::size_t(start[o]) + p) * D + k] += g[(o * 2 + p) * D + k];
        check_table(prog, want);
    }
    SECTION("cross-entropy's logits, an ignored row among them") {
        using Z = param<"z", 4, 5>;
        auto prog = compile<double>(softmax_cross_entropy(Z{}, index_input<"t", 4>{}));
        prog.params().init(2);
        const std::vector<index_t> t{1, -100, 4, 0};
        prog.feed("t", t.data(), rshape{1, {4}});
        const double* z = prog.params().value(prog.params().slot("z"));
        std::vector<double> want(4 * 5, 0.0);  // (softmax - onehot) / 3 in the rows that count
        for (std::size_t r = 0; r < 4; ++r) {
            if (t[r] < 0) continue;
            double m = z[r * 5], total = 0;
            for (int k = 1; k < 5; ++k) m = std::max(m, z[r * 5 + k]);
            for (int k = 0; k < 5; ++k) total += std::exp(z[r * 5 + k] - m);
            for (int k = 0; k < 5; ++k) want[r * 5 + k] = (std::exp(z[r * 5 + k] - m) / total - (k == t[r])) / 3;
        }
        for (int twice = 1; twice <= 2; ++twice) {
            if (twice == 1) {
                auto gz = prog.grad<"z">();
                std::fill(gz.begin(), gz.end(), stale);
                prog.zero_grad();
            }
            prog.forward();
            prog.backward();
            auto gz = prog.grad<"z">();
            INFO((twice == 1 ? "after zero_grad" : "a second backward"));
            for (std::size_t k = 0; k < want.size(); ++k) CHECK(gz.data()[k] == Approx(twice * want[k]).margin(1e-15));
            CHECK(gz(1, 2) == 0.0);  // the ignored row
        }
    }
}

namespace {
using block = nn::encoder_block<"", D, 2, 8>;
constexpr auto block_fn = [](auto h) { return block{}(h, causal{}); };
template <fixed_string P>
using named_block = nn::encoder_block<P, D, 2, 8>;

/// repeat's row l of "blocks.<name>" is layer l's parameter "l<l>.<name>" of the written-out model.
void copy_layers(parameter_store<double>& a, parameter_store<double>& b) {
    a.init(11);
    for (std::size_t s = 0; s < a.size(); ++s) {
        const auto& e = a.at(s);
        REQUIRE(e.name.rfind("blocks.", 0) == 0);
        REQUIRE(e.layer_axes == 1);
        const std::size_t per = e.shape.size() / e.shape.d[0];
        for (std::size_t k = 0; k < e.shape.size(); ++k) a.value(s)[k] += 0.2 * std::cos(double(3 * k + s));
        for (std::size_t l = 0; l < e.shape.d[0]; ++l)
            std::copy(a.value(s) + l * per, a.value(s) + (l + 1) * per,
                      b.value(b.slot("l" + std::to_string(l) + "." + e.name.substr(7))));
    }
}
void compare_layers(parameter_store<double>& a, parameter_store<double>& b) {
    for (std::size_t s = 0; s < a.size(); ++s) {
        const auto& e = a.at(s);
        const std::size_t per = e.shape.size() / e.shape.d[0];
        for (std::size_t l = 0; l < e.shape.d[0]; ++l) {
            const double* gb = b.grad(b.slot("l" + std::to_string(l) + "." + e.name.substr(7)));
            for (std::size_t k = 0; k < per; ++k) CHECK(a.grad(s)[l * per + k] == Approx(gb[k]).margin(1e-12));
        }
    }
}
}  // namespace

TEST_CASE("repeat equals the same blocks written out, values and gradients", "[transformer]") {
    auto stacked = repeat<3, "blocks.">(block_fn, X{});
    auto written = named_block<"l2.">{}(named_block<"l1.">{}(named_block<"l0.">{}(X{}, causal{}), causal{}), causal{});
    auto pa = compile<double, grads>(sum(mul(stacked, Gw{})));
    auto pb = compile<double, grads>(sum(mul(written, Gw{})));
    REQUIRE(pa.params().size() * 3 == pb.params().size());
    compare_programs(pa, pb, 2, 5, 1e-12, copy_layers, compare_layers);
    // One layer type whatever the depth: the 3-layer program has the nodes of one block plus repeat.
    CHECK(decltype(pa)::N < decltype(pb)::N / 2);
}

TEST_CASE("stacked parameters initialise per layer: gains 1, biases 0, Xavier per slice", "[transformer]") {
    auto prog = compile<float>(repeat<4, "blocks.">(block_fn, X{}));
    prog.params().init(3);
    auto ln = prog.param<"blocks.ln1.weight">();
    auto bias = prog.param<"blocks.fc1.bias">();
    auto w = prog.param<"blocks.fc1.weight">();  // (4, D, 8): a = sqrt(6 / (D + 8)) per layer
    CHECK(ln.shape()[0] == 4);
    for (float v : ln) CHECK(v == 1.0f);
    for (float v : bias) CHECK(v == 0.0f);
    const float a = std::sqrt(6.0f / (D + 8));
    float largest = 0;
    for (float v : w) largest = std::max(largest, std::abs(v));
    CHECK(largest <= a);
    CHECK(largest > 0.5f * a);
    CHECK(xt::amax(xt::abs(xt::view(w, 0) - xt::view(w, 1)))() > 0.0f);  // layers differ
}

TEST_CASE("a GPT's bad input: a token id out of range, a context longer than the table", "[transformer][errors]") {
    using model = nn::gpt<11, 8, D, 2, 2>;
    using Tok = index_input<"tok", B, T>;
    using Tgt = index_input<"tgt", B, T>;
    auto prog = compile<float>(model::loss(Tok{}, Tgt{}));
    prog.params().init(1);
    const std::vector<float> before(prog.params().values().begin(), prog.params().values().end());
    std::vector<index_t> tok = {1, 2, 3, 11}, tgt = {2, 3, 4, 5};
    prog.feed("tok", tok.data(), rshape{2, {1, 4}});
    prog.feed("tgt", tgt.data(), rshape{2, {1, 4}});
    CHECK_THROWS_WITH(prog.forward(), Catch::Contains("id 11 at position 3 of input 'tok' is outside the table's range [0, 11)"));
    std::vector<index_t> long_tok(9, 1), long_tgt(9, 2);
    prog.feed("tok", long_tok.data(), rshape{2, {1, 9}});
    prog.feed("tgt", long_tgt.data(), rshape{2, {1, 9}});
    CHECK_THROWS_WITH(prog.forward(), Catch::Contains("a sequence of 9 positions in 'embedding' is longer than the "
                                                      "positional table (8 positions)"));
    CHECK(std::equal(before.begin(), before.end(), prog.params().values().begin()));
    prog.feed("tok", tok.data(), rshape{2, {1, 4}});
    tok[3] = 10;
    prog.feed("tok", tok.data(), rshape{2, {1, 4}});
    prog.feed("tgt", tgt.data(), rshape{2, {1, 4}});
    // The failed calls left nothing behind: a fresh program over the same weights agrees exactly.
    decltype(prog) fresh(prog.shared_params());
    fresh.feed("tok", tok.data(), rshape{2, {1, 4}});
    fresh.feed("tgt", tgt.data(), rshape{2, {1, 4}});
    const float loss = prog.forward();
    CHECK(std::isfinite(loss));
    CHECK(loss == fresh.forward());
}

TEST_CASE("dropout: rate, scale, reproducible masks, new masks per pass and per layer, off in inference", "[transformer]") {
    using Xd = input<"x", B, T, D>;
    auto y = dropout<0.25>(Xd{});
    auto prog = compile<double, grads>(sum(mul(y, Gw{})));
    const std::size_t n = 4 * 50 * D;
    const std::vector<double> ones(n, 1.0), g = random_values(n, 8);
    prog.feed("x", ones.data(), rshape{3, {4, 50, D}});
    prog.feed("g", g.data(), rshape{3, {4, 50, D}});
    prog.dropout_seed(42);
    prog.forward();
    const xt::xtensor<double, 3> first = prog.value_of(y);  // a copy (xt::eval of a view would not copy)
    std::size_t zeros = 0;
    for (double v : first) {
        zeros += v == 0.0;
        if (v != 0.0) CHECK(v == 1.0 / 0.75);
    }
    CHECK(zeros > n / 4 - 50);  // 200 expected, sd 12
    CHECK(zeros < n / 4 + 50);
    // VJP: the same mask, scaled.
    prog.backward();
    auto gx = prog.input_grad<"x">();
    for (std::size_t i = 0; i < n; ++i) CHECK(gx.data()[i] == Approx(first.data()[i] != 0.0 ? g[i] / 0.75 : 0.0).margin(1e-15));
    // The next pass draws a new mask; the same seed replays the first.
    prog.forward();
    CHECK_FALSE(bool(xt::eval(prog.value_of(y)) == first));
    prog.dropout_seed(42);
    prog.forward();
    CHECK(bool(xt::eval(prog.value_of(y)) == first));
    // Evaluation mode and inference programs: the identity.
    prog.training(false);
    prog.forward();
    CHECK(bool(xt::eval(prog.value_of(y)) == xt::ones<double>({4, 50, D})));
    auto inference = compile<double, options{.inference = true}>(y);
    inference.feed("x", ones.data(), rshape{3, {4, 50, D}});
    inference.forward();
    CHECK(bool(xt::eval(inference.output<0>()) == xt::ones<double>({4, 50, D})));
    // Each layer of a repeat draws its own mask: two layers of rate 1/2 keep a quarter.
    auto twice = compile<double>(repeat<2, "r.">([](auto h) { return dropout<0.5>(h); }, Xd{}));
    twice.feed("x", ones.data(), rshape{3, {4, 50, D}});
    twice.forward();
    std::size_t kept = 0;
    for (double v : twice.output<0>()) kept += v != 0.0;
    CHECK(kept > n / 4 - 50);
    CHECK(kept < n / 4 + 50);
}

TEST_CASE("a GPT with dropout: training draws masks, evaluation mode equals the model without dropout", "[transformer]") {
    using Tok = index_input<"tok", B, T>;
    using Tgt = index_input<"tgt", B, T>;
    using plain = nn::gpt<11, 8, D, 2, 2>;
    using dropped = nn::gpt<11, 8, D, 2, 2, 4 * D, void, 0.2>;
    auto p0 = compile<double>(plain::loss(Tok{}, Tgt{}));
    decltype(compile<double>(dropped::loss(Tok{}, Tgt{}))) p1(p0.shared_params());  // the same weights
    p0.params().init(3);
    const std::vector<index_t> tok = {1, 2, 3, 4, 5, 6}, tgt = {2, 3, 4, 5, 6, 7};
    p0.feed("tok", tok.data(), rshape{2, {2, 3}});
    p0.feed("tgt", tgt.data(), rshape{2, {2, 3}});
    p1.feed("tok", tok.data(), rshape{2, {2, 3}});
    p1.feed("tgt", tgt.data(), rshape{2, {2, 3}});
    const double reference = p0.forward();
    const double a = p1.forward(), b = p1.forward();
    CHECK(a != reference);
    CHECK(a != b);
    p1.training(false);
    CHECK(p1.forward() == reference);
}
