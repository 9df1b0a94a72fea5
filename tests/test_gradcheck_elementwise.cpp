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

TEST_CASE("gradcheck: broadcasting over size-1 axes (NumPy's rules), unsqueeze, keepdim reductions", "[gradcheck]") {
    using X3 = input<"x3", B, 3, 4>;
    using Col = input<"col", B, 3, 1>;    // one value per row, against every feature
    using Row = param<"row", 1, 4>;       // a static 1 against the middle axis
    using Mid = input<"mid", B, 1, 4>;    // one row per batch element, against every position
    CHECK(check_gradients(mul(X3{}, Col{})) > 0);
    CHECK(check_gradients(div(X3{}, Col{}), {.values = {0.5, 2}}) > 0);
    CHECK(check_gradients(sub(Col{}, X3{})) > 0);
    CHECK(check_gradients(add(X3{}, Row{})) > 0);
    CHECK(check_gradients(mul(Mid{}, X3{})) > 0);
    CHECK(check_gradients(add(Mid{}, param<"cols", 3, 1>{})) > 0);  // both repeated: (B, 1, 4) + (3, 1) -> (B, 3, 4)
    // keepdim reductions and unsqueeze, composed: centring and scaling by the row's statistics
    auto centred = X3{} - mean<-1, true>(X3{});
    CHECK(check_gradients(centred) > 0);
    CHECK(check_gradients(div(centred, sum<-1, true>(mul(X3{}, X3{})) + constant<1>{})) > 0);
    CHECK(check_gradients(mul(X3{}, unsqueeze<-1>(sum<-1>(X3{})))) > 0);
    CHECK(check_gradients(squeeze<2>(sum<2, true>(X3{}))) > 0);
    CHECK(check_gradients(mul(X3{}, unsqueeze<0>(param<"p", 4>{}))) > 0);  // (4) -> (1, 4)
}

TEST_CASE("broadcast values: each element from its operands' repeated elements", "[broadcast]") {
    using A = input<"a", 2, 1, 3>;
    using Bc = input<"b", 4, 1>;
    auto prog = compile<double>(sum(mul(A{} + Bc{}, A{})));
    const double a[] = {1, 2, 3, 4, 5, 6}, b[] = {10, 20, 30, 40};
    prog.feed("a", a, rshape{3, {2, 1, 3}});
    prog.feed("b", b, rshape{2, {4, 1}});
    prog.forward();
    const auto y = prog.value_of(A{} + Bc{});
    REQUIRE(y.shape()[0] == 2);
    REQUIRE(y.shape()[1] == 4);
    REQUIRE(y.shape()[2] == 3);
    for (std::size_t i = 0; i < 2; ++i)
        for (std::size_t j = 0; j < 4; ++j)
            for (std::size_t k = 0; k < 3; ++k) CHECK(y(i, j, k) == a[i * 3 + k] + b[j]);
    // keepdim: mean<-1, true> is (2, 1, 1) here, the row means
    auto p2 = compile<double>(sum(A{} - mean<-1, true>(A{})));
    p2.feed("a", a, rshape{3, {2, 1, 3}});
    p2.forward();
    const auto m = p2.value_of(mean<-1, true>(A{}));
    REQUIRE(m.dimension() == 3);
    CHECK(m(0, 0, 0) == 2.0);
    CHECK(m(1, 0, 0) == 5.0);
}

TEST_CASE("gradcheck: the same operand twice", "[gradcheck]") {
    // Both operand adjoints point at one buffer: each side must add its own part.
    CHECK(check_gradients(mul(X{}, X{})) > 0);
    CHECK(check_gradients(add(X{}, X{})) > 0);
    CHECK(check_gradients(div(X{}, X{}), {.values = {0.5, 2}}) > 0);
}
