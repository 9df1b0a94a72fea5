// ctgraph/ops/full.hpp: a tensor of one value, full<0.5, B, 64>() or zeros<B, 64>(), with static or
// dynamic dimensions (a dynamic letter takes its value from the program's inputs). An op without
// operands: nothing flows back from it.
#pragma once
#include <algorithm>
#include <string>
#include <string_view>

#include "ctgraph/graph/node.hpp"
#include "ctgraph/op.hpp"

namespace ctg {
namespace ops {
template <cval Value, dim... D>
struct full_op {
    static constexpr std::string_view name = "full";
    static constexpr std::array<dim, sizeof...(D)> shape{D...};
    template <class... None>
    static consteval bool check() { return sizeof...(None) == 0; }
    template <class... None>
    static consteval auto dims() { return shape; }
    template <class T>
    static void forward(op_io<T, 0>& c) { std::fill(c.y_data(), c.y_data() + c.y.size(), T(Value.value())); }
    template <class T>
    static void backward(op_io<T, 0>&) {}
    static std::string describe() { return std::to_string(Value.value()); }
};
}  // namespace ops

/// A tensor of shape D... holding `Value` everywhere.
template <cval Value, dim... D>
constexpr auto full() {
    static_assert(sizeof...(D) <= max_rank, "ctg::full: at most 4 dimensions");
    return make_node<ops::full_op<Value, D...>>();
}
/// A tensor of zeros of shape D...
template <dim... D>
constexpr auto zeros() { return full<0.0, D...>(); }
}  // namespace ctg
