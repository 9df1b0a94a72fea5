// A parameter's size must be known to the compiler.
// EXPECT: ctg::param: every dimension of a parameter must be static
#include <ctgraph/ctgraph.hpp>
using namespace ctg;
int main() {
    auto p = param<"W", dyn('B'), 4>{};
    (void)p;
}
