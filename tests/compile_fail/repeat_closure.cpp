// A block that closes over an encoder's output (built from parameters of its own) instead of taking
// it as an argument of repeat: its parameters would become per-layer.
// NO_PCH: clang (clang 14 crashes instantiating repeat from a precompiled header)
// EXPECT: ctg::repeat: the block combines data with parameters without its arguments
#include <ctgraph/ctgraph.hpp>
using namespace ctg;
using X = input<"x", 2, 3, 4>;
int main() {
    auto memory = tanh(input<"src", 2, 5, 4>{} * param<"enc.w", 4, 4>{});
    auto y = repeat<2, "dec.">([&](auto h) { return nn::decoder_block<"", 4, 2, 8>{}(h, memory); }, X{});
    (void)y;
}
