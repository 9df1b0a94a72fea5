// char_gpt's model on subword tokens: a SentencePiece BPE vocabulary of 512 pieces, trained on the
// training part of the text shipped in data/text (the GNU licences), then a GPT trained on the token
// ids, and a sample decoded by SentencePiece.
//
//   subword_gpt [--steps N] [--out DIR] [--text FILE] [--retrain]
//       loads DIR/subword.model, or trains it first (always with --retrain): BPE, 512 pieces, on the
//       first 90 % of the text, no normalisation and no dummy prefix, '\n' a piece of its own, so
//       decode(encode(text)) is the text. Then encodes the training and validation text separately,
//       split at char_gpt's character (the last 10 % of the characters: the same validation text);
//       trains nn::gpt with ctg::trainer (char_gpt's sizes and optimiser, context 128 tokens); prints
//       tokens/s and the validation loss per token and per character (the validation windows' total
//       nats over the characters their targets cover: the unit of char_gpt's figure) and a sample.
//       Writes DIR/subword.model and .vocab, DIR/subword_gpt.npz, DIR/subword_gpt_loss.csv and
//       DIR/subword_gpt_loss.png. Then the validation loss with int8 and 4-bit weights (options{.weights}).
//       Exits non-zero unless decoding the encoded training and validation text gives them back
//       exactly, the validation loss ends below its value before training, and the quantised models'
//       losses are within 0.5 % (int8) and 3 % (4-bit) of float32's.
//   subword_gpt encode MODEL TEXT
//       prints the ids of TEXT under the SentencePiece model MODEL, one line, space-separated
//       (examples/subword_crosscheck.py compares them with Python's sentencepiece).
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <random>
#include <string>
#include <unordered_map>
#include <vector>

#include <sentencepiece_processor.h>
#include <sentencepiece_trainer.h>

#include <ctgraph/ctgraph.hpp>
#include <ctgraph/xtensor.hpp>
#include <ctgraph/quantize.hpp>
#include <ctgraph/train.hpp>

#include "chars.hpp"
#include "gpt_text.hpp"
#include "subword.hpp"

using namespace ctg;

