// tests/attention_fixture.hpp: shapes, masks and a host-side reference shared by the attention tests.
#pragma once
#include <cmath>
#include <cstddef>
#include <functional>
#include <limits>
#include <vector>

#include <ctgraph/ctgraph.hpp>
#include <ctgraph/xtensor.hpp>

namespace ctg::testing::attn {

inline constexpr dim B = dyn('B');
constexpr int n = 4, m = 5, d = 3, dv = 2;
using Q = input<"q", B, n, d>;
using K = input<"k", B, m, d>;
using V = input<"v", B, m, dv>;
using S = input<"s", B, n, m>;
using Len = index_input<"len", B>;
using Mat = index_input<"mat", n, m>;

/// Keys whose index is even or equal to the query's position: a set no range describes.
struct even_or_self {
    static constexpr bool visible(std::size_t i, std::size_t j) { return j % 2 == 0 || j == i; }
};

/// The cosine score of the custom-score example: S_ij = exp(t) cos(q_i, k_j).
struct cosine_score {
    static constexpr auto scores(auto q, auto k) {
        return mul(matmul(l2_normalize(q), transpose(l2_normalize(k))), exp(param<"cos_t">{}));
    }
};

/// An independent host-side statement of each mask: visible(b, i, j) for n queries and m keys.
using visibility = std::function<bool(std::size_t, std::size_t, std::size_t)>;
inline long long position(std::size_t i, std::size_t nq, std::size_t mk) { return (long long)i + (long long)mk - (long long)nq; }

/// softmax(S + M) with M = 0 / -inf per `vis`, rows with nothing visible all zero. s: (batches, nq, mk).
/// (Vis: a visibility, or any callable of the same form.)
template <class Vis = visibility>
std::vector<double> reference_weights(const std::vector<double>& s, std::size_t batches, std::size_t nq, std::size_t mk,
                                      const Vis& vis) {
    std::vector<double> p(s.size(), 0.0);
    std::vector<char> seen(mk);  // vis asked once per element (the sanitizers' tests run it unoptimised)
    for (std::size_t b = 0; b < batches; ++b)
        for (std::size_t i = 0; i < nq; ++i) {
            const double* row = s.data() + (b * nq + i) * mk;
            double* out = p.data() + (b * nq + i) * mk;
            double mx = -std::numeric_limits<double>::infinity();
            for (std::size_t j = 0; j < mk; ++j)
                if ((seen[j] = vis(b, i, j))) mx = std::max(mx, row[j]);
            if (mx == -std::numeric_limits<double>::infinity()) continue;
            double sum = 0;
            for (std::size_t j = 0; j < mk; ++j)
                if (seen[j]) sum += out[j] = std::exp(row[j] - mx);
            for (std::size_t j = 0; j < mk; ++j)
                if (seen[j]) out[j] /= sum;
        }
    return p;
}

}  // namespace ctg::testing::attn

#ifdef CTG_ATTENTION_GRADCHECK
#include "gradcheck.hpp"
namespace ctg::testing::attn {
/// Finite differences (float64) of attention(Q, K, V, score, mask) for every kind of mask; the
/// lengths are drawn from [1, m] and the matrix from {0, 1} (some rows then see nothing).
template <class Score>
void check_every_mask(Score score) {
    const check_config cfg{.dims = {{'B', 2}}, .index_bound = {{"len", m + 1}}, .index_low = {{"len", 1}}};
    CHECK(check_gradients(attention(Q{}, K{}, V{}, score, no_mask{}), cfg) > 0);
    CHECK(check_gradients(attention(Q{}, K{}, V{}, score, causal{}), cfg) > 0);
    CHECK(check_gradients(attention(Q{}, K{}, V{}, score, local_window<1>{}), cfg) > 0);
    CHECK(check_gradients(attention(Q{}, K{}, V{}, score, local_window<1, window::past>{}), cfg) > 0);
    CHECK(check_gradients(attention(Q{}, K{}, V{}, score, visible_if<even_or_self>{}), cfg) > 0);
    CHECK(check_gradients(attention(Q{}, K{}, V{}, score, key_padding(Len{})), cfg) > 0);
    CHECK(check_gradients(attention(Q{}, K{}, V{}, score, mask_matrix(Mat{})), cfg) > 0);
    CHECK(check_gradients(attention(Q{}, K{}, V{}, score, causal{} && key_padding(Len{})), cfg) > 0);
}
}  // namespace ctg::testing::attn
#endif
