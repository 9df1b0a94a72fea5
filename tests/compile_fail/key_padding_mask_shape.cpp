// A key padding mask over another sequence's positions (B, S) for self-attention over (B, T).
// EXPECT: ctg::masked_softmax: the mask's tensor does not fit the scores
// EXPECT: shape_is<'B', 4, 'T', 'T'>, ctg::shape_is<'B', 'S'>
#include <ctgraph/ctgraph.hpp>
using namespace ctg;
inline constexpr dim B = dyn('B'), T = dyn('T'), S = dyn('S');
int main() {
    using mha = nn::multi_head_attention<"attn.", 16, 4>;
    auto y = mha::self(input<"x", B, T, 16>{}, key_padding_mask(index_input<"pad", B, S>{}));
    auto prog = compile<float>(sum(y));
    (void)prog;
}
