// nn::gpt2 (GPT-2's architecture: learned positions, the head tied to the token embedding) and
// Hugging Face checkpoints: finite differences (float64) of the model, the tied embedding's
// gradient and learned positions from a per-sequence start; parity with a PyTorch GPT-2 written with
// Hugging Face's names and layout (tests/gpt2_ref.py: logits in float64 and float32, greedy
// continuations through gpt_generator's KV cache, F32 / BF16 / F16 files); saving back the same
// tensors; every mismatch of a checkpoint an io_error naming tensor, shapes and file.
//
// The parity cases run /usr/bin/python3 with python3-torch (installed by scripts/setup.sh); without
// it they fail, saying so, rather than skip.
#include <catch2/catch.hpp>

#include "temp_dir.hpp"

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <map>
#include <memory>
#include <string>
#include <type_traits>
#include <vector>

#include <unistd.h>

#include <ctgraph/ctgraph.hpp>
#include <ctgraph/xtensor.hpp>
#include <ctgraph/nn/gpt2_hf.hpp>

#include "gradcheck.hpp"

#ifndef CTG_GPT2_REF
#error "CTG_GPT2_REF (the path of tests/gpt2_ref.py) must be defined by the build"
#endif

using namespace ctg;
namespace fs = std::filesystem;
namespace st = ctg::safetensors;
using Catch::Matchers::Contains;
using ctg::testing::check_config;
using ctg::testing::check_gradients;

namespace {
inline constexpr dim B = dyn('B'), T = dyn('T');
using Tokens = index_input<"tokens", B, T>;

/// The sizes of tests/gpt2_ref.py's model.
using ref_model = nn::gpt2<61, 24, 32, 4, 3>;
constexpr std::size_t V = 61, ML = 24;

using ctg::testing::temp_dir;

/// The reference script's files, written once per run into a directory of their own.
const temp_dir& reference() {
    static const temp_dir dir("ctg_gpt2_");
    static const bool written = (ctg::testing::run_python_reference(dir, CTG_GPT2_REF), true);
    (void)written;
    return dir;
}

std::vector<double> doubles(const std::map<std::string, st::tensor>& f, const std::string& name) {
    REQUIRE(f.count(name));
    return st::to_vector<double>(f.at(name));
}
std::vector<int> ints(const std::map<std::string, st::tensor>& f, const std::string& name) {
    const auto v = st::to_vector<std::int64_t>(f.at(name));
    return {v.begin(), v.end()};
}

template <class F>
std::string io_message(F&& f) {
    try {
        f();
    } catch (const io_error& e) {
        return e.what();
    }
    return "no io_error";
}

/// The model's logits (B, T, V) for `tokens` (B, T) in an inference program of type Tp over `store`.
template <class Tp>
std::vector<double> logits_of(std::shared_ptr<parameter_store<Tp>> store, const std::vector<int>& tokens,
                              std::size_t batch) {
    using P = decltype(compile<Tp, options{.inference = true}>(ref_model::logits(Tokens{})));
    P p(std::move(store));
    const std::vector<index_t> ids(tokens.begin(), tokens.end());
    p.feed("tokens", ids.data(), rshape{2, {batch, ids.size() / batch}});
    p.forward();
    auto z = p.template output<0>();
    return {z.begin(), z.end()};
}

/// max |a - b| / max |b|.
double relative_error(const std::vector<double>& a, const std::vector<double>& b) {
    REQUIRE(a.size() == b.size());
    double worst = 0, scale = 0;
    for (std::size_t i = 0; i < a.size(); ++i) worst = std::max(worst, std::abs(a[i] - b[i])), scale = std::max(scale, std::abs(b[i]));
    return worst / scale;
}
}  // namespace

// ---- Finite differences --------------------------------------------------------------------------

TEST_CASE("gradcheck: a two-layer GPT-2 (learned positions, tied head)", "[gradcheck][gpt2]") {
    using model = nn::gpt2<7, 6, 4, 2, 2>;
    check_config c{.dims = {{'B', 2}, {'T', 3}}};
    c.index_bound = {{"tok", 7}, {"tgt", 7}};
    c.values = {-0.8, 0.8};
    // tok_embed's gradient is checked as a whole: the embedding's rows and the head's, summed.
    CHECK(check_gradients(model::logits(index_input<"tok", B, T>{}), c) > 0);
    CHECK(check_gradients(model::loss(index_input<"tok", B, T>{}, index_input<"tgt", B, T>{}), c) > 0);
    // The head alone: h E^T's gradient with respect to E.
    CHECK(check_gradients(model::head(input<"h", B, T, 4>{}), c) > 0);
}

