// key_padding_mask(pad) (ops/ctgraph/ops/masks.hpp): PyTorch's key_padding_mask, a (B, m) index_input
// of 0/1 with 1 (True) where a key is padding, anywhere in the row. Checked: equal to
// key_padding(lengths) when the padding is at the end; against a float64 reference written here
// when it is at the start and in the middle, through the fused ops (several row blocks per matrix,
// heads side by side, n != m); finite differences; PyTorch's nn.MultiheadAttention,
// nn.TransformerEncoderLayer (with a causal src_mask) and nn.TransformerEncoder (repeat) given the
// same mask (tests/torch_layouts_ref.py's "padding" mode); its errors; the guide's example.
#include <catch2/catch.hpp>

#include "gradcheck.hpp"
#include "temp_dir.hpp"

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <limits>
#include <map>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include <ctgraph/ctgraph.hpp>
#include <ctgraph/xtensor.hpp>
#include <ctgraph/nn/torch_layout.hpp>

#ifndef CTG_TORCH_LAYOUTS_REF
#error "CTG_TORCH_LAYOUTS_REF (the path of tests/torch_layouts_ref.py) must be defined by the build"
#endif

using namespace ctg;
using ctg::testing::check_config;
using ctg::testing::check_gradients;
using Catch::Matchers::Contains;

namespace {
inline constexpr dim B = dyn('B'), N = dyn('N'), Mk = dyn('M');
constexpr int H = 3, dk = 4, dval = 2;  // three heads; one head of 12 for ctg::attention
using Q = input<"q", B, N, H * dk>;
using K = input<"k", B, Mk, H * dk>;
using V = input<"v", B, Mk, H * dval>;
using G = input<"g", B, N, H * dval>;
using Len = index_input<"len", B>;
using Pad = index_input<"pad", B, Mk>;

std::vector<double> random_values(std::size_t count, unsigned seed) {
    std::mt19937_64 rng(seed);
    std::uniform_real_distribution<double> u(-2, 2);
    std::vector<double> v(count);
    for (auto& x : v) x = u(rng);
    return v;
}

/// One run's inputs: q (2, n, 12), k (2, m, 12), v (2, m, 6), g (2, n, 6), and the padding.
struct data {
    std::size_t n, m;
    std::vector<index_t> pad, len;
    std::vector<double> q, k, v, g;
    data(std::size_t n_, std::size_t m_, std::vector<index_t> pad_, std::vector<index_t> len_ = {})
        : n(n_), m(m_), pad(std::move(pad_)), len(std::move(len_)), q(random_values(2 * n * H * dk, 51)),
          k(random_values(2 * m * H * dk, 52)), v(random_values(2 * m * H * dval, 53)), g(random_values(2 * n * H * dval, 54)) {}
    template <class P>
    double run(P& p) const {
        p.feed("q", q.data(), rshape{3, {2, n, H * dk}});
        p.feed("k", k.data(), rshape{3, {2, m, H * dk}});
        p.feed("v", v.data(), rshape{3, {2, m, H * dval}});
        p.feed("g", g.data(), rshape{3, {2, n, H * dval}});
        if constexpr (P::template has_input<"pad">) p.feed("pad", pad.data(), rshape{2, {2, m}});
        if constexpr (P::template has_input<"len">) p.feed("len", len.data(), rshape{1, {2}});
        p.poison_arena(true);  // an element read before it is written shows as NaN
        const double loss = p.forward();
        p.backward();
        return loss;
    }
};

/// Rows of padding at the end of each row: 1 from lengths[b] on.
std::vector<index_t> padding_after(const std::vector<index_t>& lengths, std::size_t m) {
    std::vector<index_t> pad(lengths.size() * m);
    for (std::size_t b = 0; b < lengths.size(); ++b)
        for (std::size_t j = 0; j < m; ++j) pad[b * m + j] = j >= std::size_t(lengths[b]);
    return pad;
}

template <class X, class Y>
double worst(const X& x, const Y& y) {
    REQUIRE(x.size() == y.size());
    double w = 0;
    for (std::size_t i = 0; i < x.size(); ++i) w = std::max(w, std::abs(double(x.data()[i]) - double(y.data()[i])));
    return w;
}

/// max |x - y| / max |y|.
template <class X, class Y>
double relative(const X& x, const Y& y) {
    double scale = 0;
    for (std::size_t i = 0; i < y.size(); ++i) scale = std::max(scale, std::abs(double(y.data()[i])));
    return worst(x, y) / scale;
}

/// Loss and gradients of two programs over the same data: the largest relative difference (the
/// loss to max(1, |loss|), each gradient to its largest element).
template <class A, class Bp>
double worst_difference(A& a, Bp& b, const data& d) {
    const double la = d.run(a), lb = d.run(b);
    REQUIRE(std::isfinite(la));
    double w = std::abs(la - lb) / std::max(1.0, std::abs(lb));
    w = std::max(w, relative(a.template input_grad<"q">(), b.template input_grad<"q">()));
    w = std::max(w, relative(a.template input_grad<"k">(), b.template input_grad<"k">()));
    return std::max(w, relative(a.template input_grad<"v">(), b.template input_grad<"v">()));
}

template <expr E>
using grad_program = decltype(compile<double, options{.input_grads = true}>(sum(mul(E{}, G{}))));
}  // namespace

