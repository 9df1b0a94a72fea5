// bench/workloads.hpp: the reference workloads of shared/WORKLOADS.md written with ctgraph, and
// what ctg-bench needs of each: initialise, feed a batch, run a training step, and map between
// ctgraph's parameters and the PyTorch dump (names are PyTorch's; weights stored [out, in] there
// are stored transposed [in, out] here, because ctgraph writes x W, not W x).
#pragma once
#include <cstddef>
#include <map>
#include <random>
#include <set>
#include <string>
#include <type_traits>
#include <vector>

#include <boost/hana/type.hpp>
#include <boost/hana/tuple.hpp>

#include <ctgraph/ctgraph.hpp>
#include <ctgraph/xtensor.hpp>
#include <ctgraph/quantize.hpp>
#include <ctgraph/train.hpp>
#include <ctgraph/npz.hpp>
#include <ctgraph/nn/lora.hpp>

namespace ctg::bench {

inline constexpr dim B = dyn('B');

/// The numbers a workload computes with, as its template argument: float or double (products in
/// the same type), or bf16_mixed: float storage with bf16 products (options{.precision =
/// precision::bf16}; ctg-bench --precision bf16).
/// Or quantised<W>: float storage and products, the decoding programs' weights read from int8 or
/// 4-bit copies (options{.weights = W}; ctg-bench --weights int8|q4; decode workloads only).
struct bf16_mixed {};
template <weight_format W>
struct quantised {};
template <class P>
struct numerics {
    using scalar = P;
    static constexpr ctg::precision products = ctg::precision::f32;
    static constexpr weight_format weights = weight_format::f32;
};
template <>
struct numerics<bf16_mixed> {
    using scalar = float;
    static constexpr ctg::precision products = ctg::precision::bf16;
    static constexpr weight_format weights = weight_format::f32;
};
template <weight_format W>
struct numerics<quantised<W>> {
    using scalar = float;
    static constexpr ctg::precision products = ctg::precision::f32;
    static constexpr weight_format weights = W;
};
template <class P>
using scalar_of = typename numerics<P>::scalar;
/// The options of a workload's training program in numbers P.
template <class P>
inline constexpr options options_of{.precision = numerics<P>::products};

/// One training step (forward, loss, backward, optimizer update), the same for every workload.
/// `fused`: ctg::train_step, each parameter's update inside backward (ctg-bench --step fused).
template <class W>
struct workload_base {
    bool fused = false;
    auto& params() { return static_cast<W&>(*this).prog.params(); }
    auto step(bool update = true) {
        W& w = static_cast<W&>(*this);
        using T = typename decltype(w.prog)::scalar;
        if constexpr (optim::optimizer_for<decltype(w.opt), T>)
            if (fused && update) return train_step(w.prog, w.opt);
        w.prog.zero_grad();
        const auto l = w.prog.forward();
        w.prog.backward();
        if (update) w.opt.step(w.prog.params());
        return l;
    }
};

/// The `mlp` workload: 784 -> 256 -> 10, ReLU, softmax cross-entropy (mean), SGD lr 0.1, batch 64.
template <class P>
struct mlp : workload_base<mlp<P>> {
    using T = scalar_of<P>;
    static constexpr precision products = numerics<P>::products;
    static constexpr const char* name = "mlp";
    static constexpr std::size_t batch = 64;
    using X = input<"x", B, 784>;
    using Y = index_input<"y", B>;
    /// The logits (B, 10): what an inference program of the model computes (ctg-onnx-bench).
    static constexpr auto forward() {
        auto h = relu(affine(X{}, param<"fc1_weight", 784, 256>{}, param<"fc1_bias", 256>{}));
        return affine(h, param<"fc2_weight", 256, 10>{}, param<"fc2_bias", 10>{});
    }
    static constexpr auto loss() { return softmax_cross_entropy(forward(), Y{}); }
    decltype(compile<T, options_of<P>>(loss())) prog = compile<T, options_of<P>>(loss());
    optim::sgd<T> opt{{.lr = 0.1}};

