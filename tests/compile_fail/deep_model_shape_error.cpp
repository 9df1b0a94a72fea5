// A shape mistake at the end of a deep residual model (4 pre-norm blocks with layer norm composed
// from primitives, as a user writes it): the message names the op and both shapes, and stays
// short. When node types spelled their operands, g++ printed 96 MB for two blocks of the GPT probe.
// EXPECT: ctg::matmul: the last dimension of the left operand must equal the row dimension
// EXPECT: shape_is<'B', 16, 32>, ctg::shape_is<33, 11>
// MAX_ERROR_BYTES: 20000
#include <ctgraph/ctgraph.hpp>
using namespace ctg;
inline constexpr dim B = dyn('B');
constexpr int D = 32, T = 16, V = 11;
using Avg = param<"avg", D, D>;  // x * Avg is the row mean when Avg holds 1/D

template <int L>
constexpr auto tower(auto x) {
    if constexpr (L == 0) {
        return x;
    } else {
        auto c = x - x * Avg{};
        auto h = mul(c, exp(scale<-0.5>(log(mul(c, c) * Avg{} + constant<1e-5>{}))));
        auto r = x + matmul(softmax(matmul(h * param<"Wq", D, D>{}, transpose(h * param<"Wk", D, D>{}))),
                            h * param<"Wv", D, D>{});
        return tower<L - 1>(r + gelu(r * param<"W1", D, 4 * D>{}) * param<"W2", 4 * D, D>{});
    }
}

int main() {
    auto x0 = embedding(param<"wte", V, D>{}, index_input<"tok", B, T>{});
    auto logits = tower<4>(x0) * param<"Wout", D + 1, V>{};
    (void)logits;
}
