// nn::load_torch / nn::save_torch (ctgraph/nn/torch_layout.hpp): PyTorch state_dicts written by
// tests/torch_layouts_ref.py (nn.MultiheadAttention; nn.Linear, nn.LayerNorm and nn.Embedding in one
// module; nn.TransformerEncoderLayer post- and pre-norm, and two in an nn.TransformerEncoder;
// nn.TransformerDecoderLayer; bench/torch_ref.py's GPT; nn.GRU, nn.LSTM and nn.RNN, one-way and
// bidirectional, one layer and num_layers > 1) load in one call, and the modules' float64 outputs
// equal PyTorch's to 1e-12 relative; saved back, each file loads into a new PyTorch module with
// load_state_dict(strict=True) and gives the same outputs, its tensors equal to the original's (but
// nn.RNN's two biases, saved as their sum and zeros). Every mismatch is an io_error naming tensor,
// shapes and file, and nothing is written. A model around an nn.TransformerEncoder with its final
// norm (docs/guide/fine-tuning.md's Tagger) loads in one call and fine-tunes with the encoder frozen,
// its loss and gradients PyTorch's.
//
// The cases run /usr/bin/python3 with python3-torch (installed by scripts/setup.sh); without it they
// fail, saying so, rather than skip.
#include <catch2/catch.hpp>

#include "temp_dir.hpp"

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <filesystem>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include <unistd.h>

#include <ctgraph/ctgraph.hpp>
#include <ctgraph/xtensor.hpp>
#include <ctgraph/nn/torch_layout.hpp>

#ifndef CTG_TORCH_LAYOUTS_REF
#error "CTG_TORCH_LAYOUTS_REF (the path of tests/torch_layouts_ref.py) must be defined by the build"
#endif

using namespace ctg;
namespace fs = std::filesystem;
namespace st = ctg::safetensors;
using Catch::Matchers::Contains;

