// Keys of length 6 and values of length 7: one sentence naming both shapes.
// EXPECT: ctg::attention: keys \(..., m, d_k\) and values \(..., m, d_v\) need the same leading dimensions and the same length m
// EXPECT: shape_is<'B', 6, 8>, ctg::shape_is<'B', 7, 4>
#include <ctgraph/ctgraph.hpp>
using namespace ctg;
inline constexpr dim B = dyn('B');
int main() {
    auto o = attention(input<"q", B, 5, 8>{}, input<"k", B, 6, 8>{}, input<"v", B, 7, 4>{}, causal{});
    (void)o;
}
