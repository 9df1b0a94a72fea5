// A scan whose cell returns something that depends on neither its state nor its step input: there is
// nothing to compute per step (the engine writes each step's output through the cell's computation).
// EXPECT: ctg::scan: the cell's result depends on neither the state nor the step input
#include <ctgraph/ctgraph.hpp>
using namespace ctg;
inline constexpr dim B = dyn('B'), T = dyn('T');
int main() {
    auto hs = scan<4>([](auto, auto) { return tanh(input<"h", B, 4>{}); }, input<"xs", T, B, 3>{});
    auto prog = compile<double>(sum(hs));
    prog.forward();
}
