// A (B,T,32) hidden state against a tied head whose table is (65,48): the widths differ.
// EXPECT: ctg::matmul_transposed: the right operand must be a matrix \(N, K\) whose last dimension equals
// EXPECT: shape_is<'B', 'T', 32>, ctg::shape_is<65, 48>
#include <ctgraph/ctgraph.hpp>
using namespace ctg;
int main() {
    auto z = matmul_transposed(input<"h", dyn('B'), dyn('T'), 32>{}, param<"tok_embed", 65, 48>{});
    auto prog = compile<float>(mean(z));  // no further error: the mistake is reported once
    (void)prog;
}