TEST_CASE("key_padding_mask equals key_padding(lengths) when the padding is at the end", "[attention][key_padding]") {
    // The fused scaled dot product (one head of 12), heads side by side (nn::attention_over_heads:
    // the fused ops with Heads = 3), causal with it, and a score without fused weights (bilinear:
    // masked_softmax, then the value product). Matrices of several row blocks, n = m, n < m, n > m.
    auto plain = [](auto mask) { return attention(Q{}, K{}, V{}, mask); };
    auto heads = [](auto mask) { return nn::attention_over_heads<H>(Q{}, K{}, V{}, mask); };
    auto causal_heads = [](auto mask) { return nn::attention_over_heads<H>(Q{}, K{}, V{}, causal{} && mask); };
    auto bilinear = [](auto mask) { return attention(Q{}, K{}, V{}, bilinear_score<"W", H * dk, H * dk>{}, mask); };
    grad_program<decltype(plain(key_padding_mask(Pad{})))> p1;
    grad_program<decltype(plain(key_padding(Len{})))> l1;
    grad_program<decltype(heads(key_padding_mask(Pad{})))> p2;
    grad_program<decltype(heads(key_padding(Len{})))> l2;
    grad_program<decltype(causal_heads(key_padding_mask(Pad{})))> p3;
    grad_program<decltype(causal_heads(key_padding(Len{})))> l3;
    grad_program<decltype(bilinear(key_padding_mask(Pad{})))> p4;
    grad_program<decltype(bilinear(key_padding(Len{})))> l4(p4.shared_params());
    p4.params().init(9);
    for (auto [n, m, lengths] : {std::tuple<std::size_t, std::size_t, std::vector<index_t>>{150, 150, {150, 67}},
                                 {70, 140, {140, 1}}, {140, 70, {33, 70}}, {4, 5, {2, 5}}}) {
        INFO("n " << n << ", m " << m);
        const data d(n, m, padding_after(lengths, m), lengths);
        CHECK(worst_difference(p1, l1, d) == 0.0);
        CHECK(worst_difference(p2, l2, d) == 0.0);
        CHECK(worst_difference(p3, l3, d) == 0.0);
        CHECK(worst_difference(p4, l4, d) == 0.0);
        // The weights too (the value product's input).
        CHECK(worst(p2.value_of(nn::attention_weights_over_heads<H>(Q{}, K{}, key_padding_mask(Pad{}))),
                    l2.value_of(nn::attention_weights_over_heads<H>(Q{}, K{}, key_padding(Len{})))) == 0.0);
    }
}

