// ctgraph/ops/lstm_gates.hpp: the gate math of an LSTM step (PyTorch's nn.LSTM) as one node.
//
//   lstm_gates(p, q, s): p = x W_i + b_i (..., 4H), q = h W_h + b_h (..., 4H), s = [h; c] (..., 2H)
//     -> [h'; c'] (..., 2H), with gates a = p + q split as i, f, g, o (PyTorch's order):
//     c' = s(a_f) c + s(a_i) tanh(a_g),   h' = s(a_o) tanh(c')
//
// The composed form (an add, four slices of the gates and one of the state, three sigmoids, two
// tanh, three products, an add and a concat: 16 nodes) becomes one pass keeping i, f, g, o and
// tanh(c') in scratch. The VJP, per element, with dh' and dc' the two halves of the output adjoint:
//   t = tanh(c'):  dc = dc' + dh' o (1 - t^2)
//   da_o = dh' t o (1 - o),  da_f = dc c f (1 - f),  da_i = dc g i (1 - i),  da_g = dc i (1 - g^2)
//   dp = dq = da,  ds = [0; dc f]   (the state's h half reaches the step only through q)
// Tested against the composed graph (value and every gradient, float64) and by finite differences
// (tests/test_fused_ops.cpp); nn::lstm uses it, and the LSTM keeps its parity with PyTorch.
#pragma once
#include <algorithm>
#include <cmath>
#include <string>
#include <string_view>

#include "ctgraph/graph/node.hpp"
#include "ctgraph/ops/detail/lanes.hpp"
#include "ctgraph/op.hpp"

namespace ctg {
namespace ops {
struct lstm_gates_op {
    static constexpr std::string_view name = "lstm_gates";
    template <class P, class Q, class S>
    static consteval bool rows_independent() { return true; }  // per element of a row (see op.hpp)
    static constexpr bool assigns_adjoints = true;

    template <class P, class Q, class S>
    static consteval bool check() { return lanes::gate_shapes<4, 2, P, Q, S>(); }
    template <class P, class Q, class S>
    static consteval auto dims() { return S::dims; }
    /// i, f, g, o and tanh(c') of every element (5 per state feature), for backward.
    static std::size_t scratch_size(const rshape& y, const std::array<rshape, 3>&) { return 5 * (y.size() / 2); }

    // ONNX: the gate math node by node: a = p + q split into i, f, g, o and s into h, c (Split of
    // the last axis in equal parts), c' = Sigmoid(a_f) c + Sigmoid(a_i) Tanh(a_g),
    // h' = Sigmoid(a_o) Tanh(c'), then Concat [h'; c'].
    template <class B>
    static void onnx(B& b) {
        const auto a = b.emit_n("Split", {b.emit("Add", {b.x(0), b.x(1)})}, 4, {{"axis", -1}});
        const auto s = b.emit_n("Split", {b.x(2)}, 2, {{"axis", -1}});
        const std::string i = b.emit("Sigmoid", {a[0]}), f = b.emit("Sigmoid", {a[1]}), g = b.emit("Tanh", {a[2]}),
                          o = b.emit("Sigmoid", {a[3]});
        const std::string c2 = b.emit("Add", {b.emit("Mul", {f, s[1]}), b.emit("Mul", {i, g})});
        const std::string h2 = b.emit("Mul", {o, b.emit("Tanh", {c2})});
        b.emit_y("Concat", {h2, c2}, {{"axis", -1}});
    }
    template <class T>
    static void forward(op_io<T, 3>& c) {
        const std::size_t H = c.y.shape.cols() / 2, rows = c.y.shape.rows(), n_all = rows * H;
        const T *p = c.x_data(0), *q = c.x_data(1), *s = c.x_data(2);
        T *y = c.y_data(), *saved = c.scratch.template as<T>();
        for (std::size_t b = 0; b < rows; ++b) {
            const T *pb = p + b * 4 * H, *qb = q + b * 4 * H, *cb = s + b * 2 * H + H;
            T *ig = saved + b * H, *fg = ig + n_all, *gg = fg + n_all, *og = gg + n_all, *tc = og + n_all;
            T *hy = y + b * 2 * H, *cy = hy + H;
            lanes::each<T>(H, [&](std::size_t j, auto tag) {
                using V = decltype(tag);
                using std::tanh;
                auto gate = [&](std::size_t k) { return lanes::load<V>(pb + k * H + j) + lanes::load<V>(qb + k * H + j); };
                const V iv = lanes::sigmoid(gate(0)), fv = lanes::sigmoid(gate(1)), gv = tanh(gate(2)), ov = lanes::sigmoid(gate(3));
                const V c2 = fv * lanes::load<V>(cb + j) + iv * gv;
                const V t = tanh(c2);
                lanes::store(ig + j, iv);
                lanes::store(fg + j, fv);
                lanes::store(gg + j, gv);
                lanes::store(og + j, ov);
                lanes::store(tc + j, t);
                lanes::store(cy + j, c2);
                lanes::store(hy + j, ov * t);
            });
        }
    }

