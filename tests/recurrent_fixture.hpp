// tests/recurrent_fixture.hpp: the sizes, sequence input and Elman cell shared by test_scan.cpp and
// test_cells.cpp (one TU each, so each compiles in about 20 s).
#pragma once
#include <random>

#include <xtensor/xview.hpp>

#include "gradcheck.hpp"

namespace ctg::testing::recurrent {
inline constexpr dim B = dyn('B');
inline constexpr dim T = dyn('T');
constexpr int X = 3, H = 4;
using Xs = input<"xs", T, B, X>;

inline constexpr auto elman = [](auto h, auto x) {
    return tanh(h * param<"W_h", H, H>{} + x * param<"W_x", X, H>{} + param<"b", H>{});
};
}  // namespace ctg::testing::recurrent
