// Decoding at long context: GPT-2 small's sizes with a KV cache in float and in bf16, side by side
// (docs/mixed-precision.md, "Decoding: bf16 weights and a bf16 KV cache").
//
//   build/bench/decode-context [--prompt 896] [--new 128] [--reps 3] [--threads 1]
//
// The model is nn::gpt2<50257, 1024, 768, 12, 12> (124 M parameters, random weights: the time of a
// token does not depend on them), decoded by nn::gpt_generator with bf16 products, once with float
// caches and once with bf16 ones (the default with bf16 products). A rep generates `new` tokens
// after a prompt of `prompt` tokens, and once 1 token (the prefill alone); a token's time is their
// difference over new - 1 steps. The two kinds alternate; medians are reported. At position p a
// token reads every weight's bf16 copy once (250 MB) and 2 x 12 x p x 768 cached values.
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <random>
#include <string>
#include <vector>

#include <ctgraph/ctgraph.hpp>
#include <ctgraph/nn/gpt2.hpp>

using namespace ctg;

namespace {
constexpr int V = 50257, Ctx = 1024, Width = 768, Layers = 12;
using model = nn::gpt2<V, Ctx, Width, 12, Layers>;
template <precision Cache>
using generator = nn::gpt_generator<model, float, precision::bf16, Cache>;

template <class Gen>
double seconds_of(Gen& gen, const std::vector<std::vector<int>>& prompt, std::size_t n, std::vector<std::vector<int>>& out) {
    const auto t0 = std::chrono::steady_clock::now();
    gen.generate_into(out, prompt, n);
    return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}
double median(std::vector<double> v) {
    std::sort(v.begin(), v.end());
    return v[v.size() / 2];
}
}  // namespace

int main(int argc, char** argv) {
    std::size_t prompt_len = 896, new_tokens = 128;
    int reps = 3, threads = 1;
    for (int a = 1; a < argc; ++a) {
        const std::string arg = argv[a];
        if (arg == "--prompt" && a + 1 < argc) prompt_len = std::size_t(std::atol(argv[++a]));
        else if (arg == "--new" && a + 1 < argc) new_tokens = std::size_t(std::atol(argv[++a]));
        else if (arg == "--reps" && a + 1 < argc) reps = std::atoi(argv[++a]);
        else if (arg == "--threads" && a + 1 < argc) threads = std::atoi(argv[++a]);
        else {
            std::fprintf(stderr, "usage: decode-context [--prompt P] [--new N] [--reps R] [--threads K]\n");
            return 2;
        }
    }
    if (prompt_len == 0 || new_tokens < 2 || prompt_len + new_tokens - 1 > std::size_t(Ctx) || reps < 1) {
        std::fprintf(stderr, "decode-context: need a prompt >= 1, new >= 2, prompt + new - 1 <= %d, reps >= 1\n", Ctx);
        return 2;
    }
    set_num_threads(threads);
    auto store = std::make_shared<parameter_store<float>>();
    generator<precision::f32> float_cache(store, 1, prompt_len + new_tokens);
    generator<precision::bf16> bf16_cache(store, 1, prompt_len + new_tokens);
    store->init(1);
    std::mt19937 rng(3);
    std::uniform_int_distribution<int> id(0, V - 1);
    std::vector<std::vector<int>> prompt(1), out;
    for (std::size_t t = 0; t < prompt_len; ++t) prompt[0].push_back(id(rng));

    std::vector<double> per_token[2], prefill[2];
    for (int r = 0; r <= reps; ++r) {  // rep 0 warms up (planning, page faults)
        for (int k = 0; k < 2; ++k) {
            const double one = k == 0 ? seconds_of(float_cache, prompt, 1, out) : seconds_of(bf16_cache, prompt, 1, out);
            const double all = k == 0 ? seconds_of(float_cache, prompt, new_tokens, out)
                                      : seconds_of(bf16_cache, prompt, new_tokens, out);
            if (r == 0) continue;
            prefill[k].push_back(one);
            per_token[k].push_back((all - one) / double(new_tokens - 1));
        }
    }
    const double mean_pos = double(prompt_len) + double(new_tokens - 2) / 2.0;  // positions fed by the steps
    std::printf("GPT-2 small, bf16 products, 1 sequence, prompt %zu, %zu new tokens (positions %zu-%zu), %d threads, %d reps\n",
                prompt_len, new_tokens, prompt_len, prompt_len + new_tokens - 2, threads, reps);
    const char* names[2] = {"float cache", "bf16 cache "};
    const std::size_t bytes[2] = {float_cache.cache_bytes(), bf16_cache.cache_bytes()};
    const double elem[2] = {4.0, 2.0};
    for (int k = 0; k < 2; ++k) {
        const double cache_read = 2.0 * Layers * mean_pos * Width * elem[k] / 1e6;
        std::printf("%s: %.2f ms a token (%.1f tokens/s), prefill %.0f ms; cache %.1f MB, %.1f MB of it read a token\n",
                    names[k], 1e3 * median(per_token[k]), 1.0 / median(per_token[k]), 1e3 * median(prefill[k]),
                    double(bytes[k]) / 1e6, cache_read);
    }
    std::printf("bf16 cache / float cache: %.3fx tokens/s\n", median(per_token[0]) / median(per_token[1]));
    return 0;
}
