// Finite-difference checks (float64) of the dot-product scores (fused kernels) under every mask.
#define CTG_ATTENTION_GRADCHECK
#include "attention_fixture.hpp"

using namespace ctg;
using namespace ctg::testing::attn;

TEST_CASE("gradcheck: dot score x every mask", "[gradcheck][attention]") { check_every_mask(dot_score{}); }
TEST_CASE("gradcheck: scaled dot score x every mask", "[gradcheck][attention]") { check_every_mask(scaled_dot_score{}); }
TEST_CASE("gradcheck: bilinear score x every mask", "[gradcheck][attention]") {
    check_every_mask(bilinear_score<"W", d, d>{});
}
