// ctgraph/ops/layer_norm.hpp: layer normalisation over the last axis, fused (one pass per row).
//   layer_norm(x (..., D), gamma (D), beta (D)) -> (..., D)
//   mu = mean(x_row), var = mean((x_row - mu)^2) (biased, as PyTorch), r = 1 / sqrt(var + eps),
//   xhat = (x - mu) r,  y = xhat * gamma + beta,  eps = 1e-5 (PyTorch's default; layer_norm<1e-6>
//   for another, as nn.LayerNorm(eps=...)).
// Forward keeps mu and r per row in scratch (2 per row); backward recomputes xhat from them.
// Rows run as pool tasks (kernels::for_items); gamma's and beta's adjoints are summed per block of
// 64 rows into scratch, and the blocks added in order: the same bits at any thread count.
// VJP, with g = gy * gamma and means over the row:
//   gx += r (g - mean(g) - xhat mean(g xhat)),  ggamma += sum_rows gy xhat,  gbeta += sum_rows gy.
// The composed graph (means through primitives) is tested against this to 1e-12 in float64.
#pragma once
#include <algorithm>
#include <cmath>
#include <string>
#include <string_view>
#include <tuple>

#include "ctgraph/graph/node.hpp"
#include "ctgraph/kernels/bf16.hpp"
#include "ctgraph/kernels/simd.hpp"
#include "ctgraph/op.hpp"

namespace ctg {
namespace ops {
template <cval Eps = 1e-5>
struct layer_norm_op {
    static constexpr std::string_view name = "layer_norm";
    // ONNX: LayerNormalization (opset 17) over the last axis, the same biased variance and eps.
    template <class B>
    static void onnx(B& b) { b.emit_y("LayerNormalization", {b.x(0), b.x(1), b.x(2)}, {{"axis", -1}, {"epsilon", Eps.value()}}); }
    template <class X, class Gamma, class Beta>
    static consteval bool rows_independent() { return X::rank >= 2; }  // along the last axis (see op.hpp)
    static constexpr double eps = Eps.value();
    static constexpr bool assigns_adjoints = true;
    static constexpr bool vjp_reads_result = false;  // the VJP reads x and the saved (mu, r), not y (see op.hpp)
    static constexpr bool writes_bf16_result = true;  // each row's bf16 shadow, c.yb, while in L1 (see op.hpp)
    template <class X, class Gamma, class Beta>
    static consteval bool check() {
        return X::rank >= 1 && Gamma::rank == 1 && Beta::rank == 1 && Gamma::dims[0] == X::dims[X::rank - 1] &&
               Beta::dims[0] == X::dims[X::rank - 1];
    }
    template <class X, class Gamma, class Beta>
    static consteval auto dims() { return X::dims; }
    static constexpr std::size_t block_rows = 64;  // rows of one partial sum of gamma's and beta's adjoints
    static std::size_t blocks(std::size_t rows) { return (rows + block_rows - 1) / block_rows; }
    // (mu, r) per row, then a block's partial adjoints of gamma and beta (2 D each; not in a
    // forward-only pass, which has no backward)
    static std::size_t scratch_size(const rshape& y, const std::array<rshape, 3>&, bool forward_only) {
        return 2 * y.rows() + (forward_only ? 0 : 2 * y.cols() * blocks(y.rows()));
    }

    template <class T>
    static void forward(op_io<T, 3>& c) {
        const std::size_t n = c.y.shape.cols(), rows = c.y.shape.rows();
        const T *x = c.x_data(0), *gamma = c.x_data(1), *beta = c.x_data(2);
        T* y = c.y_data();
        T* stats = c.scratch.template as<T>();  // (mu, r) per row
        const T inv_n = T(1) / T(n);
        kernels::for_items(rows, rows * n, kernels::parallel_map_min_size, [&](std::size_t r0, std::size_t r1) {
            kernels::scratch<T> row(y ? 0 : n);  // the row, when only its shadow is kept (c.y null: see op.hpp)
            for (std::size_t r = r0; r < r1; ++r) {
                const T* xr = x + r * n;
                T* yr = y ? y + r * n : row.data();
                const T mu = kernels::sum(n, xr) * inv_n;
                const T var = kernels::reduce_sum(n, xr, xr, [mu](auto a, auto) {
                                  const auto d = a - decltype(a)(mu);
                                  return d * d;
                              }) * inv_n;
                const T rs = T(1) / std::sqrt(var + T(eps));
                stats[2 * r] = mu;
                stats[2 * r + 1] = rs;
                kernels::map(n, yr, [mu, rs](auto xv, auto g, auto b) {
                    using V = decltype(xv);
                    return (xv - V(mu)) * V(rs) * g + b;
                }, xr, gamma, beta);
                if constexpr (std::is_same_v<T, float>)
                    if (c.yb) kernels::pack_bf16(false, 1, n, yr, n, c.yb + r * n);
            }
        });
    }

