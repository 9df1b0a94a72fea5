// The flagship demo: a character-level GPT trained on the text shipped in data/text (the GNU
// licences, 169 KB), then generating text with a KV cache.
//
//   char_gpt train [--steps N] [--out DIR] [--text FILE] [--require NATS] [--precision f32|bf16]
//       trains with ctg::trainer (progress line: step, loss, tokens/s, ETA), evaluates on the last
//       10 % of the text every 100 steps, writes DIR/char_gpt.npz (checkpoint, every 100 steps and at
//       the end), DIR/char_gpt_loss.csv and DIR/char_gpt_loss.png (train and validation loss), and
//       prints a sample. With --require, exits non-zero unless the validation loss ends below NATS.
//       --precision bf16: mixed precision (matrix products on bf16 operands, float accumulation,
//       float weights and optimizer: options{.precision = precision::bf16}).
//   char_gpt generate CHECKPOINT "prompt" [--tokens N] [--temperature T] [--top-p P] [--seed S]
//       loads the checkpoint and continues the prompt.
//   char_gpt quantize CHECKPOINT [--out DIR] [--text FILE] [--require-int8 R] [--require-q4 R]
//       the trained model with int8 and 4-bit weights (options{.weights}, docs/guide/quantization.md):
//       its validation loss in float32, int8 and q4 on the training run's validation windows, the
//       greedy continuation of a prompt and the tokens/s of each; writes DIR/char_gpt.int8.safetensors
//       and DIR/char_gpt.q4.safetensors and checks that the loaded files decode as the models saved.
//       With --require-*, exits non-zero when a format's loss exceeds float32's by more than the
//       fraction R (0.005: half a percent).
//
// Model: nn::gpt (token embedding + sinusoidal positions, pre-norm blocks of causal multi-head
// self-attention and GELU FFN, one ctg::repeat over the layers), dropout 0.1 in training. Text
// longer than the context is generated with a sliding window: when the cache is full, the last
// half of the text is prefilled again and generation goes on.
#include <algorithm>
#include <chrono>
#include <filesystem>
#include <cmath>
#include <cstdio>
#include <random>
#include <string>
#include <vector>

#include <ctgraph/ctgraph.hpp>
#include <ctgraph/xtensor.hpp>
#include <ctgraph/quantize.hpp>
#include <ctgraph/train.hpp>

#include "char_gpt_model.hpp"
#include "chars.hpp"
#include "gpt_text.hpp"

using namespace ctg;

