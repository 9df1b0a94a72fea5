// Runtime misuse: every error says what and where, and leaves the program usable.
#include <catch2/catch.hpp>

#include <algorithm>
#include <bit>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <limits>
#include <random>
#include <string>
#include <type_traits>
#include <vector>

#include <ctgraph/ctgraph.hpp>
#include <ctgraph/xtensor.hpp>

using namespace ctg;
using Catch::Matchers::Contains;

namespace {
inline constexpr dim B = dyn('B');
using X = input<"x", B, 4>;
using Y = index_input<"y", B>;
auto model() { return softmax_cross_entropy(X{} * param<"W", 4, 3>{}, Y{}); }

/// The text as an F (float: std::strtof, double: std::strtod); `whole` says whether it read all of it.
template <class F>
F parse(const std::string& text, bool& whole) {
    char* end = nullptr;
    const F v = std::is_same_v<F, float> ? F(std::strtof(text.c_str(), &end)) : F(std::strtod(text.c_str(), &end));
    whole = end && *end == 0 && !text.empty();
    return v;
}
/// Whether two values are the same bits (0.0 and -0.0 differ).
template <class F>
bool same_bits(F a, F b) {
    using U = std::conditional_t<sizeof(F) == 4, std::uint32_t, std::uint64_t>;
    return std::bit_cast<U>(a) == std::bit_cast<U>(b);
}
/// The "%.{p}g" text of v with the fewest significant digits p that reads back as exactly v (as an F).
template <class F>
std::string fewest_g(F v) {
    for (int p = 1; p <= 17; ++p) {
        char buf[64];
        std::snprintf(buf, sizeof buf, "%.*g", p, double(v));
        bool whole = false;
        if (same_bits(parse<F>(buf, whole), v)) return buf;
    }
    return "(none)";
}
/// Checks detail::shortest_text(v) reads back as exactly v, is no longer than the shortest "%g"
/// text that does, and differs from the text of the next value up.
template <class F>
void check_shortest(F v) {
    const std::string t = detail::shortest_text(v);
    INFO(t);
    bool whole = false;
    CHECK(same_bits(parse<F>(t, whole), v));
    CHECK(whole);
    CHECK(t.size() <= fewest_g(v).size());
    const F up = std::nextafter(v, std::numeric_limits<F>::infinity());
    if (std::isfinite(up)) CHECK(detail::shortest_text(up) != t);
}
}  // namespace

TEST_CASE("a dynamic dimension that disagrees between two inputs names the op and both shapes", "[errors]") {
    auto prog = compile<float>(model());
    prog.feed<"x">(xt::xtensor<float, 2>(xt::zeros<float>({5, 4})));
    prog.feed<"y">(xt::xtensor<int, 1>(xt::zeros<int>({3})));
    REQUIRE_THROWS_AS(prog.forward(), shape_error);
    REQUIRE_THROWS_WITH(prog.forward(), Contains("dimension 'B' disagrees") && Contains("input 'x' of shape (5,4)") &&
                                            Contains("input 'y' of shape (3)") &&
                                            Contains("op 'softmax_cross_entropy'"));
    // Fixing the input makes the program work again.
    prog.feed<"y">(xt::xtensor<int, 1>(xt::zeros<int>({5})));
    CHECK(std::isfinite(prog.forward()));
}

TEST_CASE("feeding the wrong static size, rank, name or kind throws", "[errors]") {
    auto prog = compile<float>(model());
    REQUIRE_THROWS_WITH(prog.feed<"x">(xt::xtensor<float, 2>(xt::zeros<float>({5, 3}))),
                        Contains("input 'x' is declared (B,4) but was given (5,3)"));
    REQUIRE_THROWS_WITH(prog.feed<"x">(xt::xtensor<float, 1>(xt::zeros<float>({4}))),
                        Contains("declared (B,4) but was given (4)"));
    float data[4] = {};
    REQUIRE_THROWS_WITH(prog.feed("nope", data, rshape{2, {1, 4}}), Contains("no input named 'nope'"));
    REQUIRE_THROWS_WITH(prog.feed("y", data, rshape{1, {4}}), Contains("is an index input"));
    REQUIRE_THROWS_WITH(prog.forward(), Contains("input 'x' was not fed"));
    REQUIRE_THROWS_WITH(prog.backward(), Contains("call forward() first"));
}

TEST_CASE("a rejected feed leaves the previous input in place", "[errors]") {
    auto prog = compile<float>(mean(embedding(param<"E", 10, 4>{}, index_input<"tokens", B>{})));
    prog.params().init(1);
    prog.feed<"tokens">(xt::xtensor<long long, 1>{1, 2, 3});
    const float before = prog.forward();
    REQUIRE_THROWS_WITH(prog.feed<"tokens">(xt::xtensor<long long, 1>{4, 5, 1LL << 40, 6}),
                        Contains("element 2 = 1099511627776 does not fit int32"));
    CHECK(prog.forward() == before);  // still the three tokens fed first
    CHECK(prog.dim_value('B') == 3);
}

