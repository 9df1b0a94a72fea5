// prog.summary(sizes): parameters, FLOPs and memory before running, against counts made by hand
// (a GPT and a GRU language model), against kernels::gemm_flop_counter() over one real forward and
// backward at the same sizes (the products' FLOPs exactly), and against the arena the program plans.
#include <catch2/catch.hpp>

#include <cstdint>
#include <cstdio>

#include <ctgraph/ctgraph.hpp>
#include <ctgraph/xtensor.hpp>

using namespace ctg;

namespace {
inline constexpr dim B = dyn('B'), T = dyn('T');

// The products' FLOPs of one real forward and backward, and the arena they planned.
template <class Prog, class Feed>
std::pair<std::uint64_t, std::uint64_t> run_counted(Prog& prog, Feed feed) {
    feed();
    prog.zero_grad();
    auto& counter = kernels::gemm_flop_counter();
    counter = 0;
    prog.forward();
    const std::uint64_t fwd = counter.exchange(0);
    prog.backward();
    return {fwd, counter.exchange(0)};
}
}  // namespace

TEST_CASE("summary of a GPT: hand counts, the GEMM counter and the arena", "[summary]") {
    // gpt-s: V = 65, context 64, D = 128, 4 heads, 2 layers, F = 4 D; batch 16 of 64 tokens.
    constexpr std::uint64_t V = 65, D = 128, H = 4, L = 2, F = 4 * D, b = 16, t = 64, M = b * t;
    using model = nn::gpt<int(V), 64, int(D), int(H), int(L)>;
    using Tok = index_input<"tokens", B, T>;
    auto prog = compile<float>(model::loss(Tok{}, index_input<"targets", B, T>{}));
    prog.params().init(3);

    const model_summary s = prog.summary({{'B', b}, {'T', t}});
    CHECK(prog.arena_elements() == 0);  // nothing planned, nothing run
    std::printf("%s", s.to_string().c_str());

    // Parameters: embedding; per layer ln1, q/k/v/proj (weights and biases), ln2, fc1, fc2; ln_f; head.
    const std::uint64_t per_layer = 2 * D + 4 * (D * D + D) + 2 * D + (D * F + F) + (F * D + D);
    const std::uint64_t params = V * D + L * per_layer + 2 * D + (D * V + V);
    CHECK(s.params == params);
    CHECK(s.params == prog.params().num_elements());
    CHECK(s.param_bytes == params * sizeof(float));

    // Products forward: per layer q, k, v, proj (2 M D D each), fc1 and fc2 (2 M D F each), the
    // scores Q K^T and the weighted values P V (2 B T T D each over the heads); the head 2 M D V.
    // Backward: every operand of every product receives an adjoint, so twice forward.
    const std::uint64_t fwd = L * (4 * 2 * M * D * D + 2 * 2 * M * D * F + 2 * 2 * b * t * t * D) + 2 * M * D * V;
    CHECK(s.flops.forward_products == fwd);
    CHECK(s.flops.backward_products == 2 * fwd);
    CHECK(s.flops.forward > s.flops.forward_products);  // plus the element-wise work

    // Rows: tok_embed, the positions and dropout (no parameters), blocks. x2, ln_f., head., the loss.
    REQUIRE(s.rows.size() == 6);
    CHECK(s.rows[0].name == "tok_embed");
    CHECK(s.rows[0].params == V * D);
    CHECK(s.rows[1].name == "-");
    CHECK(s.rows[2].name == "blocks.");
    CHECK(s.rows[2].layers == L);
    CHECK(s.rows[2].params == L * per_layer);
    CHECK(s.rows[2].flops.forward_products == L * (8 * M * D * D + 4 * M * D * F + 4 * b * t * t * D));
    CHECK(s.rows[2].shape == "(16,64,128)");
    CHECK(s.rows[3].name == "ln_f.");
    CHECK(s.rows[4].name == "head.");
    CHECK(s.rows[4].params == D * V + V);
    CHECK(s.rows[4].flops.forward_products == 2 * M * D * V);
    CHECK(s.rows[5].ops == "softmax_cross_entropy");
    std::uint64_t rows_params = 0;
    std::size_t rows_bytes = 0;
    for (const summary_row& r : s.rows) rows_params += r.params, rows_bytes += r.bytes;
    CHECK(rows_params == s.params);
    CHECK(rows_bytes <= s.arena_bytes);  // (plus constants' values)
    CHECK(s.value_bytes + s.adjoint_bytes + s.scratch_bytes == s.arena_bytes);
    CHECK(s.rows[2].value_bytes + s.rows[2].adjoint_bytes + s.rows[2].scratch_bytes == s.rows[2].bytes);
    CHECK(s.rows[2].value_bytes == b * t * D * sizeof(float));  // the last layer's output; the rest is scratch
    const std::string table = s.to_string();
    CHECK(table.find("blocks. x2  repeat") != std::string::npos);
    CHECK(table.find("parameters: 413505") != std::string::npos);

    // One real step at the same sizes: the GEMM counter and the arena.
    xt::xtensor<int, 2> tok = xt::zeros<int>({std::size_t(b), std::size_t(t)});
    for (std::size_t i = 0; i < tok.size(); ++i) tok.data()[i] = int(i * 7 % V);
    const auto [f, g] = run_counted(prog, [&] {
        prog.feed<"tokens">(tok);
        prog.feed<"targets">(tok);
    });
    CHECK(f == s.flops.forward_products);
    CHECK(g == s.flops.backward_products);
    CHECK(prog.arena_elements() * sizeof(float) == s.arena_bytes);

    // Other sizes give other figures: T enters the attention products squared.
    const model_summary s2 = prog.summary({{'B', 2}, {'T', 8}});
    CHECK(s2.flops.forward_products == L * (8 * 16 * D * D + 4 * 16 * D * F + 4 * 2 * 8 * 8 * D) + 2 * 16 * D * V);
    CHECK_THROWS_AS(prog.summary({{'B', 2}}), error);          // T not named
    CHECK_THROWS_AS(prog.summary({{'B', 2}, {'T', 8}, {'Q', 1}}), error);  // no such dimension

    // The inference program of the logits: no backward, values and scratch placed by lifetime.
    auto infer = program_for<float, options{.inference = true}, decltype(model::logits(Tok{}))>(prog.shared_params());
    const model_summary si = infer.summary({{'B', b}, {'T', t}});
    CHECK(si.inference);
    CHECK(si.flops.backward == 0);
    CHECK(si.flops.forward_products == fwd);
    CHECK(si.adjoint_bytes == 0);
    CHECK(si.arena_bytes < si.value_bytes + si.scratch_bytes);
    infer.feed<"tokens">(tok);
    kernels::gemm_flop_counter() = 0;
    infer.forward();
    CHECK(kernels::gemm_flop_counter().exchange(0) == si.flops.forward_products);
    CHECK(infer.arena_elements() * sizeof(float) == si.arena_bytes);
}

