// One name, two shapes: "W" would have to be two different tensors.
// EXPECT: ctg::compile: two different leaves share one name
// EXPECT: shape_is<4, 3>, ctg::shape_is<3, 3>
#include <ctgraph/ctgraph.hpp>
using namespace ctg;
int main() {
    auto h = input<"x", dyn('B'), 4>{} * param<"W", 4, 3>{};
    auto y = h * param<"W", 3, 3>{};
    auto prog = compile<float>(mean(y));
    (void)prog;
}