namespace {

// Vocabulary: '\n' and printable ASCII ' '..'~'. Training text maps other bytes to ' '; a prompt
// with a character outside the vocabulary is an error. The model: char_gpt_model.hpp.
using char_gpt_model::Context;
using char_gpt_model::D;
using char_gpt_model::Heads;
using char_gpt_model::Layers;
using char_gpt_model::model;
using char_gpt_model::V;
inline constexpr dim B = dyn('B'), T = dyn('T');
using Tokens = index_input<"tokens", B, T>;
using Targets = index_input<"targets", B, T>;
constexpr auto loss() { return model::loss(Tokens{}, Targets{}); }

using chars::decode;
using chars::encode;
using chars::in_vocab;

std::vector<int> encode_prompt(const std::string& prompt) {
    std::vector<int> ids;
    for (std::size_t i = 0; i < prompt.size(); ++i) {
        const auto c = static_cast<unsigned char>(prompt[i]);
        if (!in_vocab(c)) {
            char hex[8];
            std::snprintf(hex, sizeof hex, "0x%02x", unsigned(c));
            throw index_error(std::string("char_gpt: the prompt's byte ") + hex + " at position " + std::to_string(i) +
                              " is not in the vocabulary (newline and printable ASCII)");
        }
        ids.push_back(encode(c));
    }
    if (ids.empty()) throw error("char_gpt: the prompt is empty");
    return ids;
}

/// Continues `prompt` by `count` characters, sliding the window when the cache is full.
template <class Generator>
std::string generate(Generator& gen, std::vector<int> text, std::size_t count, const nn::sampling& how,
                     std::mt19937_64& rng) {
    std::string out;
    gpt_text::continue_tokens(gen, std::move(text), count, std::size_t(Context), how, rng,
                              [&](int id) { out += decode(id); });
    return out;
}

struct train_args {
    std::string out_dir = ".", text_path = CTG_SOURCE_DIR "/data/text/gnu-licenses.txt", precision = "f32";
    long steps = 3000;
    double require = 0;
};

template <precision Products>
int train(const train_args& a);

int train(int argc, char** argv) {
    train_args t;
    for (int i = 2; i < argc; ++i) {
        const std::string a = argv[i];
        auto value = [&]() -> std::string {
            if (i + 1 >= argc) throw error("char_gpt: " + a + " needs a value");
            return argv[++i];
        };
        if (a == "--steps") t.steps = std::stol(value());
        else if (a == "--out") t.out_dir = value();
        else if (a == "--text") t.text_path = value();
        else if (a == "--require") t.require = std::stod(value());
        else if (a == "--precision") t.precision = value();
        else throw error("char_gpt: unknown option '" + a + "'");
    }
    if (t.precision == "bf16") return train<precision::bf16>(t);
    if (t.precision != "f32") throw error("char_gpt: --precision is f32 or bf16, not '" + t.precision + "'");
    return train<precision::f32>(t);
}

template <precision Products>
int train(const train_args& a) {
    const std::string& out_dir = a.out_dir;
    const long steps = a.steps;
    const auto ids = chars::read_text(a.text_path, 10 * Context, "char_gpt");
    const std::size_t n_val = ids.size() / 10;
    // Training samples: the window at every start position of the first 90 % (an epoch sees each
    // once, shuffled); validation: the disjoint windows of the last 10 %.
    token_windows train_set({ids.begin(), ids.end() - long(n_val)}, Context),
        val_set({ids.end() - long(n_val), ids.end()}, Context, Context);
    std::printf("char_gpt: %d layers, d %d, %d heads, context %d, %zu training and %zu validation characters%s\n", Layers,
                D, Heads, Context, ids.size() - n_val, n_val, Products == precision::bf16 ? "; bf16 products" : "");

    auto prog = compile<float, options{.precision = Products}>(loss());
    auto& params = prog.params();
    params.init(11);
    params.init("tok_embed", [](std::mt19937_64& rng, std::size_t) { return float(std::normal_distribution<double>(0, 0.02)(rng)); });
    std::printf("%zu parameters\n", params.num_elements());
    prog.dropout_seed(1);
    auto opt = optim::adamw<float>({.lr = 3e-3, .weight_decay = 0.01});
    trainer training(prog, opt,
                {.batch = 8, .epochs = 0, .max_steps = steps, .seed = 3, .clip_norm = 1.0, .eval_every = 100,
                 .checkpoint_every = 100, .out_dir = out_dir, .name = "char_gpt", .metric_name = "val"},
                optim::warmup_cosine_lr{3e-3, 100, steps, 1e-4});
    const train_report r = training.fit(train_set, val_set);  // progress line, checkpoints, CSV and PNG of the losses
    std::printf("validation loss %.3f nats/char (perplexity %.2f) after %ld steps in %s; the LSTM of char_lm reaches 1.71\n",
                r.metric, std::exp(r.metric), r.step, clock_text(r.seconds).c_str());
    std::printf("wrote %s, %s, %s\n", training.path(".npz").c_str(), training.path("_loss.csv").c_str(),
                training.path("_loss.png").c_str());

    nn::gpt_generator<model, float, Products> gen(prog.shared_params(), 1, Context);
    std::mt19937_64 sample_rng(7);
    const std::string prompt = "The licensee ";
    const std::string text = generate(gen, encode_prompt(prompt), 400, {.top_k = 0, .temperature = 0.8, .top_p = 0.95},
                                      sample_rng);
    std::printf("--- sample (temperature 0.8, top-p 0.95) ---\n%s%s\n---\n", prompt.c_str(), text.c_str());
    std::printf("generate more: char_gpt generate %s \"your prompt\"\n", training.path(".npz").c_str());
    return a.require > 0 && !(r.metric < a.require) ? 1 : 0;
}

int generate_command(int argc, char** argv) {
    if (argc < 4) throw error("usage: char_gpt generate CHECKPOINT \"prompt\" [--tokens N] [--temperature T] [--top-p P] [--seed S]");
    const std::string path = argv[2], prompt = argv[3];
    std::size_t tokens = 300;
    nn::sampling how{.top_k = 0, .temperature = 0.8, .top_p = 0.95};
    unsigned long long seed = 1;
    for (int i = 4; i < argc; ++i) {
        const std::string a = argv[i];
        if (i + 1 >= argc) throw error("char_gpt: " + a + " needs a value");
        const std::string v = argv[++i];
        if (a == "--tokens") tokens = std::stoul(v);
        else if (a == "--temperature") how.temperature = std::stod(v);
        else if (a == "--top-p") how.top_p = std::stod(v);
        else if (a == "--seed") seed = std::stoull(v);
        else throw error("char_gpt: unknown option '" + a + "'");
    }
    const auto ids = encode_prompt(prompt);  // before anything is loaded
    auto store = std::make_shared<parameter_store<float>>();
    nn::gpt_generator<model> gen(store, 1, Context);  // registers the model's parameters
    checkpoint::load_weights(path, *store);             // names and shapes must agree, else nothing changes
    std::mt19937_64 rng(seed);
    std::printf("%s%s\n", prompt.c_str(), generate(gen, ids, tokens, how, rng).c_str());
    return 0;
}

// ---------------------------------------------------------------- quantize
// One format's figures: validation loss, tokens/s of greedy generation, the continuation.
struct quantized_run {
    double loss = 0, tokens_per_s = 0, megabytes = 0;  // megabytes: the weights as the programs read them
    std::vector<int> continuation;
};

template <weight_format Weights>
quantized_run measure(const std::shared_ptr<parameter_store<float>>& store, token_windows& val, const std::vector<int>& prompt) {
    quantized_run r;
    // The loss program reads the weights as the generator does: the same quantised copies.
    program_for<float, options{.inference = true, .weights = Weights}, decltype(loss())> eval(store);
    r.loss = mean_output(eval, val, 8);
    nn::gpt_generator<model, float, precision::f32, precision::f32, Weights> gen(store, 1, Context);
    double bytes = 0;
    for (std::size_t s = 0; s < store->size(); ++s) {
        const auto* q = quantized(*store, s, Weights);
        bytes += q ? double(q->bytes()) : 4.0 * double(store->at(s).shape.size());
    }
    r.megabytes = bytes / 1e6;
    const std::size_t n = std::size_t(Context) - prompt.size();
    r.continuation = gen.generate({prompt}, n)[0];  // (warm-up, and the greedy text)
    const auto t0 = std::chrono::steady_clock::now();
    for (int rep = 0; rep < 3; ++rep) gen.generate({prompt}, n);
    r.tokens_per_s = 3.0 * double(n) / std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    return r;
}

int quantize_command(int argc, char** argv) {
    if (argc < 3) throw error("usage: char_gpt quantize CHECKPOINT [--out DIR] [--text FILE] [--require-int8 R] [--require-q4 R]");
    const std::string path = argv[2];
    std::string out_dir = ".", text_path = CTG_SOURCE_DIR "/data/text/gnu-licenses.txt";
    double require_int8 = 0, require_q4 = 0;
    for (int i = 3; i < argc; ++i) {
        const std::string a = argv[i];
        if (i + 1 >= argc) throw error("char_gpt: " + a + " needs a value");
        const std::string v = argv[++i];
        if (a == "--out") out_dir = v;
        else if (a == "--text") text_path = v;
        else if (a == "--require-int8") require_int8 = std::stod(v);
        else if (a == "--require-q4") require_q4 = std::stod(v);
        else throw error("char_gpt: unknown option '" + a + "'");
    }
    const auto ids = chars::read_text(text_path, 10 * Context, "char_gpt");
    token_windows val({ids.end() - long(ids.size() / 10), ids.end()}, Context, Context);  // train's validation windows
    auto store = std::make_shared<parameter_store<float>>();
    nn::gpt_generator<model> probe(store, 1, 1);  // registers the model's parameters
    checkpoint::load_weights(path, *store);
    const std::vector<int> prompt = encode_prompt("The licensee ");

    const quantized_run f32 = measure<weight_format::f32>(store, val, prompt);
    const quantized_run i8 = measure<weight_format::int8>(store, val, prompt);
    const quantized_run q4 = measure<weight_format::q4>(store, val, prompt);
    std::printf("%-8s %10s %10s %12s %10s\n", "weights", "val loss", "vs f32", "MB weights", "tokens/s");
    std::printf("%-8s %10.4f %10s %12.2f %10.0f\n", "f32", f32.loss, "", f32.megabytes, f32.tokens_per_s);
    auto row = [&](const char* name, const quantized_run& r) {
        std::printf("%-8s %10.4f %+9.2f%% %12.2f %10.0f\n", name, r.loss, 100 * (r.loss / f32.loss - 1), r.megabytes, r.tokens_per_s);
    };
    row("int8", i8);
    row("q4", q4);
    auto text = [](const std::vector<int>& t) {
        std::string s;
        for (int id : t) s += decode(id);
        return s;
    };
    std::printf("greedy continuations of \"The licensee \":\n  f32:  %s\n  int8: %s\n  q4:   %s\n", text(f32.continuation).c_str(),
                text(i8.continuation).c_str(), text(q4.continuation).c_str());

    // Files: each format saved, loaded into a fresh store, decoding what the saved model decoded.
    int rc = 0;
    auto round_trip = [&]<weight_format W>(const char* suffix, const quantized_run& saved) {
        const std::string file = out_dir + "/char_gpt." + suffix + ".safetensors";
        save_quantized(*store, W, file);  // (the store holds both formats' copies: measure made them)
        auto loaded = std::make_shared<parameter_store<float>>();
        nn::gpt_generator<model> registers(loaded, 1, 1);
        load_quantized(*loaded, file);
        nn::gpt_generator<model, float, precision::f32, precision::f32, W> gen(loaded, 1, Context);
        const bool same = gen.generate({prompt}, saved.continuation.size())[0] == saved.continuation;
        std::printf("wrote %s (%.2f MB); loaded, it decodes %s\n", file.c_str(), double(std::filesystem::file_size(file)) / 1e6,
                    same ? "the same text" : "ANOTHER text");
        if (!same) rc = 1;
    };
    round_trip.template operator()<weight_format::int8>("int8", i8);
    round_trip.template operator()<weight_format::q4>("q4", q4);
    if (require_int8 > 0 && !(i8.loss <= f32.loss * (1 + require_int8))) {
        std::fprintf(stderr, "char_gpt: int8 weights raise the validation loss by more than %.2f %%\n", 100 * require_int8);
        rc = 1;
    }
    if (require_q4 > 0 && !(q4.loss <= f32.loss * (1 + require_q4))) {
        std::fprintf(stderr, "char_gpt: 4-bit weights raise the validation loss by more than %.2f %%\n", 100 * require_q4);
        rc = 1;
    }
    return rc;
}

}  // namespace

int main(int argc, char** argv) try {
    const std::string cmd = argc > 1 ? argv[1] : "train";
    if (cmd == "train") return train(argc, argv);
    if (cmd == "generate") return generate_command(argc, argv);
    if (cmd == "quantize") return quantize_command(argc, argv);
    std::fprintf(stderr, "usage: char_gpt train [--steps N] [--out DIR] [--text FILE] [--require NATS] [--precision f32|bf16]\n"
                         "       char_gpt generate CHECKPOINT \"prompt\" [--tokens N] [--temperature T] [--top-p P] [--seed S]\n"
                         "       char_gpt quantize CHECKPOINT [--out DIR] [--text FILE] [--require-int8 R] [--require-q4 R]\n");
    return 2;
} catch (const ctg::error& e) {
    std::fprintf(stderr, "error: %s\n", e.what());
    return 2;
} catch (const std::exception& e) {
    std::fprintf(stderr, "error: %s\n", e.what());
    return 2;
}