TEST_CASE("gradcheck: matmul_transposed, and it equals matmul by the transpose", "[gradcheck][gpt2]") {
    check_config c{.dims = {{'B', 2}, {'T', 3}}};
    CHECK(check_gradients(matmul_transposed(input<"a", B, T, 4>{}, param<"E", 5, 4>{}), c) > 0);
    CHECK(check_gradients(matmul_transposed(input<"a", B, 4>{}, input<"b", 3, 4>{}), c) > 0);  // both inputs
    // The weight used twice (as a tied embedding): its adjoint is written by one use and added by the other.
    CHECK(check_gradients(matmul_transposed(tanh(matmul(input<"a", B, 5>{}, param<"E", 5, 4>{})), param<"E", 5, 4>{}), c) > 0);
    CHECK(check_gradients(matmul_transposed(matmul(input<"a", B, 4>{}, param<"E", 4, 5>{}), param<"E", 4, 5>{}), c) > 0);

    // Forward and gradients equal the composed matmul(a, transpose(b)) (float, with OpenBLAS's paths).
    auto fused = compile<float>(sum(mul(matmul_transposed(input<"a", B, 7>{}, param<"E", 9, 7>{}), input<"g", B, 9>{})));
    auto composed = compile<float>(sum(mul(matmul(input<"a", B, 7>{}, transpose(param<"E", 9, 7>{})), input<"g", B, 9>{})));
    fused.params().init(2);
    composed.params().values() = fused.params().values();
    for (std::size_t rows : {1, 5, 40}) {
        std::vector<float> a(rows * 7), g(rows * 9);
        for (std::size_t i = 0; i < a.size(); ++i) a[i] = std::sin(float(i));
        for (std::size_t i = 0; i < g.size(); ++i) g[i] = std::cos(float(3 * i));
        auto run = [&](auto& p) {
            p.feed("a", a.data(), rshape{2, {rows, 7}});
            p.feed("g", g.data(), rshape{2, {rows, 9}});
            p.zero_grad();
            const float l = p.forward();
            p.backward();
            return l;
        };
        INFO(rows << " rows");
        CHECK(run(fused) == Approx(run(composed)).epsilon(1e-5));
        const float *x = fused.params().grad(0), *y = composed.params().grad(0);
        for (std::size_t k = 0; k < 63; ++k) CHECK(x[k] == Approx(y[k]).epsilon(1e-5).margin(1e-6));
    }
    // Mixed precision (bf16 operands, float sums): the weight read transposed from its bf16 copy.
    using Bf = decltype(compile<float, options{.precision = precision::bf16}>(
        sum(mul(matmul_transposed(input<"a", B, 7>{}, param<"E", 9, 7>{}), input<"g", B, 9>{}))));
    Bf mixed(fused.shared_params());
    for (std::size_t rows : {1, 40}) {
        std::vector<float> a(rows * 7), g(rows * 9);
        for (std::size_t i = 0; i < a.size(); ++i) a[i] = std::sin(float(i));
        for (std::size_t i = 0; i < g.size(); ++i) g[i] = std::cos(float(3 * i));
        auto run = [&](auto& p) {
            p.feed("a", a.data(), rshape{2, {rows, 7}});
            p.feed("g", g.data(), rshape{2, {rows, 9}});
            return p.forward();
        };
        const float want = run(fused), got = run(mixed);
        INFO(rows << " rows: " << got << " against " << want);
        CHECK(std::abs(got - want) <= 2e-2f * (1 + std::abs(want)));
    }
}

TEST_CASE("the tied embedding's gradient is the sum of the embedding's and the head's", "[gpt2]") {
    using model = nn::gpt2<7, 6, 4, 2, 1>;
    auto prog = compile<double>(model::loss(index_input<"tok", B, T>{}, index_input<"tgt", B, T>{}));
    prog.params().init(3);
    const std::vector<index_t> tok{1, 2, 3, 1}, tgt{2, 3, 4, 5};
    prog.feed("tok", tok.data(), rshape{2, {1, 4}});
    prog.feed("tgt", tgt.data(), rshape{2, {1, 4}});
    prog.zero_grad();
    prog.forward();
    prog.backward();
    const std::size_t s = prog.params().slot("tok_embed");
    const double* g = prog.params().grad(s);
    // Row 0 is neither read nor a target: only the head's use (every logit's column 0) reaches it;
    // row 6 likewise. Both must be non-zero (the head's part), rows 1..5 carry both parts.
    double row0 = 0, row6 = 0;
    for (std::size_t d = 0; d < 4; ++d) row0 += std::abs(g[d]), row6 += std::abs(g[6 * 4 + d]);
    CHECK(row0 > 0);
    CHECK(row6 > 0);
    CHECK(prog.params().find("head.weight") < 0);  // no parameter of its own
    CHECK(prog.params().size() == 2 + 16 + 2);      // tok_embed, pos_embed, 16 stacked, ln_f
}