    /// PyTorch weights stored [out, in] (transposed here).
    static std::set<std::string> transposed() { return {"fc1_weight", "fc2_weight"}; }
    /// Multiply-adds of the matrix products x2, forward + backward (3x forward), as torch_ref.py counts.
    static double flops() { return 3.0 * (2.0 * batch * 784 * 256 + 2.0 * batch * 256 * 10); }

    void random_batch(unsigned long long seed) {
        std::mt19937_64 rng(seed);
        std::normal_distribution<double> n01;
        std::uniform_int_distribution<int> cls(0, 9);
        xt::xtensor<T, 2> x = xt::xtensor<T, 2>::from_shape({batch, 784});
        for (auto& v : x) v = T(n01(rng));
        xt::xtensor<int, 1> y = xt::xtensor<int, 1>::from_shape({batch});
        for (auto& v : y) v = cls(rng);
        prog.template feed<"x">(x);
        prog.template feed<"y">(y);
    }
    void feed_dump(const std::map<std::string, npz::array>& b) {
        const auto& x = b.at("x");
        const auto& y = b.at("y");
        auto xv = npz::to_vector<T>(x);
        prog.feed("x", xv.data(), rshape{2, {x.shape[0], x.shape[1]}});
        auto yv = npz::to_vector<index_t>(y);
        prog.feed("y", yv.data(), rshape{1, {y.shape[0]}});
    }
};

/// The `rnn` workload: Elman RNN language model, vocab 65, embed 64, hidden 128, T 64, batch 16,
/// cross-entropy at every step (mean over T x B), full BPTT, Adam lr 1e-3. Time-major inside:
/// the dump's [B, T] token arrays are fed transposed as (T, B).
template <class P>
struct rnn : workload_base<rnn<P>> {
    using T = scalar_of<P>;
    static constexpr precision products = numerics<P>::products;
    static constexpr const char* name = "rnn";
    static constexpr std::size_t V = 65, E = 64, H = 128, steps = 64, batch = 16;
    static constexpr dim Tm = dyn('T');
    using X = index_input<"x", Tm, B>;
    using Y = index_input<"y", Tm, B>;
    /// The logits (T, B, V).
    static constexpr auto forward() {
        // x_t W_x + b for every t at once (one GEMM), then h_t = tanh(h_{t-1} W_h + that).
        auto xw = affine(embedding(param<"embed", V, E>{}, X{}), param<"W_x", E, H>{}, param<"b", H>{});
        auto hs = scan<H>([](auto h, auto p) { return tanh(h * param<"W_h", H, H>{} + p); }, xw);
        return affine(hs, param<"W_y", H, V>{}, param<"c", V>{});
    }
    static constexpr auto loss() { return softmax_cross_entropy(forward(), Y{}); }
    decltype(compile<T, options_of<P>>(loss())) prog = compile<T, options_of<P>>(loss());
    optim::adam<T> opt{{.lr = 1e-3}};

