// Key lengths indexed by another dimension than the scores' batch.
// EXPECT: ctg::masked_softmax: the mask's tensor does not fit the scores
// EXPECT: shape_is<'B', 5, 6>, ctg::shape_is<'T'>
#include <ctgraph/ctgraph.hpp>
using namespace ctg;
inline constexpr dim B = dyn('B');
int main() {
    auto o = attention(input<"q", B, 5, 8>{}, input<"k", B, 6, 8>{}, input<"v", B, 6, 4>{},
                       key_padding(index_input<"len", dyn('T')>{}));
    (void)o;
}