namespace {
inline constexpr dim B = dyn('B'), T = dyn('T'), S = dyn('S');
using X16 = input<"x", B, T, 16>;
using M16 = input<"m", B, S, 16>;
using Tokens = index_input<"tokens", B, T>;

// The modules of tests/torch_layouts_ref.py's cases.
using mha = nn::multi_head_attention<"attn.", 16, 4>;
using emb = param<"emb", 11, 8>;
using lin = nn::linear<"lin.", 8, 8>;
using ln = nn::layer_norm<"ln.", 8>;
using small = nn::torch_model<nn::torch_at<"emb.", emb>, nn::torch_at<"lin.", lin>, nn::torch_at<"ln.", ln>>;
using enc = nn::encoder_block<"enc.", 16, 4, 32, nn::norm_placement::post, nn::activation::gelu_erf, scaled_dot_score, 0.0, 1e-6>;
using enc_pre = nn::encoder_block<"", 16, 4, 32, nn::norm_placement::pre, nn::activation::gelu_erf>;
using dec = nn::decoder_block<"dec.", 16, 4, 32, nn::norm_placement::post, nn::activation::gelu_erf>;
using gpt = nn::gpt<13, 12, 16, 4, 2, 64, float>;  // torch_ref.py's positions: a float32 buffer
using gru = nn::gru<"g", 5, 6>;
using lstm = nn::lstm<"l", 5, 6>;
using bigru = nn::bidirectional<nn::gru<"gf", 5, 6>, nn::gru<"gb", 5, 6>>;
using bilstm = nn::bidirectional<nn::lstm<"lf", 5, 6>, nn::lstm<"lb", 5, 6>>;
// PyTorch's num_layers: layer l's tensors *_l<l>, its input the layer before's outputs.
using gru2 = nn::stacked_recurrent<nn::gru<"g0", 5, 6>, nn::gru<"g1", 6, 6>>;
using lstm3 = nn::stacked_recurrent<nn::lstm<"l0", 5, 6>, nn::lstm<"l1", 6, 6>, nn::lstm<"l2", 6, 6>>;
using bigru2 = nn::stacked_recurrent<nn::bidirectional<nn::gru<"f0", 5, 6>, nn::gru<"b0", 5, 6>>,
                                     nn::bidirectional<nn::gru<"f1", 12, 6>, nn::gru<"b1", 12, 6>>>;
using rnn = nn::elman<"r", 5, 6>;
template <fixed_string P, int X>
using relu_cell = nn::elman<P, X, 6, nn::activation::relu>;
using birnn2 = nn::stacked_recurrent<nn::bidirectional<relu_cell<"f0", 5>, relu_cell<"b0", 5>>,
                                     nn::bidirectional<relu_cell<"f1", 12>, relu_cell<"b1", 12>>>;

using ctg::testing::temp_dir;

/// The reference script's files, written once per run into a directory of their own.
const temp_dir& reference() {
    static const temp_dir dir("ctg_torch_layouts_");
    static const bool written = (ctg::testing::run_python_reference(dir, CTG_TORCH_LAYOUTS_REF " gen"), true);
    (void)written;
    return dir;
}

const std::map<std::string, st::tensor>& expected() {
    static const auto e = st::read(reference() / "expected.safetensors");
    return e;
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

/// The arrays fed to a program, kept while it runs.
struct fed {
    std::vector<std::vector<double>> reals;
    std::vector<std::vector<index_t>> ids;
};

/// Feeds `p` the tensors "<c>.<name>" of `file` for the names it has ("tokens" and "lengths" as indices).
template <class P>
void feed_case(P& p, const std::map<std::string, st::tensor>& file, const std::string& c, const std::vector<std::string>& names,
               fed& keep) {
    for (const std::string& n : names) {
        const auto it = file.find(c + "." + n);
        if (it == file.end()) continue;
        rshape s{it->second.shape.size(), {}};
        std::copy(it->second.shape.begin(), it->second.shape.end(), s.d.begin());
        if (n == "tokens" || n == "lengths") {
            const auto v = st::to_vector<std::int64_t>(it->second);
            keep.ids.emplace_back(v.begin(), v.end());
            p.feed(n, keep.ids.back().data(), s);
        } else {
            keep.reals.push_back(st::to_vector<double>(it->second));
            p.feed(n, keep.reals.back().data(), s);
        }
    }
}

/// The output of `e` in a float64 inference program over `store`, fed the case's inputs of these names.
template <class E>
std::vector<double> output_of(std::shared_ptr<parameter_store<double>> store, E, const std::string& c,
                              const std::vector<std::string>& names = {"x", "m", "tokens", "lengths"}) {
    using P = decltype(compile<double, options{.inference = true}>(E{}));
    P p(std::move(store));
    fed keep;
    feed_case(p, expected(), c, names, keep);
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

/// Loads case `c` into a new float64 store with one load_torch<Module> call, checks the output of
/// `e` against PyTorch's, saves it back and has PyTorch load and check that file; the saved tensors
/// equal the original's. Returns the store.
template <class Module, class E>
std::shared_ptr<parameter_store<double>> check_case(const std::string& c, E e) {
    INFO("case " << c);
    const temp_dir& ref = reference();
    auto store = std::make_shared<parameter_store<double>>();
    nn::load_torch<Module>(*store, ref / (c + ".safetensors"));
    const auto want = st::to_vector<double>(expected().at(c + ".y"));
    const double err = relative_error(output_of(store, e, c), want);
    INFO("relative error " << err);
    CHECK(err <= 1e-12);

    temp_dir dir;
    const std::string out = dir / (c + ".safetensors");
    nn::save_torch<Module>(*store, out);
    const auto original = st::read(ref / (c + ".safetensors"));
    st::metadata meta;
    const auto saved = st::read(out, &meta);
    CHECK(meta == st::metadata{{"format", "pt"}});
    REQUIRE(saved.size() == original.size());
    // What each saved tensor must hold: the original, but a tensor added on loading to an earlier
    // one's parameter (nn.RNN's bias_hh) saves as zeros and the earlier one as the sum.
    std::map<std::string, std::vector<double>> want_saved;
    for (const auto& [name, t] : original) want_saved[name] = st::to_vector<double>(t);
    std::map<std::vector<std::string>, std::string> first;
    for (const nn::layout_entry& x : nn::torch_layout<Module>::entries()) {
        if (!x.summed) {
            first.emplace(x.params, x.name);
            continue;
        }
        REQUIRE(first.count(x.params));
        auto& sum = want_saved.at(first.at(x.params));
        auto& added = want_saved.at(x.name);
        for (std::size_t i = 0; i < sum.size(); ++i) sum[i] += added[i];
        std::fill(added.begin(), added.end(), 0.0);
    }
    for (const auto& [name, t] : original) {
        INFO(name);
        REQUIRE(saved.count(name));
        CHECK(saved.at(name).dtype == "F64");
        CHECK(saved.at(name).shape == t.shape);
        CHECK(st::to_vector<double>(saved.at(name)) == want_saved.at(name));
    }
    CHECK(std::system(("OMP_NUM_THREADS=1 /usr/bin/python3 " CTG_TORCH_LAYOUTS_REF " check " + ref.root.string() + " " + c +
                       " " + out)
                          .c_str()) == 0);
    // A float store saves F32, PyTorch's own dtype.
    parameter_store<float> f;
    nn::load_torch<Module>(f, ref / (c + ".safetensors"));
    nn::save_torch<Module>(f, out);
    for (const auto& [name, t] : st::read(out)) CHECK(t.dtype == "F32");
    return store;
}
}  // namespace

// ---- Parity ---------------------------------------------------------------------------------------

TEST_CASE("nn.MultiheadAttention: packed in_proj_weight and in_proj_bias", "[torch_layout][python]") {
    auto store = check_case<mha>("mha", mha::cross(X16{}, M16{}));
    CHECK(store->size() == 8);
    // Row block j of in_proj_weight (3D, D) is parameter j transposed.
    const auto file = st::read(reference() / "mha.safetensors");
    const auto w = st::to_vector<double>(file.at("in_proj_weight"));
    const double* k = store->value(store->slot("attn.k.weight"));
    for (std::size_t i = 0; i < 16; ++i)
        for (std::size_t o = 0; o < 16; ++o) CHECK(k[i * 16 + o] == w[(16 + o) * 16 + i]);
}

TEST_CASE("nn.Embedding, nn.Linear (square) and nn.LayerNorm in one module", "[torch_layout][python]") {
    auto e = ln{}(lin{}(embedding(emb{}, Tokens{})));
    auto store = check_case<small>("small", e);
    // The square weight is read as PyTorch's (out, in) and stored transposed: it is not symmetric,
    // so read the other way round the output above would differ.
    const auto file = st::read(reference() / "small.safetensors");
    const auto w = st::to_vector<double>(file.at("lin.weight"));
    const double* v = store->value(store->slot("lin.weight"));
    bool symmetric = true;
    for (std::size_t i = 0; i < 8; ++i)
        for (std::size_t o = 0; o < 8; ++o) {
            CHECK(v[i * 8 + o] == w[o * 8 + i]);
            symmetric = symmetric && w[o * 8 + i] == w[i * 8 + o];
        }
    CHECK_FALSE(symmetric);
    // The parts load on their own, each under its prefix (the rest of the file is left alone).
    parameter_store<double> parts;
    nn::load_torch<lin>(parts, reference() / "small.safetensors", "lin.");
    nn::load_torch<emb>(parts, reference() / "small.safetensors", "emb.");
    nn::load_torch<ln>(parts, reference() / "small.safetensors", "ln.");
    REQUIRE(parts.size() == store->size());
    for (std::size_t s = 0; s < parts.size(); ++s) {
        const std::size_t t = store->slot(parts.at(s).name);
        CHECK(std::equal(parts.value(s), parts.value(s) + parts.at(s).shape.size(), store->value(t)));
    }
}

TEST_CASE("nn.TransformerEncoderLayer, post-norm (the default) and norm_first", "[torch_layout][python]") {
    check_case<enc>("enc", enc{}(X16{}));
    check_case<enc_pre>("enc_pre", enc_pre{}(X16{}));
}

TEST_CASE("nn.TransformerEncoder: layers.{l}.* stacked by repeat", "[torch_layout][python]") {
    using layer = nn::encoder_block<"", 16, 4, 32, nn::norm_placement::post, nn::activation::gelu_erf>;
    auto e = repeat<2, "layers.">([](auto h) { return layer{}(h); }, X16{});
    auto store = check_case<nn::torch_repeat<"layers.", 2, layer>>("stack", e);
    CHECK(store->at(store->slot("layers.q.weight")).shape.to_vector() == std::vector<std::size_t>{2, 16, 16});
    // The layout's prefix and repeat's differ: the program over the loaded store refuses (it added
    // the block's 16 parameters, zero-initialised, and computed wrong outputs without a word).
    const std::size_t n = store->size();
    auto other = repeat<2, "encoder.layers.">([](auto h) { return layer{}(h); }, X16{});
    std::string m;
    try {
        program_for<double, options{.inference = true}, decltype(other)> p(store);
    } catch (const ctg::error& x) {
        m = x.what();
    }
    CHECK_THAT(m, Contains("lacks 16 parameters"));
    CHECK_THAT(m, Contains("'encoder.layers.q.weight' (2,16,16): closest present 'layers.q.weight'"));
    CHECK(store->size() == n);
}

TEST_CASE("nn.TransformerDecoderLayer with a causal tgt_mask", "[torch_layout][python]") {
    check_case<dec>("dec", dec{}(X16{}, M16{}));
}

TEST_CASE("bench/torch_ref.py's GPT: blocks.{l}.* stacked over the layers", "[torch_layout][python]") {
    auto store = check_case<gpt>("gpt", gpt::logits(Tokens{}));
    CHECK(store->at(store->slot("blocks.fc1.weight")).shape.to_vector() == std::vector<std::size_t>{2, 16, 64});
}

TEST_CASE("nn.GRU and nn.LSTM: gates in PyTorch's order, weights transposed", "[torch_layout][python]") {
    using Xs = input<"x", T, B, 5>;
    check_case<gru>("gru", gru::run(Xs{}));
    check_case<lstm>("lstm", lstm::run(Xs{}));
}

TEST_CASE("bidirectional nn.GRU and nn.LSTM: the backward cell's tensors _reverse", "[torch_layout][python]") {
    using Xs = input<"x", T, B, 5>;
    auto store = check_case<bigru>("bigru", bigru::run(Xs{}));
    CHECK(store->find("gb_W_h") >= 0);
    check_case<bilstm>("bilstm", bilstm::run(Xs{}));
}

TEST_CASE("nn.GRU and nn.LSTM with num_layers > 1: layer l's *_l<l> into nn::stacked_recurrent's layer l",
          "[torch_layout][python]") {
    using Xs = input<"x", T, B, 5>;
    auto store = check_case<gru2>("gru2", gru2::run(Xs{}));
    CHECK(store->size() == 8);
    // Layer 1 reads layer 0's outputs: its input weights are (H, 3H).
    CHECK(store->at(store->slot("g1_W_i")).shape.to_vector() == std::vector<std::size_t>{6, 18});
    check_case<lstm3>("lstm3", lstm3::run(Xs{}));
    // Bidirectional: layer 1 reads both directions (2H) and has its own _l1_reverse tensors.
    store = check_case<bigru2>("bigru2", bigru2::run(Xs{}));
    CHECK(store->at(store->slot("b1_W_i")).shape.to_vector() == std::vector<std::size_t>{12, 18});
}

TEST_CASE("nn::stacked_recurrent over padded sequences: PyTorch's outputs over a PackedSequence", "[torch_layout][python]") {
    using Xs = input<"x", T, B, 5>;
    using Lengths = index_input<"lengths", B>;
    // The relative error of e's real steps (t < length) against PyTorch's outputs of <c>_len, over
    // case c's state_dict; the padding (zeros in PyTorch) is not compared.
    auto real_steps_error = [](auto e, const std::string& c, auto module, std::vector<std::string> names = {"x", "lengths"}) {
        INFO("case " << c << "_len");
        auto store = std::make_shared<parameter_store<double>>();
        nn::load_torch<decltype(module)>(*store, reference() / (c + ".safetensors"));
        const auto got = output_of(store, e, c + "_len", names);
        const auto want = st::to_vector<double>(expected().at(c + "_len.y"));
        const auto& shape = expected().at(c + "_len.y").shape;  // (T, B, W)
        const auto len = st::to_vector<std::int64_t>(expected().at(c + "_len.lengths"));
        REQUIRE(got.size() == want.size());
        REQUIRE(len.size() == shape[1]);
        double worst = 0, scale = 0;
        for (std::size_t t = 0; t < shape[0]; ++t)
            for (std::size_t b = 0; b < shape[1]; ++b)
                for (std::size_t j = 0; t < std::size_t(len[b]) && j < shape[2]; ++j) {
                    const std::size_t i = (t * shape[1] + b) * shape[2] + j;
                    worst = std::max(worst, std::abs(got[i] - want[i])), scale = std::max(scale, std::abs(want[i]));
                }
        return worst / scale;
    };
    CHECK(real_steps_error(lstm3::run(Xs{}, Lengths{}), "lstm3", lstm3{}) <= 1e-12);
    CHECK(real_steps_error(bigru2::run(Xs{}, Lengths{}), "bigru2", bigru2{}) <= 1e-12);
    // Without the lengths the backward cells start in the padding: the short sequence's outputs differ.
    CHECK(real_steps_error(bigru2::run(Xs{}), "bigru2", bigru2{}, {"x"}) > 1e-3);
}

TEST_CASE("nn.RNN: bias_ih + bias_hh load as nn::elman's one bias, save as (bias, 0)", "[torch_layout][python]") {
    using Xs = input<"x", T, B, 5>;
    auto store = check_case<rnn>("rnn", rnn::run(Xs{}));
    CHECK(store->size() == 3);
    const auto file = st::read(reference() / "rnn.safetensors");
    const auto bi = st::to_vector<double>(file.at("bias_ih_l0")), bh = st::to_vector<double>(file.at("bias_hh_l0"));
    const double* b = store->value(store->slot("r_b"));
    for (std::size_t i = 0; i < 6; ++i) CHECK(b[i] == bi[i] + bh[i]);
    // Loading again replaces the bias (the sum is not added to what the store held).
    nn::load_torch<rnn>(*store, reference() / "rnn.safetensors");
    for (std::size_t i = 0; i < 6; ++i) CHECK(b[i] == bi[i] + bh[i]);
    check_case<birnn2>("birnn2", birnn2::run(Xs{}));
}

// ---- Mismatches ----------------------------------------------------------------------------------

TEST_CASE("every mismatch of a state_dict is an io_error naming tensor, shapes and file, and nothing is written",
          "[torch_layout][python]") {
    const temp_dir& ref = reference();
    temp_dir dir;
    const std::string path = dir / "bad.safetensors";
    parameter_store<float> store;
    nn::load_torch<enc>(store, ref / "enc.safetensors");
    const std::vector<float> before(store.values().begin(), store.values().end());
    // Writes enc's state_dict changed by `edit` and returns load_torch's message.
    auto message = [&](auto edit, const std::string& prefix = "") {
        auto tensors = st::read(ref / "enc.safetensors");
        edit(tensors);
        std::vector<st::tensor> list;
        for (auto& [name, t] : tensors) list.push_back(t);
        st::write(path, list);
        const std::string m = io_message([&] { nn::load_torch<enc>(store, path, prefix); });
        CHECK(std::equal(before.begin(), before.end(), store.values().begin()));
        CHECK_THAT(m, Contains("ctg::nn::load_torch: '" + path +
                               "' does not match the PyTorch layout of nn::encoder_block<\"enc.\", 16, 4, 32>"));
        return m;
    };
    CHECK_THAT(message([](auto& m) { m.erase("self_attn.in_proj_bias"); }),
               Contains("tensor 'self_attn.in_proj_bias' is missing (expected shape (48))"));
    // A packed weight transposed (16, 48) and a Linear weight in ctgraph's (in, out) orientation.
    CHECK_THAT(message([](auto& m) { m.at("self_attn.in_proj_weight").shape = {16, 48}; }),
               Contains("tensor 'self_attn.in_proj_weight' has shape (16,48) in the file; expected (48,16)"));
    CHECK_THAT(message([](auto& m) { m.at("linear1.weight").shape = {16, 32}; }),
               Contains("tensor 'linear1.weight' has shape (16,32) in the file; expected (32,16)"));
    CHECK_THAT(message([](auto& m) { m.at("norm2.bias").dtype = "I32"; }),
               Contains("tensor 'norm2.bias' has dtype I32 (load_torch takes F32, F64, F16 or BF16)"));
    CHECK_THAT(message([](auto& m) {
                   auto t = m.at("norm2.bias");
                   t.name = "norm3.bias";
                   m[t.name] = t;
               }),
               Contains("tensors the module does not have: 'norm3.bias'"));
    // Several problems: all listed in one message.
    const std::string many = message([](auto& m) {
        m.erase("linear2.bias");
        auto& t = m.at("norm1.weight");
        t.shape = {8};
        t.bytes.resize(8 * 4);
    });
    CHECK_THAT(many, Contains("tensor 'linear2.bias' is missing (expected shape (16))"));
    CHECK_THAT(many, Contains("tensor 'norm1.weight' has shape (8) in the file; expected (16)"));
    // Under a prefix, names are the file's; a file without it is all missing.
    CHECK_THAT(message([](auto&) {}, "layers.0."),
               Contains("under 'layers.0.':\n  tensor 'layers.0.self_attn.in_proj_weight' is missing"));

    // ctgraph's own names and orientation (safetensors::save of a store) are not a PyTorch
    // state_dict: no tensor is taken for another, square or not.
    auto own = std::make_shared<parameter_store<float>>();
    nn::load_torch<enc>(*own, ref / "enc.safetensors");
    st::save(*own, path);
    const std::string m = io_message([&] { nn::load_torch<enc>(store, path); });
    CHECK_THAT(m, Contains("tensor 'self_attn.in_proj_weight' is missing (expected shape (48,16))"));
    CHECK_THAT(m, Contains("tensors the module does not have: 'enc.fc1.bias', 'enc.fc1.weight'"));

    // A store parameter of another shape.
    parameter_store<float> other;
    other.add("enc.fc1.weight", rshape{2, {32, 16}});
    CHECK_THAT(io_message([&] { nn::load_torch<enc>(other, ref / "enc.safetensors"); }),
               Contains("parameter 'enc.fc1.weight' has shape (32,16) in the store; the model needs (16,32)"));
    CHECK(other.size() == 1);
    // A GPT of more layers in the file than the model: the extra layers are named.
    parameter_store<float> shallow;
    CHECK_THAT(io_message([&] { nn::load_torch<nn::gpt<13, 12, 16, 4, 1, 64>>(shallow, ref / "gpt.safetensors"); }),
               Contains("tensors the module does not have: 'blocks.1.fc1.bias'"));
    CHECK(shallow.size() == 0);
    // Saving a module whose parameters the store lacks names the parameter.
    CHECK_THROWS_WITH(nn::save_torch<dec>(store, path), Contains("dec."));
}

TEST_CASE("a recurrent state_dict of other layers or sizes is an io_error naming tensors and shapes", "[torch_layout][python]") {
    const temp_dir& ref = reference();
    parameter_store<double> store;
    // Two layers in the file, one in the model: layer 1's tensors are named.
    CHECK_THAT(io_message([&] { nn::load_torch<nn::stacked_recurrent<nn::gru<"g0", 5, 6>>>(store, ref / "gru2.safetensors"); }),
               Contains("tensors the module does not have: 'bias_hh_l1', 'bias_ih_l1', 'weight_hh_l1', 'weight_ih_l1'"));
    // Three layers in the model, two in the file: layer 2's are missing, with their shapes.
    using gru3 = nn::stacked_recurrent<nn::gru<"g0", 5, 6>, nn::gru<"g1", 6, 6>, nn::gru<"g2", 6, 6>>;
    const std::string three = io_message([&] { nn::load_torch<gru3>(store, ref / "gru2.safetensors"); });
    CHECK_THAT(three, Contains("does not match the PyTorch layout of nn::stacked_recurrent<nn::gru<\"g0\", 5, 6>, "));
    CHECK_THAT(three, Contains("tensor 'weight_ih_l2' is missing (expected shape (18,6))"));
    // A second layer of another width: its shapes differ from the file's.
    using wide = nn::stacked_recurrent<nn::gru<"g0", 5, 6>, nn::gru<"g1", 6, 7>>;
    const std::string w = io_message([&] { nn::load_torch<wide>(store, ref / "gru2.safetensors"); });
    CHECK_THAT(w, Contains("tensor 'weight_ih_l1' has shape (18,6) in the file; expected (21,6)"));
    CHECK_THAT(w, Contains("tensor 'bias_hh_l1' has shape (18) in the file; expected (21)"));
    // A one-way stack given a bidirectional file: layer 1's input there is 2H wide.
    CHECK_THAT(io_message([&] { nn::load_torch<gru2>(store, ref / "bigru2.safetensors"); }),
               Contains("tensor 'weight_ih_l1' has shape (18,12) in the file; expected (18,6)"));
    // nn.RNN: an LSTM's file (4H rows) and a missing second bias.
    CHECK_THAT(io_message([&] { nn::load_torch<nn::elman<"r", 5, 6>>(store, ref / "lstm.safetensors"); }),
               Contains("tensor 'weight_ih_l0' has shape (24,5) in the file; expected (6,5)"));
    temp_dir dir;
    auto tensors = st::read(ref / "rnn.safetensors");
    tensors.erase("bias_hh_l0");
    std::vector<st::tensor> list;
    for (auto& [name, t] : tensors) list.push_back(t);
    st::write(dir / "rnn.safetensors", list);
    CHECK_THAT(io_message([&] { nn::load_torch<rnn>(store, dir / "rnn.safetensors"); }),
               Contains("nn::elman<\"r\", 5, 6>:\n  tensor 'bias_hh_l0' is missing (expected shape (6))"));
    CHECK(store.size() == 0);
    // A relu cell says so: its file's tensors are a tanh one's.
    CHECK_THAT(io_message([&] { nn::load_torch<relu_cell<"r", 5>>(store, dir / "rnn.safetensors"); }),
               Contains("PyTorch layout of nn::elman<\"r\", 5, 6, relu>:"));
}

// ---- Programs over a loaded store ----------------------------------------------------------------

namespace {
// A state_dict of nn.Embedding(11, 8) at "emb." and nn.Linear(8, 8) at "lin.", written without Python,
// loaded with the linear layer's parameters under "enc.": the store holds emb, enc.lin.weight, enc.lin.bias.
using enc_lin = nn::linear<"enc.lin.", 8, 8>;
using emb_enc_lin = nn::torch_model<nn::torch_at<"emb.", emb>, nn::torch_at<"lin.", enc_lin>>;
using Ids = index_input<"ids", B>;

std::shared_ptr<parameter_store<float>> loaded_emb_lin(const temp_dir& dir) {
    std::vector<float> E(11 * 8), W(8 * 8), b(8);
    for (std::size_t i = 0; i < E.size(); ++i) E[i] = float(std::sin(0.7 * double(i)));
    for (std::size_t i = 0; i < W.size(); ++i) W[i] = float(std::cos(1.3 * double(i)));
    for (std::size_t i = 0; i < b.size(); ++i) b[i] = 0.1f * float(i + 1);
    st::write(dir / "net.safetensors", {st::from_data("emb.weight", E.data(), {11, 8}), st::from_data("lin.weight", W.data(), {8, 8}),
                                        st::from_data("lin.bias", b.data(), {8})});
    auto store = std::make_shared<parameter_store<float>>();
    nn::load_torch<emb_enc_lin>(*store, dir / "net.safetensors");
    return store;
}
}  // namespace

TEST_CASE("a program over a loaded store refuses to add the parameters the file did not give", "[torch_layout]") {
    temp_dir dir;
    auto store = loaded_emb_lin(dir);
    CHECK(store->strict());  // a store filled from a file
    CHECK_FALSE(parameter_store<float>{}.strict());  // a new one
    CHECK(parameter_store<float>(*store).strict());  // a copy keeps the flag
    REQUIRE(store->size() == 3);
    const std::vector<std::string> names = {store->at(0).name, store->at(1).name, store->at(2).name};
    const std::vector<float> before(store->values().begin(), store->values().end());

    // (a) The linear layer's prefix without "enc.": its two parameters are missing. Both are listed,
    // each with its shape and the closest names present (the same name under a prefix first); the
    // store is unchanged.
    using typo = decltype(nn::linear<"lin.", 8, 8>{}(embedding(emb{}, Ids{})));
    std::string m = "no ctg::error";
    try {
        program_for<float, options{.inference = true}, typo> p(store);
    } catch (const ctg::error& e) {
        m = e.what();
    }
    CHECK_THAT(m, Contains("the parameter store is strict"));
    CHECK_THAT(m, Contains("lacks 2 parameters"));
    CHECK_THAT(m, Contains("'lin.weight' (8,8): closest present 'enc.lin.weight'"));
    CHECK_THAT(m, Contains("'lin.bias' (8): closest present 'enc.lin.bias'"));
    CHECK_THAT(m, Contains("strict(false)"));
    REQUIRE(store->size() == 3);
    for (std::size_t s = 0; s < 3; ++s) CHECK(store->at(s).name == names[s]);
    CHECK(std::equal(before.begin(), before.end(), store->values().begin(), store->values().end()));

    // (c) A program that needs nothing new: built over the strict store, which it leaves as it was.
    using right = decltype(enc_lin{}(embedding(emb{}, Ids{})));
    program_for<float, options{.inference = true}, right> ok(store);
    ok.feed<"ids">(xt::xtensor<index_t, 1>{0, 10});
    ok.forward();
    CHECK(ok.output()(1, 0) != 0.0f);
    CHECK(store->size() == 3);

    // (b) Not strict: the program adds the missing parameters (zero-initialised), as before.
    store->strict(false);
    program_for<float, options{.inference = true}, typo> added(store);
    CHECK(store->size() == 5);
    for (const char* n : {"lin.weight", "lin.bias"}) {
        const auto& e = store->at(store->slot(n));
        CHECK(std::all_of(store->value(store->slot(n)), store->value(store->slot(n)) + e.shape.size(), [](float v) { return v == 0; }));
    }
    for (std::size_t s = 0; s < 3; ++s) CHECK(std::equal(store->value(s), store->value(s) + store->at(s).shape.size(), before.data() + store->at(s).offset));
    // Loading again makes the store strict again.
    nn::load_torch<emb_enc_lin>(*store, dir / "net.safetensors");
    CHECK(store->strict());
}

TEST_CASE("the closest names of a missing parameter: a prefix changed first, then by edit distance", "[torch_layout]") {
    CHECK(detail::edit_distance("kitten", "sitting") == 3);
    CHECK(detail::edit_distance("", "abc") == 3);
    CHECK(detail::same_but_prefix("layers.self_attn.in_proj_weight", "encoder.layers.self_attn.in_proj_weight"));
    CHECK(detail::same_but_prefix("enc.fc1.weight", "encoder.fc1.weight"));
    CHECK_FALSE(detail::same_but_prefix("fc1.weight", "fc2.weight"));  // only the last component in common
    CHECK(detail::same_but_prefix("weight", "lin.weight"));
    CHECK_FALSE(detail::same_but_prefix("weight", "xweight"));
    // A store of many names: the three closest, the prefixed one first though farther by characters.
    auto store = std::make_shared<parameter_store<float>>();
    for (const char* n : {"encoder.layers.q.weight", "layers.k.weight", "layers.q.bias", "layers.v.weight", "emb"})
        store->add(n, rshape{2, {4, 4}});
    store->strict(true);
    std::string m;
    try {
        program_for<float, options{.inference = true}, decltype(input<"x", B, 4>{} * param<"layers.q.weight", 4, 4>{})> p(store);
    } catch (const ctg::error& e) {
        m = e.what();
    }
    CHECK_THAT(m, Contains("lacks 1 parameter this program needs"));
    CHECK_THAT(m, Contains("'layers.q.weight' (4,4): closest present 'encoder.layers.q.weight', 'layers.k.weight', 'layers.v.weight'\n"));
    CHECK(store->size() == 5);
}

// ---- Gradients under PyTorch's names --------------------------------------------------------------

namespace {
/// tests/torch_layouts_ref.py's "grads" files, written once per run beside "gen"'s: per gradient case g
/// PyTorch's p.grad (<g>.grads.safetensors) and the loss's weights r ("<g>.r" of the map returned).
const std::map<std::string, st::tensor>& grad_inputs() {
    static const auto r = [] {
        ctg::testing::run_python_reference(reference(), CTG_TORCH_LAYOUTS_REF " grads");
        return st::read(reference() / "grads_inputs.safetensors");
    }();
    return r;
}

using Xs5 = input<"x", T, B, 5>;
/// sum(y * r) over each gradient case's output y: what the reference script differentiates.
using mha_loss = decltype(sum(mul(mha::cross(X16{}, M16{}), input<"r", B, T, 16>{})));
using small_loss = decltype(sum(mul(ln{}(lin{}(embedding(emb{}, Tokens{}))), input<"r", B, T, 8>{})));
using gpt_loss = decltype(sum(mul(gpt::logits(Tokens{}), input<"r", B, T, 13>{})));
using rnn_loss = decltype(sum(mul(rnn::run(Xs5{}), input<"r", T, B, 6>{})));

/// Case c's state_dict loaded into a new float64 store, then one forward and backward of a program of
/// Loss (with Opt) over it, fed c's inputs and gradient case g's r: the store holding the gradients.
template <class Module, class Loss, options Opt = options{}>
std::shared_ptr<parameter_store<double>> gradients_of(const std::string& c, const std::string& g) {
    auto store = std::make_shared<parameter_store<double>>();
    nn::load_torch<Module>(*store, reference() / (c + ".safetensors"));
    program_for<double, Opt, Loss> p(store);
    fed keep;
    feed_case(p, expected(), c, {"x", "m", "tokens"}, keep);
    feed_case(p, grad_inputs(), g, {"r"}, keep);
    p.zero_grad();
    p.forward();
    p.backward();
    return store;
}

/// The gradient metadata: "contents", and the tensors left out and holding zeros for frozen parts.
st::metadata gradient_metadata(const std::string& frozen, const std::string& partly) {
    return {{"format", "pt"}, {"contents", "gradients"}, {"frozen", frozen}, {"partly_frozen", partly}};
}

/// The largest |element|.
double largest(const std::vector<double>& v) {
    double m = 0;
    for (double x : v) m = std::max(m, std::abs(x));
    return m;
}

/// The gradient file ctgraph wrote at `path` against PyTorch's p.grad of gradient case g: the same
/// names (none for a p.grad that is None), shapes and values (F64, to 1e-12 of each tensor's
/// largest element, or of a thousandth of the file's largest for a gradient that is zero in exact
/// arithmetic: the keys' biases, as softmax ignores a shift of all the scores), and the metadata
/// listing `frozen` and `partly` frozen tensors.
void check_against_pytorch(const std::string& path, const std::string& g, const std::string& frozen = "",
                           const std::string& partly = "") {
    INFO("gradient case " << g);
    st::metadata meta;
    const auto got = st::read(path, &meta);
    const auto want = st::read(reference() / (g + ".grads.safetensors"));
    CHECK(meta == gradient_metadata(frozen, partly));
    std::vector<std::string> got_names, want_names;
    double file_scale = 0;
    for (const auto& [name, t] : got) got_names.push_back(name);
    for (const auto& [name, t] : want) want_names.push_back(name), file_scale = std::max(file_scale, largest(st::to_vector<double>(t)));
    REQUIRE(got_names == want_names);
    for (const auto& [name, t] : want) {
        INFO(name);
        const st::tensor& x = got.at(name);
        CHECK(x.dtype == "F64");
        REQUIRE(x.shape == t.shape);
        const auto a = st::to_vector<double>(x), b = st::to_vector<double>(t);
        std::vector<double> diff(a.size());
        for (std::size_t i = 0; i < a.size(); ++i) diff[i] = a[i] - b[i];
        INFO("largest difference " << largest(diff) << ", largest element " << largest(b) << " (the file's " << file_scale << ")");
        CHECK(largest(diff) <= 1e-12 * std::max(largest(b), 1e-3 * file_scale));
    }
}
}  // namespace

TEST_CASE("save_torch writes the gradients under the state_dict's names: PyTorch's p.grad", "[torch_layout][python]") {
    temp_dir dir;
    const std::string out = dir / "grads.safetensors";
    // Packed rows (in_proj_weight), transposed Linear weights, an embedding, a square Linear and a
    // LayerNorm, layers stacked by repeat (blocks.{l}.*), and nn.RNN's two biases, which PyTorch
    // gives the same gradient (that of their sum, ctgraph's one bias).
    nn::save_torch<mha>(*gradients_of<mha, mha_loss>("mha", "mha"), out, nn::what::gradients);
    check_against_pytorch(out, "mha");
    nn::save_torch<small>(*gradients_of<small, small_loss>("small", "small"), out, nn::what::gradients);
    check_against_pytorch(out, "small");
    nn::save_torch<gpt>(*gradients_of<gpt, gpt_loss>("gpt", "gpt"), out, nn::what::gradients);
    check_against_pytorch(out, "gpt");
    nn::save_torch<rnn>(*gradients_of<rnn, rnn_loss>("rnn", "rnn"), out, nn::what::gradients);
    check_against_pytorch(out, "rnn");
    // Under a prefix, as a submodule of a bigger state_dict.
    nn::save_torch<rnn>(*gradients_of<rnn, rnn_loss>("rnn", "rnn"), out, nn::what::gradients, "rnn.");
    const auto prefixed = st::read(out);
    CHECK(prefixed.count("rnn.bias_hh_l0"));
    CHECK(prefixed.size() == 4);
}

TEST_CASE("a frozen parameter's gradient is not written (PyTorch's p.grad is None), a frozen part of a packed tensor is zeros",
          "[torch_layout][python]") {
    temp_dir dir;
    const std::string out = dir / "grads.safetensors";
    // The embedding frozen (PyTorch: emb.weight.requires_grad_(False)): no emb.weight, the rest as PyTorch's.
    auto store = gradients_of<small, small_loss, options{.frozen = "emb"}>("small", "small_frozen");
    REQUIRE(store->frozen(store->slot("emb")));
    nn::save_torch<small>(*store, out, nn::what::gradients);
    check_against_pytorch(out, "small_frozen", "emb.weight");
    // Its values are all saved, as always: the checkpoint does not depend on what trains.
    nn::save_torch<small>(*store, out);
    st::metadata meta;
    CHECK(st::read(out, &meta).size() == 5);
    CHECK(meta == st::metadata{{"format", "pt"}});
    // The keys' projection frozen, one third of in_proj_weight: zeros there, as PyTorch's p.grad under
    // a hook zeroing those rows (a tensor is frozen or not as a whole in PyTorch).
    store = gradients_of<mha, mha_loss, options{.frozen = "attn.k.weight"}>("mha", "mha_kfrozen");
    nn::save_torch<mha>(*store, out, nn::what::gradients);
    check_against_pytorch(out, "mha_kfrozen", "", "in_proj_weight");
}

namespace {
/// A program of Loss over a new float64 store initialised from `seed`, after one forward and
/// backward fed `inputs` (name, shape: values from sin, so the gradients are not symmetric).
template <class Loss>
std::shared_ptr<parameter_store<double>> gradients_without_python(
    unsigned seed, const std::vector<std::pair<std::string, std::vector<std::size_t>>>& inputs) {
    auto store = std::make_shared<parameter_store<double>>();
    program_for<double, options{}, Loss> p(store);
    store->init(seed);
    std::vector<std::vector<double>> keep;
    for (const auto& [name, shape] : inputs) {
        std::size_t n = 1;
        for (std::size_t d : shape) n *= d;
        keep.emplace_back(n);
        for (std::size_t i = 0; i < n; ++i) keep.back()[i] = std::sin(double(3 * i + keep.size()));
        rshape s{shape.size(), {}};
        std::copy(shape.begin(), shape.end(), s.d.begin());
        p.feed(name, keep.back().data(), s);
    }
    p.zero_grad();
    p.forward();
    p.backward();
    return store;
}

std::vector<std::string> names_of(const std::map<std::string, st::tensor>& f) {
    std::vector<std::string> n;
    for (const auto& [name, t] : f) n.push_back(name);
    return n;
}
}  // namespace

TEST_CASE("gradients saved under PyTorch's names read back: (out, in) weights, packed rows, both summed biases",
          "[torch_layout]") {
    temp_dir dir;
    const std::string out = dir / "grads.safetensors";
    // nn.MultiheadAttention: in_proj_weight (3D, D), row block j the gradient of q, k, v's weight
    // (in, out) transposed; out_proj.weight (D, D) proj's transposed.
    auto store = gradients_without_python<mha_loss>(5, {{"x", {2, 5, 16}}, {"m", {2, 7, 16}}, {"r", {2, 5, 16}}});
    nn::save_torch<mha>(*store, out, nn::what::gradients);
    st::metadata meta;
    auto f = st::read(out, &meta);
    CHECK(meta == gradient_metadata("", ""));
    REQUIRE(names_of(f) == std::vector<std::string>{"in_proj_bias", "in_proj_weight", "out_proj.bias", "out_proj.weight"});
    CHECK(f.at("in_proj_weight").shape == std::vector<std::size_t>{48, 16});
    CHECK(f.at("in_proj_bias").shape == std::vector<std::size_t>{48});
    CHECK(f.at("out_proj.weight").shape == std::vector<std::size_t>{16, 16});
    CHECK(f.at("out_proj.bias").shape == std::vector<std::size_t>{16});
    for (const auto& [name, t] : f) CHECK(t.dtype == "F64");
    const auto w = st::to_vector<double>(f.at("in_proj_weight")), bias = st::to_vector<double>(f.at("in_proj_bias")),
               proj = st::to_vector<double>(f.at("out_proj.weight"));
    const char* qkv[] = {"q", "k", "v"};
    std::size_t mismatches = 0;
    for (std::size_t j = 0; j < 3; ++j) {
        const double* g = store->grad(store->slot("attn." + std::string(qkv[j]) + ".weight"));
        const double* gb = store->grad(store->slot("attn." + std::string(qkv[j]) + ".bias"));
        for (std::size_t o = 0; o < 16; ++o) {
            mismatches += bias[j * 16 + o] != gb[o];
            for (std::size_t i = 0; i < 16; ++i) mismatches += w[(j * 16 + o) * 16 + i] != g[i * 16 + o];
        }
    }
    const double* gp = store->grad(store->slot("attn.proj.weight"));
    for (std::size_t o = 0; o < 16; ++o)
        for (std::size_t i = 0; i < 16; ++i) mismatches += proj[o * 16 + i] != gp[i * 16 + o];
    CHECK(mismatches == 0);
    CHECK(st::to_vector<double>(f.at("out_proj.bias")) ==
          std::vector<double>(store->grad(store->slot("attn.proj.bias")), store->grad(store->slot("attn.proj.bias")) + 16));

    // Frozen: the values' projection (a part of in_proj_weight: zeros there, the rest unchanged) and
    // the output bias (the whole of out_proj.bias: not written); both named in the metadata.
    store->set_frozen(store->slot("attn.v.weight"), true);
    store->set_frozen(store->slot("attn.proj.bias"), true);
    nn::save_torch<mha>(*store, out, nn::what::gradients);
    auto frozen = st::read(out, &meta);
    CHECK(meta == gradient_metadata("out_proj.bias", "in_proj_weight"));
    REQUIRE(names_of(frozen) == std::vector<std::string>{"in_proj_bias", "in_proj_weight", "out_proj.weight"});
    const auto wf = st::to_vector<double>(frozen.at("in_proj_weight"));
    for (std::size_t k = 0; k < wf.size(); ++k) mismatches += wf[k] != (k < 32 * 16 ? w[k] : 0.0);
    CHECK(mismatches == 0);
    CHECK(st::to_vector<double>(frozen.at("in_proj_bias")) == bias);
    CHECK(st::to_vector<double>(frozen.at("out_proj.weight")) == proj);
    // With every parameter frozen there is nothing to write, and the file says why.
    for (std::size_t s = 0; s < store->size(); ++s) store->set_frozen(s, true);
    nn::save_torch<mha>(*store, out, nn::what::gradients);
    CHECK(st::read(out, &meta).empty());
    CHECK(meta == gradient_metadata("in_proj_weight in_proj_bias out_proj.weight out_proj.bias", ""));

    // nn.RNN: weight_ih_l0 (H, X) is W_x's gradient (X, H) transposed; bias_ih_l0 and bias_hh_l0 are
    // both the one bias's gradient (the derivative of a sum by either addend), where the values save
    // the bias in bias_ih_l0 and zeros in bias_hh_l0.
    auto r = gradients_without_python<rnn_loss>(6, {{"x", {4, 2, 5}}, {"r", {4, 2, 6}}});
    nn::save_torch<rnn>(*r, out, nn::what::gradients);
    f = st::read(out);
    REQUIRE(names_of(f) == std::vector<std::string>{"bias_hh_l0", "bias_ih_l0", "weight_hh_l0", "weight_ih_l0"});
    CHECK(f.at("weight_ih_l0").shape == std::vector<std::size_t>{6, 5});
    const auto wi = st::to_vector<double>(f.at("weight_ih_l0"));
    const double* gx = r->grad(r->slot("r_W_x"));
    for (std::size_t h = 0; h < 6; ++h)
        for (std::size_t x = 0; x < 5; ++x) mismatches += wi[h * 5 + x] != gx[x * 6 + h];
    CHECK(mismatches == 0);
    const std::vector<double> gb(r->grad(r->slot("r_b")), r->grad(r->slot("r_b")) + 6);
    CHECK(std::any_of(gb.begin(), gb.end(), [](double v) { return v != 0; }));
    CHECK(st::to_vector<double>(f.at("bias_ih_l0")) == gb);
    CHECK(st::to_vector<double>(f.at("bias_hh_l0")) == gb);

    // An array of one's own (here each parameter's gradient doubled, W_h's left out): like a gradient,
    // both biases hold it; like the values, bias_hh_l0 holds zeros.
    std::map<std::size_t, std::vector<double>> twice;
    for (std::size_t s = 0; s < r->size(); ++s) {
        const double* g = r->grad(s);
        for (std::size_t i = 0; i < r->at(s).shape.size(); ++i) twice[s].push_back(2 * g[i]);
    }
    auto doubled = [&](std::size_t s) -> const double* { return r->at(s).name == "r_W_h" ? nullptr : twice.at(s).data(); };
    std::vector<double> gb2;
    for (double v : gb) gb2.push_back(2 * v);
    nn::save_torch<rnn>(*r, out, nn::parameter_array<double>("twice the gradients", nn::what::gradients, doubled));
    f = st::read(out, &meta);
    CHECK(meta == st::metadata{{"format", "pt"}, {"contents", "twice the gradients"}, {"frozen", "weight_hh_l0"}, {"partly_frozen", ""}});
    REQUIRE(names_of(f) == std::vector<std::string>{"bias_hh_l0", "bias_ih_l0", "weight_ih_l0"});
    CHECK(st::to_vector<double>(f.at("bias_ih_l0")) == gb2);
    CHECK(st::to_vector<double>(f.at("bias_hh_l0")) == gb2);
    nn::save_torch<rnn>(*r, out, nn::parameter_array<double>("twice the gradients", nn::what::values, doubled));
    f = st::read(out);
    CHECK(st::to_vector<double>(f.at("bias_ih_l0")) == gb2);
    CHECK(st::to_vector<double>(f.at("bias_hh_l0")) == std::vector<double>(6, 0.0));
}

// ---- A model around nn.TransformerEncoder (docs/guide/fine-tuning.md) ------------------------------

namespace tagger_model {
// [tagger]
// PyTorch's Tagger (tests/torch_layouts_ref.py): emb = nn.Embedding(V, D); encoder = nn.TransformerEncoder(
// nn.TransformerEncoderLayer(D, Heads, F, activation="gelu", batch_first=True), L, norm=nn.LayerNorm(D));
// head = nn.Linear(D, C). Its state_dict: emb.weight, encoder.layers.{l}.*, encoder.norm.*, head.*.
constexpr int V = 13, D = 16, Heads = 4, F = 32, L = 2, C = 5;
using layer = nn::encoder_block<"", D, Heads, F, nn::norm_placement::post, nn::activation::gelu_erf>;
using embed = param<"emb.weight", V, D>;
using final_norm = nn::layer_norm<"encoder.norm.", D>;  // encoder.norm.weight, encoder.norm.bias
using head = nn::linear<"head.", D, C>;
// Each part at its prefix in the state_dict; the layers' parameters under the program's repeat prefix.
using tagger = nn::torch_model<nn::torch_at<"emb.", embed>,
                               nn::torch_repeat<"encoder.layers.", L, layer>,
                               nn::torch_at<"encoder.norm.", final_norm>,
                               nn::torch_at<"head.", head>>;
constexpr auto logits() {
    auto x = embedding(embed{}, index_input<"tokens", B, T>{});
    auto h = repeat<L, "encoder.layers.">([](auto a) { return layer{}(a); }, x);  // self.encoder's layers
    return head{}(final_norm{}(h));
}
constexpr auto loss() { return softmax_cross_entropy(logits(), index_input<"tags", B, T>{}); }
// [tagger]

// [tagger-tree]
// The same layout as PyTorch's tree of modules: torch_at adds its prefix to the state_dict's names, not
// to the parameters', so the parts inside "encoder." keep the program's names ("encoder.layers.", the
// last argument of torch_repeat, and final_norm's "encoder.norm.").
using encoder = nn::torch_model<nn::torch_repeat<"layers.", L, layer, "encoder.layers.">, nn::torch_at<"norm.", final_norm>>;
using tagger_tree = nn::torch_model<nn::torch_at<"emb.", embed>, nn::torch_at<"encoder.", encoder>, nn::torch_at<"head.", head>>;
// [tagger-tree]
}  // namespace tagger_model

TEST_CASE("nn.TransformerEncoder with its final norm inside a bigger model: loaded in one call, fine-tuned with the encoder frozen",
          "[torch_layout][python]") {
    using namespace tagger_model;
    const temp_dir& ref = reference();
    ctg::testing::run_python_reference(ref, CTG_TORCH_LAYOUTS_REF " tagger");
    const auto want = st::read(ref / "tagger_ref.safetensors");
    auto indices = [&](const char* name) {
        const auto v = st::to_vector<std::int64_t>(want.at(name));
        return xt::xtensor<std::int64_t, 2>(xt::adapt(v, std::vector<std::size_t>{2, 6}));
    };
    const auto tokens = indices("tokens"), tags = indices("tags");
    const std::string path = ref / "tagger.safetensors";
    temp_dir dir;
    const std::string grads = dir / "grads.safetensors";

    // [tagger-load]
    auto store = std::make_shared<parameter_store<double>>();
    nn::load_torch<tagger>(*store, path);  // all 29 tensors: the embedding, both layers, the final norm, the head
    program_for<double, options{.inference = true}, decltype(logits())> predict(store);
    predict.feed<"tokens">(tokens);
    predict.forward();
    // [tagger-load]
    CHECK(store->strict());
    CHECK(store->size() == 21);  // emb.weight, 16 stacked (2, ...), encoder.norm.weight and .bias, head.weight and .bias
    CHECK(store->at(store->slot("encoder.layers.q.weight")).shape.to_vector() == std::vector<std::size_t>{2, 16, 16});
    const auto y = predict.output();
    const double err = relative_error({y.begin(), y.end()}, st::to_vector<double>(want.at("logits")));
    INFO("logits: relative error " << err);
    CHECK(err <= 1e-12);
    const std::vector<double> loaded(store->values().begin(), store->values().end());

    // [tagger-finetune]
    // The encoder frozen, its layers and its final norm (PyTorch: model.encoder.requires_grad_(False)):
    // no gradient, no update. The embedding and the head train.
    program_for<double, options{.frozen = "encoder."}, decltype(loss())> train(store);
    optim::sgd<double> opt({.lr = 0.5});
    train.feed<"tokens">(tokens);
    train.feed<"tags">(tags);
    train.zero_grad();
    const double before = train.forward();
    train.backward();
    nn::save_torch<tagger>(*store, grads, nn::what::gradients);  // as PyTorch's p.grad: emb.weight, head.weight, head.bias
    opt.step(train.params());
    // [tagger-finetune]
    const double torch_loss = st::to_vector<double>(want.at("loss"))[0];
    CHECK(std::abs(before - torch_loss) <= 1e-12 * std::abs(torch_loss));
    // The gradients against PyTorch's: the embedding's flows back through the frozen layers and norm.
    std::string frozen;
    for (const nn::layout_entry& e : nn::torch_layout<tagger>::entries())
        if (e.name.starts_with("encoder.")) frozen += (frozen.empty() ? "" : " ") + e.name;
    check_against_pytorch(grads, "tagger", frozen);
    // The frozen parameters have no gradient and kept every bit; the others moved, and the loss fell.
    for (std::size_t s = 0; s < store->size(); ++s) {
        const auto& e = store->at(s);
        INFO(e.name);
        const bool in_encoder = e.name.starts_with("encoder.");
        CHECK(store->frozen(s) == in_encoder);
        if (in_encoder) CHECK_THROWS_WITH(store->grad(s), Contains("is frozen"));
        CHECK(std::equal(store->value(s), store->value(s) + e.shape.size(), loaded.data() + e.offset) == in_encoder);
    }
    CHECK(train.forward() < before);

    // The nested layout is the same; a layout without the final norm is refused, naming its tensors.
    const auto flat = nn::torch_layout<tagger>::entries(), tree = nn::torch_layout<tagger_tree>::entries();
    REQUIRE(flat.size() == tree.size());
    for (std::size_t i = 0; i < flat.size(); ++i) {
        CHECK(flat[i].name == tree[i].name);
        CHECK(flat[i].params == tree[i].params);
        CHECK(flat[i].layer == tree[i].layer);
    }
    using without_norm =
        nn::torch_model<nn::torch_at<"emb.", embed>, nn::torch_repeat<"encoder.layers.", L, layer>, nn::torch_at<"head.", head>>;
    parameter_store<double> other;
    CHECK_THAT(io_message([&] { nn::load_torch<without_norm>(other, path); }),
               Contains("tensors the module does not have: 'encoder.norm.bias', 'encoder.norm.weight'"));
    CHECK(other.size() == 0);
}