namespace {

constexpr int V = 512, Context = 128, D = 128, Heads = 4, Layers = 3;  // char_gpt's model but the vocabulary
using model = nn::gpt<V, Context, D, Heads, Layers, 4 * D, void, 0.1>;
inline constexpr dim B = dyn('B'), T = dyn('T');
using Tokens = index_input<"tokens", B, T>;
using Targets = index_input<"targets", B, T>;
constexpr auto loss() { return model::loss(Tokens{}, Targets{}); }

struct args {
    std::string out_dir = ".", text_path = CTG_SOURCE_DIR "/data/text/gnu-licenses.txt";
    long steps = 3000;
    bool retrain = false;
};

int run(const args& a) {
    std::filesystem::create_directories(a.out_dir);
    const std::string text = chars::read_string(a.text_path, 10 * Context, "subword_gpt");
    const std::size_t n_val = text.size() / 10;  // char_gpt's split: the last 10 % of the characters
    const std::string train_text = text.substr(0, text.size() - n_val), val_text = text.substr(text.size() - n_val);

    sentencepiece::SentencePieceProcessor sp;
    subword::load_or_train(sp, a.out_dir + "/subword.model", train_text, V, a.retrain, "subword_gpt");
    std::vector<int> train_chars, val_chars;
    auto train_ids = subword::encode(sp, train_text, train_chars, "training", "subword_gpt");
    auto val_ids = subword::encode(sp, val_text, val_chars, "validation", "subword_gpt");
    std::printf("encode -> decode gives the training and validation text back exactly: %zu and %zu tokens, "
                "%.2f characters per token\n", train_ids.size(), val_ids.size(),
                double(train_text.size() + val_text.size()) / double(train_ids.size() + val_ids.size()));

    // Validation: the disjoint windows of the validation tokens (as char_gpt's); the characters their
    // targets cover turn the loss per token into a loss per character.
    token_windows train_set(std::move(train_ids), Context), val_set(val_ids, Context, Context);
    long val_targets = 0, val_target_chars = 0;
    const std::size_t len = Context;
    for (std::size_t w = 0; w < val_set.size(); ++w)
        for (std::size_t k = 1; k <= len; ++k) ++val_targets, val_target_chars += val_chars[w * len + k];
    const double chars_per_target = double(val_target_chars) / double(val_targets);
    std::printf("subword_gpt: %d layers, d %d, %d heads, context %d tokens, vocabulary %d; validation: %zu windows, "
                "%ld target tokens covering %ld characters\n", Layers, D, Heads, Context, V, val_set.size(),
                val_targets, val_target_chars);

    auto prog = compile<float>(loss());
    auto& params = prog.params();
    params.init(11);
    params.init("tok_embed", [](std::mt19937_64& rng, std::size_t) { return float(std::normal_distribution<double>(0, 0.02)(rng)); });
    std::printf("%zu parameters\n", params.num_elements());
    prog.dropout_seed(1);
    auto opt = optim::adamw<float>({.lr = 3e-3, .weight_decay = 0.01});
    trainer training(prog, opt,
                     {.batch = 8, .epochs = 0, .max_steps = a.steps, .seed = 3, .clip_norm = 1.0,
                      .eval_every = std::min(100L, a.steps), .checkpoint_every = 100, .out_dir = a.out_dir,
                      .name = "subword_gpt", .metric_name = "val"},
                     optim::warmup_cosine_lr{3e-3, std::min(100L, a.steps), a.steps, 1e-4});
    const double before = mean_output(training.evaluator(), val_set, 8);
    std::printf("before training: validation loss %.3f nats/token (ln %d = %.3f)\n", before, V, std::log(double(V)));
    const train_report r = training.fit(train_set, val_set);
    const double tokens_per_s = r.samples_per_second * Context;
    std::printf("%.0f tokens/s (%.0f characters/s); validation loss %.3f nats/token, %.3f nats/char "
                "(best %.3f nats/char at step %ld) after %ld steps in %s; char_gpt reaches 1.16 nats/char\n",
                tokens_per_s, tokens_per_s * chars_per_target, r.metric, r.metric / chars_per_target,
                r.best_metric / chars_per_target, r.best_step, r.step, clock_text(r.seconds).c_str());

    // The trained model with int8 and 4-bit weights (options{.weights}; docs/guide/quantization.md):
    // the validation loss of each against float32's, over the same windows.
    auto val_loss = [&]<weight_format W>() {
        program_for<float, options{.inference = true, .weights = W}, decltype(loss())> eval(prog.shared_params());
        return mean_output(eval, val_set, 8);
    };
    const double f32_loss = val_loss.template operator()<weight_format::f32>();
    const double int8_loss = val_loss.template operator()<weight_format::int8>();
    const double q4_loss = val_loss.template operator()<weight_format::q4>();
    std::printf("validation loss with quantised weights: float32 %.4f, int8 %.4f (%+.2f %%), q4 %.4f (%+.2f %%) nats/token\n",
                f32_loss, int8_loss, 100 * (int8_loss / f32_loss - 1), q4_loss, 100 * (q4_loss / f32_loss - 1));

    nn::gpt_generator<model, float> gen(prog.shared_params(), 1, Context);
    std::mt19937_64 sample_rng(7);
    const std::string prompt = "The licensee";
    std::vector<int> prompt_ids, sample;
    subword::check(sp.Encode(prompt, &prompt_ids), "subword_gpt: encoding the prompt");
    gpt_text::continue_tokens(gen, prompt_ids, 120, len, {.top_k = 0, .temperature = 0.8, .top_p = 0.95},
                              sample_rng, [&](int id) { sample.push_back(id); });
    std::string decoded;
    subword::check(sp.Decode(sample, &decoded), "subword_gpt: decoding the sample");
    std::printf("--- sample (120 tokens, temperature 0.8, top-p 0.95) ---\n%s%s\n---\n", prompt.c_str(), decoded.c_str());
    if (!(r.metric < before)) {
        std::fprintf(stderr, "subword_gpt: the validation loss did not fall (%.3f before, %.3f after)\n", before, r.metric);
        return 1;
    }
    if (!(int8_loss <= 1.005 * f32_loss) || !(q4_loss <= 1.03 * f32_loss)) {
        std::fprintf(stderr, "subword_gpt: quantised weights raise the validation loss by more than 0.5 %% (int8) or 3 %% (q4)\n");
        return 1;
    }
    return 0;
}

int encode_command(const std::string& model_path, const std::string& text) {
    sentencepiece::SentencePieceProcessor sp;
    subword::check(sp.Load(model_path), "subword_gpt: loading " + model_path);
    std::vector<int> ids;
    subword::check(sp.Encode(text, &ids), "subword_gpt: encoding");
    for (std::size_t i = 0; i < ids.size(); ++i) std::printf(i ? " %d" : "%d", ids[i]);
    std::printf("\n");
    return 0;
}

}  // namespace

int main(int argc, char** argv) try {
    if (argc > 1 && std::string(argv[1]) == "encode") {
        if (argc != 4) throw error("usage: subword_gpt encode MODEL TEXT");
        return encode_command(argv[2], argv[3]);
    }
    args a;
    for (int i = 1; i < argc; ++i) {
        const std::string s = argv[i];
        if (s == "--retrain") {
            a.retrain = true;
            continue;
        }
        if (i + 1 >= argc) throw error("usage: subword_gpt [--steps N] [--out DIR] [--text FILE] [--retrain]");
        const std::string v = argv[++i];
        if (s == "--steps") a.steps = std::stol(v);
        else if (s == "--out") a.out_dir = v;
        else if (s == "--text") a.text_path = v;
        else throw error("subword_gpt: unknown option '" + s + "'");
    }
    return run(a);
} catch (const std::exception& e) {
    std::fprintf(stderr, "error: %s\n", e.what());
    return 2;
}