namespace {
/// The float64 reference: per sequence b and head h, O_i = sum_j p_ij v_j with p_i the softmax of
/// q_i . k_j / sqrt(dh) over the keys j that are not padding (and, if causal, j <= i + m - n); a
/// query with no such key gives 0. q (2, n, heads dh), k (2, m, heads dh), v (2, m, heads dv).
std::vector<double> reference_attention(const data& d, int heads, bool causal_too) {
    const std::size_t n = d.n, m = d.m, dh = H * dk / heads, dv = H * dval / heads, wq = H * dk, wv = H * dval;
    std::vector<double> out(2 * n * wv, 0.0);
    for (std::size_t b = 0; b < 2; ++b)
        for (int h = 0; h < heads; ++h)
            for (std::size_t i = 0; i < n; ++i) {
                std::vector<double> s(m, -std::numeric_limits<double>::infinity());
                double mx = -std::numeric_limits<double>::infinity();
                for (std::size_t j = 0; j < m; ++j) {
                    if (d.pad[b * m + j] != 0) continue;
                    if (causal_too && (long long)j > (long long)i + (long long)m - (long long)n) continue;
                    double dot = 0;
                    for (std::size_t c = 0; c < dh; ++c) dot += d.q[(b * n + i) * wq + h * dh + c] * d.k[(b * m + j) * wq + h * dh + c];
                    s[j] = dot / std::sqrt(double(dh));
                    mx = std::max(mx, s[j]);
                }
                if (mx == -std::numeric_limits<double>::infinity()) continue;  // no key: zeros
                double total = 0;
                for (std::size_t j = 0; j < m; ++j) total += s[j] = std::exp(s[j] - mx);  // exp(-inf) = 0
                for (std::size_t j = 0; j < m; ++j)
                    for (std::size_t c = 0; c < dv; ++c) out[(b * n + i) * wv + h * dv + c] += s[j] / total * d.v[(b * m + j) * wv + h * dv + c];
            }
    return out;
}

/// Padding at the start, in the middle and at the end: row 0 every third key from 1 and the last
/// two, row 1 its first 40 % and every fifth key from 2.
std::vector<index_t> scattered_padding(std::size_t m) {
    std::vector<index_t> pad(2 * m);
    for (std::size_t j = 0; j < m; ++j) {
        pad[j] = j % 3 == 1 || j + 2 >= m;
        pad[m + j] = j < 2 * m / 5 || j % 5 == 2;
    }
    return pad;
}
}  // namespace

TEST_CASE("key_padding_mask with padding at the start and in the middle: against a float64 reference", "[attention][key_padding]") {
    const auto mask = key_padding_mask(Pad{});
    auto plain = compile<double, options{.input_grads = true}>(sum(mul(attention(Q{}, K{}, V{}, mask), G{})));
    auto heads = compile<double, options{.input_grads = true}>(sum(mul(nn::attention_over_heads<H>(Q{}, K{}, V{}, mask), G{})));
    const auto over_heads_causal = nn::attention_over_heads<H>(Q{}, K{}, V{}, causal{} && mask);
    auto causal_heads = compile<double, options{.input_grads = true}>(sum(mul(over_heads_causal, G{})));
    // The same heads split into a batch axis and the softmax composed: gradients to compare with.
    const auto split = nn::merge_heads(matmul(
        masked_softmax(scaled_dot_score::scores(nn::split_heads<H>(Q{}), nn::split_heads<H>(K{})), causal{} && mask), nn::split_heads<H>(V{})));
    auto composed = compile<double, options{.input_grads = true}>(sum(mul(split, G{})));
    for (auto [n, m] : {std::pair<std::size_t, std::size_t>{150, 150}, {70, 140}, {140, 70}, {4, 7}}) {
        INFO("n " << n << ", m " << m);
        const data d(n, m, scattered_padding(m));
        d.run(plain);
        CHECK(worst(plain.value_of(attention(Q{}, K{}, V{}, mask)), reference_attention(d, 1, false)) <= 1e-13);
        d.run(heads);
        CHECK(worst(heads.value_of(nn::attention_over_heads<H>(Q{}, K{}, V{}, mask)), reference_attention(d, H, false)) <= 1e-13);
        // causal too (n > m: the first queries see no key, and give zeros)
        CHECK(worst_difference(causal_heads, composed, d) <= 1e-12);
        CHECK(worst(causal_heads.value_of(over_heads_causal), reference_attention(d, H, true)) <= 1e-13);
    }
}

