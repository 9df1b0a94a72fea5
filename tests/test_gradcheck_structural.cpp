// Finite-difference checks (float64) of the structural primitives (products, reductions, softmax,
// concat/slice, gather, losses) and of composed graphs with shared subexpressions.
#include "gradcheck.hpp"

using namespace ctg;
using ctg::testing::check_gradients;

namespace {
inline constexpr dim B = dyn('B');
inline constexpr dim T = dyn('T');
using X = input<"x", B, 4>;
}  // namespace

TEST_CASE("gradcheck: matmul in its three forms and transpose", "[gradcheck]") {
    CHECK(check_gradients(X{} * param<"W", 4, 3>{}) > 0);                          // shared weight
    CHECK(check_gradients(input<"x3", B, T, 4>{} * param<"W", 4, 3>{}) > 0);      // over leading dims
    CHECK(check_gradients(X{} * param<"w", 4>{}) > 0);                             // a vector
    CHECK(check_gradients(matmul(input<"q", B, T, 4>{}, input<"k", B, 4, T>{}),
                          {.dims = {{'B', 2}, {'T', 3}}}) > 0);                      // batched
    CHECK(check_gradients(transpose(input<"m", B, 3, 4>{})) > 0);
    CHECK(check_gradients(matmul(input<"q", B, T, 4>{}, transpose(input<"k", B, T, 4>{})),
                          {.dims = {{'B', 2}, {'T', 3}}}) > 0);  // Q K^T
}

TEST_CASE("gradcheck: sum and mean by axis and in full", "[gradcheck]") {
    using X3 = input<"x3", B, 3, 4>;
    CHECK(check_gradients(sum<0>(X3{})) > 0);
    CHECK(check_gradients(sum<1>(X3{})) > 0);
    CHECK(check_gradients(sum<-1>(X3{})) > 0);
    CHECK(check_gradients(mean<1>(X3{})) > 0);
    CHECK(check_gradients(mean<-1>(X3{})) > 0);
    CHECK(check_gradients(sum(X3{})) > 0);
    CHECK(check_gradients(mean(X3{})) > 0);
}

TEST_CASE("gradcheck: softmax and log-softmax", "[gradcheck]") {
    CHECK(check_gradients(softmax(X{}), {.values = {-3, 3}}) > 0);
    CHECK(check_gradients(log_softmax(X{}), {.values = {-3, 3}}) > 0);
    CHECK(check_gradients(softmax(input<"s", B, T, 5>{}), {.values = {-3, 3}}) > 0);
}

TEST_CASE("gradcheck: concat and slice along the feature axis", "[gradcheck]") {
    CHECK(check_gradients(concat(X{}, input<"z", B, 2>{}, input<"p", B, 3>{} * param<"q", 3, 1>{})) > 0);
    CHECK(check_gradients(slice<1, 3>(X{})) > 0);
    CHECK(check_gradients(concat(slice<2, 4>(X{}), slice<0, 2>(X{}))) > 0);  // one input read twice
}

TEST_CASE("gradcheck: embedding gathers and scatter-adds", "[gradcheck]") {
    // With 4 ids drawn from a vocabulary of 3, some id repeats: its rows must add.
    using Ids = index_input<"ids", B>;
    CHECK(check_gradients(embedding(param<"E", 3, 4>{}, Ids{}), {.dims = {{'B', 6}}, .index_bound = {{"ids", 3}}}) > 0);
    CHECK(check_gradients(embedding(param<"E", 5, 2>{}, index_input<"tok", B, T>{}),
                          {.index_bound = {{"tok", 5}}}) > 0);
}

TEST_CASE("gradcheck: losses", "[gradcheck]") {
    CHECK(check_gradients(mse_loss(X{}, input<"t", B, 4>{})) > 0);
    using Tg = index_input<"target", B>;
    CHECK(check_gradients(softmax_cross_entropy(X{}, Tg{}), {.dims = {{'B', 5}}, .index_bound = {{"target", 4}}}) > 0);
    // With an ignored position (index 1 is set to the ignore index).
    CHECK(check_gradients(softmax_cross_entropy<-1>(X{}, Tg{}),
                          {.dims = {{'B', 5}}, .index_bound = {{"target", 4}}, .index_ignore = {{"target", -1}}}) > 0);
    CHECK(check_gradients(softmax_cross_entropy(input<"z", B, T, 4>{}, index_input<"target", B, T>{}),
                          {.index_bound = {{"target", 4}}}) > 0);
}

TEST_CASE("gradcheck: composed graphs with shared subexpressions", "[gradcheck]") {
    using W = param<"W", 4, 4>;
    // h is used twice, u three times: one node each, adjoints accumulated from every use.
    auto h = tanh(X{} * W{} + param<"b", 4>{});
    auto u = sigmoid(h * param<"U", 4, 4>{});
    auto out = mul(u, h) + mul(u, u) + slice<0, 4>(concat(u, h));
    CHECK(check_gradients(out) > 0);
    // An Elman step written twice over the same weights (weight sharing by name).
    using H0 = input<"h0", B, 4>;
    auto step1 = tanh(H0{} * W{} + input<"x1", B, 4>{} * param<"Wx", 4, 4>{});
    auto step2 = tanh(step1 * W{} + input<"x2", B, 4>{} * param<"Wx", 4, 4>{});
    CHECK(check_gradients(step2) > 0);
    // A scaled-dot attention with a learned projection: X read three times.
    using S = input<"seq", B, T, 4>;
    auto q = S{} * param<"Wq", 4, 4>{};
    auto k = S{} * param<"Wk", 4, 4>{};
    auto v = S{} * param<"Wv", 4, 4>{};
    auto att = matmul(softmax(scale<0.5>(matmul(q, transpose(k)))), v);
    CHECK(check_gradients(att, {.dims = {{'B', 2}, {'T', 3}}}) > 0);
}

