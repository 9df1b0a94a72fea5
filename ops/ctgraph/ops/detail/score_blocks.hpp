// ctgraph/ops/detail/score_blocks.hpp: the parts of an attention score matrix that a mask leaves
// visible (masked_rows::row_blocks and column_blocks, ops/masked_softmax.hpp), and the three kinds
// of product attention runs over them, each on the blocks alone:
//   block_scores       S = alpha A B^T + beta S     (n x m)   Q K^T, gP = gO V^T
//   block_sum(keys)    C = alpha S B + beta C       (n x d)   P V, gQ = gS K
//   block_sum(queries) C = alpha S^T A + beta C     (m x d)   gV = P^T gO, gK = gS^T Q
// S is one n x m matrix (leading dimension m); A has a row per query, B a row per key, C as said,
// all with d columns, each row ld_a, ld_b, ld_c elements after the last (d where heads are a batch
// axis; h d where the heads sit side by side in the rows, head_rows). Each operand may come with its
// bf16 shadow (laid out as it, or null), read by bf16 products (kernels::gemm).
#pragma once
#include <array>
#include <cstddef>

#include "ctgraph/kernels/gemm.hpp"
#include "ctgraph/op.hpp"

namespace ctg {
namespace ops {

/// A part of one score matrix: rows [r0, r1) by key columns [c0, c1), counted within the matrix.
struct score_block {
    /// @{ the rows and the columns
    std::size_t r0 = 0, r1 = 0, c0 = 0, c1 = 0;
    /// @}
    bool operator==(const score_block&) const = default;  ///< the same rows and columns
};
/// The parts of a score matrix that attention's products compute (masked_rows::row_blocks): at most
/// max_row_blocks row blocks, or twice as many and one more column blocks.
struct score_blocks {
    static constexpr std::size_t max_row_blocks = 16;  ///< so that a matrix's blocks need no allocation
    static constexpr std::size_t block_rows = 64;  ///< rows per block, unless there would be more blocks
    /// @{ the blocks, in order
    std::array<score_block, 2 * max_row_blocks + 1> at{};
    std::size_t count = 0;
    /// @}
    /// The same blocks in the same order.
    friend bool operator==(const score_blocks& x, const score_blocks& y) {
        if (x.count != y.count) return false;
        for (std::size_t i = 0; i < x.count; ++i)
            if (!(x.at[i] == y.at[i])) return false;
        return true;
    }
};

/// Where matrix f of a (..., n, d) operand of attention is, by its head layout: heads = 0, heads
/// (if any) a batch axis, (B, h, n, d): matrix f at f n d, its rows d apart; heads > 0, the heads
/// side by side in the rows of a (B, n, heads d) tensor (a projection's output as it is, no split):
/// matrix f = (b, j) at b n heads d + j d, its rows heads d apart. (A runtime count: the kernels
/// that use it are compiled once for every head count, ops/instances.hpp.)
struct head_rows {
    std::size_t d;          ///< a head's features
    std::size_t heads = 0;  ///< heads side by side in a row (0: none)
    /// The first element of matrix f, of n rows.
    std::size_t offset(std::size_t f, std::size_t n) const {
        if (heads == 0) return f * n * d;
        return (f / heads) * n * heads * d + (f % heads) * d;
    }
    /// The distance between two rows of a matrix.
    std::size_t ld() const { return heads == 0 ? d : heads * d; }
};

/// S = alpha A B^T + beta S on each of the row blocks `rows`; S outside them is not touched.
template <class T>
void block_scores(const score_blocks& rows, std::size_t m, std::size_t d, T alpha, const T* a, const kernels::bf16_bits* a16,
                  std::size_t ld_a, const T* b, const kernels::bf16_bits* b16, std::size_t ld_b, T beta, T* s, bool bf16) {
    using ctg::detail::offset_or_null;
    for (std::size_t i = 0; i < rows.count; ++i) {
        const score_block& x = rows.at[i];
        kernels::gemm(false, true, x.r1 - x.r0, x.c1 - x.c0, d, alpha, offset_or_null(a, x.r0 * ld_a), ld_a, offset_or_null(b, x.c0 * ld_b),
                      ld_b, beta, s + x.r0 * m + x.c0, m, nullptr, bf16, offset_or_null(a16, x.r0 * ld_a), offset_or_null(b16, x.c0 * ld_b));
    }
}
/// Which way a block sum runs over S (block_sum).
enum class sum_over {
    keys,    ///< C = alpha S B + beta C by row blocks: each query's row sums over its block's keys
    queries  ///< C = alpha S^T A + beta C by column blocks: each key's row sums over the queries that see it
};
/// C = alpha op(S) X + beta C on the blocks `parts` (row blocks to sum over keys, X = B; column
/// blocks, masked_rows::column_blocks, to sum over queries, X = A). A block with nothing to sum
/// gives alpha times an empty sum.
template <class T>
void block_sum(sum_over over, const score_blocks& parts, std::size_t m, std::size_t d, T alpha, const T* s,
               const kernels::bf16_bits* s16, const T* x, const kernels::bf16_bits* x16, std::size_t ld_x, T beta, T* c,
               std::size_t ld_c, bool bf16) {
    using ctg::detail::offset_or_null;
    const bool by_keys = over == sum_over::keys;
    for (std::size_t i = 0; i < parts.count; ++i) {
        const score_block& b = parts.at[i];
        // out: the rows of C this block writes; in: the rows of X it sums over.
        const std::size_t out0 = by_keys ? b.r0 : b.c0, out1 = by_keys ? b.r1 : b.c1;
        const std::size_t in0 = by_keys ? b.c0 : b.r0, in1 = by_keys ? b.c1 : b.r1;
        const std::size_t at = b.r0 * m + b.c0;
        kernels::gemm(!by_keys, false, out1 - out0, d, in1 - in0, alpha, offset_or_null(s, at), m, offset_or_null(x, in0 * ld_x), ld_x,
                      beta, c + out0 * ld_c, ld_c, nullptr, bf16, offset_or_null(s16, at), offset_or_null(x16, in0 * ld_x));
    }
}

}  // namespace ops
}  // namespace ctg
