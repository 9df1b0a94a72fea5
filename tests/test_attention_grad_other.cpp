// Finite-difference checks (float64) of the additive score (fused kernel), a user's own score
// (cosine similarity with a learnable temperature, composed from primitives) and multi-head
// attention, under every mask.
#define CTG_ATTENTION_GRADCHECK
#include "attention_fixture.hpp"

using namespace ctg;
using namespace ctg::testing::attn;
using ctg::testing::check_config;
using ctg::testing::check_gradients;

TEST_CASE("gradcheck: additive score x every mask", "[gradcheck][attention]") {
    check_every_mask(additive_score<"add_", d, d, 4>{});
    check_every_mask(additive_score<"nob_", d, d, 4, false>{});
}
TEST_CASE("gradcheck: a user's own score x every mask", "[gradcheck][attention]") { check_every_mask(cosine_score{}); }

TEST_CASE("gradcheck: multi-head self- and cross-attention", "[gradcheck][attention]") {
    using mha = nn::multi_head_attention<"mha_", 4, 2>;
    using X = input<"x", B, 3, 4>;
    using Mem = input<"mem", B, 5, 4>;
    const check_config cfg{.dims = {{'B', 2}}, .index_bound = {{"len", 6}}, .index_low = {{"len", 1}}};
    CHECK(check_gradients(mha::self(X{}), cfg) > 0);
    CHECK(check_gradients(mha::self(X{}, causal{}), cfg) > 0);
    CHECK(check_gradients(mha::cross(X{}, Mem{}, key_padding(Len{})), cfg) > 0);
    // keys and values from different tensors (PyTorch's query, key, value)
    using Val = input<"val", B, 5, 4>;
    CHECK(check_gradients(mha::attend(X{}, Mem{}, Val{}, key_padding(Len{})), cfg) > 0);
    CHECK(check_gradients(mha::attend(X{}, Mem{}, tanh(Mem{})), cfg) > 0);
    using mha_add = nn::multi_head_attention<"mhb_", 4, 2, additive_score<"mhb_s_", 2, 2, 3>>;
    CHECK(check_gradients(mha_add::self(X{}, causal{}), cfg) > 0);
}
