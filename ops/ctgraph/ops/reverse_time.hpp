// ctgraph/ops/reverse_time.hpp: reverses a sequence along its leading (time) axis,
//   reverse_time(xs):           ys[t] = xs[T-1-t]
//   reverse_time(xs, lengths):  per sequence b (second axis), ys[t][b] = xs[len_b-1-t][b] for t < len_b,
//                               and ys[t][b] = xs[t][b] (padding stays in place) for t >= len_b.
// Used for the backward half of a bidirectional encoder. The VJP is the same permutation of the
// adjoint (a permutation's transpose is its inverse, and these are involutions).
#pragma once
#include <limits>
#include <string_view>

#include "ctgraph/graph/node.hpp"
#include "ctgraph/kernels/simd.hpp"
#include "ctgraph/op.hpp"

namespace ctg {
namespace ops {
template <bool HasLengths>
struct reverse_time_op {
    static constexpr std::string_view name = "reverse_time";
    template <class Xs, class... L>
    static consteval bool check() { return Xs::rank >= 2; }
    template <class Xs, class... L>
    static consteval auto dims() { return Xs::dims; }

    // Source step of output step t for sequence b.
    template <class T, std::size_t K>
    static std::size_t source(const op_io<T, K>& c, std::size_t t, std::size_t b, std::size_t steps) {
        if constexpr (HasLengths) {
            const std::size_t len = std::size_t(c.x[1].template as<index_t>()[b]);
            return t < len ? len - 1 - t : t;
        } else {
            return steps - 1 - t;
        }
    }
    template <class T, std::size_t K>
    static void check_lengths(const op_io<T, K>& c, std::size_t steps, std::size_t batch) {
        if constexpr (HasLengths) {
            if (c.x[1].size() != batch)
                throw shape_error("ctg::reverse_time: input '" + std::string(c.x_name[1]) + "' holds " +
                                  std::to_string(c.x[1].size()) + " lengths for a batch of " + std::to_string(batch));
            for (std::size_t b = 0; b < batch; ++b) {
                const index_t len = c.x[1].template as<index_t>()[b];
                if (len < 0 || std::size_t(len) > steps)
                    throw index_error("ctg::reverse_time: length " + std::to_string(len) + " of sequence " +
                                      std::to_string(b) + " in input '" + std::string(c.x_name[1]) +
                                      "' is outside [0, " + std::to_string(steps) + "]");
            }
        }
    }
    // ONNX: with lengths, ReverseSequence (time_axis 0, batch_axis 1; the lengths are int64), which
    // reverses the first len_b steps of sequence b and copies the rest in place, as here; without,
    // Slice of axis 0 from the last step backwards (step -1).
    template <class B>
    static void onnx(B& b) {
        if constexpr (HasLengths)
            b.emit_y("ReverseSequence", {b.x(0), b.x(1)}, {{"time_axis", 0}, {"batch_axis", 1}});
        else
            b.emit_y("Slice", {b.x(0), b.ints({-1}), b.ints({std::numeric_limits<long long>::min()}), b.ints({0}), b.ints({-1})});
    }
    template <class T, std::size_t K>
    static void forward(op_io<T, K>& c) {
        const rshape& s = c.x[0].shape;
        const std::size_t steps = s.d[0], batch = s.d[1], row = s.size() / (steps * batch);
        check_lengths(c, steps, batch);
        const T* x = c.x_data(0);
        T* y = c.y_data();
        for (std::size_t t = 0; t < steps; ++t)
            for (std::size_t b = 0; b < batch; ++b) {
                const T* src = x + (source(c, t, b, steps) * batch + b) * row;
                std::copy(src, src + row, y + (t * batch + b) * row);
            }
    }
    template <class T, std::size_t K>
    static void backward(op_io<T, K>& c) {
        T* g = c.gx_data(0);
        if (!g) return;
        const rshape& s = c.x[0].shape;
        const std::size_t steps = s.d[0], batch = s.d[1], row = s.size() / (steps * batch);
        for (std::size_t t = 0; t < steps; ++t)
            for (std::size_t b = 0; b < batch; ++b)
                kernels::add_to(row, c.gy_data() + (t * batch + b) * row, g + (source(c, t, b, steps) * batch + b) * row);
    }
};
}  // namespace ops

/// Reverses the leading (time) axis.
template <expr Xs>
constexpr auto reverse_time(Xs xs) {
    static_assert(with_shapes<any_poison<Xs> || (Xs::shape::rank >= 2), typename Xs::shape::pretty>::value,
                  "ctg::reverse_time: the sequence needs a time axis and a batch axis (T, B, ...)");
    return make_float_node<ops::reverse_time_op<false>>(xs);
}
/// Reverses each sequence's first lengths[b] steps, leaving its padding in place.
template <expr Xs, expr Len>
constexpr auto reverse_time(Xs xs, Len lengths) {
    static_assert(with_shapes<any_poison<Xs, Len> || (Xs::shape::rank >= 2 && Len::is_index && Len::shape::rank == 1 &&
                                                      Len::shape::dims[0] == Xs::shape::dims[1]),
                              typename Xs::shape::pretty, typename Len::shape::pretty>::value,
                  "ctg::reverse_time: the sequence needs axes (T, B, ...) and lengths must be an index_input (B)");
    if constexpr (any_poison<Xs, Len>) return poison{};
    else return make_node<ops::reverse_time_op<true>>(xs, lengths);
}
}  // namespace ctg
