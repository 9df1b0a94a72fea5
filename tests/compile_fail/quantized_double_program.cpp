// Quantised weights in a double program: one error saying they need a float program.
// EXPECT: options\{.weights = int8 or q4\} is weight-only quantisation for inference: it needs a float
#include <ctgraph/ctgraph.hpp>
using namespace ctg;
int main() {
    auto prog = compile<double, options{.inference = true, .weights = weight_format::q4}>(relu(input<"x", dyn('B'), 32>{} * param<"w", 32, 4>{}));
    prog.forward();
}
