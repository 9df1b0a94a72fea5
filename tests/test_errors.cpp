// Runtime misuse: every error says what and where, and leaves the program usable.
#include <catch2/catch.hpp>

#include <algorithm>
#include <limits>
#include <string>

#include <ctgraph/ctgraph.hpp>

using namespace ctg;
using Catch::Matchers::Contains;

namespace {
inline constexpr dim B = dyn('B');
using X = input<"x", B, 4>;
using Y = index_input<"y", B>;
auto model() { return softmax_cross_entropy(X{} * param<"W", 4, 3>{}, Y{}); }
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
