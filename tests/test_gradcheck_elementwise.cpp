// Finite-difference checks (float64) of the element-wise primitives, through the one generic checker.
#include "gradcheck.hpp"

using namespace ctg;
using ctg::testing::check_gradients;
using ctg::testing::check_config;
using ctg::testing::domain;

namespace {
inline constexpr dim B = dyn('B');
using X = input<"x", B, 5>;
using Y = input<"y", B, 5>;
using Bias = param<"bias", 5>;
}  // namespace

TEST_CASE("gradcheck: unary element-wise primitives", "[gradcheck]") {
    // (op, input domain, tolerance): one row per primitive.
    CHECK(check_gradients(tanh(X{}), {.values = {-2, 2}}) > 0);
    CHECK(check_gradients(sigmoid(X{}), {.values = {-3, 3}}) > 0);
    CHECK(check_gradients(relu(X{}), {.values = {-2, 2, 0.05}}) > 0);  // away from the kink
    CHECK(check_gradients(gelu(X{}), {.values = {-3, 3}}) > 0);
    CHECK(check_gradients(gelu_erf(X{}), {.values = {-4, 4}}) > 0);
    CHECK(check_gradients(exp(X{}), {.values = {-2, 2}}) > 0);
    CHECK(check_gradients(log(X{}), {.values = {0.3, 3}}) > 0);
    CHECK(check_gradients(neg(X{})) > 0);
    CHECK(check_gradients(scale<0.37>(X{})) > 0);
    CHECK(check_gradients(-X{}) > 0);
}

TEST_CASE("gradcheck: binary element-wise primitives, same shapes", "[gradcheck]") {
    CHECK(check_gradients(add(X{}, Y{})) > 0);
    CHECK(check_gradients(sub(X{}, Y{})) > 0);
    CHECK(check_gradients(mul(X{}, Y{})) > 0);
    CHECK(check_gradients(div(X{}, Y{}), {.values = {0.5, 2}}) > 0);
    CHECK(check_gradients(X{} + Y{}) > 0);
    CHECK(check_gradients(X{} - Y{}) > 0);
    CHECK(check_gradients(X{} / Y{}, {.values = {0.5, 2}}) > 0);
}

TEST_CASE("gradcheck: row broadcast, reduced once in the family", "[gradcheck]") {
    // A bias (5) against (B,5), on either side, for each binary op; the bias gradient sums over rows.
    CHECK(check_gradients(add(X{}, Bias{})) > 0);
    CHECK(check_gradients(add(Bias{}, X{})) > 0);
    CHECK(check_gradients(sub(Bias{}, X{})) > 0);
    CHECK(check_gradients(mul(X{}, Bias{})) > 0);
    CHECK(check_gradients(div(X{}, Bias{}), {.values = {0.5, 2}}) > 0);
    CHECK(check_gradients(div(Bias{}, X{}), {.values = {0.5, 2}}) > 0);
    // Rank 3 against a rank-2 trailing part, and a scalar constant.
    using X3 = input<"x3", B, 2, 4>;
    CHECK(check_gradients(mul(X3{}, param<"p", 2, 4>{})) > 0);
    CHECK(check_gradients(sub(constant<1>{}, X{})) > 0);
    CHECK(check_gradients(mul(X{}, constant<2.5>{})) > 0);
}

TEST_CASE("gradcheck: the same operand twice", "[gradcheck]") {
    // Both operand adjoints point at one buffer: each side must add its own part.
    CHECK(check_gradients(mul(X{}, X{})) > 0);
    CHECK(check_gradients(add(X{}, X{})) > 0);
    CHECK(check_gradients(div(X{}, X{}), {.values = {0.5, 2}}) > 0);
}
