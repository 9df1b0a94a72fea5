// ctgraph/ops/attention_values.hpp: attention's value product under a mask,
//   O = P V,   P (..., n, m) the masked weights, V (..., m, d_v) -> O (..., n, d_v)
// computed only on the blocks of each P matrix whose rows may see their keys
// (masked_rows::row_blocks, as ops/scaled_dot_weights.hpp computes P): P is 0 outside them, so
// the sum over the keys needs only their columns. ctg::attention() builds it for every masked
// attention (matmul(P, V) without a mask).
// VJP, per matrix, on the same blocks:
//   gP  = gO V^T   by row block; outside the blocks gP is written 0 (fresh) or left as it is,
//                  which P's producer never reads: its softmax VJP reads gP only where a row may
//                  see (elsewhere P is 0 whatever the scores, and so is the scores' adjoint)
//   gV += P^T gO   by column block (keys no row sees: 0 when fresh)
// So the op is matmul(P, V) for any P that is 0 where the mask hides a key, and its adjoints are
// matmul's wherever the producer of such a P reads them.
#pragma once
#include <string>
#include <string_view>

#include "ctgraph/graph/node.hpp"
#include "ctgraph/kernels/gemm.hpp"
#include "ctgraph/op.hpp"
#include "ctgraph/ops/masked_softmax.hpp"

namespace ctg {
namespace ops {
template <class Mask>
struct attention_values_op {
    static constexpr std::string_view name = "attention_values";
    static constexpr bool assigns_adjoints = true;
    static constexpr std::uint32_t bf16_operands = 0b11;  // P and V: their bf16 shadows, io.xb (see op.hpp)
    static constexpr std::uint32_t bf16_operands_only = 0b11;  // read nowhere but in the products (see op.hpp)
    static constexpr std::uint32_t backward_reads = 0b11;  // P and V, not O (see op.hpp)

    template <class P, class V, class... Ops>
    static consteval bool check() {
        if constexpr (P::rank < 2 || P::rank != V::rank) {
            return false;
        } else {
            for (std::size_t i = 0; i + 2 < P::rank; ++i)
                if (!(P::dims[i] == V::dims[i])) return false;
            return P::dims[P::rank - 1] == V::dims[V::rank - 2];
        }
    }
    template <class P, class V, class... Ops>
    static consteval auto dims() {
        auto r = P::dims;
        r[P::rank - 1] = V::dims[V::rank - 1];
        return r;
    }

    struct sizes {
        std::size_t matrices, n, m, dv;
        std::size_t work() const { return 2 * matrices * n * m * dv; }  // flops of the whole products
    };
    static sizes sizes_of(const rshape& p, const rshape& v) { return {p.rows() / p[-2], p[-2], p[-1], v[-1]}; }
    // A matrix of an operand or of its shadow (null: none; P or V kept in bf16 only come null, see op.hpp).
    template <class X>
    static X* at(X* x, std::size_t off) { return x ? x + off : nullptr; }

    template <class T, std::size_t K>
    static void forward(op_io<T, K>& io) {
        const sizes s = sizes_of(io.x[0].shape, io.x[1].shape);
        const masked_rows<Mask, T, K> rows(io, io.x[0].shape);
        const T *p = io.x_data(0), *v = io.x_data(1);
        T* o = io.y_data();
        // One task per block of (batch, head) matrices, as matmul's batches.
        kernels::for_items(s.matrices, s.work(), kernels::parallel_gemm_min_flops, [&](std::size_t f0, std::size_t f1) {
            for (std::size_t f = f0; f < f1; ++f) {
                const score_blocks parts = rows.row_blocks(f);
                for (std::size_t b = 0; b < parts.count; ++b) {  // (n x dv) = (n x m)(m x dv); rows that see nothing: 0
                    const score_block& x = parts.at[b];
                    const std::size_t pa = f * s.n * s.m + x.r0 * s.m + x.c0, va = (f * s.m + x.c0) * s.dv;
                    kernels::gemm(false, false, x.r1 - x.r0, s.dv, x.c1 - x.c0, T(1), at(p, pa), s.m, at(v, va), s.dv, T(0),
                                  o + (f * s.n + x.r0) * s.dv, s.dv, nullptr, io.run.bf16, at(io.xb[0], pa), at(io.xb[1], va));
                }
            }
        });
    }
    template <class T, std::size_t K>
    static void backward(op_io<T, K>& io) {
        T *gp = io.gx_data(0), *gv = io.gx_data(1);
        if (!gp && !gv) return;
        const sizes s = sizes_of(io.x[0].shape, io.x[1].shape);
        const masked_rows<Mask, T, K> rows(io, io.x[0].shape);
        const T *p = io.x_data(0), *v = io.x_data(1), *go = io.gy_data();
        const std::size_t nm = s.n * s.m;
        kernels::for_items(s.matrices, 2 * s.work(), kernels::parallel_gemm_min_flops, [&](std::size_t f0, std::size_t f1) {
            for (std::size_t f = f0; f < f1; ++f) {
                const score_blocks parts = rows.row_blocks(f);
                if (gp) {  // (n x m) = or += (n x dv)(dv x m) inside the blocks
                    for (std::size_t b = 0; b < parts.count; ++b) {
                        const score_block& x = parts.at[b];
                        if (io.fresh(0))  // a fresh adjoint is written whole: 0 beside the block
                            for (std::size_t i = x.r0; i < x.r1; ++i) {
                                T* row = gp + f * nm + i * s.m;
                                std::fill(row, row + x.c0, T(0));
                                std::fill(row + x.c1, row + s.m, T(0));
                            }
                        kernels::gemm(false, true, x.r1 - x.r0, x.c1 - x.c0, s.dv, T(1), go + (f * s.n + x.r0) * s.dv, s.dv,
                                      at(v, (f * s.m + x.c0) * s.dv), s.dv, io.fresh(0) ? T(0) : T(1), gp + f * nm + x.r0 * s.m + x.c0,
                                      s.m, nullptr, io.run.bf16, nullptr, at(io.xb[1], (f * s.m + x.c0) * s.dv));
                    }
                }
                if (gv) {  // (m x dv) = or += (m x n)(n x dv), by column block
                    const score_blocks cols = rows.column_blocks(parts);
                    for (std::size_t b = 0; b < cols.count; ++b) {
                        const score_block& x = cols.at[b];
                        const std::size_t pa = f * nm + x.r0 * s.m + x.c0;
                        kernels::gemm(true, false, x.c1 - x.c0, s.dv, x.r1 - x.r0, T(1), at(p, pa), s.m, go + (f * s.n + x.r0) * s.dv,
                                      s.dv, io.fresh(1) ? T(0) : T(1), gv + (f * s.m + x.c0) * s.dv, s.dv, nullptr, io.run.bf16,
                                      at(io.xb[0], pa));
                    }
                }
            }
        });
    }
    static std::string describe() { return "mask " + Mask::describe(); }
};
}  // namespace ops

namespace detail {
/// O = P V for attention weights P under `Mask` (ctg::attention builds it; see the file comment).
template <class Mask, class P, class V, class... Ops>
constexpr auto make_attention_values(P p, V v, tlist<Ops...>) {
    using op = ops::attention_values_op<Mask>;
    if constexpr (any_poison<P, V, Ops...>) {
        return poison{};
    } else {
        static_assert(op::template check<typename P::shape, typename V::shape>(),
                      "ctg::attention: the weights (..., n, m) and the values (..., m, d_v) need the same leading "
                      "dimensions and the same m");
        return make_node<op>(p, v, Ops{}...);
    }
}
}  // namespace detail
}  // namespace ctg