    static std::set<std::string> transposed() { return {"W_x", "W_h", "W_y"}; }
    static double flops() {
        return 3.0 * steps * (2.0 * batch * E * H + 2.0 * batch * H * H + 2.0 * batch * H * V);
    }
    void feed_tokens(const std::vector<index_t>& x_bt, const std::vector<index_t>& y_bt) {
        std::vector<index_t> x(steps * batch), y(steps * batch);
        for (std::size_t b = 0; b < batch; ++b)
            for (std::size_t t = 0; t < steps; ++t) {
                x[t * batch + b] = x_bt[b * steps + t];
                y[t * batch + b] = y_bt[b * steps + t];
            }
        prog.feed("x", x.data(), rshape{2, {steps, batch}});
        prog.feed("y", y.data(), rshape{2, {steps, batch}});
    }
    void random_batch(unsigned long long seed) {
        std::mt19937_64 rng(seed);
        std::uniform_int_distribution<int> tok(0, int(V) - 1);
        std::vector<index_t> seq(batch * (steps + 1)), x(batch * steps), y(batch * steps);
        for (auto& v : seq) v = tok(rng);
        for (std::size_t b = 0; b < batch; ++b)
            for (std::size_t t = 0; t < steps; ++t) {
                x[b * steps + t] = seq[b * (steps + 1) + t];
                y[b * steps + t] = seq[b * (steps + 1) + t + 1];
            }
        feed_tokens(x, y);
    }
    void feed_dump(const std::map<std::string, npz::array>& b) {
        const auto& x = b.at("x");
        if (x.shape != std::vector<std::size_t>{batch, steps})
            throw io_error("batch.npz: 'x' must be [16, 64] tokens for the rnn workload");
        feed_tokens(npz::to_vector<index_t>(x), npz::to_vector<index_t>(b.at("y")));
    }
};

/// The `s2s` workload: Seq2Seq with Bahdanau attention. GRU encoder, GRU decoder with additive
/// attention over the encoder states; decoder input [emb(y_{t-1}); c_t]; logits = [s_t; c_t] W_o + b_o;
/// s_0 = the last encoder state. Vocabularies 40/40, embed 64, hidden 128, attention 128, source and
/// target 24, batch 32; teacher forcing, cross-entropy (mean), Adam lr 1e-3. Time-major inside.
template <class P>
struct s2s : workload_base<s2s<P>> {
    using T = scalar_of<P>;
    static constexpr precision products = numerics<P>::products;
    static constexpr const char* name = "s2s";
    static constexpr std::size_t Vs = 40, Vt = 40, E = 64, H = 128, A = 128, S = 24, Tn = 24, batch = 32;
    static constexpr dim Sd = dyn('S'), Td = dyn('T');
    using Src = index_input<"src", Sd, B>;
    using TgtIn = index_input<"tgt_in", Td, B>;
    using TgtOut = index_input<"tgt_out", Td, B>;
    using encoder = nn::gru<"enc", E, H>;
    using score = additive_score_of<param<"attn_W_s", H, A>, param<"attn_W_h", H, A>, param<"attn_b_a", A>, param<"attn_w", A>>;
    using decoder = nn::attention_decoder<nn::gru<"dec", E + H, H>, H, score>;
    /// The logits (T, B, Vt) under teacher forcing.
    static constexpr auto forward() {
        auto hs = encoder::run(embedding(param<"src_embed", Vs, E>{}, Src{}));   // (S, B, H)
        auto outs = decoder::run(embedding(param<"tgt_embed", Vt, E>{}, TgtIn{}), permute<1, 0, 2>(hs), at_time<-1>(hs));
        return affine(outs, param<"out_W_o", 2 * H, Vt>{}, param<"out_b_o", Vt>{});   // (T, B, Vt)
    }
    static constexpr auto loss() { return softmax_cross_entropy(forward(), TgtOut{}); }
    decltype(compile<T, options_of<P>>(loss())) prog = compile<T, options_of<P>>(loss());
    optim::adam<T> opt{{.lr = 1e-3}};

