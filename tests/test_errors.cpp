// Runtime misuse: every error says what and where, and leaves the program usable.
#include <catch2/catch.hpp>

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
