// Queries of width 8 against keys of width 6 under a dot-product score.
// EXPECT: ctg::attention: queries \(..., n, d\) and keys \(..., m, d\) need the same leading dimensions and the same feature size d
// EXPECT: shape_is<'B', 5, 8>, ctg::shape_is<'B', 6, 6>
#include <ctgraph/ctgraph.hpp>
using namespace ctg;
inline constexpr dim B = dyn('B');
int main() {
    auto o = attention(input<"q", B, 5, 8>{}, input<"k", B, 6, 6>{}, input<"v", B, 6, 4>{});
    (void)o;
}