    static std::set<std::string> transposed() {
        return {"enc_W_i", "enc_W_h", "dec_W_i", "dec_W_h", "attn_W_s", "attn_W_h", "out_W_o"};
    }
    static double flops() {  // torch_ref.py's formula
        const double enc = S * (2.0 * batch * E * 3 * H + 2.0 * batch * H * 3 * H), keys = 2.0 * batch * S * H * A;
        const double dec = Tn * (2.0 * batch * H * A + 2.0 * batch * S * A + 2.0 * batch * S * H +
                                 2.0 * batch * (E + H) * 3 * H + 2.0 * batch * H * 3 * H);
        return 3.0 * (enc + keys + dec + 2.0 * batch * Tn * 2 * H * Vt);
    }
    // [B, L] token arrays, time-major inside.
    void feed_tokens(const char* name, const std::vector<index_t>& bl, std::size_t len) {
        std::vector<index_t> lb(bl.size());
        for (std::size_t b = 0; b < batch; ++b)
            for (std::size_t t = 0; t < len; ++t) lb[t * batch + b] = bl[b * len + t];
        prog.feed(name, lb.data(), rshape{2, {len, batch}});
    }
    void random_batch(unsigned long long seed) {
        std::mt19937_64 rng(seed);
        std::uniform_int_distribution<int> tok(0, int(Vt) - 1);
        std::vector<index_t> src(batch * S), tgt(batch * Tn), tin(batch * Tn);
        for (auto& v : src) v = tok(rng);
        for (auto& v : tgt) v = tok(rng);
        for (std::size_t b = 0; b < batch; ++b)
            for (std::size_t t = 0; t < Tn; ++t) tin[b * Tn + t] = t == 0 ? 0 : tgt[b * Tn + t - 1];
        feed_tokens("src", src, S);
        feed_tokens("tgt_in", tin, Tn);
        feed_tokens("tgt_out", tgt, Tn);
    }
    void feed_dump(const std::map<std::string, npz::array>& b) {
        for (const char* k : {"src", "tgt_in", "tgt_out"}) {
            const auto& a = b.at(k);
            if (a.shape.size() != 2 || a.shape[0] != batch)
                throw io_error(std::string("batch.npz: '") + k + "' must be [32, L] tokens for the s2s workload");
            feed_tokens(k, npz::to_vector<index_t>(a), a.shape[1]);
        }
    }
};

/// A step without an update (the attention workloads time forward + backward only).
struct no_update {
    template <class Store>
    void step(Store&) {}
};

/// The `attn-*` workloads: one attention layer, forward + backward to Q, K, V (and the score's
/// parameters): O = softmax(S + M) V, loss = sum(O * G) for a fixed G. Batch 8, n = m = 128,
/// d_k = d_v = 64.
template <class P, fixed_string Name, class Score, class Mask, int ExtraFlopsKind>
struct attention_workload : workload_base<attention_workload<P, Name, Score, Mask, ExtraFlopsKind>> {
    using T = scalar_of<P>;
    static constexpr precision products = numerics<P>::products;
    static constexpr const char* name = Name.data;
    static constexpr std::size_t batch = 8, n = 128, m = 128, d = 64;
    using Q = input<"Q", B, n, d>;
    using K = input<"K", B, m, d>;
    using V = input<"V", B, m, d>;
    using G = input<"G", B, n, d>;
    /// The attention's output O (B, n, d).
    static constexpr auto forward() { return attention(Q{}, K{}, V{}, Score{}, Mask{}); }
    static constexpr auto loss() { return sum(mul(forward(), G{})); }
    static constexpr options opts{.precision = numerics<P>::products, .input_grads = true};  // (named: clang 14 misparses options{...} in a member's type)
    decltype(compile<T, opts>(loss())) prog = compile<T, opts>(loss());
    no_update opt;

