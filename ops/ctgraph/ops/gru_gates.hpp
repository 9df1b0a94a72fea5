// ctgraph/ops/gru_gates.hpp: the gate math of a GRU step (PyTorch's nn.GRU) as one node.
//
//   gru_gates(p, q, h): p = x W_i + b_i (..., 3H), q = h W_h + b_h (..., 3H), h (..., H) -> h' (..., H)
//     r = s(p_r + q_r),  z = s(p_z + q_z),  n = tanh(p_n + r * q_n),  h' = (1 - z) * n + z * h
//   (gate order r, z, n along the last axis, as PyTorch's weight_ih / weight_hh rows).
//
// The composed form (three slices of p and of q, two adds, two sigmoids, tanh, four element-wise
// products: 16 nodes, each a pass over memory and a value kept for backward) becomes one pass that
// keeps r, z and n in scratch. The VJP, per element, with g = dL/dh':
//   dn = g (1 - z),  dz = g (h - n),  dh += g z
//   a = dn (1 - n^2):        dp_n = a,  dq_n = a r,  dr = a q_n
//   dp_r = dq_r = dr r (1 - r),  dp_z = dq_z = dz z (1 - z)
// Tested against the composed graph (value and every gradient, float64) and by finite differences
// (tests/test_cells.cpp); nn::gru uses it, and the GRU keeps its parity with PyTorch.
#pragma once
#include <cmath>
#include <string>
#include <string_view>

#include "ctgraph/graph/node.hpp"
#include "ctgraph/ops/detail/lanes.hpp"
#include "ctgraph/op.hpp"

namespace ctg {
namespace ops {
struct gru_gates_op {
    static constexpr std::string_view name = "gru_gates";
    template <class P, class Q, class Hs>
    static consteval bool rows_independent() { return true; }  // per element of a row (see op.hpp)
    static constexpr bool assigns_adjoints = true;

    template <class P, class Q, class Hs>
    static consteval bool check() { return lanes::gate_shapes<3, 1, P, Q, Hs>(); }
    template <class P, class Q, class Hs>
    static consteval auto dims() { return Hs::dims; }
    /// r, z and n of every element, for backward.
    static std::size_t scratch_size(const rshape& y, const std::array<rshape, 3>&) { return 3 * y.size(); }

    // ONNX: the gate math node by node: p and q split into r, z, n (Split of the last axis in three
    // equal parts), r = Sigmoid(p_r + q_r), z = Sigmoid(p_z + q_z), n = Tanh(p_n + r q_n),
    // h' = (1 - z) n + z h.
    template <class B>
    static void onnx(B& b) {
        const auto p = b.emit_n("Split", {b.x(0)}, 3, {{"axis", -1}});
        const auto q = b.emit_n("Split", {b.x(1)}, 3, {{"axis", -1}});
        const std::string r = b.emit("Sigmoid", {b.emit("Add", {p[0], q[0]})});
        const std::string z = b.emit("Sigmoid", {b.emit("Add", {p[1], q[1]})});
        const std::string n = b.emit("Tanh", {b.emit("Add", {p[2], b.emit("Mul", {r, q[2]})})});
        b.emit_y("Add", {b.emit("Mul", {b.emit("Sub", {b.scalar(1.0), z}), n}), b.emit("Mul", {z, b.x(2)})});
    }
    template <class T>
    static void forward(op_io<T, 3>& c) {
        const std::size_t H = c.y.shape.cols(), rows = c.y.shape.rows(), n_all = c.y.size();
        const T *p = c.x_data(0), *q = c.x_data(1), *h = c.x_data(2);
        T *y = c.y_data(), *saved = c.scratch.template as<T>();
        for (std::size_t b = 0; b < rows; ++b) {
            const T *pb = p + b * 3 * H, *qb = q + b * 3 * H, *hb = h + b * H;
            T *r = saved + b * H, *z = r + n_all, *n = z + n_all, *yb = y + b * H;
            lanes::each<T>(H, [&](std::size_t j, auto tag) {
                using V = decltype(tag);
                const V rv = lanes::sigmoid(lanes::load<V>(pb + j) + lanes::load<V>(qb + j));
                const V zv = lanes::sigmoid(lanes::load<V>(pb + H + j) + lanes::load<V>(qb + H + j));
                using std::tanh;
                const V nv = tanh(lanes::load<V>(pb + 2 * H + j) + rv * lanes::load<V>(qb + 2 * H + j));
                lanes::store(r + j, rv);
                lanes::store(z + j, zv);
                lanes::store(n + j, nv);
                lanes::store(yb + j, (V(1) - zv) * nv + zv * lanes::load<V>(hb + j));
            });
        }
    }

    template <class T>
    static void backward(op_io<T, 3>& c) {
        const std::size_t H = c.y.shape.cols(), rows = c.y.shape.rows(), n_all = c.y.size();
        const T *q = c.x_data(1), *h = c.x_data(2), *gy = c.gy_data(), *saved = c.scratch.template as<T>();
        T *gp = c.gx_data(0), *gq = c.gx_data(1), *gh = c.gx_data(2);
        const bool fp = c.fresh(0), fq = c.fresh(1), fh = c.fresh(2);
        for (std::size_t b = 0; b < rows; ++b) {
            const T *qb = q + b * 3 * H, *hb = h + b * H, *gb = gy + b * H;
            const T *r = saved + b * H, *z = r + n_all, *n = z + n_all;
            T* gpb = gp ? gp + b * 3 * H : nullptr;
            T* gqb = gq ? gq + b * 3 * H : nullptr;
            T* ghb = gh ? gh + b * H : nullptr;
            lanes::each<T>(H, [&](std::size_t j, auto tag) {
                using V = decltype(tag);
                const V g = lanes::load<V>(gb + j), rv = lanes::load<V>(r + j), zv = lanes::load<V>(z + j), nv = lanes::load<V>(n + j);
                const V a = g * (V(1) - zv) * (V(1) - nv * nv);                 // d(pre-activation of n)
                const V ar = a * lanes::load<V>(qb + 2 * H + j) * rv * (V(1) - rv);  // d(pre-activation of r)
                const V az = g * (lanes::load<V>(hb + j) - nv) * zv * (V(1) - zv);   // d(pre-activation of z)
                if (gpb) {
                    lanes::write(fp, gpb + j, ar);
                    lanes::write(fp, gpb + H + j, az);
                    lanes::write(fp, gpb + 2 * H + j, a);
                }
                if (gqb) {
                    lanes::write(fq, gqb + j, ar);
                    lanes::write(fq, gqb + H + j, az);
                    lanes::write(fq, gqb + 2 * H + j, a * rv);
                }
                if (ghb) lanes::write(fh, ghb + j, g * zv);
            });
        }
    }

};
}  // namespace ops

/// The GRU gate math (see the file comment): p = x W_i + b_i, q = h W_h + b_h (both (..., 3H)), h (..., H).
template <expr P, expr Q, expr Hs>
constexpr auto gru_gates(P p, Q q, Hs h) {
    static_assert(with_shapes<any_poison<P, Q, Hs> ||
                                  ops::gru_gates_op::check<typename P::shape, typename Q::shape, typename Hs::shape>(),
                              typename P::shape::pretty, typename Q::shape::pretty, typename Hs::shape::pretty>::value,
                  "ctg::gru_gates: p and q must have one shape (..., 3H) and the state h (..., H) the same leading "
                  "dimensions");
    return make_float_node<ops::gru_gates_op>(p, q, h);
}
}  // namespace ctg
