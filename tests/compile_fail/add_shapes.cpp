// Adding (B,10) and (B,5): the last axes differ and neither is 1.
// EXPECT: ctg::add: the operand shapes do not broadcast
// EXPECT: shape_is<'B', 10>, ctg::shape_is<'B', 5>
#include <ctgraph/ctgraph.hpp>
using namespace ctg;
int main() {
    auto y = input<"a", dyn('B'), 10>{} + input<"b", dyn('B'), 5>{};
    (void)y;
}
