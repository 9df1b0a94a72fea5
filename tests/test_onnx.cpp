// ONNX export (ctgraph/onnx.hpp): each program exported, run in ONNX Runtime (onnxruntime-node),
// its outputs against ctgraph's (tests/onnx_check.hpp); the file's structure (inputs, dynamic axes,
// initializers); the error paths.
#include <catch2/catch.hpp>

#include <filesystem>
#include <fstream>

#include "onnx_check.hpp"

using namespace ctg;
using namespace ctg::testing::onnx_test;

TEST_CASE("an MLP with every element-wise function exports and runs in ONNX Runtime", "[onnx]") {
    using X = input<"x", B, 12>;
    auto h1 = relu(affine(X{}, param<"fc1.weight", 12, 16>{}, param<"fc1.bias", 16>{}));
    auto h2 = tanh(h1 * param<"w2", 16, 16>{}) + sigmoid(h1) - exp(scale<-0.5>(mul(h1, h1)));
    auto h3 = gelu(h2) + gelu_erf(h2) + div(neg(h2), exp(h2) + constant<2.0>{}) + log(exp(h2) + constant<1.0>{});
    auto out = log_softmax(affine_gelu(h3, param<"fc3.weight", 16, 10>{}, param<"fc3.bias", 10>{}));
    auto prob = softmax(affine_relu(h3, param<"fc4.weight", 16, 10>{}, param<"fc4.bias", 10>{}) + l2_normalize(h3 * param<"w5", 16, 10>{}));
    auto prog = compile<float, infer>(out, prob);
    prog.params().init(3);
    check_export(prog, {{"x", rshape{2, {5, 12}}, wave(60, 2.0)}}, "onnx_mlp", 1e-5, {.output_names = {"log_probs", "probs"}});
    // The batch is a dynamic axis of the file: another batch size runs from the same file.
    check_export(prog, {{"x", rshape{2, {3, 12}}, wave(36, 1.5, 2)}}, "onnx_mlp_b3");
}

TEST_CASE("the file names its inputs, dynamic axes, outputs and parameters", "[onnx]") {
    using X = input<"x", B, 4>;
    auto prog = compile<float, infer>(affine(X{}, param<"lin.weight", 4, 3>{}, param<"lin.bias", 3>{}));
    prog.params().init(1);
    const onnx::model_ir m = onnx::to_model(prog, {.output_names = {"y"}});
    REQUIRE(m.inputs.size() == 1);
    CHECK(m.inputs[0].name == "x");
    REQUIRE(m.inputs[0].dims.size() == 2);
    CHECK(m.inputs[0].dims[0].sym == 'B');
    CHECK(m.inputs[0].dims[1].n == 4);
    REQUIRE(m.outputs.size() == 1);
    CHECK(m.outputs[0].name == "y");
    const auto w = std::find_if(m.initializers.begin(), m.initializers.end(), [](auto& t) { return t.name == "lin.weight"; });
    REQUIRE(w != m.initializers.end());
    CHECK(w->dims == std::vector<long long>{4, 3});
    CHECK(w->f32[5] == prog.params().value(prog.params().slot("lin.weight"))[5]);
    CHECK(onnx::serialize_model(m).size() > 12 * 4);
}

TEST_CASE("a small GPT (repeat unrolled, fused attention, positions) exports and runs in ONNX Runtime", "[onnx]") {
    using model = nn::gpt<17, 16, 32, 4, 2>;
    using Tok = index_input<"tokens", B, T>;
    auto prog = compile<float, infer>(model::logits(Tok{}));
    prog.params().init(7);
    check_export(prog, {{"tokens", rshape{2, {2, 9}}, ids(18, 17), true}}, "onnx_gpt", 1e-5, {.output_names = {"logits"}});
    check_export(prog, {{"tokens", rshape{2, {1, 16}}, ids(16, 17, 3), true}}, "onnx_gpt_t16");
    // Layer l's parameters are initializers of their own, named as a PyTorch export names them.
    const onnx::model_ir m = onnx::to_model(prog);
    auto has = [&](std::string_view n) {
        return std::any_of(m.initializers.begin(), m.initializers.end(), [&](auto& t) { return t.name == n; });
    };
    CHECK(has("blocks.0.q.weight"));
    CHECK(has("blocks.1.fc2.bias"));
    CHECK(!has("blocks.q.weight"));
}

