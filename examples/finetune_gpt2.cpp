// Fine-tuning a pretrained GPT-2 with LoRA, against full fine-tuning: an nn::gpt2 is trained on the
// first 60 % of the shipped text (SentencePiece BPE tokens, 512 pieces) and saved as a Hugging Face
// GPT-2 checkpoint; then the checkpoint is loaded and adapted to the rest of the text (other
// licences) twice: with LoRA (r 8, alpha 16 on every layer's queries and values, the base frozen)
// and in full. Prints the trainable and total parameters, the validation loss on the new text of
// the base model and of both adaptations, the step time and what each training keeps in memory
// (weights, gradients, optimizer state, activations); then merges the adapters into the weights and
// generates a sample with the base model's programs.
//
//   finetune_gpt2 [--pretrain-steps N] [--steps M] [--out DIR]      (default 600, 300, finetune_gpt2_run)
//
// Exits non-zero unless LoRA lowers the validation loss on the new text, its step is faster and
// keeps less memory than full fine-tuning, the frozen weights keep every bit, and the merged model's
// logits equal the adapted model's within float rounding. docs/guide/fine-tuning.md walks through it.
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include <ctgraph/ctgraph.hpp>
#include <ctgraph/xtensor.hpp>
#include <ctgraph/nn/gpt2_hf.hpp>
#include <ctgraph/nn/lora.hpp>
#include <ctgraph/train.hpp>

#include "chars.hpp"
#include "gpt_text.hpp"
#include "subword.hpp"

using namespace ctg;

