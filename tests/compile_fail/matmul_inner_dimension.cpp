// A (B,784) activation times a (128,10) weight: the inner dimensions differ.
// EXPECT: ctg::matmul: the last dimension of the left operand must equal the row dimension
// EXPECT: shape_is<'B', 784>, ctg::shape_is<128, 10>
#include <ctgraph/ctgraph.hpp>
using namespace ctg;
int main() {
    auto y = input<"x", dyn('B'), 784>{} * param<"W", 128, 10>{};
    auto prog = compile<float>(mean(relu(y)));  // no further error: the mistake is reported once
    (void)prog;
}
