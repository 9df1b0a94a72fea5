// ctgraph/ops/permute.hpp: reorders the axes. permute<P...>(x): axis k of the result is axis P[k] of
// x, so y[i_0, ..., i_{r-1}] = x[j] with j[P[k]] = i_k.
//   permute<1, 0, 2>(hs)          (T, B, H) -> (B, T, H)          time-major to batch-major
//   permute<0, 2, 1, 3>(x)        (B, T, h, d) -> (B, h, T, d)     heads as a batch axis
// The VJP scatters the adjoint back through the same index map (a permutation's transpose is its
// inverse). When the last axis stays last, whole rows move at once.
#pragma once
#include <array>
#include <string>
#include <string_view>
#include <vector>

#include "ctgraph/graph/node.hpp"
#include "ctgraph/kernels/bf16.hpp"
#include "ctgraph/kernels/simd.hpp"
#include "ctgraph/op.hpp"

namespace ctg {
namespace ops {
template <int... P>
struct permute_op {
    static constexpr std::string_view name = "permute";
    static constexpr bool assigns_adjoints = true;
    static constexpr std::uint32_t backward_reads = 0;  // the VJP permutes the adjoint back: no value (see op.hpp)
    static constexpr bool writes_bf16_result = true;  // the shadow (c.yb) converted from x run by run (see op.hpp)
    static constexpr std::size_t R = sizeof...(P);
    static constexpr std::array<int, R> perm{P...};

    template <class A>
    static consteval bool check() {
        if (A::rank != R || R < 2) return false;
        std::array<bool, R> seen{};
        for (int p : perm) {
            if (p < 0 || std::size_t(p) >= R || seen[std::size_t(p)]) return false;
            seen[std::size_t(p)] = true;
        }
        return true;
    }
    template <class A>
    static consteval auto dims() {
        std::array<dim, R> r{};
        for (std::size_t k = 0; k < R; ++k) r[k] = A::dims[std::size_t(perm[k])];
        return r;
    }

    // Walks the result; `src` is the matching offset in the operand. Rows of `run` contiguous
    // elements move together when the last axis stays in place. Ranges of rows run as pool tasks
    // (a Transformer's head split moves 3 MB per layer and pass); each element is copied once,
    // so the result does not depend on the thread count.
    template <class F>
    static void walk(const rshape& x, F&& f) {
        std::array<std::size_t, max_rank> xstride{}, ydim{}, ystride_in_x{};
        std::size_t s = 1;
        for (std::size_t a = R; a-- > 0;) {
            xstride[a] = s;
            s *= x.d[a];
        }
        for (std::size_t k = 0; k < R; ++k) {
            ydim[k] = x.d[std::size_t(perm[k])];
            ystride_in_x[k] = xstride[std::size_t(perm[k])];
        }
        const bool rows = perm[R - 1] == int(R - 1);
        const std::size_t run = rows ? ydim[R - 1] : 1, outer = R - (rows ? 1 : 0);
        std::size_t total = 1;
        for (std::size_t k = 0; k < outer; ++k) total *= ydim[k];
        kernels::for_items(total, total * run, kernels::parallel_map_min_size, [&](std::size_t n0, std::size_t n1) {
            std::array<std::size_t, max_rank> idx{};
            for (std::size_t k = outer, m = n0; k-- > 0; m /= ydim[k]) idx[k] = m % ydim[k];  // n0's index
            for (std::size_t n = n0, dst = n0 * run; n < n1; ++n, dst += run) {
                std::size_t src = 0;
                for (std::size_t k = 0; k < outer; ++k) src += idx[k] * ystride_in_x[k];
                f(dst, src, run);
                for (std::size_t k = outer; k-- > 0;) {  // next index, last axis fastest
                    if (++idx[k] < ydim[k]) break;
                    idx[k] = 0;
                }
            }
        });
    }

    // ONNX: Transpose with perm = P (the same convention: output axis k is input axis P[k]).
    template <class B>
    static void onnx(B& b) { b.emit_y("Transpose", {b.x(0)}, {{"perm", std::vector<long long>{P...}}}); }

    template <class T>
    static void forward(op_io<T, 1>& c) {
        const T* x = c.x_data(0);
        T* y = c.y_data();
        if constexpr (std::is_same_v<T, float>)
            if (c.yb) {  // the shadow rounded from x as it moves (y's elements: the same bits); y only if kept
                walk(c.x[0].shape, [&](std::size_t dst, std::size_t src, std::size_t run) {
                    if (y) std::copy(x + src, x + src + run, y + dst);
                    kernels::pack_bf16(false, 1, run, x + src, run, c.yb + dst);
                });
                return;
            }
        walk(c.x[0].shape, [&](std::size_t dst, std::size_t src, std::size_t run) {
            std::copy(x + src, x + src + run, y + dst);
        });
    }
    template <class T>
    static void backward(op_io<T, 1>& c) {
        T* g = c.gx_data(0);
        if (!g) return;
        const T* gy = c.gy_data();
        const bool fresh = c.fresh(0);  // every element of the operand is visited once
        walk(c.x[0].shape, [&](std::size_t dst, std::size_t src, std::size_t run) { kernels::put(fresh, run, gy + dst, g + src); });
    }
    static std::string describe() {
        std::string s;
        for (int p : perm) s += (s.empty() ? "" : ",") + std::to_string(p);
        return s;
    }
};
}  // namespace ops

/// Reorders the axes: axis k of the result is axis P[k] of the operand.
template <int... P, expr A>
constexpr auto permute(A a) {
    static_assert(with_shapes<any_poison<A> || ops::permute_op<P...>::template check<typename A::shape>(),
                              typename A::shape::pretty, shape_is<P...>>::value,
                  "ctg::permute: give each axis of the operand exactly once (P is a permutation of 0..rank-1)");
    return make_float_node<ops::permute_op<P...>>(a);
}
}  // namespace ctg