TEST_CASE("gradcheck: learned positions from a start per sequence", "[gradcheck][gpt2]") {
    check_config c{.dims = {{'B', 3}, {'T', 2}}};
    c.index_bound = {{"start", 4}};  // start + 2 <= 5
    CHECK(check_gradients(learned_positions(input<"x", B, T, 4>{}, param<"pos", 5, 4>{}, index_input<"start", B>{}), c) > 0);
}

TEST_CASE("learned positions from a start: rows start[o].., and a start past the table throws", "[gpt2]") {
    auto prog = compile<double>(learned_positions(input<"x", B, 1, 2>{}, param<"pos", 3, 2>{}, index_input<"start", B>{}));
    prog.params().init(1);
    double* table = prog.params().value(prog.params().slot("pos"));
    for (int k = 0; k < 6; ++k) table[k] = 10 * k;
    const std::vector<double> x{1, 2, 3, 4};
    prog.feed("x", x.data(), rshape{3, {2, 1, 2}});
    std::vector<index_t> start{2, 0};
    prog.feed("start", start.data(), rshape{1, {2}});
    prog.forward();
    auto y = prog.output<0>();
    CHECK(y(0, 0, 0) == 41);
    CHECK(y(0, 0, 1) == 52);
    CHECK(y(1, 0, 0) == 3);
    CHECK(y(1, 0, 1) == 14);
    start = {3, 0};
    prog.feed("start", start.data(), rshape{1, {2}});
    CHECK_THROWS_AS(prog.forward(), index_error);
    start = {0, -1};
    prog.feed("start", start.data(), rshape{1, {2}});
    CHECK_THROWS_WITH(prog.forward(), Contains("outside the positional table (3 positions)"));
}

// ---- Parity with PyTorch -------------------------------------------------------------------------

TEST_CASE("a Hugging Face GPT-2 checkpoint loads in one call and gives PyTorch's logits", "[gpt2][python]") {
    const temp_dir& ref = reference();
    const auto expected = st::read(ref / "expected.safetensors");
    const std::vector<int> tokens = ints(expected, "tokens");
    const std::vector<double> want = doubles(expected, "logits");

    auto d = std::make_shared<parameter_store<double>>();
    nn::load_hf_gpt2<ref_model>(*d, ref / "lmhead.safetensors");  // prefixed names, lm_head, mask buffers
    const double e64 = relative_error(logits_of(d, tokens, 2), want);
    INFO("float64 relative error " << e64);
    CHECK(e64 <= 1e-12);

    auto f = std::make_shared<parameter_store<float>>();
    nn::load_hf_gpt2<ref_model>(*f, ref / "lmhead.safetensors");
    const double e32 = relative_error(logits_of(f, tokens, 2), want);
    INFO("float32 relative error " << e32);
    CHECK(e32 <= 1e-5);

    // BF16 and F16 files of the same (exactly representable) values, without the prefix.
    for (const char* file : {"bf16.safetensors", "f16.safetensors"}) {
        auto s = std::make_shared<parameter_store<double>>();
        nn::load_hf_gpt2<ref_model>(*s, ref / file);
        INFO(file);
        REQUIRE(s->size() == d->size());
        for (std::size_t k = 0; k < d->size(); ++k) {
            const auto& e = d->at(k);
            const double* a = s->value(s->slot(e.name));
            CHECK(std::equal(a, a + e.shape.size(), d->value(k)));
        }
    }
}

