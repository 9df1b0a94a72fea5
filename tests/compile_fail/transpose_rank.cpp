// transpose of a vector: it needs two axes to swap.
// EXPECT: ctg::transpose: the operand must have rank 2 or more
// EXPECT: shape_is<16>
#include <ctgraph/ctgraph.hpp>
using namespace ctg;
int main() {
    auto y = transpose(param<"v", 16>{});
    (void)y;
}
