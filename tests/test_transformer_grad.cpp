// Finite-difference checks (float64) of layer norm, positional encodings, encoder and decoder
// blocks (pre- and post-norm), repeat (depth as a loop) and a small GPT.
#include <catch2/catch.hpp>

#include "gradcheck.hpp"
#include "transformer_fixture.hpp"

using namespace ctg;
using namespace ctg::testing::tfm;
using ctg::testing::check_config;
using ctg::testing::check_gradients;

namespace {
const check_config cfg{.dims = {{'B', 2}, {'T', 3}}};
}

TEST_CASE("gradcheck: layer norm and positional encodings", "[gradcheck][transformer]") {
    CHECK(check_gradients(layer_norm(X{}, param<"g", D>{}, param<"b", D>{}), cfg) > 0);
    CHECK(check_gradients(layer_norm(X{} * param<"w", D, D>{}, param<"g", D>{}, param<"b", D>{}), cfg) > 0);
    // gamma and beta computed (their adjoints are then the engine's, written first by layer norm)
    CHECK(check_gradients(layer_norm(X{}, tanh(param<"g", D>{}), mul(param<"b", D>{}, param<"s", D>{})), cfg) > 0);
    CHECK(check_gradients(sinusoidal_positions<5>(X{}), cfg) > 0);
    CHECK(check_gradients(learned_positions(X{}, param<"pos", 5, D>{}), cfg) > 0);
}

TEST_CASE("gradcheck: encoder blocks, pre- and post-norm, GELU and ReLU", "[gradcheck][transformer]") {
    CHECK(check_gradients(nn::encoder_block<"pre.", D, 2, 6>{}(X{}, causal{}), cfg) > 0);
    CHECK(check_gradients(nn::encoder_block<"post.", D, 2, 6, nn::norm_placement::post, nn::activation::relu>{}(X{}), cfg) > 0);
}

TEST_CASE("gradcheck: decoder block with cross-attention and source padding", "[gradcheck][transformer]") {
    using Mem = input<"mem", B, 4, D>;
    using Len = index_input<"len", B>;
    check_config c = cfg;
    c.index_bound = {{"len", 5}};
    c.index_low = {{"len", 1}};
    CHECK(check_gradients(nn::decoder_block<"dec.", D, 2, 6>{}(X{}, Mem{}, no_mask{}, key_padding(Len{})), c) > 0);
    // not causal, exact GELU, another layer-norm eps
    using open_dec = nn::decoder_block<"dec.", D, 2, 6, nn::norm_placement::post, nn::activation::gelu_erf, scaled_dot_score,
                                       0.0, false, 1e-3>;
    CHECK(check_gradients(open_dec{}(X{}, Mem{}, no_mask{}, key_padding(Len{})), c) > 0);
}

TEST_CASE("gradcheck: repeat over three layers, with a hoisted invariant", "[gradcheck][transformer]") {
    using block = nn::encoder_block<"", D, 2, 6>;
    CHECK(check_gradients(repeat<3, "blocks.">([](auto h) { return block{}(h, causal{}); }, X{}), cfg) > 0);
    // The decoder's memory is read by every layer: its adjoint sums over them.
    using Mem = input<"mem", B, 4, D>;
    using dec = nn::decoder_block<"", D, 2, 6>;
    CHECK(check_gradients(repeat<2, "dec.">([](auto h, auto mem) { return dec{}(h, mem); }, X{}, Mem{}), cfg) > 0);
    // A memory computed from parameters of its own: they stay unstacked, its gradient flows back.
    auto memory = tanh(Mem{} * param<"enc.w", D, D>{});
    CHECK(check_gradients(repeat<2, "dec.">([](auto h, auto mem) { return dec{}(h, mem); }, X{}, memory), cfg) > 0);
}

TEST_CASE("gradcheck: a two-layer GPT", "[gradcheck][transformer]") {
    using model = nn::gpt<7, 6, D, 2, 2>;
    check_config c = cfg;
    c.index_bound = {{"tok", 7}, {"tgt", 7}};
    c.values = {-0.8, 0.8};
    CHECK(check_gradients(model::logits(index_input<"tok", B, T>{}), c) > 0);
    CHECK(check_gradients(model::loss(index_input<"tok", B, T>{}, index_input<"tgt", B, T>{}), c) > 0);
}