TEST_CASE("greedy continuations through the KV cache equal PyTorch's", "[gpt2][python][generate]") {
    const temp_dir& ref = reference();
    const auto expected = st::read(ref / "expected.safetensors");
    std::vector<std::vector<int>> prompts, want;
    for (int i = 0; i < 3; ++i) {
        prompts.push_back(ints(expected, "prompt" + std::to_string(i)));
        want.push_back(ints(expected, "greedy" + std::to_string(i)));
    }
    const std::size_t n = want[0].size();

    auto d = std::make_shared<parameter_store<double>>();
    nn::load_hf_gpt2<ref_model>(*d, ref / "lmhead.safetensors");
    nn::gpt_generator<ref_model, double> gen64(d, 3, ML);
    std::vector<std::vector<double>> logits;
    CHECK(gen64.generate(prompts, n, &logits) == want);  // prompts of different lengths in one batch
    // Every step's logits equal a full recompute of the sequence so far.
    for (std::size_t b = 0; b < 3; ++b) {
        std::vector<int> seq = prompts[b];
        for (std::size_t t = 0; t < n; ++t) {
            const auto full = logits_of(d, seq, 1);
            const std::vector<double> last(full.end() - long(V), full.end()),
                got(logits[b].begin() + long(t * V), logits[b].begin() + long((t + 1) * V));
            INFO("sequence " << b << ", new token " << t);
            CHECK(relative_error(got, last) <= 1e-12);
            seq.push_back(want[b][t]);
        }
    }

    auto f = std::make_shared<parameter_store<float>>();
    nn::load_hf_gpt2<ref_model>(*f, ref / "lmhead.safetensors");
    nn::gpt_generator<ref_model, float> gen32(f, 3, ML);
    CHECK(gen32.generate(prompts, n) == want);
    // One sequence at a time, too (the batch of one the prefill pads nothing for).
    for (std::size_t b = 0; b < 3; ++b) CHECK(gen32.generate({prompts[b]}, n)[0] == want[b]);
}

TEST_CASE("save_hf_gpt2 writes back the checkpoint's tensors", "[gpt2][python]") {
    const temp_dir& ref = reference();
    temp_dir dir;
    auto original = st::read(ref / "bf16.safetensors");
    for (const char* type : {"float", "double"}) {
        INFO(type);
        st::metadata meta;
        std::map<std::string, st::tensor> saved;
        if (std::string(type) == "float") {
            parameter_store<float> s;
            nn::load_hf_gpt2<ref_model>(s, ref / "lmhead.safetensors");
            nn::save_hf_gpt2<ref_model>(s, dir / "out.safetensors");
            saved = st::read(dir / "out.safetensors", &meta);
            for (const auto& [name, t] : saved) CHECK(t.dtype == "F32");
        } else {
            parameter_store<double> s;
            nn::load_hf_gpt2<ref_model>(s, ref / "f16.safetensors");
            nn::save_hf_gpt2<ref_model>(s, dir / "out.safetensors");
            saved = st::read(dir / "out.safetensors", &meta);
            for (const auto& [name, t] : saved) CHECK(t.dtype == "F64");
        }
        CHECK(meta == st::metadata{{"format", "pt"}});
        REQUIRE(saved.size() == original.size());
        for (const auto& [name, t] : original) {
            INFO(name);
            REQUIRE(saved.count(name));
            CHECK(saved.at(name).shape == t.shape);
            CHECK(st::to_vector<double>(saved.at(name)) == st::to_vector<double>(t));
        }
        // and loads again
        parameter_store<double> again;
        nn::load_hf_gpt2<ref_model>(again, dir / "out.safetensors");
    }
}

// ---- Gradients under Hugging Face's names -------------------------------------------------------

namespace {
using Targets = index_input<"targets", B, T>;
/// A float64 training program of ref_model's loss (the mean cross-entropy of its logits).
using train64 = program_for<double, options{}, decltype(ref_model::loss(Tokens{}, Targets{}))>;

/// tests/gpt2_ref.py's "grads" files (PyTorch's p.grad, the targets), written once per run beside the others.
const temp_dir& grads_reference() {
    static const bool written = (ctg::testing::run_python_reference(reference(), CTG_GPT2_REF " grads"), true);
    (void)written;
    return reference();
}

/// One forward and backward of `p` on these tokens and targets, `batch` sequences.
void backward_on(train64& p, const std::vector<int>& tokens, const std::vector<int>& targets, std::size_t batch) {
    const std::vector<index_t> ids(tokens.begin(), tokens.end()), tg(targets.begin(), targets.end());
    const rshape s{2, {batch, ids.size() / batch}};
    p.feed("tokens", ids.data(), s);
    p.feed("targets", tg.data(), s);
    p.zero_grad();
    p.forward();
    p.backward();
}

/// The metadata of a gradient file: the tensors left out and holding zeros for frozen parameters.
st::metadata gradient_metadata(const std::string& frozen, const std::string& partly) {
    return {{"format", "pt"}, {"contents", "gradients"}, {"frozen", frozen}, {"partly_frozen", partly}};
}
}  // namespace

