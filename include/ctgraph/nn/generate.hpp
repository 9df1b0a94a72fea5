// ctgraph/nn/generate.hpp: text generation from an nn::gpt or nn::gpt2 with a KV cache.
//
//   nn::gpt_generator<model> gen(train.shared_params(), /*max batch*/ 4, /*cache positions*/ 512);
//   auto tokens = gen.generate({{1, 2, 3}, {7}}, 100, nn::sampling{.top_k = 0, .temperature = 0.8,
//                                                                   .top_p = 0.95}, rng);
//   auto greedy = gen.generate({{1, 2, 3}}, 100);    // the most likely token each step, no generator
//
// Two inference programs over the model's own parameters (the same store as training): a prefill
// that runs every prompt in one pass and stores each layer's projected keys and values in the
// cache, and a step that feeds one token per sequence at its own position, appends its keys and
// values and attends over the cache (O(t d) per token, not O(t^2 d)). Prompts may differ in length:
// they are right-padded, each sequence continues from its own last position. The caches (layers,
// batch, positions, width; keys feature-major) are allocated once; a generation step allocates
// nothing (tested). With precision::bf16 the caches hold bfloat16 (bf16_input): half the bytes, the
// keys and values rounded as a bf16 product would read them. With weight_format::int8 or q4 the
// projections and the head read int8 or 4-bit copies of their weights: a quarter or an eighth of
// the bytes a token reads.
// Bad input is refused before anything runs: an empty prompt, a token outside the vocabulary, more
// prompts than the batch, or a prompt plus new tokens longer than the cache or the positional table.
#pragma once
#include <algorithm>
#include <memory>
#include <random>
#include <string>
#include <type_traits>
#include <vector>

#include "ctgraph/graph/program.hpp"
#include "ctgraph/memory.hpp"
#include "ctgraph/nn/decode.hpp"
#include "ctgraph/nn/transformer.hpp"

namespace ctg::nn {

/// Text generation from an nn::gpt or nn::gpt2 with a KV cache: a prefill program over the prompts and a
/// one-token step program, both inference programs over the model's parameters (the training store).
/// Model is an nn::gpt or nn::gpt2 type; T float or double. Products: precision::bf16 runs the two programs'
/// matrix products on bf16 operands (the program option of the same name), in a float program.
/// Cache: precision::bf16 keeps the KV cache in bfloat16 (the default with bf16 products).
/// Weights: weight_format::int8 or q4 reads every projection and the output head from quantised
/// copies kept in the store (options::weights; docs/guide/quantization.md): float programs with
/// float products (Products f32).
template <class Model, class T = float, precision Products = precision::f32, precision Cache = Products,
          weight_format Weights = weight_format::f32>
class gpt_generator {
    static constexpr dim B = dyn('B'), Tp = dyn('T'), C = dyn('C');
    static constexpr std::size_t L = Model::layers, D = Model::width, V = Model::vocab;
    static constexpr bool bf16_cache = Cache == precision::bf16;
    static_assert(!bf16_cache || std::is_same_v<T, float>, "ctg::nn::gpt_generator: a bf16 KV cache is for float programs");
    template <fixed_string Name, dim... Ds>
    using cache_input = std::conditional_t<bf16_cache, bf16_input<Name, Ds...>, input<Name, Ds...>>;

public:
    /// The caches' element: T, or kernels::bf16_bits with a bf16 cache.
    using cache_element = std::conditional_t<bf16_cache, kernels::bf16_bits, T>;
    using Prompt = index_input<"prompt", B, Tp>;  ///< the prefill's prompts (B, T), right-padded
    using Token = index_input<"token", B, 1>;  ///< the step's token per sequence (B, 1)
    using Pos = index_input<"pos", B>;  ///< the step's position per sequence (B)
    using CacheK = cache_input<"cache_k", int(L), B, int(D), C>;  ///< keys (layers, B, width, positions), feature-major (see ops/kv_cache.hpp)
    using CacheV = cache_input<"cache_v", int(L), B, C, int(D)>;  ///< values (layers, B, positions, width)
    /// The prefill's output: the logits of every prompt position (B, T, vocab).
    static constexpr auto prefill_logits() { return Model::prefill_logits(Prompt{}, CacheK{}, CacheV{}); }
    /// The step's output: the next token's logits (B, 1, vocab).
    static constexpr auto step_logits() { return Model::step_logits(Token{}, Pos{}, CacheK{}, CacheV{}); }
    static constexpr options program_options{.precision = Products, .inference = true, .weights = Weights};  ///< inference programs, products at Products precision, weights as Weights
    using prefill_program = decltype(compile<T, program_options>(prefill_logits()));  ///< the prefill program's type
    using step_program = decltype(compile<T, program_options>(step_logits()));  ///< the one-token step program's type

    /// Two programs over `store` (missing parameters are added), caches for max_batch sequences of
    /// capacity positions. Throws ctg::error when either is 0.
    gpt_generator(std::shared_ptr<parameter_store<T>> store, std::size_t max_batch, std::size_t capacity)
        : prefill_(store), step_(store), max_batch_(max_batch), capacity_(capacity),
          cache_k_(L * max_batch * capacity * D), cache_v_(L * max_batch * capacity * D),
          token_(max_batch), pos_(max_batch), last_(max_batch) {
        if (max_batch == 0 || capacity == 0) throw error("ctg::nn::gpt_generator: the batch and the cache need room");
    }