TEST_CASE("an id outside the table names the input, the position and the value", "[errors]") {
    auto prog = compile<float>(mean(embedding(param<"E", 10, 4>{}, index_input<"tokens", B>{})));
    prog.feed<"tokens">(xt::xtensor<int, 1>{1, 2, 10});
    REQUIRE_THROWS_AS(prog.forward(), index_error);
    REQUIRE_THROWS_WITH(prog.forward(), Contains("id 10 at position 2 of input 'tokens'") && Contains("[0, 10)"));
    prog.feed<"tokens">(xt::xtensor<int, 1>{-1});
    REQUIRE_THROWS_WITH(prog.forward(), Contains("id -1 at position 0"));
}

TEST_CASE("a class target outside the logits throws but the ignore index does not", "[errors]") {
    auto prog = compile<float>(model());
    prog.feed<"x">(xt::xtensor<float, 2>(xt::zeros<float>({2, 4})));
    prog.feed<"y">(xt::xtensor<int, 1>{0, 3});
    REQUIRE_THROWS_WITH(prog.forward(), Contains("target 3 at position 1 of input 'y'"));
    prog.feed<"y">(xt::xtensor<int, 1>{0, -100});
    CHECK(prog.forward() == Approx(std::log(3.0f)));
}

TEST_CASE("a non-finite loss throws naming the output", "[errors]") {
    auto prog = compile<float>(mean(log(X{})));
    prog.feed<"x">(xt::xtensor<float, 2>{{1, 1, 1, -1}});
    REQUIRE_THROWS_AS(prog.forward(), numeric_error);
    REQUIRE_THROWS_WITH(prog.forward(), Contains("output 0") && Contains("nan"));
    prog.check_finite(false);
    CHECK(std::isnan(prog.forward()));
}

TEST_CASE("a parameter store refuses a name with another shape", "[errors]") {
    auto a = compile<float>(mean(X{} * param<"W", 4, 3>{}));
    REQUIRE_THROWS_WITH((program_for<float, options{}, decltype(mean(X{} * param<"W", 4, 2>{}))>(a.shared_params())),
                        Contains("parameter 'W' exists with shape (4,3), cannot add it with shape (4,2)"));
}

TEST_CASE("anomaly mode names the first non-finite node in forward and in backward", "[errors][anomaly]") {
    // A planted log(0): the log node's value is -inf at the element whose input is 0.
    auto z = input<"x", B, 4>{} * param<"W", 4, 3>{};
    auto loss = sum(log(mul(z, z)) + param<"b", 3>{});
    auto prog = compile<double, options{.detect_anomaly = true}>(loss);
    prog.params().init(1);
    xt::xtensor<double, 2> x = {{1, 2, 3, 4}, {0, 0, 0, 0}};  // the second row gives z = 0
    prog.feed<"x">(x);
    try {
        prog.forward();
        FAIL("no anomaly reported");
    } catch (const numeric_error& e) {
        const std::string m = e.what();
        INFO(m);
        CHECK_THAT(m, Contains("forward of node"));
        CHECK_THAT(m, Contains("'log' (2,3)"));
        CHECK_THAT(m, Contains("its value is not finite at flat index 3 (-inf)"));  // row 1, column 0
        CHECK_THAT(m, Contains("'mul' (2,3)) finite"));  // its operand was finite: the log made it
    }
    // Without the option the same program runs through and only the loss is caught.
    auto plain = compile<double>(loss);
    plain.params().init(1);
    plain.feed<"x">(x);
    CHECK_THROWS_WITH(plain.forward(), Contains("output 0") && !Contains("anomaly"));

    // Finite forward, non-finite backward: d(a / y)/dy = -a / y^2 overflows for y = 1e-200.
    auto ratio = sum(param<"a", 2>{} / param<"y", 2>{});
    auto p2 = compile<double, options{.detect_anomaly = true}>(ratio);
    p2.param<"a">() = xt::xtensor<double, 1>{1, 1};
    p2.param<"y">() = xt::xtensor<double, 1>{1e-200, 1};
    p2.zero_grad();
    CHECK(std::isfinite(p2.forward()));
    try {
        p2.backward();
        FAIL("no anomaly reported");
    } catch (const numeric_error& e) {
        const std::string m = e.what();
        INFO(m);
        CHECK_THAT(m, Contains("backward of node"));
        CHECK_THAT(m, Contains("(op div): the adjoint it gave operand 1 (%1 'y' (2)) is not finite at flat index 0"));
        CHECK_THAT(m, Contains("the node's own adjoint finite"));
    }
    // The failed pass leaves nothing behind: after zero_grad() its partly written gradients are
    // cleared, and the next backward starts from zero, as after zero_grad() (1 / y, -a / y^2).
    const auto& after_failure = p2.params().grads();
    CHECK(std::all_of(after_failure.begin(), after_failure.end(), [](double g) { return g == 0.0; }));
    p2.zero_grad();
    p2.forward();
    try {
        p2.backward();
        FAIL("no anomaly reported");
    } catch (const numeric_error&) {
    }
    p2.param<"y">() = xt::xtensor<double, 1>{2, 1};
    p2.forward();
    p2.backward();  // the zero_grad() before the failed pass is pending again: this pass assigns
    CHECK(xt::allclose(p2.grad<"a">(), xt::xtensor<double, 1>{0.5, 1}));
    CHECK(xt::allclose(p2.grad<"y">(), xt::xtensor<double, 1>{-0.25, -1}));
}