TEST_CASE("save_hf_gpt2 writes the gradients under Hugging Face's names: PyTorch's p.grad", "[gpt2][python]") {
    const temp_dir& ref = grads_reference();
    auto store = std::make_shared<parameter_store<double>>();
    nn::load_hf_gpt2<ref_model>(*store, ref / "lmhead.safetensors");
    train64 p(store);
    backward_on(p, ints(st::read(ref / "expected.safetensors"), "tokens"), ints(st::read(ref / "grads_inputs.safetensors"), "targets"),
                2);
    temp_dir dir;
    nn::save_hf_gpt2<ref_model>(*store, dir / "grads.safetensors", nn::what::gradients);
    st::metadata meta;
    const auto got = st::read(dir / "grads.safetensors", &meta);
    const auto want = st::read(ref / "grads.safetensors");  // GPT2Model's p.grad: wte.weight's holds the tied head's part
    CHECK(meta == gradient_metadata("", ""));
    REQUIRE(got.size() == want.size());
    for (const auto& [name, t] : want) {
        INFO(name);
        REQUIRE(got.count(name));
        CHECK(got.at(name).dtype == "F64");
        REQUIRE(got.at(name).shape == t.shape);
        const double e = relative_error(doubles(got, name), doubles(want, name));
        INFO("relative error " << e);
        CHECK(e <= 1e-12);
    }
}

TEST_CASE("gradients saved in Hugging Face's layout read back: c_attn's columns q | k | v, frozen ones left out or zeros",
          "[gpt2]") {
    constexpr std::size_t D = 32, F = ref_model::ffn_width, L = 3;
    auto store = std::make_shared<parameter_store<double>>();
    train64 p(store);
    store->init(11);
    std::vector<int> tokens(20), targets(20);
    for (std::size_t i = 0; i < 20; ++i) tokens[i] = int((7 * i + 3) % V), targets[i] = int((5 * i + 1) % V);
    backward_on(p, tokens, targets, 2);
    temp_dir dir;
    const std::string out = dir / "grads.safetensors";
    nn::save_hf_gpt2<ref_model>(*store, out, nn::what::gradients);
    st::metadata meta;
    const auto f = st::read(out, &meta);
    CHECK(meta == gradient_metadata("", ""));
    // GPT2Model's names (no "transformer.", no lm_head.weight: the head is wte.weight, whose gradient
    // holds both uses, as tok_embed's does).
    std::vector<std::string> want = {"wte.weight", "wpe.weight", "ln_f.weight", "ln_f.bias"};
    for (std::size_t l = 0; l < L; ++l)
        for (const char* n : {"ln_1.weight", "ln_1.bias", "attn.c_attn.weight", "attn.c_attn.bias", "attn.c_proj.weight",
                              "attn.c_proj.bias", "ln_2.weight", "ln_2.bias", "mlp.c_fc.weight", "mlp.c_fc.bias",
                              "mlp.c_proj.weight", "mlp.c_proj.bias"})
            want.push_back("h." + std::to_string(l) + "." + n);
    std::sort(want.begin(), want.end());
    std::vector<std::string> names;
    for (const auto& [name, t] : f) names.push_back(name);
    REQUIRE(names == want);
    CHECK(f.at("wte.weight").shape == std::vector<std::size_t>{V, D});
    CHECK(f.at("h.1.attn.c_attn.weight").shape == std::vector<std::size_t>{D, 3 * D});
    CHECK(f.at("h.1.mlp.c_proj.weight").shape == std::vector<std::size_t>{F, D});
    auto grad = [&](const std::string& n) { return store->grad(store->slot(n)); };
    auto same = [&](const std::string& tensor, const double* g) {
        const auto v = doubles(f, tensor);
        return std::equal(v.begin(), v.end(), g);
    };
    CHECK(same("wte.weight", grad("tok_embed")));
    CHECK(same("wpe.weight", grad("pos_embed")));
    CHECK(same("ln_f.bias", grad("ln_f.bias")));
    std::size_t mismatches = 0;
    const char* qkv[] = {"q", "k", "v"};
    for (std::size_t l = 0; l < L; ++l) {
        const std::string h = "h." + std::to_string(l) + ".";
        INFO(h);
        // Conv1D (in, out) as ctgraph's (in, out); layer l of the stacked parameters.
        CHECK(same(h + "mlp.c_fc.weight", grad("blocks.fc1.weight") + l * D * F));
        CHECK(same(h + "mlp.c_proj.weight", grad("blocks.fc2.weight") + l * F * D));
        CHECK(same(h + "attn.c_proj.bias", grad("blocks.proj.bias") + l * D));
        CHECK(same(h + "ln_2.weight", grad("blocks.ln2.weight") + l * D));
        // c_attn (D, 3D): columns j D .. (j + 1) D are q, k, v's (in, out) gradient.
        const auto w = doubles(f, h + "attn.c_attn.weight"), b = doubles(f, h + "attn.c_attn.bias");
        for (std::size_t j = 0; j < 3; ++j) {
            const double* g = grad("blocks." + std::string(qkv[j]) + ".weight") + l * D * D;
            const double* gb = grad("blocks." + std::string(qkv[j]) + ".bias") + l * D;
            for (std::size_t o = 0; o < D; ++o) {
                mismatches += b[j * D + o] != gb[o];
                for (std::size_t i = 0; i < D; ++i) mismatches += w[i * 3 * D + j * D + o] != g[i * D + o];
            }
        }
    }
    CHECK(mismatches == 0);

    // Frozen: tok_embed (wte.weight, embedding and head alike, is not written: PyTorch's p.grad of a
    // frozen wte is None) and the keys' projection (the middle columns of every c_attn.weight are
    // zeros); the metadata names both, every other tensor is as before.
    store->set_frozen(store->slot("tok_embed"), true);
    store->set_frozen(store->slot("blocks.k.weight"), true);
    nn::save_hf_gpt2<ref_model>(*store, out, nn::what::gradients);
    const auto frozen = st::read(out, &meta);
    CHECK(meta == gradient_metadata("wte.weight", "h.0.attn.c_attn.weight h.1.attn.c_attn.weight h.2.attn.c_attn.weight"));
    REQUIRE(frozen.size() == f.size() - 1);
    CHECK_FALSE(frozen.count("wte.weight"));
    for (const auto& [name, t] : frozen) {
        INFO(name);
        auto before = doubles(f, name);
        if (name.ends_with("attn.c_attn.weight"))
            for (std::size_t i = 0; i < D; ++i) std::fill_n(before.begin() + long(i * 3 * D + D), D, 0.0);
        CHECK(doubles(frozen, name) == before);
    }
    // The values are saved whole, frozen or not.
    nn::save_hf_gpt2<ref_model>(*store, out);
    CHECK(st::read(out, &meta).size() == f.size());
    CHECK(meta == st::metadata{{"format", "pt"}});
}

