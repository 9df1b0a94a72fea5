// A bf16_input (a KV cache's storage) given to an op that computes on floats: only the KV-cache
// ops read bf16 storage.
// EXPECT: ctg: this op was given a bf16_input, which only the KV-cache ops read
// EXPECT: gelu
#include <ctgraph/ctgraph.hpp>
using namespace ctg;
int main() {
    auto y = gelu(bf16_input<"cache", dyn('B'), 64>{});
    (void)y;
}
