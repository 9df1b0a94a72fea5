// ctgraph/ops/additive_scores.hpp: additive (Bahdanau) scores without the n x m x a tensor,
//   S_ij = sum_c w_c tanh(Qp_ic + Kp_jc),   Qp (..., n, a), Kp (..., m, a), w (a) -> S (..., n, m)
// where Qp = q W_q + b and Kp = k W_k are the projected queries and keys. The composed form,
// matmul(tanh(Qp[:, :, None] + Kp[:, None]), w), materialises B x n x m x a values of tanh in
// forward and keeps them for backward (PyTorch: 98 ms per step on attn-additive). Here each
// (i, j) pair computes its a values of tanh in registers and reduces them at once; backward
// recomputes them, pair by pair, instead of storing them:
//   u = gS_ij * w * (1 - t^2) with t = tanh(Qp_i + Kp_j):  gQp_i += u, gKp_j += u, gw += gS_ij * t
#pragma once
#include <algorithm>
#include <cmath>
#include <string>
#include <string_view>

#include "ctgraph/graph/node.hpp"
#include "ctgraph/kernels/parallel.hpp"
#include "ctgraph/kernels/simd.hpp"
#include "ctgraph/op.hpp"

namespace ctg {
namespace ops {
struct additive_scores_op {
    static constexpr std::string_view name = "additive_scores";

    template <class Q, class K, class W>
    static consteval bool check() {
        if constexpr (Q::rank < 2 || Q::rank != K::rank || W::rank != 1) {
            return false;
        } else {
            for (std::size_t i = 0; i + 2 < Q::rank; ++i)
                if (!(Q::dims[i] == K::dims[i])) return false;
            return Q::dims[Q::rank - 1] == K::dims[K::rank - 1] && Q::dims[Q::rank - 1] == W::dims[0];
        }
    }
    template <class Q, class K, class W>
    static consteval auto dims() {
        auto r = Q::dims;
        r[Q::rank - 1] = K::dims[K::rank - 2];
        return r;
    }

    /// sum_c w_c tanh(q_c + k_c) over a elements.
    template <class T>
    static T score(std::size_t a, const T* q, const T* k, const T* w) {
        using V = kernels::batch<T>;
        constexpr std::size_t L = V::size;
        std::size_t c = 0;
        T s = 0;
        if (!kernels::scalar_only() && a >= L) {
            V acc(T(0));
            for (; c + L <= a; c += L)
                acc = kernels::fmadd(V::load_unaligned(w + c), xsimd::tanh(V::load_unaligned(q + c) + V::load_unaligned(k + c)), acc);
            s = xsimd::hadd(acc);
        }
        for (; c < a; ++c) s += w[c] * std::tanh(q[c] + k[c]);
        return s;
    }
    /// The VJP of one pair with adjoint g: gq += u, gk += u, gw += g t (null pointers are skipped).
    template <class T>
    static void pair_backward(std::size_t a, T g, const T* q, const T* k, const T* w, T* gq, T* gk, T* gw) {
        using V = kernels::batch<T>;
        constexpr std::size_t L = V::size;
        std::size_t c = 0;
        if (!kernels::scalar_only()) {
            const V gv(g), one(T(1));
            for (; c + L <= a; c += L) {
                const V t = xsimd::tanh(V::load_unaligned(q + c) + V::load_unaligned(k + c));
                const V u = gv * V::load_unaligned(w + c) * (one - t * t);
                if (gq) (V::load_unaligned(gq + c) + u).store_unaligned(gq + c);
                if (gk) (V::load_unaligned(gk + c) + u).store_unaligned(gk + c);
                if (gw) kernels::fmadd(gv, t, V::load_unaligned(gw + c)).store_unaligned(gw + c);
            }
        }
        for (; c < a; ++c) {
            const T t = std::tanh(q[c] + k[c]), u = g * w[c] * (T(1) - t * t);
            if (gq) gq[c] += u;
            if (gk) gk[c] += u;
            if (gw) gw[c] += g * t;
        }
    }