// ---- Mismatches ----------------------------------------------------------------------------------

TEST_CASE("every mismatch of a checkpoint is an io_error naming tensor, shapes and file, nothing is written",
          "[gpt2][python]") {
    const temp_dir& ref = reference();
    temp_dir dir;
    const auto base = st::read(ref / "lmhead.safetensors");
    const std::string path = dir / "bad.safetensors";
    // Writes `base` changed by `edit` (name -> tensor) and returns load_hf_gpt2's message.
    parameter_store<float> store;
    nn::load_hf_gpt2<ref_model>(store, ref / "lmhead.safetensors");
    const std::vector<float> before(store.values().begin(), store.values().end());
    auto message = [&](auto edit) {
        auto tensors = base;
        edit(tensors);
        std::vector<st::tensor> list;
        for (auto& [name, t] : tensors) list.push_back(t);
        st::write(path, list);
        const std::string m = io_message([&] { nn::load_hf_gpt2<ref_model>(store, path); });
        CHECK(std::equal(before.begin(), before.end(), store.values().begin()));
        CHECK_THAT(m, Contains("ctg::nn::load_hf_gpt2: '" + path + "' does not match nn::gpt2<V=61, MaxLen=24, D=32"));
        return m;
    };
    auto rename = [](std::map<std::string, st::tensor>& m, const std::string& from, const std::string& to) {
        auto t = m.at(from);
        m.erase(from);
        t.name = to;
        m[to] = t;
    };

    CHECK_THAT(message([](auto& m) { m.erase("transformer.h.1.attn.c_proj.weight"); }),
               Contains("tensor 'h.1.attn.c_proj.weight' is missing (expected shape (32,32))"));
    // A c_attn of the wrong width, and a square weight transposed cannot pass for another: (in, out) by name.
    CHECK_THAT(message([](auto& m) { m.at("transformer.h.2.attn.c_attn.weight").shape = {96, 32}; }),
               Contains("tensor 'transformer.h.2.attn.c_attn.weight' has shape (96,32) in the file; expected (32,96)"));
    CHECK_THAT(message([](auto& m) {
                   auto& t = m.at("transformer.wpe.weight");
                   t.shape = {12, 32};
                   t.bytes.resize(12 * 32 * 4);
               }),
               Contains("tensor 'transformer.wpe.weight' has shape (12,32) in the file; expected (24,32)"));
    CHECK_THAT(message([](auto& m) {
                   auto& t = m.at("transformer.ln_f.bias");
                   t.dtype = "I32";
               }),
               Contains("tensor 'transformer.ln_f.bias' has dtype I32 (nn::gpt2 takes F32, F64, F16 or BF16)"));
    CHECK_THAT(message([](auto& m) { m.at("lm_head.weight").bytes[40] ^= 1; }),
               Contains("tensor 'lm_head.weight' differs from wte.weight (first at element 10"));
    CHECK_THAT(message([&](auto& m) {
                   auto t = m.at("transformer.h.0.ln_1.weight");
                   t.name = "transformer.h.3.ln_1.weight";
                   m[t.name] = t;
               }),
               Contains("tensors the model does not have: 'transformer.h.3.ln_1.weight' (the file has 4 layers, the model 3)"));
    CHECK_THAT(message([&](auto& m) {
                   auto t = m.at("transformer.wte.weight");
                   t.name = "wte.weight";
                   m[t.name] = t;
               }),
               Contains("tensor 'wte.weight' is in the file both with and without the 'transformer.' prefix"));
    // Several problems: all listed in one message.
    const std::string many = message([&](auto& m) {
        m.erase("transformer.h.0.mlp.c_fc.bias");
        rename(m, "transformer.h.0.mlp.c_proj.bias", "transformer.h.0.mlp.c_proj.b");
    });
    CHECK_THAT(many, Contains("'h.0.mlp.c_fc.bias' is missing (expected shape (128))"));
    CHECK_THAT(many, Contains("'h.0.mlp.c_proj.bias' is missing"));
    CHECK_THAT(many, Contains("tensors the model does not have: 'transformer.h.0.mlp.c_proj.b'"));

    // A store whose parameter has another shape.
    parameter_store<float> other;
    other.add("pos_embed", rshape{2, {8, 32}});
    CHECK_THAT(io_message([&] { nn::load_hf_gpt2<ref_model>(other, ref / "lmhead.safetensors"); }),
               Contains("parameter 'pos_embed' has shape (8,32) in the store; the model needs (24,32)"));
    // A model of other sizes names the file's shapes.
    parameter_store<float> wide;
    CHECK_THAT(io_message([&] { nn::load_hf_gpt2<nn::gpt2<61, 24, 32, 4, 2>>(wide, ref / "lmhead.safetensors"); }),
               Contains("(the file has 3 layers, the model 2)"));
    CHECK(wide.size() == 0);
}