    template <class T>
    static void backward(op_io<T, 3>& c) {
        const std::size_t H = c.y.shape.cols() / 2, rows = c.y.shape.rows(), n_all = rows * H;
        const T *s = c.x_data(2), *gy = c.gy_data(), *saved = c.scratch.template as<T>();
        T *gp = c.gx_data(0), *gq = c.gx_data(1), *gs = c.gx_data(2);
        const bool fp = c.fresh(0), fq = c.fresh(1), fs = c.fresh(2);
        for (std::size_t b = 0; b < rows; ++b) {
            const T *cb = s + b * 2 * H + H, *ghb = gy + b * 2 * H, *gcb = ghb + H;
            const T *ig = saved + b * H, *fg = ig + n_all, *gg = fg + n_all, *og = gg + n_all, *tc = og + n_all;
            T* gpb = gp ? gp + b * 4 * H : nullptr;
            T* gqb = gq ? gq + b * 4 * H : nullptr;
            if (gs && fs) std::fill(gs + b * 2 * H, gs + b * 2 * H + H, T(0));  // the h half: no gradient from here
            T* gcs = gs ? gs + b * 2 * H + H : nullptr;
            lanes::each<T>(H, [&](std::size_t j, auto tag) {
                using V = decltype(tag);
                const V dh = lanes::load<V>(ghb + j), t = lanes::load<V>(tc + j), iv = lanes::load<V>(ig + j), fv = lanes::load<V>(fg + j),
                        gv = lanes::load<V>(gg + j), ov = lanes::load<V>(og + j);
                const V dc = lanes::load<V>(gcb + j) + dh * ov * (V(1) - t * t);
                const V da[4] = {dc * gv * iv * (V(1) - iv), dc * lanes::load<V>(cb + j) * fv * (V(1) - fv),
                                 dc * iv * (V(1) - gv * gv), dh * t * ov * (V(1) - ov)};
                for (std::size_t k = 0; k < 4; ++k) {
                    if (gpb) lanes::write(fp, gpb + k * H + j, da[k]);
                    if (gqb) lanes::write(fq, gqb + k * H + j, da[k]);
                }
                if (gcs) lanes::write(fs, gcs + j, dc * fv);
            });
        }
    }
};
}  // namespace ops

/// The LSTM gate math (see the file comment): p = x W_i + b_i, q = h W_h + b_h (both (..., 4H)),
/// s = [h; c] (..., 2H) -> [h'; c'].
template <expr P, expr Q, expr S>
constexpr auto lstm_gates(P p, Q q, S s) {
    static_assert(with_shapes<any_poison<P, Q, S> ||
                                  ops::lstm_gates_op::check<typename P::shape, typename Q::shape, typename S::shape>(),
                              typename P::shape::pretty, typename Q::shape::pretty, typename S::shape::pretty>::value,
                  "ctg::lstm_gates: p and q must have one shape (..., 4H) and the state [h; c] (..., 2H) the same "
                  "leading dimensions");
    return make_float_node<ops::lstm_gates_op>(p, q, s);
}
}  // namespace ctg
