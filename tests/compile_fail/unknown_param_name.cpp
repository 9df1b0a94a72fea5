// Asking a program for a parameter it does not have.
// EXPECT: ctg::program: no leaf of this name in the program
// EXPECT: (fixed_string<5>{"W_hh"}|{{87, 95, 104, 104, 0}})
#include <ctgraph/ctgraph.hpp>
#include <ctgraph/xtensor.hpp>
using namespace ctg;
int main() {
    auto prog = compile<float>(mean(input<"x", dyn('B'), 4>{} * param<"W_h", 4, 4>{}));
    auto w = prog.param<"W_hh">();
    (void)w;
}
