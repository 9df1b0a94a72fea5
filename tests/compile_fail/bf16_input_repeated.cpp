// NO_PCH: clang
// A bf16_input as the value a repeat carries from layer to layer: layers compute floats.
// EXPECT: ctg::repeat: the carried value must be computed in floats, not a bf16_input
#include <ctgraph/ctgraph.hpp>
using namespace ctg;
int main() {
    auto y = repeat<2, "blocks.">([](auto h) { return tanh(h); }, bf16_input<"x", dyn('B'), 8>{});
    (void)y;
}
