// Quantised weights in a training program: one error saying they are for inference programs.
// EXPECT: options\{.weights = int8 or q4\} is weight-only quantisation for inference
#include <ctgraph/ctgraph.hpp>
using namespace ctg;
int main() {
    auto prog = compile<float, options{.weights = weight_format::int8}>(sum(relu(input<"x", dyn('B'), 4>{} * param<"w", 4, 4>{})));
    prog.forward();
}
