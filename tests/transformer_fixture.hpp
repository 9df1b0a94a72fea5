// tests/transformer_fixture.hpp: shapes and a two-program comparison shared by the Transformer tests.
#pragma once
#include <catch2/catch.hpp>

#include <random>
#include <string>
#include <vector>

#include <ctgraph/ctgraph.hpp>
#include <ctgraph/xtensor.hpp>

namespace ctg::testing::tfm {

inline constexpr dim B = dyn('B'), T = dyn('T');
constexpr int D = 4;
using X = input<"x", B, T, D>;
using Gw = input<"g", B, T, D>;

inline std::vector<double> random_values(std::size_t count, unsigned seed, double lo = -2, double hi = 2) {
    std::mt19937_64 rng(seed);
    std::uniform_real_distribution<double> u(lo, hi);
    std::vector<double> v(count);
    for (auto& x : v) x = u(rng);
    return v;
}

/// Runs L = sum(out * g) for both programs on the same x (batch, len, D) and g, after `copy_params`
/// made their weights equal, and compares loss, dL/dx and (through `compare_grads`) the parameter
/// gradients.
template <class PA, class PB, class CopyParams, class CompareGrads>
void compare_programs(PA& pa, PB& pb, std::size_t batch, std::size_t len, double tol, CopyParams copy_params,
                      CompareGrads compare_grads) {
    copy_params(pa.params(), pb.params());
    const auto x = random_values(batch * len * D, 3), g = random_values(batch * len * D, 4, -1, 1);
    auto run = [&](auto& p) {
        p.feed("x", x.data(), rshape{3, {batch, len, D}});
        p.feed("g", g.data(), rshape{3, {batch, len, D}});
        p.zero_grad();
        const double l = p.forward();
        p.backward();
        return l;
    };
    const double la = run(pa), lb = run(pb);
    CHECK(la == Approx(lb).margin(tol));
    auto gxa = pa.template input_grad<"x">();
    auto gxb = pb.template input_grad<"x">();
    REQUIRE(gxa.size() == gxb.size());
    for (std::size_t i = 0; i < gxa.size(); ++i) CHECK(gxa.data()[i] == Approx(gxb.data()[i]).margin(tol));
    compare_grads(pa.params(), pb.params());
}

}  // namespace ctg::testing::tfm