namespace {

constexpr int V = 512, Context = 64, D = 128, Heads = 4, Layers = 3;
inline constexpr dim B = dyn('B'), T = dyn('T');
using Tokens = index_input<"tokens", B, T>;
using Targets = index_input<"targets", B, T>;

// [models]
using base = nn::gpt2<V, Context, D, Heads, Layers>;
using adapters = nn::lora<8, 16.0, "q.", "v.">;  // r 8, alpha 16, on every layer's queries and values
using adapted = nn::gpt2<V, Context, D, Heads, Layers, 4 * D, 0.0, adapters>;
using full_program = decltype(compile<float>(base::loss(Tokens{}, Targets{})));
using lora_program = decltype(compile<float, options{.trainable = "*lora_*"}>(adapted::loss(Tokens{}, Targets{})));
// [models]

struct result {
    double val_loss = 0, ms_per_step = 0, kept_mib = 0;
};

// What a training step keeps: the weights, the gradients and AdamW's two moments of the parameters
// that train, and the program's arena (activations, adjoints, scratch).
template <class Program>
double kept_mib(const Program& prog) {
    const auto& ps = prog.params();
    return double((ps.values().size() + 3 * ps.grad_elements() + prog.arena_elements()) * sizeof(float)) / (1 << 20);
}

// [adapt]
// `steps` steps of AdamW on `train` from the weights in `store`; the validation loss on `val`.
template <class Program>
result adapt(std::shared_ptr<parameter_store<float>> store, token_windows& train, token_windows& val, long steps,
             const char* label) {
    Program prog(store);
    if constexpr (std::is_same_v<Program, lora_program>) store->init_matching("*lora_*", 1);  // A Kaiming-uniform, B zero
    const model_summary s = prog.summary({{'B', 16}, {'T', Context}});
    std::printf("%s: %llu of %llu parameters train; backward %.1f GFLOP a step%s\n", label,
                (unsigned long long)(s.params - s.frozen_params), (unsigned long long)s.params,
                double(s.flops.backward) / 1e9,
                s.frozen_params ? (" (freezing saves " + std::to_string(double(s.frozen_saved_backward) / 1e9).substr(0, 4) +
                                   " GFLOP)").c_str()
                                : "");
    auto opt = optim::adamw<float>({.lr = std::is_same_v<Program, lora_program> ? 2e-3 : 5e-4, .weight_decay = 0.01});
    trainer training(prog, opt, {.batch = 16, .epochs = 0, .max_steps = steps, .seed = 9, .log = nullptr});
    const train_report r = training.fit(train);
    return {mean_output(training.evaluator(), val, 16), 1000.0 * 16 / r.samples_per_second, kept_mib(prog)};
}
// [adapt]

struct args {
    long pretrain_steps = 600, steps = 300;
    std::string out_dir = "finetune_gpt2_run";
};

int run(const args& a) {
    std::filesystem::create_directories(a.out_dir);
    const std::string text = chars::read_string(CTG_SOURCE_DIR "/data/text/gnu-licenses.txt", 100000, "finetune_gpt2");
    // The first 60 % to pretrain on; the rest (other licences) to adapt to, its last 15 % to validate.
    const std::size_t split = text.size() * 6 / 10, adapt_end = split + (text.size() - split) * 85 / 100;
    const std::string pretrain_text = text.substr(0, split), adapt_text = text.substr(split, adapt_end - split),
                      val_text = text.substr(adapt_end);

    sentencepiece::SentencePieceProcessor sp;
    // The vocabulary covers the whole text (as GPT-2's covers every byte): one trained on the first
    // part alone meets characters it cannot encode in the rest.
    subword::load_or_train(sp, a.out_dir + "/subword.model", text, V, true, "finetune_gpt2");
    std::vector<int> chars_of;
    token_windows pretrain_set(subword::encode(sp, pretrain_text, chars_of, "pretraining", "finetune_gpt2"), Context);
    token_windows adapt_set(subword::encode(sp, adapt_text, chars_of, "adaptation", "finetune_gpt2"), Context);
    const std::vector<index_t> val_ids = subword::encode(sp, val_text, chars_of, "validation", "finetune_gpt2");
    token_windows val_set(val_ids, Context, Context);

    // [pretrain]
    {
        full_program prog;
        prog.params().init(3);
        auto opt = optim::adamw<float>({.lr = 3e-3, .weight_decay = 0.01});
        trainer training(prog, opt, {.batch = 16, .epochs = 0, .max_steps = a.pretrain_steps, .seed = 3, .clip_norm = 1.0, .log = nullptr},
                         optim::warmup_cosine_lr{3e-3, std::min(50L, a.pretrain_steps), a.pretrain_steps, 1e-4});
        training.fit(pretrain_set);
        nn::save_hf_gpt2<base>(prog.params(), a.out_dir + "/pretrained.safetensors");  // GPT2LMHeadModel's names and layout
    }
    // [pretrain]
    auto load = [&] {
        auto store = std::make_shared<parameter_store<float>>();
        nn::load_hf_gpt2<base>(*store, a.out_dir + "/pretrained.safetensors");
        return store;
    };
    double before = 0;
    {
        program_for<float, options{.inference = true}, decltype(base::loss(Tokens{}, Targets{}))> eval(load());
        before = mean_output(eval, val_set, 16);
    }
    std::printf("pretrained %ld steps on the first part and saved it as a Hugging Face GPT-2 checkpoint; "
                "validation loss on the new text: %.3f nats/token\n", a.pretrain_steps, before);

    auto lora_store = load();
    const parameter_store<float> pretrained = *lora_store;
    const result lora = adapt<lora_program>(lora_store, adapt_set, val_set, a.steps, "LoRA");
    const result full = adapt<full_program>(load(), adapt_set, val_set, a.steps, "full fine-tuning");
    std::printf("validation loss on the new text after %ld steps: LoRA %.3f, full fine-tuning %.3f (base %.3f)\n"
                "step: LoRA %.2f ms, full %.2f ms (%.2fx); kept in memory: LoRA %.1f MiB, full %.1f MiB (%.0f %%)\n",
                a.steps, lora.val_loss, full.val_loss, before, lora.ms_per_step, full.ms_per_step,
                full.ms_per_step / lora.ms_per_step, lora.kept_mib, full.kept_mib, 100 * lora.kept_mib / full.kept_mib);

    bool ok = true;
    for (std::size_t s = 0; s < pretrained.size(); ++s)  // the base weights kept every bit
        if (std::memcmp(pretrained.value(s), lora_store->value(std::size_t(lora_store->find(pretrained.at(s).name))),
                        pretrained.at(s).shape.size() * sizeof(float)) != 0) {
            std::printf("FAILED: frozen '%s' changed\n", pretrained.at(s).name.c_str());
            ok = false;
        }
    adapters::save(*lora_store, a.out_dir + "/adapters.safetensors");

    // [merge]
    // The adapters folded into the weights: the base model's programs (and decoding speed) from here on.
    auto merged = std::make_shared<parameter_store<float>>(adapters::merge(*lora_store));
    program_for<float, options{.inference = true}, decltype(base::logits(Tokens{}))> merged_logits(merged);
    program_for<float, options{.inference = true}, decltype(adapted::logits(Tokens{}))> adapted_logits(lora_store);
    // [merge]
    for (auto* p : {static_cast<void*>(&merged_logits), static_cast<void*>(&adapted_logits)}) {  // the first validation window
        const rshape one{2, {1, std::size_t(Context)}};
        if (p == &merged_logits) merged_logits.feed("tokens", val_ids.data(), one);
        else adapted_logits.feed("tokens", val_ids.data(), one);
    }
    merged_logits.forward();
    adapted_logits.forward();
    double worst = 0, scale = 0;
    auto lm = merged_logits.output();
    auto la = adapted_logits.output();
    for (std::size_t i = 0; i < lm.size(); ++i)
        worst = std::max(worst, double(std::abs(lm.data()[i] - la.data()[i]))), scale = std::max(scale, double(std::abs(la.data()[i])));
    std::printf("merged: logits within %.1e of the adapted model's (largest %.1f)\n", worst, scale);

    nn::gpt_generator<base, float> gen(merged, 1, Context);
    std::mt19937_64 rng(7);
    const std::string prompt = "The licensee";
    std::vector<int> prompt_ids, sample;
    subword::check(sp.Encode(prompt, &prompt_ids), "finetune_gpt2: encoding the prompt");
    gpt_text::continue_tokens(gen, prompt_ids, 60, Context, {.top_k = 0, .temperature = 0.8, .top_p = 0.95}, rng,
                              [&](int id) { sample.push_back(id); });
    std::string decoded;
    subword::check(sp.Decode(sample, &decoded), "finetune_gpt2: decoding the sample");
    std::printf("--- sample of the merged model (60 tokens) ---\n%s%s\n---\n", prompt.c_str(), decoded.c_str());

    if (!(lora.val_loss < before)) std::printf("FAILED: LoRA did not lower the validation loss\n"), ok = false;
    if (!(lora.ms_per_step < full.ms_per_step)) std::printf("FAILED: the LoRA step is not faster\n"), ok = false;
    if (!(lora.kept_mib < full.kept_mib)) std::printf("FAILED: LoRA keeps no less memory\n"), ok = false;
    if (!(worst <= 1e-5 * std::max(1.0, scale))) std::printf("FAILED: the merged logits differ\n"), ok = false;
    return ok ? 0 : 1;
}

}  // namespace

int main(int argc, char** argv) {
    args a;
    for (int i = 1; i < argc; ++i) {
        const std::string k = argv[i];
        if (i + 1 < argc && k == "--pretrain-steps") a.pretrain_steps = std::atol(argv[++i]);
        else if (i + 1 < argc && k == "--steps") a.steps = std::atol(argv[++i]);
        else if (i + 1 < argc && k == "--out") a.out_dir = argv[++i];
        else {
            std::fprintf(stderr, "usage: finetune_gpt2 [--pretrain-steps N] [--steps M] [--out DIR]\n");
            return 2;
        }
    }
    if (a.pretrain_steps < 1 || a.steps < 1) {
        std::fprintf(stderr, "finetune_gpt2: the step counts must be positive\n");
        return 2;
    }
    try {
        return run(a);
    } catch (const std::exception& e) {
        std::fprintf(stderr, "%s\n", e.what());
        return 1;
    }
}