TEST_CASE("shortest_text: the fewest digits that read back as exactly the value, a float's as a float",
          "[errors][number_text]") {
    // A float prints its own digits, not those of the double it converts to.
    CHECK(detail::shortest_text(0.1f) == "0.1");
    CHECK(detail::shortest_text(0.1) == "0.1");
    CHECK(detail::shortest_text(double(0.1f)) != detail::shortest_text(0.1f));
    CHECK(detail::shortest_text(std::nextafter(0.1f, 1.0f)) != detail::shortest_text(0.1f));
    bool whole = false;
    CHECK(std::isinf(parse<double>(detail::shortest_text(-std::numeric_limits<double>::infinity()), whole)));
    CHECK(std::isnan(parse<float>(detail::shortest_text(std::numeric_limits<float>::quiet_NaN()), whole)));
    for (float f : {0.0f, -0.0f, 1.0f, 100.0f, 0.1f, 1e-7f, 0.0574885853f, std::numeric_limits<float>::max(),
                    std::numeric_limits<float>::min(), std::numeric_limits<float>::denorm_min(), -3.0000002f})
        check_shortest(f);
    for (double d : {0.0, -0.0, 1.0, 100.0, 0.1, 1e-7, 0.0574885853, std::numeric_limits<double>::max(),
                     std::numeric_limits<double>::min(), std::numeric_limits<double>::denorm_min(), -3.0000000000000004})
        check_shortest(d);
    // Finite values of every size: random bit patterns.
    std::mt19937_64 rng(20240611);
    for (int n = 0; n < 3000; ++n) {
        const float f = std::bit_cast<float>(std::uint32_t(rng()));
        const double d = std::bit_cast<double>(std::uint64_t(rng()));
        if (std::isfinite(f)) check_shortest(f);
        if (std::isfinite(d)) check_shortest(d);
    }
}

TEST_CASE("a refused number is shown in its shortest round-trip digits", "[errors][number_text]") {
    // top_p one ulp above 1: "1.000000" would read as allowed.
    std::mt19937_64 rng(1);
    const std::vector<double> logits = {0.0, 1.0};
    const double top_p = std::nextafter(1.0, 2.0);
    try {
        (void)nn::choose([&](std::size_t v) { return logits[v]; }, 2, {0, 0.5, top_p}, rng);
        FAIL("no error");
    } catch (const error& e) {
        const std::string m = e.what();
        INFO(m);
        REQUIRE(m.ends_with(")"));
        const std::size_t at = m.rfind(", ") + 2;
        const std::string shown = m.substr(at, m.size() - 1 - at);
        bool whole = false;
        CHECK(same_bits(parse<double>(shown, whole), top_p));
        CHECK(whole);
        CHECK(shown.size() <= fewest_g(top_p).size());
    }
    // A float one ulp above 3 is not an integer: "(3.000000)" would not say why.
    const float near3 = std::nextafter(3.0f, 4.0f);
    const std::vector<float> values = {1.0f, near3};
    try {
        (void)npz::to_vector<std::int32_t>(npz::from_data("f", values.data(), {2}));
        FAIL("no io_error");
    } catch (const io_error& e) {
        const std::string m = e.what();
        INFO(m);
        const auto open = m.find("element 1 (");
        REQUIRE(open != std::string::npos);
        const std::string shown = m.substr(open + 11, m.find(')', open) - open - 11);
        bool whole = false;
        CHECK(same_bits(parse<float>(shown, whole), near3));
        CHECK(whole);
        CHECK(shown.size() <= fewest_g(near3).size());
    }
}
