// Reading a program's result as a view without <ctgraph/xtensor.hpp>, which gives the views' type:
// one error, naming the header (and the raw accessors that need none).
// EXPECT: ctg::program: param, grad, output, value_of, adjoint_of and input_grad give xtensor views
// EXPECT: include <ctgraph/xtensor.hpp> \(or read raw memory: output_data, node_shape, params\(\)\)
#include <ctgraph/ctgraph.hpp>
using namespace ctg;
int main() {
    auto prog = compile<float>(mean(input<"x", dyn('B'), 4>{} * param<"W", 4, 4>{}));
    auto w = prog.param<"W">();
    (void)w;
}