    std::size_t capacity() const { return capacity_; }  ///< the number of positions the cache holds
    /// Bytes of the key and value caches (allocated once, at construction).
    std::size_t cache_bytes() const { return (cache_k_.size() + cache_v_.size()) * sizeof(cache_element); }
    /// Bytes of the two programs' working memory (activations and op scratch of the last prefill
    /// and step; weights and caches not counted): what generation needs beyond model and cache.
    std::size_t working_bytes() const { return (prefill_.arena_elements() + step_.arena_elements()) * sizeof(T); }

    /// new_tokens tokens after each prompt. `logits` (optional) receives, per sequence, the logits
    /// (V each) from which each new token was chosen.
    std::vector<std::vector<int>> generate(const std::vector<std::vector<int>>& prompts, std::size_t new_tokens,
                                           const sampling& how, std::mt19937_64& rng,
                                           std::vector<std::vector<T>>* logits = nullptr) {
        std::vector<std::vector<int>> out;
        generate_into(out, prompts, new_tokens, how, rng, logits);
        return out;
    }

    /// Greedy decoding (the most likely token at every step; nothing is drawn, so no random
    /// generator): new_tokens tokens after each prompt, as generate() with nn::sampling{}.
    std::vector<std::vector<int>> generate(const std::vector<std::vector<int>>& prompts, std::size_t new_tokens,
                                           std::vector<std::vector<T>>* logits = nullptr) {
        std::vector<std::vector<int>> out;
        generate_into(out, prompts, new_tokens, logits);
        return out;
    }
    /// Greedy generate_into() (see the greedy generate()).
    void generate_into(std::vector<std::vector<int>>& out, const std::vector<std::vector<int>>& prompts,
                       std::size_t new_tokens, std::vector<std::vector<T>>* logits = nullptr) {
        std::mt19937_64 never_drawn;  // top_k = 1 takes the argmax: the generator is not read
        generate_into(out, prompts, new_tokens, sampling{}, never_drawn, logits);
    }

    /// generate() into the caller's vectors, reusing their memory: a server that keeps `out` across
    /// requests allocates nothing per request once it has grown (nothing per token in any case).
    void generate_into(std::vector<std::vector<int>>& out, const std::vector<std::vector<int>>& prompts,
                       std::size_t new_tokens, const sampling& how, std::mt19937_64& rng,
                       std::vector<std::vector<T>>* logits = nullptr) {
        const std::size_t n = prompts.size();
        std::size_t longest = 0;
        check(prompts, new_tokens, longest);
        out.resize(n);
        for (auto& o : out) o.clear();
        if (logits) {
            logits->resize(n);
            for (auto& l : *logits) l.clear();
        }
        if (new_tokens == 0) return;
        for (auto& o : out) o.reserve(new_tokens);

        // Prefill: every prompt in one pass, right-padded to the longest.
        prompt_.assign(n * longest, 0);
        for (std::size_t b = 0; b < n; ++b) std::copy(prompts[b].begin(), prompts[b].end(), prompt_.begin() + long(b * longest));
        const rshape keys{4, {L, n, D, capacity_}}, values{4, {L, n, capacity_, D}};
        prefill_.feed("prompt", prompt_.data(), rshape{2, {n, longest}});
        prefill_.bind("cache_k", cache_k_.data(), keys);
        prefill_.bind("cache_v", cache_v_.data(), values);
        prefill_.forward();
        const T* z = output(prefill_);
        for (std::size_t b = 0; b < n; ++b) pick(b, z + (b * longest + prompts[b].size() - 1) * V, how, rng, out, logits);

        // Steps: each sequence's last choice at its own next position.
        step_.bind("cache_k", cache_k_.data(), keys);
        step_.bind("cache_v", cache_v_.data(), values);
        for (std::size_t t = 1; t < new_tokens; ++t) {
            for (std::size_t b = 0; b < n; ++b) {
                token_[b] = last_[b];
                pos_[b] = index_t(prompts[b].size() + t - 1);
            }
            step_.feed("token", token_.data(), rshape{2, {n, 1}});
            step_.feed("pos", pos_.data(), rshape{1, {n}});
            step_.forward();
            const T* zs = output(step_);
            for (std::size_t b = 0; b < n; ++b) pick(b, zs + b * V, how, rng, out, logits);
        }
    }

private:
    void check(const std::vector<std::vector<int>>& prompts, std::size_t new_tokens, std::size_t& longest) const {
        check_prompts(prompts, new_tokens, longest, max_batch_, V, capacity_, std::size_t(Model::max_len));
    }
    template <class P>
    static const T* output(P& p) { return p.value_view(P::output_nodes[0]).template as<T>(); }
    void pick(std::size_t b, const T* z, const sampling& how, std::mt19937_64& rng, std::vector<std::vector<int>>& out,
              std::vector<std::vector<T>>* logits) {
        last_[b] = index_t(choose_from(z, V, how, rng, scratch_));
        out[b].push_back(int(last_[b]));
        if (logits) (*logits)[b].insert((*logits)[b].end(), z, z + V);
    }

    prefill_program prefill_;
    step_program step_;
    std::size_t max_batch_, capacity_;
    aligned_vector<cache_element> cache_k_, cache_v_;
    std::vector<index_t> prompt_, token_, pos_, last_;
    choice_scratch scratch_;
};

}  // namespace ctg::nn
