// A bf16_input as the sequence of a scan: a scan steps over floats or indices.
// EXPECT: ctg::scan: the sequence must be floats or indices, not a bf16_input
#include <ctgraph/ctgraph.hpp>
using namespace ctg;
int main() {
    constexpr dim T = dyn('T'), B = dyn('B');
    auto hs = scan<8>([](auto h, auto x) { return tanh(x * param<"W", 4, 8>{} + h); }, bf16_input<"xs", T, B, 4>{});
    (void)hs;
}