// ---- A tied head one ulp away --------------------------------------------------------------------

namespace {
using tiny_model = nn::gpt2<7, 6, 4, 2, 2>;

/// The text as an F (std::strtof or std::strtod), which must be a number and nothing else.
template <class F>
F read_back(const std::string& text) {
    char* end = nullptr;
    const F v = std::is_same_v<F, float> ? F(std::strtof(text.c_str(), &end)) : F(std::strtod(text.c_str(), &end));
    CHECK(!text.empty());
    CHECK(*end == 0);
    return v;
}
/// The "%.{p}g" text of v with the fewest significant digits p that reads back as v (as an F).
template <class F>
std::string fewest_g(F v) {
    for (int p = 1; p <= 17; ++p) {
        char buf[64];
        std::snprintf(buf, sizeof buf, "%.*g", p, double(v));
        if (read_back<F>(buf) == v) return buf;
    }
    return "(none)";
}

/// What a tied-head refusal shows: "(first at element K: HEAD against WTE)".
struct head_against_wte {
    std::size_t element = 0;
    std::string head, wte;
};
head_against_wte shown_in(const std::string& m) {
    INFO(m);
    const std::string lead = "tensor 'lm_head.weight' differs from wte.weight (first at element ";
    const std::size_t at = m.find(lead);
    REQUIRE(at != std::string::npos);
    const std::size_t colon = m.find(": ", at + lead.size());
    REQUIRE(colon != std::string::npos);
    const std::size_t against = m.find(" against ", colon);
    REQUIRE(against != std::string::npos);
    const std::size_t close = m.find(')', against);
    REQUIRE(close != std::string::npos);
    return {std::size_t(std::stoul(m.substr(at + lead.size(), colon - at - lead.size()))),
            m.substr(colon + 2, against - colon - 2), m.substr(against + 9, close - against - 9)};
}

/// tiny_model's tensors as save_hf_gpt2 writes them from a store of Tp (F32 or F64), with values
/// that are not round in binary (0.03, -0.06, ...).
template <class Tp>
std::map<std::string, st::tensor> tiny_checkpoint(const std::string& path) {
    parameter_store<Tp> store;
    nn::add_gpt2_params<tiny_model>(store);
    auto& v = store.values();
    for (std::size_t i = 0; i < v.size(); ++i) v[i] = Tp(0.01 * double(int(i % 13) - 6));
    nn::save_hf_gpt2<tiny_model>(store, path);
    return st::read(path);
}
/// Writes `tensors` to `path` and returns the message with which load_hf_gpt2 refuses it.
std::string refusal(const std::map<std::string, st::tensor>& tensors, const std::string& path) {
    std::vector<st::tensor> list;
    for (const auto& [name, t] : tensors) list.push_back(t);
    st::write(path, list);
    parameter_store<float> store;
    return io_message([&] { nn::load_hf_gpt2<tiny_model>(store, path); });
}
}  // namespace