TEST_CASE("export refuses a path it cannot write and leaves the old file", "[onnx]") {
    using X = input<"x", B, 4>;
    auto prog = compile<float, infer>(relu(X{}));
    CHECK_THROWS_AS(onnx::save(prog, "/nonexistent-dir/model.onnx"), io_error);
    {
        std::ofstream("onnx_keep.onnx") << "previous";
    }
    // A directory where the file should go: the write fails, the previous file is untouched.
    std::filesystem::create_directories("onnx_dir.onnx");
    CHECK_THROWS_AS(onnx::save(prog, "onnx_dir.onnx"), io_error);
    std::ifstream in("onnx_keep.onnx");
    std::string s;
    in >> s;
    CHECK(s == "previous");
}

TEST_CASE("a scan exports as ONNX Scan: zero, learned and fed initial states, variable lengths", "[onnx]") {
    constexpr int X = 5, H = 6;
    using Xs = input<"xs", T, B, X>;
    using Len = index_input<"lengths", B>;
    constexpr auto elman = [](auto h, auto x) {
        return tanh(h * param<"W_h", H, H>{} + x * param<"W_x", X, H>{} + param<"b", H>{});
    };
    const std::vector<onnx_feed> xs{{"xs", rshape{3, {7, 3, X}}, wave(7 * 3 * X, 1.2)}};
    auto lengths = [] { return onnx_feed{"lengths", rshape{1, {3}}, {7, 2, 5}, true}; };
    {
        auto prog = compile<float, infer>(scan<H>(elman, Xs{}));
        prog.params().init(2);
        check_export(prog, xs, "onnx_scan_zero");
    }
    {
        auto prog = compile<float, infer>(scan<H>(elman, Xs{}, param<"h0", H>{}, Len{}));
        prog.params().init(3);
        for (std::size_t k = 0; k < H; ++k) prog.params().value(prog.params().slot("h0"))[k] = 0.1f * float(k + 1);
        auto feeds = xs;
        feeds.push_back(lengths());
        check_export(prog, feeds, "onnx_scan_h0_lengths");
    }
    {
        // A built-in cell (the input projected outside the loop) from a fed h0, read through a head.
        auto hs = nn::elman<"rnn", X, H>::run(Xs{}, input<"h0", B, H>{}, Len{});
        auto prog = compile<float, infer>(softmax(hs * param<"head", H, 4>{}));
        prog.params().init(4);
        auto feeds = xs;
        feeds.push_back({"h0", rshape{2, {3, H}}, wave(3 * H, 0.5, 5)});
        feeds.push_back(lengths());
        check_export(prog, feeds, "onnx_scan_cell");
    }
}

namespace {
int argmax(const float* z, std::size_t n) { return int(std::max_element(z, z + n) - z); }
const onnx::fetched_tensor& named(const std::vector<onnx::fetched_tensor>& r, const std::string& n) {
    for (const auto& t : r)
        if (t.name == n) return t;
    FAIL("no output " << n);
    return r.front();
}
}  // namespace