    static std::set<std::string> transposed() { return {"W_q", "W_k"}; }  // additive: F.linear weights
    /// Inputs whose gradients the parity check compares too.
    static std::vector<std::string> input_grads() { return {"Q", "K", "V"}; }
    std::vector<double> input_grad(const std::string& k) {
        auto g = k == "Q" ? xt::xtensor<T, 3>(prog.template input_grad<"Q">())
                          : k == "K" ? xt::xtensor<T, 3>(prog.template input_grad<"K">())
                                     : xt::xtensor<T, 3>(prog.template input_grad<"V">());
        return {g.begin(), g.end()};
    }
    static double flops() {
        const double base = 2.0 * batch * n * m * d + 2.0 * batch * n * m * d;
        const double extra = ExtraFlopsKind == 1 ? 2.0 * batch * n * d * d
                             : ExtraFlopsKind == 2 ? 2.0 * batch * n * d * d + 2.0 * batch * m * d * d + 2.0 * batch * n * m * d
                                                   : 0.0;
        return 3.0 * (base + extra);
    }
    void feed_arrays(const std::map<std::string, std::vector<double>>& a) {
        for (const auto& [k, v] : a) {
            std::vector<T> t(v.begin(), v.end());
            prog.feed(k, t.data(), rshape{3, {batch, k == "K" || k == "V" ? m : n, d}});
        }
    }
    void random_batch(unsigned long long seed) {
        std::mt19937_64 rng(seed);
        std::normal_distribution<double> n01;
        std::map<std::string, std::vector<double>> a;
        for (const char* k : {"Q", "K", "V", "G"}) {
            auto& v = a[k];
            v.resize(batch * n * d);
            for (auto& x : v) x = n01(rng);
        }
        feed_arrays(a);
    }
    void feed_dump(const std::map<std::string, npz::array>& b) {
        std::map<std::string, std::vector<double>> a;
        for (const char* k : {"Q", "K", "V", "G"}) {
            const auto& arr = b.at(k);
            if (arr.shape != std::vector<std::size_t>{batch, n, d})
                throw io_error(std::string("batch.npz: '") + k + "' must be [8, 128, 64] for the attention workloads");
            a[k] = npz::to_vector<double>(arr);
        }
        feed_arrays(a);  // the dump's mask M (sdp-causal) is the causal mask given by type here
    }
};
template <class T>
struct attn_sdp : attention_workload<T, "attn-sdp", scaled_dot_score, no_mask, 0> {};
template <class T>
struct attn_sdp_causal : attention_workload<T, "attn-sdp-causal", scaled_dot_score, causal, 0> {};
template <class T>
struct attn_dot : attention_workload<T, "attn-dot", dot_score, no_mask, 0> {};
template <class T>
struct attn_bilinear : attention_workload<T, "attn-bilinear", bilinear_score<"W", 64, 64>, no_mask, 1> {};
template <class T>
struct attn_additive
    : attention_workload<T, "attn-additive", additive_score_of<param<"W_q", 64, 64>, param<"W_k", 64, 64>, void, param<"w", 64>>,
                         no_mask, 2> {};

/// A workload's options with the precision of numbers P: Opts (frozen or trainable parameters) at
/// P's products.
template <class P, options Opts>
inline constexpr options options_with = [] {
    options o = Opts;
    o.precision = numerics<P>::products;
    return o;
}();

/// The `gpt-s` and `gpt-m` workloads: decoder-only Transformer (nn::gpt): token embedding +
/// sinusoidal positions, pre-LN blocks (causal multi-head self-attention, GELU-tanh FFN of 4 d),
/// final LayerNorm, linear head; next-token cross-entropy (mean over B x T); AdamW lr 3e-4, weight
/// decay 0.1 on every parameter that trains. The blocks are one ctg::repeat over parameters stacked
/// per layer. Adapt: the projections' adapters (nn::lora for the LoRA workloads); Opts: which
/// parameters train (options::frozen, options::trainable; its precision is P's).
template <class P, fixed_string Name, int Vocab, int Context, int Width, int Heads, int Layers, std::size_t Batch,
          class Adapt = nn::no_adapter, options Opts = options{}>
struct gpt_workload : workload_base<gpt_workload<P, Name, Vocab, Context, Width, Heads, Layers, Batch, Adapt, Opts>> {
    using T = scalar_of<P>;
    static constexpr precision products = numerics<P>::products;
    static constexpr const char* name = Name.data;
    static constexpr std::size_t V = Vocab, Tn = Context, d = Width, L = Layers, batch = Batch;
    static constexpr dim Td = dyn('T');
    // Positions as torch_ref.py's float32 buffer holds them (converted by .double() in float64).
    using model = nn::gpt<Vocab, Context, Width, Heads, Layers, 4 * Width, float, 0.0, Adapt>;
    using X = index_input<"x", B, Td>;
    using Y = index_input<"y", B, Td>;
    /// The logits (B, T, V).
    static constexpr auto forward() { return model::logits(X{}); }
    static constexpr auto loss() { return model::loss(X{}, Y{}); }
    static constexpr options opts = options_with<P, Opts>;  // (named: clang 14 misparses options{...} in a member's type)
    decltype(compile<T, opts>(loss())) prog = compile<T, opts>(loss());
    optim::adam<T> opt = optim::adamw<T>({.lr = 3e-4, .weight_decay = 0.1});

    /// The program's summary at a step's sizes (ctg-bench prints its products beside those counted).
    auto summary() const { return prog.summary({{'B', batch}, {'T', Tn}}); }