    // ONNX: the composed form, S = Tanh(Qp[..., :, None, :] + Kp[..., None, :, :]) w: Unsqueeze,
    // a broadcast Add to (..., n, m, a), Tanh, and MatMul with the vector w, which drops the last axis.
    template <class B>
    static void onnx(B& b) {
        const std::string q = b.emit("Unsqueeze", {b.x(0), b.ints({-2})});  // (..., n, 1, a)
        const std::string k = b.emit("Unsqueeze", {b.x(1), b.ints({-3})});  // (..., 1, m, a)
        b.emit_y("MatMul", {b.emit("Tanh", {b.emit("Add", {q, k})}), b.x(2)});
    }

    // Work below this many tanh evaluations stays on one thread (a split costs about a microsecond).
    static constexpr std::size_t parallel_min_tanh = std::size_t(1) << 15;

    template <class T>
    static void forward(op_io<T, 3>& io) {
        const rshape &qs = io.x[0].shape, &ks = io.x[1].shape;
        const std::size_t n = qs[-2], m = ks[-2], a = qs[-1], matrices = qs.rows() / n;
        const T *q = io.x_data(0), *k = io.x_data(1), *w = io.x_data(2);
        T* s = io.y_data();
        // every score is one thread's: the matrices in ranges (attention heads, batch rows)
        kernels::for_items(matrices, matrices * n * m * a, parallel_min_tanh, [&](std::size_t f0, std::size_t f1) {
            for (std::size_t f = f0; f < f1; ++f)
                for (std::size_t i = 0; i < n; ++i)
                    for (std::size_t j = 0; j < m; ++j)
                        s[(f * n + i) * m + j] = score(a, q + (f * n + i) * a, k + (f * m + j) * a, w);
        });
    }
    template <class T>
    static void backward(op_io<T, 3>& io) {
        T *gq = io.gx_data(0), *gk = io.gx_data(1), *gw = io.gx_data(2);
        if (!gq && !gk && !gw) return;
        const rshape &qs = io.x[0].shape, &ks = io.x[1].shape;
        const std::size_t n = qs[-2], m = ks[-2], a = qs[-1], matrices = qs.rows() / n;
        const T *q = io.x_data(0), *k = io.x_data(1), *w = io.x_data(2), *gs = io.gy_data();
        // gQp and gKp rows belong to one matrix each, so matrices run in parallel; w's gradient
        // is summed per matrix, then over the matrices in order: the same result on any number of
        // threads.
        kernels::scratch<T> partial(gw ? matrices * a : 0);
        if (gw) std::fill(partial.data(), partial.data() + matrices * a, T(0));
        kernels::for_items(matrices, matrices * n * m * a, parallel_min_tanh, [&](std::size_t f0, std::size_t f1) {
            for (std::size_t f = f0; f < f1; ++f)
                for (std::size_t i = 0; i < n; ++i)
                    for (std::size_t j = 0; j < m; ++j) {
                        const T g = gs[(f * n + i) * m + j];
                        if (g == T(0)) continue;  // a masked or fully ignored pair contributes nothing
                        const std::size_t qi = (f * n + i) * a, kj = (f * m + j) * a;
                        pair_backward(a, g, q + qi, k + kj, w, gq ? gq + qi : nullptr, gk ? gk + kj : nullptr,
                                      gw ? partial.data() + f * a : nullptr);
                    }
        });
        if (gw)
            for (std::size_t f = 0; f < matrices; ++f) kernels::add_to(a, partial.data() + f * a, gw);
    }
};
}  // namespace ops

/// Additive scores S_ij = w . tanh(qp_i + kp_j) of projected queries (..., n, a) and keys (..., m, a).
template <expr Q, expr K, expr W>
constexpr auto additive_scores(Q qp, K kp, W w) {
    static_assert(with_shapes<any_poison<Q, K, W> ||
                                  ops::additive_scores_op::check<typename Q::shape, typename K::shape, typename W::shape>(),
                              typename Q::shape::pretty, typename K::shape::pretty, typename W::shape::pretty>::value,
                  "ctg::additive_scores: projected queries (..., n, a) and keys (..., m, a) need the same leading "
                  "dimensions and the vector w the same size a");
    return make_float_node<ops::additive_scores_op>(qp, kp, w);
}
}  // namespace ctg