TEST_CASE("the KV-cache prefill and step programs export with the caches as inputs and outputs, and ONNX Runtime decodes "
          "32 tokens greedily as gpt_generator does", "[onnx]") {
    constexpr std::size_t V = 17, D = 32, L = 2, C = 48;
    using model = nn::gpt<int(V), 64, int(D), 4, int(L)>;
    using gen = nn::gpt_generator<model, float>;
    auto store = std::make_shared<parameter_store<float>>();
    gen g(store, 1, C);
    store->init(11);
    const std::vector<int> prompt{1, 5, 3, 9, 2, 7};
    std::vector<std::vector<float>> our_logits;
    const auto ours = g.generate({prompt}, 32, &our_logits);
    typename gen::prefill_program prefill(store);
    typename gen::step_program step(store);
    onnx::save(prefill, "onnx_prefill.onnx", {.output_names = {"logits"}});
    onnx::save(step, "onnx_step.onnx", {.output_names = {"logits"}});
    const onnx::model_ir m = onnx::to_model(step);
    REQUIRE(m.outputs.size() == 3);
    CHECK(m.outputs[1].name == "cache_k_out");
    CHECK(m.outputs[2].name == "cache_v_out");
    if (!ctg::testing::onnxruntime_here()) return;

    std::vector<float> kc(L * D * C, 0.0f), vc(L * C * D, 0.0f);
    const std::vector<long long> kdims{L, 1, D, C}, vdims{L, 1, C, D};
    auto r = onnx::run_onnxruntime("onnx_prefill.onnx",
                                   {onnx::feed_tensor::index_ids("prompt", {1, (long long)prompt.size()}, prompt.begin(), prompt.end()),
                                    onnx::feed_tensor::floats("cache_k", kdims, kc.begin(), kc.end()),
                                    onnx::feed_tensor::floats("cache_v", vdims, vc.begin(), vc.end())});
    const auto& z = named(r.outputs, "logits");
    std::vector<int> theirs{argmax(z.values.data() + (prompt.size() - 1) * V, V)};
    double worst = 0;
    auto compare_logits = [&](const float* got, std::size_t t) {
        for (std::size_t k = 0; k < V; ++k) worst = std::max(worst, double(std::abs(got[k] - our_logits[0][t * V + k])));
    };
    compare_logits(z.values.data() + (prompt.size() - 1) * V, 0);
    kc = named(r.outputs, "cache_k_out").values;
    vc = named(r.outputs, "cache_v_out").values;
    for (std::size_t t = 1; t < 32; ++t) {
        const long long token = theirs.back(), pos = (long long)(prompt.size() + t - 1);
        r = onnx::run_onnxruntime("onnx_step.onnx", {onnx::feed_tensor::index_ids("token", {1, 1}, &token, &token + 1),
                                                     onnx::feed_tensor::index_ids("pos", {1}, &pos, &pos + 1),
                                                     onnx::feed_tensor::floats("cache_k", kdims, kc.begin(), kc.end()),
                                                     onnx::feed_tensor::floats("cache_v", vdims, vc.begin(), vc.end())});
        const auto& zs = named(r.outputs, "logits");
        theirs.push_back(argmax(zs.values.data(), V));
        compare_logits(zs.values.data(), t);
        kc = named(r.outputs, "cache_k_out").values;
        vc = named(r.outputs, "cache_v_out").values;
    }
    CHECK(theirs == ours[0]);
    INFO("max |logit difference| over 32 steps: " << worst);
    CHECK(worst < 1e-4);
}

namespace {
struct even_or_self_onnx {
    static constexpr bool visible(std::size_t i, std::size_t j) { return j % 2 == 0 || j == i; }
};
/// The cosine score of the custom-score guide: a user's score, made of ops that lower themselves.
struct cosine_score_onnx {
    static constexpr auto scores(auto q, auto k) {
        return mul(matmul(l2_normalize(q), transpose(l2_normalize(k))), exp(param<"cos_log_t">{}));
    }
};
/// A user's own op with its own lowering: y = (a - b)^2, element-wise.
struct squared_difference_op {
    static constexpr std::string_view name = "squared_difference";
    template <class A, class B>
    static consteval bool check() { return std::is_same_v<A, B>; }
    template <class A, class B>
    static consteval auto dims() { return A::dims; }
    template <class T>
    static void forward(op_io<T, 2>& c) {
        for (std::size_t i = 0; i < c.y.size(); ++i) {
            const T d = c.x_data(0)[i] - c.x_data(1)[i];
            c.y_data()[i] = d * d;
        }
    }
    template <class T>
    static void backward(op_io<T, 2>&) {}
    template <class B>
    static void onnx(B& b) {
        const std::string d = b.emit("Sub", {b.x(0), b.x(1)});
        b.emit_y("Mul", {d, d});
    }
};
}  // namespace