    template <class T>
    static void backward(op_io<T, 3>& c) {
        const std::size_t n = c.y.shape.cols(), rows = c.y.shape.rows();
        T* partial = c.scratch.template as<T>() + 2 * rows;  // per block: gamma's, then beta's adjoint
        kernels::for_items(blocks(rows), rows * n, kernels::parallel_map_min_size, [&](std::size_t b0, std::size_t b1) {
            for (std::size_t b = b0; b < b1; ++b) backward_rows(c, b * block_rows, std::min(rows, (b + 1) * block_rows), partial + 2 * n * b);
        });
        // the blocks' sums in block order (computed gamma / beta: the first writer assigns)
        for (auto [adjoint, offset, fresh] : {std::tuple{c.gx_data(1), std::size_t(0), c.fresh(1)}, std::tuple{c.gx_data(2), n, c.fresh(2)}}) {
            if (!adjoint) continue;
            if (fresh) std::fill(adjoint, adjoint + n, T(0));
            for (std::size_t b = 0; b < blocks(rows); ++b) kernels::add_to(n, partial + 2 * n * b + offset, adjoint);
        }
    }

private:
    // Rows [r0, r1): x's adjoint, and the rows' sums of gamma's and beta's adjoints into
    // sums[0, n) and sums[n, 2n).
    template <class T>
    static void backward_rows(op_io<T, 3>& c, std::size_t r0, std::size_t r1, T* sums) {
        const std::size_t n = c.y.shape.cols();
        const T *x = c.x_data(0), *gamma = c.x_data(1), *gy = c.gy_data();
        const T* stats = c.scratch.template as<T>();
        T* gx = c.gx_data(0);
        T *sum_gamma = sums, *sum_beta = sums + n;
        std::fill(sums, sums + 2 * n, T(0));
        const T inv_n = T(1) / T(n);
        using V = kernels::batch<T>;
        for (std::size_t r = r0; r < r1; ++r) {
            const T *xr = x + r * n, *gyr = gy + r * n;
            const T mu = stats[2 * r], rs = stats[2 * r + 1];
            // One pass: sum(g) and sum(g xhat) with g = gy * gamma (in vector accumulators: a scalar
            // sum is a chain of dependent adds, which made this op 2.7 % of a gpt-s step), and the
            // parameter gradients' rows.
            V acc_g(T(0)), acc_gx(T(0));
            T sum_g = 0, sum_gx = 0;
            kernels::lanes::each<T>(n, [&](std::size_t j, auto tag) {
                using W = decltype(tag);
                const W xv = kernels::lanes::load<W>(xr + j), gv = kernels::lanes::load<W>(gyr + j);
                const W xhat = (xv - W(mu)) * W(rs), g = gv * kernels::lanes::load<W>(gamma + j);
                if constexpr (std::is_same_v<W, T>) sum_g += g, sum_gx += g * xhat;
                else acc_g += g, acc_gx += g * xhat;
                kernels::lanes::store(sum_gamma + j, kernels::lanes::load<W>(sum_gamma + j) + gv * xhat);
                kernels::lanes::store(sum_beta + j, kernels::lanes::load<W>(sum_beta + j) + gv);
            });
            if (!gx) continue;
            const T mean_g = (sum_g + xsimd::hadd(acc_g)) * inv_n, mean_gx = (sum_gx + xsimd::hadd(acc_gx)) * inv_n;
            kernels::map_into(c.fresh(0), n, gx + r * n, [&](auto xv, auto g, auto gm) {
                using W = decltype(xv);
                return W(rs) * (g * gm - W(mean_g) - (xv - W(mu)) * W(rs) * W(mean_gx));
            }, xr, gyr, gamma);
        }
    }
};
}  // namespace ops

/// Layer normalisation of each row over the last axis, scaled by gamma and shifted by beta (both (D)),
/// with Eps added to the variance (PyTorch's default 1e-5: `layer_norm<1e-6>(x, g, b)` for another).
template <cval Eps = 1e-5, expr X, expr Gamma, expr Beta>
constexpr auto layer_norm(X x, Gamma gamma, Beta beta) {
    static_assert(Eps.value() > 0, "ctg::layer_norm: eps must be positive");
    static_assert(with_shapes<any_poison<X, Gamma, Beta> ||
                                  ops::layer_norm_op<Eps>::template check<typename X::shape, typename Gamma::shape, typename Beta::shape>(),
                              typename X::shape::pretty, typename Gamma::shape::pretty, typename Beta::shape::pretty>::value,
                  "ctg::layer_norm: gamma and beta must be vectors as long as the operand's last axis");
    return make_float_node<ops::layer_norm_op<Eps>>(x, gamma, beta);
}
}  // namespace ctg
