// options::input_grads_for names an input the program does not have ("h" is misspelt "hh").
// EXPECT: options::input_grads_for names something that is not a floating-point input of this program
#include <ctgraph/ctgraph.hpp>
using namespace ctg;
int main() {
    using X = input<"x", dyn('B'), 3>;
    using H = input<"h", dyn('B'), 3>;
    auto prog = compile<double, options{.input_grads_for = "x hh"}>(sum(mul(X{}, H{})));
    prog.forward();
}
