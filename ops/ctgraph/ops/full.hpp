// ctgraph/ops/full.hpp: a tensor of one value, full<0.5, B, 64>() or zeros<B, 64>(), with static or
// dynamic dimensions (a dynamic letter takes its value from the program's inputs). An op without
// operands: nothing flows back from it.
#pragma once
#include <algorithm>
#include <string>
#include <string_view>
#include <vector>

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
    // ONNX: Expand of the float32 scalar Value to the shape D...: static extents as constants, a
    // dynamic letter's extent read at run time (Shape) from the first graph input with an axis of
    // that letter, as the program binds it. Rank 0: the scalar itself.
    template <class B>
    static void onnx(B& b) {
        const std::string v = b.scalar(Value.value());
        if constexpr (sizeof...(D) == 0) {
            b.emit_y("Identity", {v});
        } else {
            bool all_static = true;
            std::vector<long long> c;
            std::vector<std::string> parts;
            for (const dim d : shape) {
                if (d.is_static()) {
                    c.push_back(d.n);
                    parts.push_back(b.ints({d.n}));
                    continue;
                }
                all_static = false;
                std::string extent;
                for (const auto& in : b.builder().model().inputs) {
                    for (std::size_t a = 0; a < in.dims.size() && extent.empty(); ++a)
                        if (in.dims[a].sym == d.sym)
                            extent = b.emit("Shape", {in.name}, {{"start", long(a)}, {"end", long(a + 1)}});
                    if (!extent.empty()) break;
                }
                if (extent.empty())
                    throw error(std::string("ctg::onnx::save: full: no graph input has an axis '") + d.sym +
                                "' to read the dynamic dimension from");
                parts.push_back(extent);
            }
            b.emit_y("Expand", {v, all_static ? b.ints(c) : b.emit("Concat", parts, {{"axis", 0}})});
        }
    }
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
