// Attention over 5 heads side by side in projections of width 12 (not a multiple of 5).
// EXPECT: ctg::attention: queries \(B, n, D\) and keys \(B, m, D\) of heads side by side need the same B and D, and D a multiple of the number of heads
// EXPECT: shape_is<'B', 4, 12>, ctg::shape_is<'B', 6, 12>, ctg::shape_is<5>
#include <ctgraph/ctgraph.hpp>
using namespace ctg;
inline constexpr dim B = dyn('B');
int main() {
    auto o = nn::attention_over_heads<5>(input<"q", B, 4, 12>{}, input<"k", B, 6, 12>{}, input<"v", B, 6, 10>{}, causal{});
    (void)o;
}