TEST_CASE("attention under every mask, with built-in and user scores, exports and runs in ONNX Runtime", "[onnx]") {
    constexpr int n = 6, d = 8;
    using Q = input<"Q", B, n, d>;
    using K = input<"K", B, n, d>;
    using V = input<"V", B, n, d>;
    using Len = index_input<"len", B>;
    using Pad = index_input<"pad", B, n>;
    using Mat = index_input<"mat", n, n>;
    using Mat3 = index_input<"mat3", B, n, n>;
    const std::size_t b = 3, e = b * n * d;
    const std::vector<onnx_feed> qkv{{"Q", rshape{3, {b, n, d}}, wave(e, 1.0, 1)},
                                     {"K", rshape{3, {b, n, d}}, wave(e, 1.0, 2)},
                                     {"V", rshape{3, {b, n, d}}, wave(e, 1.0, 3)}};
    std::vector<double> pad(b * n, 0.0), mat(n * n), mat3(b * n * n);
    pad[1 * n + 2] = pad[1 * n + 5] = 1, pad[2 * n + 0] = 1;  // padding anywhere in a row
    for (std::size_t k = 0; k < mat.size(); ++k) mat[k] = (k * 7) % 3 != 0;
    for (std::size_t k = 0; k < mat3.size(); ++k) mat3[k] = (k * 5) % 4 != 1;
    for (std::size_t k = 0; k < n; ++k) mat3[n * n + 2 * n + k] = 0;  // a query that sees nothing: zeros
    auto with = [&](std::vector<onnx_feed> extra) {
        auto f = qkv;
        f.insert(f.end(), extra.begin(), extra.end());
        return f;
    };
    const onnx_feed len{"len", rshape{1, {b}}, {6, 2, 4}, true};
    auto run = [&](auto out, const std::vector<onnx_feed>& feeds, const std::string& name) {
        auto prog = compile<float, infer>(out);
        prog.params().init(5);
        check_export(prog, feeds, name);
    };
    run(attention(Q{}, K{}, V{}), qkv, "onnx_attn_sdp");
    run(attention(Q{}, K{}, V{}, scaled_dot_score{}, causal{}), qkv, "onnx_attn_causal");
    run(attention(Q{}, K{}, V{}, dot_score{}, local_window<1>{}), qkv, "onnx_attn_window");
    run(attention(Q{}, K{}, V{}, scaled_dot_score{}, local_window<2, window::past>{}), qkv, "onnx_attn_past_window");
    run(attention(Q{}, K{}, V{}, scaled_dot_score{}, visible_if<even_or_self_onnx>{}), qkv, "onnx_attn_visible_if");
    run(attention(Q{}, K{}, V{}, scaled_dot_score{}, key_padding(Len{})), with({len}), "onnx_attn_key_padding");
    run(attention(Q{}, K{}, V{}, scaled_dot_score{}, causal{} && key_padding(Len{})), with({len}), "onnx_attn_causal_padding");
    run(attention(Q{}, K{}, V{}, scaled_dot_score{}, key_padding_mask(Pad{})), with({{"pad", rshape{2, {b, n}}, pad, true}}),
        "onnx_attn_padding_mask");
    run(attention(Q{}, K{}, V{}, scaled_dot_score{}, mask_matrix(Mat{})), with({{"mat", rshape{2, {n, n}}, mat, true}}),
        "onnx_attn_matrix");
    run(attention(Q{}, K{}, V{}, scaled_dot_score{}, local_window<3>{} && mask_matrix(Mat3{})),
        with({{"mat3", rshape{3, {b, n, n}}, mat3, true}}), "onnx_attn_matrix3");
    run(attention(Q{}, K{}, V{}, bilinear_score<"W", d, d>{}, causal{}), qkv, "onnx_attn_bilinear");
    run(attention(Q{}, K{}, V{}, additive_score<"att_", d, d, 5>{}), qkv, "onnx_attn_additive");
    run(attention(Q{}, K{}, V{}, cosine_score_onnx{}, key_padding(Len{})), with({len}), "onnx_attn_user_score");
    // Multi-head self-attention (heads side by side in the rows) under causal and padding masks.
    using mha = nn::multi_head_attention<"mha.", d, 2>;
    run(mha::self(Q{}, causal{} && key_padding(Len{})), {qkv[0], len}, "onnx_mha");
}

TEST_CASE("a user's own op exports through the lowering it declares", "[onnx]") {
    using X = input<"x", B, 5>;
    auto y = make_float_node<squared_difference_op>(tanh(X{} * param<"w", 5, 5>{}), X{});
    auto prog = compile<float, infer>(sum(y));
    prog.params().init(9);
    check_export(prog, {{"x", rshape{2, {4, 5}}, wave(20, 1.3)}}, "onnx_user_op");
}
