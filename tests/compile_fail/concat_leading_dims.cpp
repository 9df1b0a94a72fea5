// Concatenating (B,4) with (T,4): the leading dimensions must be equal.
// EXPECT: ctg::concat: the operands need equal rank, equal leading dimensions
// EXPECT: shape_is<'B', 4>, ctg::shape_is<'T', 4>
#include <ctgraph/ctgraph.hpp>
using namespace ctg;
int main() {
    auto y = concat(input<"a", dyn('B'), 4>{}, input<"b", dyn('T'), 4>{});
    (void)y;
}