TEST_CASE("gradcheck: attention under key_padding_mask, alone, causal, over heads, in modules and in repeat", "[gradcheck][key_padding]") {
    // Row 0 pads keys 1 and 3; row 1 keys 0, 1 and 4: under the causal mask its first query (at key
    // position 1 of 5) sees no key, a row of zeros with zero gradient. The mask is data: no gradient.
    check_config cfg{.dims = {{'B', 2}, {'N', 4}, {'M', 5}}};
    cfg.index_values = {{"pad", {0, 1, 0, 1, 0, 1, 1, 0, 0, 1}}};
    const auto mask = key_padding_mask(Pad{});
    CHECK(check_gradients(attention(Q{}, K{}, V{}, mask), cfg) > 0);
    CHECK(check_gradients(attention(Q{}, K{}, V{}, causal{} && mask), cfg) > 0);
    CHECK(check_gradients(nn::attention_over_heads<H>(Q{}, K{}, V{}, mask), cfg) > 0);
    CHECK(check_gradients(attention(Q{}, K{}, V{}, bilinear_score<"W", H * dk, H * dk>{}, mask), cfg) > 0);
    // Self-attention over a sequence of M positions, the mask read in the block of a repeat (as
    // key_padding(lengths) is) or passed to it as an extra argument.
    using X = input<"x", B, Mk, 8>;
    using block = nn::encoder_block<"", 8, 2, 12>;
    CHECK(check_gradients(nn::multi_head_attention<"a.", 8, 2>::self(X{}, mask), cfg) > 0);
    CHECK(check_gradients(repeat<2, "enc.">([](auto h) { return block{}(h, key_padding_mask(Pad{})); }, X{}), cfg) > 0);
    CHECK(check_gradients(repeat<2, "enc.">([](auto h, auto pad) { return block{}(h, key_padding_mask(pad)); }, X{}, Pad{}), cfg) > 0);
}

// ---- PyTorch --------------------------------------------------------------------------------------

namespace {
namespace st = ctg::safetensors;
inline constexpr dim T = dyn('T'), S = dyn('S');
using X16 = input<"x", B, T, 16>;
using M16 = input<"m", B, S, 16>;
using PadS = index_input<"pad", B, S>;  // over the memory's keys
using PadT = index_input<"pad", B, T>;  // over the sequence's own
using mha = nn::multi_head_attention<"attn.", 16, 4>;
using enc = nn::encoder_block<"enc.", 16, 4, 32, nn::norm_placement::post, nn::activation::gelu_erf, scaled_dot_score, 0.0, 1e-6>;
using layer = nn::encoder_block<"", 16, 4, 32, nn::norm_placement::post, nn::activation::gelu_erf>;

/// tests/torch_layouts_ref.py's "padding" files, written once per run.
const ctg::testing::temp_dir& padding_reference() {
    static const ctg::testing::temp_dir dir("ctg_key_padding_");
    static const bool written = (ctg::testing::run_python_reference(dir, CTG_TORCH_LAYOUTS_REF " padding"), true);
    (void)written;
    return dir;
}

/// The relative error (max |a - b| / max |b|) of e's output over case c's state_dict, loaded as
/// Module, against PyTorch's, fed the case's x, m and pad.
template <class Module, class E>
double padding_case_error(const std::string& c, E) {
    INFO("case " << c);
    const auto& dir = padding_reference();
    static const auto expected = st::read(dir / "expected_padding.safetensors");
    auto store = std::make_shared<parameter_store<double>>();
    nn::load_torch<Module>(*store, dir / (c + ".safetensors"));
    program_for<double, options{.inference = true}, E> p(store);
    std::vector<std::vector<double>> keep;
    for (const char* n : {"x", "m"}) {
        const auto it = expected.find(c + "." + n);
        if (it == expected.end()) continue;
        keep.push_back(st::to_vector<double>(it->second));
        p.feed(n, keep.back().data(), rshape{3, {it->second.shape[0], it->second.shape[1], it->second.shape[2]}});
    }
    const st::tensor& pad = expected.at(c + ".pad");
    const auto pad64 = st::to_vector<std::int64_t>(pad);
    const std::vector<index_t> pad_ids(pad64.begin(), pad64.end());
    REQUIRE(std::count(pad_ids.begin(), pad_ids.end(), 1) > 0);
    p.feed("pad", pad_ids.data(), rshape{2, {pad.shape[0], pad.shape[1]}});
    p.forward();
    const auto want = st::to_vector<double>(expected.at(c + ".y"));
    auto got = p.template output<0>();
    REQUIRE(got.size() == want.size());
    double w = 0, scale = 0;
    for (std::size_t i = 0; i < want.size(); ++i) w = std::max(w, std::abs(got.data()[i] - want[i])), scale = std::max(scale, std::abs(want[i]));
    return w / scale;
}
}  // namespace

