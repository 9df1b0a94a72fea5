// options::frozen names a prefix no parameter has ("encoder." where the parameters are "enc."):
// a mistyped entry would otherwise freeze nothing (or, in options::trainable, train nothing).
// EXPECT: an entry of options::frozen or options::trainable matches no parameter of this program
#include <ctgraph/ctgraph.hpp>
using namespace ctg;
int main() {
    using X = input<"x", dyn('B'), 3>;
    auto loss = sum(tanh(X{} * param<"enc.W", 3, 4>{}) * param<"head.W", 4, 2>{});
    auto prog = compile<double, options{.frozen = "encoder."}>(loss);
    prog.forward();
}
