// Targets (B,T) against logits (B,65): the targets must be the logits' shape without the class axis.
// EXPECT: ctg::softmax_cross_entropy: the targets must have the logits' shape without its last
// EXPECT: shape_is<'B', 65>, ctg::shape_is<'B', 'T'>
#include <ctgraph/ctgraph.hpp>
using namespace ctg;
int main() {
    auto loss = softmax_cross_entropy(input<"z", dyn('B'), 65>{}, index_input<"y", dyn('B'), dyn('T')>{});
    (void)loss;
}