    static std::set<std::string> transposed() {
        // (LoRA's factors as PEFT's Linear layers hold them: lora_A [r, in], lora_B [out, r])
        std::set<std::string> t{"blocks.q.weight", "blocks.k.weight", "blocks.v.weight", "blocks.proj.weight",
                                "blocks.fc1.weight", "blocks.fc2.weight", "head.weight"};
        for (const char* p : {"blocks.q.", "blocks.k.", "blocks.v.", "blocks.proj.", "blocks.fc1.", "blocks.fc2.", "head."})
            for (const char* f : {"lora_A", "lora_B"}) t.insert(std::string(p) + f);
        return t;
    }
    /// torch_ref.py's formula: 3 * [L (24 N d^2 + 4 B T^2 d) + 2 N d V], N = B T; with adapters
    /// (nn::lora on `adapted` projections of the blocks, the base frozen) the products that run:
    /// forward F + A, backward the base's input adjoints (its weight products do not run: L 24 N
    /// d^2 + 2 N d V), both operands of attention's two products (L 8 B T^2 d) and 2 A, where
    /// A = L adapted 4 N d r is the adapters' forward.
    static double flops() {
        const double N = double(batch * Tn);
        const double base = L * (24.0 * N * d * d + 4.0 * batch * Tn * Tn * d) + 2.0 * N * d * V;
        if constexpr (std::is_same_v<Adapt, nn::no_adapter>) {
            return 3.0 * base;
        } else {
            const double adapted = double(Adapt::template adapts<"q."> + Adapt::template adapts<"k."> +
                                          Adapt::template adapts<"v."> + Adapt::template adapts<"proj.">);
            const double A = L * adapted * 4.0 * N * d * Adapt::rank;
            return base + A + L * (24.0 * N * d * d + 8.0 * batch * Tn * Tn * d) + 2.0 * N * d * V + 2.0 * A;
        }
    }
    void feed_tokens(const std::vector<index_t>& x, const std::vector<index_t>& y) {
        prog.feed("x", x.data(), rshape{2, {batch, Tn}});
        prog.feed("y", y.data(), rshape{2, {batch, Tn}});
    }
    void random_batch(unsigned long long seed) {
        std::mt19937_64 rng(seed);
        std::uniform_int_distribution<int> tok(0, int(V) - 1);
        std::vector<index_t> seq(batch * (Tn + 1)), x(batch * Tn), y(batch * Tn);
        for (auto& v : seq) v = tok(rng);
        for (std::size_t b = 0; b < batch; ++b)
            for (std::size_t t = 0; t < Tn; ++t) {
                x[b * Tn + t] = seq[b * (Tn + 1) + t];
                y[b * Tn + t] = seq[b * (Tn + 1) + t + 1];
            }
        feed_tokens(x, y);
    }
    void feed_dump(const std::map<std::string, npz::array>& b) {
        for (const char* k : {"x", "y"})
            if (b.at(k).shape != std::vector<std::size_t>{batch, Tn})
                throw io_error(std::string("batch.npz: '") + k + "' must be [" + std::to_string(batch) + ", " +
                               std::to_string(Tn) + "] tokens for the " + name + " workload");
        // The dump's pos_enc is the table ctgraph computes itself (sinusoidal_positions<64, float>).
        feed_tokens(npz::to_vector<index_t>(b.at("x")), npz::to_vector<index_t>(b.at("y")));
    }
};
template <class T>
struct gpt_s : gpt_workload<T, "gpt-s", 65, 64, 128, 4, 2, 16> {};
template <class T>
struct gpt_m : gpt_workload<T, "gpt-m", 65, 256, 384, 6, 4, 8> {};
/// GPT-2 small's sizes (vocabulary 50257, d 768, 12 heads, 12 layers) in this model's form (untied
/// head with bias, sinusoidal positions: 163 M parameters), at llm.c's CPU trainer's batch 4 x 64.
template <class T>
struct gpt2_124m : gpt_workload<T, "gpt2-124m", 50257, 64, 768, 12, 12, 4> {};
/// gpt2-124m cut to 2 layers (the same vocabulary, widths, heads, context and batch): the workload
/// of float64 parity at GPT-2's widths, as torch_ref.py's gpt2-124m-2l.
template <class T>
struct gpt2_124m_2l : gpt_workload<T, "gpt2-124m-2l", 50257, 64, 768, 12, 2, 4> {};

/// Fine-tuning (WORKLOADS.md): LoRA r = 8, alpha = 16 on every layer's query and value projections,
/// everything else frozen; and gpt-m with its token embedding frozen. The optimizer (AdamW as above)
/// updates the parameters that train only.
using lora_qv = nn::lora<8, 16.0, "q.", "v.">;
inline constexpr options lora_only{.trainable = "*lora_*"};
inline constexpr options frozen_embedding{.frozen = "tok_embed"};
/// gpt2-124m with LoRA on q and v, the base frozen (163 M frozen parameters, 295 k trainable).
template <class T>
struct gpt2_124m_lora : gpt_workload<T, "gpt2-124m-lora", 50257, 64, 768, 12, 12, 4, lora_qv, lora_only> {};
/// gpt2-124m-lora cut to 2 layers: float64 parity of the adapters' gradients (torch_ref.py's dump
/// of this workload starts lora_B at N(0, 0.02^2), not zero, so that lora_A's gradient is not zero).
template <class T>
struct gpt2_124m_2l_lora : gpt_workload<T, "gpt2-124m-2l-lora", 50257, 64, 768, 12, 2, 4, lora_qv, lora_only> {};
/// gpt-m with `tok_embed` frozen.
template <class T>
struct gpt_m_frozen_embed : gpt_workload<T, "gpt-m-frozen-embed", 65, 256, 384, 6, 4, 8, nn::no_adapter, frozen_embedding> {};

/// The `decode` workloads: greedy generation after the prompt [[0]], batch 1, of gpt-s's weights
/// (256 new tokens; positions run to 256, the sinusoidal table extends beyond gpt-s's training
/// context) or gpt2-124m's (decode-gpt2-cache: 128 new tokens). decode-cache: nn::gpt_generator
/// (prefill, then one cached step per token); decode-nocache: each new token recomputes the whole
/// prefix with an inference program, as PyTorch's reference does. A "step" is one whole
/// generation; tokens/s = new tokens / its median time.
template <class P, bool Cache, fixed_string Name, int Vocab, int Width, int Heads, int Layers, std::size_t NewTokens>
struct decode_workload {
    using T = scalar_of<P>;
    static constexpr precision products = numerics<P>::products;
    static constexpr const char* name = Name.data;
    static constexpr std::size_t new_tokens = NewTokens, V = Vocab, d = Width, L = Layers;
    static constexpr dim Td = dyn('T');
    using model = nn::gpt<Vocab, int(new_tokens) + 1, Width, Heads, Layers, 4 * Width, float>;
    using Tokens = index_input<"x", 1, Td>;
    std::shared_ptr<parameter_store<T>> store = std::make_shared<parameter_store<T>>();
    static constexpr weight_format weights = numerics<P>::weights;
    using generator = nn::gpt_generator<model, T, products, products, weights>;  // (bf16 products: a bf16 KV cache)
    generator gen{store, 1, new_tokens + 1};
    static constexpr options full_opts{.precision = numerics<P>::products, .inference = true, .weights = weights};
    decltype(compile<T, full_opts>(model::logits(Tokens{}))) full{store};
    /// What decode-nocache runs per token: the logits of the whole prefix (1, T, V).
    static constexpr auto forward() { return model::logits(Tokens{}); }
    std::vector<int> tokens;               // the last generation
    std::vector<index_t> seq;              // prompt + tokens so far (full recompute)
    std::vector<std::vector<int>> prompts{{0}}, outs;  // (with the cache) kept: no allocation per generation
    std::vector<std::vector<T>> logits;    // its logits per new token (kept by check())
    bool keep_logits = false;