TEST_CASE("PyTorch's key_padding_mask with padding not at the end: nn.MultiheadAttention and the encoder layers",
          "[key_padding][torch_layout][python]") {
    // nn.MultiheadAttention(x, m, m, key_padding_mask): row 0 ignores keys 1 and 3, row 1 keys 0, 5, 6.
    CHECK(padding_case_error<mha>("mha_pad", mha::cross(X16{}, M16{}, key_padding_mask(PadS{}))) <= 1e-12);
    // nn.TransformerEncoderLayer(x, src_mask=causal, src_key_padding_mask): both masks combined.
    CHECK(padding_case_error<enc>("enc_pad", enc{}(X16{}, causal{} && key_padding_mask(PadT{}))) <= 1e-12);
    // nn.TransformerEncoder of two layers: the mask read by the block of a repeat.
    auto stack = repeat<2, "layers.">([](auto h) { return layer{}(h, key_padding_mask(PadT{})); }, X16{});
    CHECK(padding_case_error<nn::torch_repeat<"layers.", 2, layer>>("stack_pad", stack) <= 1e-12);
}

// ---- Errors ---------------------------------------------------------------------------------------

TEST_CASE("key_padding_mask: a pad of another shape, a row of padding alone and a value not 0/1 are errors naming the input",
          "[key_padding][errors]") {
    auto prog = compile<float>(sum(attention(Q{}, K{}, V{}, key_padding_mask(Pad{}))));
    const std::size_t n = 4, m = 7;
    prog.feed<"q">(xt::xtensor<float, 3>(xt::ones<float>({2ul, n, std::size_t(H * dk)})));
    prog.feed<"k">(xt::xtensor<float, 3>(xt::ones<float>({2ul, m, std::size_t(H * dk)})));
    prog.feed<"v">(xt::xtensor<float, 3>(xt::ones<float>({2ul, m, std::size_t(H * dval)})));
    // Another number of keys, another batch: the program's own check names both inputs and shapes.
    prog.feed<"pad">(xt::xtensor<int, 2>(xt::zeros<int>({2, 6})));
    CHECK_THROWS_AS(prog.forward(), shape_error);
    CHECK_THROWS_WITH(prog.forward(), Contains("dimension 'M' disagrees") && Contains("'pad' of shape (2,6)") && Contains("(2,7,"));
    prog.feed<"pad">(xt::xtensor<int, 2>(xt::zeros<int>({3, 7})));
    CHECK_THROWS_WITH(prog.forward(), Contains("dimension 'B' disagrees") && Contains("'pad' of shape (3,7)"));
    // A sequence of padding alone: its queries would see no key (PyTorch: NaN). An index_error naming the row.
    prog.feed<"pad">(xt::xtensor<int, 2>{{0, 1, 0, 1, 0, 0, 0}, {1, 1, 1, 1, 1, 1, 1}});
    CHECK_THROWS_AS(prog.forward(), index_error);
    CHECK_THROWS_WITH(prog.forward(), Contains("ctg::key_padding_mask: row 1 of input 'pad' marks all 7 keys as padding"));
    // A value other than 0 and 1 (token ids fed by mistake, say).
    prog.feed<"pad">(xt::xtensor<int, 2>{{0, 1, 0, 2, 0, 0, 0}, {1, 0, 0, 0, 0, 0, 0}});
    CHECK_THROWS_AS(prog.forward(), index_error);
    CHECK_THROWS_WITH(prog.forward(), Contains("value 2 at (0,3) of input 'pad' is neither 0 (a key to attend to) nor 1 (padding"));
    prog.feed<"pad">(xt::xtensor<int, 2>{{0, 1, 0, 1, 0, 0, 0}, {1, 0, 0, 0, 0, 0, 1}});
    CHECK(std::isfinite(prog.forward()));

    // The mask's own shape check (what a program's dimension letters already ensure).
    const std::vector<index_t> six(2 * 6, 0);
    const view pad{const_cast<index_t*>(six.data()), rshape{2, {2, 6}}};
    const std::string_view name = "pad";
    const mask_args args{.x = &pad, .names = &name, .n = 4, .m = 7, .batches = 2};
    CHECK_THROWS_AS(key_padding_mask<Pad>::validate(args), shape_error);
    CHECK_THROWS_WITH(key_padding_mask<Pad>::validate(args),
                      Contains("ctg::key_padding_mask: input 'pad' has shape (2,6); the scores need (2,7): one entry per sequence and key"));
}

