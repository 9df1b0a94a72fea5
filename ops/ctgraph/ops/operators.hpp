// ctgraph/ops/operators.hpp: operator spellings. a * b is the matrix product (the row-vector form
// h W of the design); the element-wise product is mul(a, b).
#pragma once
#include "ctgraph/ops/add.hpp"
#include "ctgraph/ops/div.hpp"
#include "ctgraph/ops/matmul.hpp"
#include "ctgraph/ops/neg.hpp"
#include "ctgraph/ops/sub.hpp"

namespace ctg {
/// a + b: ctg::add (element-wise, with row broadcast).
template <expr A, expr B>
constexpr auto operator+(A a, B b) { return add(a, b); }
/// a - b: ctg::sub (element-wise, with row broadcast).
template <expr A, expr B>
constexpr auto operator-(A a, B b) { return sub(a, b); }
/// a * b: the matrix product ctg::matmul (x W with x (..., k), W (k, n)); the element-wise product is ctg::mul.
template <expr A, expr B>
constexpr auto operator*(A a, B b) { return matmul(a, b); }
/// a / b: ctg::div (element-wise, with row broadcast).
template <expr A, expr B>
constexpr auto operator/(A a, B b) { return div(a, b); }
/// -a: ctg::neg.
template <expr A>
constexpr auto operator-(A a) { return neg(a); }
}  // namespace ctg
