// A repeat whose block returns something that depends on neither its input, its other arguments nor
// its parameters: there is nothing to compute per layer.
// NO_PCH: clang (clang 14 crashes instantiating repeat from a precompiled header)
// EXPECT: ctg::repeat: the block's result depends on neither its input, its other arguments nor its parameters
#include <ctgraph/ctgraph.hpp>
using namespace ctg;
inline constexpr dim B = dyn('B');
int main() {
    auto y = repeat<2, "r.">([](auto) { return full<0.5, B, 4>(); }, input<"x", B, 4>{});
    auto prog = compile<double>(sum(y));
    prog.forward();
}