TEST_CASE("an lm_head.weight one ulp from wte.weight is refused showing two numbers that differ and read back",
          "[gpt2][number_text]") {
    temp_dir dir;
    const std::string good = dir / "good.safetensors", bad = dir / "bad.safetensors";
    const std::size_t k = 9;  // 0.03
    // A head one ulp from the embedding, in the file's precision F: the refusal shows two numbers
    // that differ, read back exactly, and are no longer than the shortest "%g" text that reads back
    // (a float's digits, not its double's: "%.9g" of the double, 0.0300000012, is longer than 0.03f needs).
    auto one_ulp = [&]<class F>(F) {
        auto f = tiny_checkpoint<F>(good);
        if constexpr (std::is_same_v<F, double>) REQUIRE(f.at("wte.weight").dtype == "F64");
        const std::vector<F> wte = st::to_vector<F>(f.at("wte.weight"));
        std::vector<F> head = wte;
        head[k] = std::nextafter(wte[k], F(1));
        f["lm_head.weight"] = st::from_data("lm_head.weight", head.data(), f.at("wte.weight").shape);
        const std::string m = refusal(f, bad);
        INFO(m);
        const head_against_wte shown = shown_in(m);
        CHECK(shown.element == k);
        CHECK(shown.head != shown.wte);
        CHECK(read_back<F>(shown.head) == head[k]);
        CHECK(read_back<F>(shown.wte) == wte[k]);
        CHECK(shown.head.size() <= fewest_g(head[k]).size());
        CHECK(shown.wte.size() <= fewest_g(wte[k]).size());
    };
    SECTION("F32: the floats' own shortest digits") { one_ulp(0.0f); }
    SECTION("F64: the doubles' shortest digits") { one_ulp(0.0); }
    SECTION("an F64 head against an F32 wte.weight: both as doubles, so they differ on the page") {
        auto f = tiny_checkpoint<float>(good);
        const std::vector<float> wte = st::to_vector<float>(f.at("wte.weight"));
        // The head holds the decimal values themselves, the embedding their nearest floats.
        std::vector<double> head(wte.size());
        for (std::size_t i = 0; i < head.size(); ++i) head[i] = 0.01 * double(int(i % 13) - 6);
        std::size_t first = 0;
        while (first < head.size() && head[first] == double(wte[first])) ++first;
        REQUIRE(first < head.size());
        f["lm_head.weight"] = st::from_data("lm_head.weight", head.data(), f.at("wte.weight").shape);
        const std::string m = refusal(f, bad);
        INFO(m);
        const head_against_wte shown = shown_in(m);
        CHECK(shown.element == first);
        CHECK(shown.head != shown.wte);
        CHECK(read_back<double>(shown.head) == head[first]);
        CHECK(read_back<double>(shown.wte) == double(wte[first]));
    }
    SECTION("a float one ulp from an integer, refused as an integer, is shown in its own digits") {
        const std::vector<float> values = {2.0f, std::nextafter(3.0f, 4.0f)};
        const st::tensor t = st::from_data("near3", values.data(), {2});
        const std::string m = io_message([&] { (void)st::to_vector<std::int64_t>(t); });
        INFO(m);
        const std::size_t open = m.find("element 1 (");
        REQUIRE(open != std::string::npos);
        const std::string shown = m.substr(open + 11, m.find(')', open) - open - 11);
        CHECK(read_back<float>(shown) == values[1]);
        CHECK(shown.size() <= fewest_g(values[1]).size());
    }
}
