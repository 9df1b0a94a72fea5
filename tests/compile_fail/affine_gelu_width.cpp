// An FFN's first half, fused, whose weight does not fit the input: (B,T,64) times a (32,256) weight.
// EXPECT: ctg::affine_gelu \(affine_gelu_erf, affine_relu\): x \(\.\.\., in\) times a weight \(in, out\) plus a bias
// EXPECT: shape_is<'B', 'T', 64>, ctg::shape_is<32, 256>
#include <ctgraph/ctgraph.hpp>
using namespace ctg;
int main() {
    auto h = affine_gelu(input<"x", dyn('B'), dyn('T'), 64>{}, param<"W", 32, 256>{}, param<"b", 256>{});
    auto prog = compile<float>(mean(h));  // no further error: the mistake is reported once
    (void)prog;
}