TEST_CASE("summary of a GRU language model: hand counts, the GEMM counter and the arena", "[summary]") {
    constexpr std::uint64_t V = 20, X = 8, H = 16, t = 12, b = 8, M = t * b;
    using Tok = index_input<"tok", T, B>;
    auto hs = nn::gru<"gru", int(X), int(H)>::run(embedding(param<"E", int(V), int(X)>{}, Tok{}));
    auto prog = compile<double>(softmax_cross_entropy(hs * param<"out", int(H), int(V)>{}, index_input<"tgt", T, B>{}));
    prog.params().init(2);

    const model_summary s = prog.summary({{'T', t}, {'B', b}});
    std::printf("%s", s.to_string().c_str());
    // Parameters: E (V, X); gru_W_i (X, 3H), gru_b_i, gru_W_h (H, 3H), gru_b_h (3H); out (H, V).
    CHECK(s.params == V * X + X * 3 * H + 3 * H + H * 3 * H + 3 * H + H * V);
    CHECK(s.params == prog.params().num_elements());
    // Products forward: the input projection over all steps, the recurrent product every step, the
    // output product. Backward: the projection's two (the embedding's rows receive an adjoint), the
    // recurrent weight's at every step but the state's at steps 1.. only (the first state is zeros,
    // no adjoint), the output's two.
    const std::uint64_t proj = 2 * M * X * 3 * H, rec = 2 * M * H * 3 * H, out = 2 * M * H * V;
    CHECK(s.flops.forward_products == proj + rec + out);
    CHECK(s.flops.backward_products == 2 * proj + (rec + 2 * (t - 1) * b * H * 3 * H) + 2 * out);
    REQUIRE(s.rows.size() == 4);  // E, gru_ (the projection and the scan), out, the loss
    CHECK(s.rows[0].name == "E");
    CHECK(s.rows[1].name == "gru_");
    CHECK(s.rows[1].ops == "affine, scan");
    CHECK(s.rows[1].shape == "(12,8,16)");
    CHECK(s.rows[1].params == X * 3 * H + 3 * H + H * 3 * H + 3 * H);
    CHECK(s.rows[1].flops.forward_products == proj + rec);
    CHECK(s.rows[2].name == "out");
    CHECK(s.rows[3].name == "-");

    xt::xtensor<int, 2> tok = xt::zeros<int>({std::size_t(t), std::size_t(b)});
    for (std::size_t i = 0; i < tok.size(); ++i) tok.data()[i] = int(i * 3 % V);
    const auto [f, g] = run_counted(prog, [&] {
        prog.feed<"tok">(tok);
        prog.feed<"tgt">(tok);
    });
    CHECK(f == s.flops.forward_products);
    CHECK(g == s.flops.backward_products);
    CHECK(prog.arena_elements() * sizeof(double) == s.arena_bytes);
}

TEST_CASE("summary: a product whose input receives no adjoint counts only the weight's product backward", "[summary]") {
    constexpr std::uint64_t b = 32, X = 8, H = 16, C = 4;
    auto logits = relu(input<"x", B, int(X)>{} * param<"W1", int(X), int(H)>{} + param<"b1", int(H)>{}) * param<"W2", int(H), int(C)>{};
    auto prog = compile<float>(softmax_cross_entropy(logits, index_input<"y", B>{}));
    prog.params().init(4);
    const model_summary s = prog.summary({{'B', b}});
    CHECK(s.flops.forward_products == 2 * b * X * H + 2 * b * H * C);
    CHECK(s.flops.backward_products == 2 * b * X * H + 2 * (2 * b * H * C));  // no dx: only dW1
    CHECK(s.params == X * H + H + H * C);
    xt::xtensor<float, 2> x = xt::ones<float>({std::size_t(b), std::size_t(X)});
    xt::xtensor<int, 1> y = xt::zeros<int>({std::size_t(b)});
    const auto [f, g] = run_counted(prog, [&] {
        prog.feed<"x">(x);
        prog.feed<"y">(y);
    });
    CHECK(f == s.flops.forward_products);
    CHECK(g == s.flops.backward_products);
    CHECK(prog.arena_elements() * sizeof(float) == s.arena_bytes);
    std::printf("%s", s.to_string().c_str());
}