// ---- The guide's example (docs/guide/attention.md, "Padding anywhere") ------------------------------

TEST_CASE("key_padding_mask: the guide's example, an encoder over sequences padded at either end", "[key_padding]") {
    // guide: begin
    using Tokens = index_input<"tokens", B, T>;
    using Pad = index_input<"pad", B, T>;  // 1 where the position is padding: PyTorch's True
    using block = nn::encoder_block<"", 16, 4, 32>;
    auto encoded = repeat<2, "layers.">([](auto h) { return block{}(h, key_padding_mask(Pad{})); },
                                        embedding(param<"emb", 11, 16>{}, Tokens{}));
    auto prog = compile<float, options{.inference = true}>(encoded);
    prog.params().init(1);
    prog.feed<"tokens">(xt::xtensor<int, 2>{{0, 3, 4, 5, 0}, {6, 7, 8, 9, 10}});
    prog.feed<"pad">(xt::xtensor<int, 2>{{1, 0, 0, 0, 1}, {0, 0, 0, 0, 0}});  // row 0: padded at both ends
    prog.forward();
    // guide: end
    const xt::xtensor<float, 3> first = prog.output();
    // Padded keys are ignored: other tokens there change no output of a position that is not padding.
    prog.feed<"tokens">(xt::xtensor<int, 2>{{9, 3, 4, 5, 2}, {6, 7, 8, 9, 10}});
    prog.forward();
    const xt::xtensor<float, 3> second = prog.output();
    for (std::size_t t = 1; t < 4; ++t)
        for (std::size_t c = 0; c < 16; ++c) CHECK(first(0, t, c) == second(0, t, c));
    CHECK(first(0, 0, 0) != second(0, 0, 0));  // (the padded positions' own outputs do change)
    // A row of padding alone is refused inside the repeat too, naming the input.
    prog.feed<"pad">(xt::xtensor<int, 2>{{1, 0, 0, 0, 1}, {1, 1, 1, 1, 1}});
    CHECK_THROWS_WITH(prog.forward(), Contains("row 1 of input 'pad' marks all 5 keys as padding"));
}