TEST_CASE("gradcheck: an op's value read again beside it, through both adjoint paths (overwrite and accumulate)",
          "[gradcheck]") {
    // masked_softmax writes its scores' adjoint with = when it is their first writer in backward;
    // with the scores also added to its result, the other reader's adjoint is there first and it
    // must add.
    using S = input<"seq", B, T, 4>;
    auto scores = matmul(S{} * param<"Wq", 4, 4>{}, transpose(S{} * param<"Wk", 4, 4>{}));
    CHECK(check_gradients(masked_softmax(scores, causal{}) + scores, {.dims = {{'B', 2}, {'T', 3}}}) > 0);
    CHECK(check_gradients(scores + masked_softmax(scores, causal{}), {.dims = {{'B', 2}, {'T', 3}}}) > 0);
    CHECK(check_gradients(masked_softmax(scores, causal{}), {.dims = {{'B', 2}, {'T', 3}}}) > 0);
}

TEST_CASE("dropout(x) + x: the branch through dropout keeps its 1/(1-p) scale when x has another reader",
          "[gradcheck]") {
    // In training mode the mask is random; read it back from the program (dropout's value / x) and
    // check dL/dx = G (mask / (1 - p) + 1) exactly, for the two orders of the sum.
    using X = input<"x", B, 6>;
    using G = input<"g", B, 6>;
    auto check = [](auto out) {
        auto prog = compile<double, options{.input_grads = true}>(sum(mul(out, G{})));
        prog.dropout_seed(5);
        std::mt19937_64 rng(3);
        std::uniform_real_distribution<double> u(0.5, 1.5);
        std::vector<double> x(4 * 6), g(4 * 6);
        for (auto& v : x) v = u(rng);
        for (auto& v : g) v = u(rng) - 1.0;
        prog.feed("x", x.data(), rshape{2, {4, 6}});
        prog.feed("g", g.data(), rshape{2, {4, 6}});
        prog.forward();
        prog.backward();
        const auto dropped = prog.value_of(dropout<0.25>(X{}));
        const auto dx = prog.template input_grad<"x">();
        std::size_t kept = 0;
        for (std::size_t i = 0; i < x.size(); ++i) {
            const double m = dropped.data()[i] / x[i];  // 0 or 1 / (1 - p)
            CHECK((m == 0.0 || std::abs(m - 1.0 / 0.75) < 1e-12));
            kept += m != 0.0;
            CHECK(dx.data()[i] == Approx(g[i] * (m + 1.0)).epsilon(1e-12));
        }
        CHECK(kept > 0);
        CHECK(kept < x.size());  // both kinds of elements were checked
    };
    check(dropout<0.25>(X{}) + X{});
    check(X{} + dropout<0.25>(X{}));
}

namespace {
// Runs a scalar loss over inputs z (5,4) and t (5,4) and returns the loss and dL/dz.
template <class Loss>
std::pair<double, std::vector<double>> loss_and_grad(Loss loss, const xt::xtensor<double, 2>& z,
                                                     const xt::xtensor<double, 2>* other, const xt::xtensor<int, 1>* ids) {
    auto prog = compile<double, options{.input_grads = true}>(loss);
    prog.feed("z", z.data(), rshape{2, {5, 4}});
    if (other) prog.feed("t", other->data(), rshape{2, {5, 4}});
    if (ids) {
        std::vector<index_t> v(ids->begin(), ids->end());
        prog.feed("target", v.data(), rshape{1, {5}});
    }
    const double l = prog.forward();
    prog.backward();
    auto g = prog.template input_grad<"z">();
    return {l, std::vector<double>(g.begin(), g.end())};
}
}  // namespace

TEST_CASE("the fused losses equal their composed forms, value and gradient", "[gradcheck][fused]") {
    using Z = input<"z", B, 4>;
    using Tm = input<"t", B, 4>;
    xt::xtensor<double, 2> z = {{0.1, -2, 3, 0.5}, {1, 1, 1, 1}, {-4, 2, 0, 7}, {0.3, 0.2, 0.1, 0}, {9, -9, 3, 2}};
    xt::xtensor<double, 2> t = {{1, 0, 0, 0}, {0, 0, 1, 0}, {0, 0, 0, 1}, {0, 1, 0, 0}, {1, 0, 0, 0}};
    xt::xtensor<int, 1> ids = {0, 2, 3, 1, 0};
    // softmax_cross_entropy(z, ids) = -mean over rows of sum(onehot * log_softmax(z))
    const auto fused = loss_and_grad(softmax_cross_entropy(Z{}, index_input<"target", B>{}), z, nullptr, &ids);
    const auto composed = loss_and_grad(neg(mean(sum<-1>(mul(log_softmax(Z{}), Tm{})))), z, &t, nullptr);
    CHECK(fused.first == Approx(composed.first).epsilon(1e-12));
    for (std::size_t i = 0; i < 20; ++i) CHECK(fused.second[i] == Approx(composed.second[i]).margin(1e-12));
    // mse_loss(z, t) = mean((z - t)^2)
    const auto mse = loss_and_grad(mse_loss(Z{}, Tm{}), z, &t, nullptr);
    const auto d = sub(Z{}, Tm{});
    const auto mse_composed = loss_and_grad(mean(mul(d, d)), z, &t, nullptr);
    CHECK(mse.first == Approx(mse_composed.first).epsilon(1e-12));
    for (std::size_t i = 0; i < 20; ++i) CHECK(mse.second[i] == Approx(mse_composed.second[i]).margin(1e-12));
}