    parameter_store<T>& params() { return *store; }
    static std::set<std::string> transposed() { return gpt_s<P>::transposed(); }
    /// The bytes one cached token reads from memory, averaged over a generation: every weight once
    /// (bf16 copies in a bf16 program, the quantised copies of the product weights with int8 or q4
    /// weights; of the embedding table one row) and the keys and values cached so far (bf16 in a
    /// bf16 program). What bounds a cached decoding step once the weights outgrow the caches.
    double bytes_per_token() const {
        const double weight_bytes = products == precision::bf16 ? 2.0 : double(sizeof(T));
        double quantised_elements = 0;  // (nn::gpt's head is untied: the embedding table stays float)
        for (std::size_t s = 0; s < store->size(); ++s)
            if (quantized(*store, s, weights)) quantised_elements += double(store->at(s).shape.size());
        const double float_weights = double(store->num_elements()) - quantised_elements - double(V) * double(d) + double(d);
        const double weight_total = float_weights * weight_bytes + double(quantized_bytes(*store, weights));
        const double mean_cached = (double(new_tokens) + 1.0) / 2.0;  // positions 1..new_tokens
        const double cache_bytes = double(sizeof(typename generator::cache_element));
        return weight_total + 2.0 * double(L) * mean_cached * double(d) * cache_bytes;
    }
    static double flops() {  // torch_ref.py: sum over L = 1..new tokens of the per-token matrix products
        double f = 0;
        for (std::size_t n = 1; n <= new_tokens; ++n)
            f += Cache ? L * (24.0 * d * d + 4.0 * n * d) + 2.0 * d * V
                       : L * (24.0 * n * d * d + 4.0 * n * n * d) + 2.0 * d * V;
        return f;
    }
    void random_batch(unsigned long long) {}
    void feed_dump(const std::map<std::string, npz::array>& b) {
        const auto p = npz::to_vector<index_t>(b.at("prompt"));
        if (p != std::vector<index_t>{0}) throw io_error("batch.npz: the decode workloads' prompt is [[0]]");
    }
    double step(bool = true) {
        std::mt19937_64 rng(0);
        if constexpr (Cache) {
            gen.generate_into(outs, prompts, new_tokens, {}, rng, keep_logits ? &logits : nullptr);
            tokens.assign(outs[0].begin(), outs[0].end());
        } else {
            seq.assign(1, 0);  // members: a generation allocates nothing once they have grown
            seq.reserve(new_tokens + 1);
            tokens.clear();
            tokens.reserve(new_tokens);
            if (keep_logits) logits.assign(1, {});
            for (std::size_t t = 0; t < new_tokens; ++t) {
                full.feed("x", seq.data(), rshape{2, {1, seq.size()}});
                full.forward();
                const T* z = full.value_view(decltype(full)::output_nodes[0]).template as<T>() + (seq.size() - 1) * V;
                const int next = int(std::max_element(z, z + V) - z);
                if (keep_logits) logits[0].insert(logits[0].end(), z, z + V);
                tokens.push_back(next);
                seq.push_back(next);
            }
        }
        return 0.0;
    }
};
template <class T>
struct decode_cache : decode_workload<T, true, "decode-cache", 65, 128, 4, 2, 256> {};
template <class T>
struct decode_nocache : decode_workload<T, false, "decode-nocache", 65, 128, 4, 2, 256> {};
template <class T>
struct decode_gpt2_cache : decode_workload<T, true, "decode-gpt2-cache", 50257, 768, 12, 12, 128> {};

/// Every workload ctg-bench knows, as one heterogeneous list of class templates (apply<T> gives the
/// workload in scalar type T): registering a workload is adding it here.
inline constexpr auto registry = boost::hana::make_tuple(
    boost::hana::template_<mlp>, boost::hana::template_<rnn>, boost::hana::template_<s2s>, boost::hana::template_<attn_sdp>,
    boost::hana::template_<attn_sdp_causal>, boost::hana::template_<attn_dot>, boost::hana::template_<attn_bilinear>,
    boost::hana::template_<attn_additive>, boost::hana::template_<gpt_s>, boost::hana::template_<gpt_m>,
    boost::hana::template_<gpt2_124m>, boost::hana::template_<gpt2_124m_2l>, boost::hana::template_<gpt2_124m_lora>,
    boost::hana::template_<gpt2_124m_2l_lora>, boost::hana::template_<gpt_m_frozen_embed>, boost::hana::template_<decode_cache>,
    boost::hana::template_<decode_nocache>, boost::hana::template_<decode_gpt2_cache>);

}  // namespace ctg::bench
