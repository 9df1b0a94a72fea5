// ctgraph/nn/decode.hpp: autoregressive generation with a one-step program.
//
// A step program is compiled from a cell's single step: inputs TokenName (an index_input (B)) and
// StateName (B, S); outputs 0 the next state (B, S) and 1 the logits (B, V), e.g.
//   auto step = program_for<float, options{}, decltype(next_state()), decltype(next_logits())>(params);
// decode() feeds <SOS> (or the given first tokens), then each sequence's own previous choice, until
// <EOS> or max_steps. Choice: greedy (top_k = 1) or sampling among the top_k logits at a temperature,
// optionally from the top_p nucleus. (Transformers decode with a KV cache: nn/generate.hpp.)
#pragma once
#include <algorithm>
#include <cmath>
#include <functional>
#include <random>
#include <string>
#include <utility>
#include <vector>

#include "ctgraph/dim.hpp"
#include "ctgraph/error.hpp"
#include "ctgraph/graph/elements.hpp"
#include "ctgraph/tensor.hpp"

namespace ctg::nn {

/// How decode() and gpt_generator choose each token: greedy, or a draw among the top_k
/// logits at a temperature, optionally restricted to the top_p nucleus.
struct sampling {
    int top_k = 1;  ///< 1: greedy (argmax); 0: no limit
    double temperature = 1.0;  ///< logits are divided by it before the softmax
    double top_p = 1.0;  ///< nucleus: the fewest most likely tokens whose probability reaches top_p
};

/// Reusable memory for choose(), so that sampling allocates nothing per token.
struct choice_scratch {
    std::vector<std::pair<double, int>> ranked;  ///< the logits with their token, sorted
    std::vector<double> weights;  ///< the kept tokens' unnormalised probabilities
};

/// Picks an index from one row of logits (logits(v) for v < n): the argmax for top_k = 1, otherwise
/// a draw from softmax(logits / temperature) restricted to the top_k largest and to the smallest
/// set of them whose probability reaches top_p.
template <class Row>
int choose(const Row& logits, std::size_t n, const sampling& s, std::mt19937_64& rng, choice_scratch& scratch) {
    if (s.top_k < 0 || !(s.temperature > 0) || !(s.top_p > 0 && s.top_p <= 1) || n == 0)
        throw error("ctg::nn::choose: top_k must be >= 0, temperature > 0 and top_p in (0, 1] (got " +
                    std::to_string(s.top_k) + ", " + ctg::detail::shortest_text(s.temperature) + ", " +
                    ctg::detail::shortest_text(s.top_p) + ")");
    auto& c = scratch.ranked;
    c.resize(n);
    for (std::size_t v = 0; v < n; ++v) c[v] = {double(logits(v)) / s.temperature, int(v)};
    std::size_t k = s.top_k == 0 ? n : std::min<std::size_t>(std::size_t(s.top_k), n);
    std::partial_sort(c.begin(), c.begin() + long(k), c.end(), std::greater<>());
    if (k == 1) return c[0].second;
    auto& w = scratch.weights;
    w.resize(k);
    double total = 0;
    for (std::size_t i = 0; i < k; ++i) total += (w[i] = std::exp(c[i].first - c[0].first));
    if (s.top_p < 1) {  // keep the most likely until their share reaches top_p
        double kept = 0;
        std::size_t m = 0;
        while (m < k && kept < s.top_p * total) kept += w[m++];
        k = std::max<std::size_t>(m, 1);
        total = kept;
    }
    double u = std::uniform_real_distribution<double>(0.0, total)(rng);
    for (std::size_t i = 0; i < k; ++i)
        if ((u -= w[i]) < 0) return c[i].second;
    return c[k - 1].second;
}
/// choose() over a row of n logits in memory: one body per scalar type, whatever calls it
/// (gpt_generator; compiled once in the library, CTG_DECODE_INSTANCES).
template <class T>
int choose_from(const T* logits, std::size_t n, const sampling& s, std::mt19937_64& rng, choice_scratch& scratch) {
    return choose([logits](std::size_t v) { return logits[v]; }, n, s, rng, scratch);
}

/// choose() with its own scratch memory (allocates per call). Throws ctg::error for a bad sampling.
template <class Row>
int choose(const Row& logits, std::size_t n, const sampling& s, std::mt19937_64& rng) {
    choice_scratch scratch;
    return choose(logits, n, s, rng, scratch);
}

/// Generates one sequence per row of `state` (see the file comment): `state` is any (B, S) tensor
/// with shape() and row-major begin()/end() (an xt::xtensor<T, 2>, say). Returns the chosen tokens,
/// without `<SOS>` and `<EOS>`; eos < 0 means "no end token" (always max_steps tokens).
template <fixed_string TokenName, fixed_string StateName, class StepProgram, class State>
    requires requires(const State& s) { s.shape(); s.begin(); }
std::vector<std::vector<int>> decode(StepProgram& step, const State& state0, int sos, int eos,
                                     std::size_t max_steps, const sampling& how, std::mt19937_64& rng) {
    using T = typename StepProgram::scalar;
    static_assert(StepProgram::template has_input<TokenName>, "ctg::nn::decode: the step program has no input of the token's name");
    static_assert(StepProgram::template has_input<StateName>, "ctg::nn::decode: the step program has no input of the state's name");
    if (state0.shape().size() != 2)
        throw shape_error("ctg::nn::decode: the state must be (B, S), got rank " + std::to_string(state0.shape().size()));
    const std::size_t n = state0.shape()[0], width = state0.shape()[1];
    std::vector<T> state(n * width);
    ctg::detail::for_each_row_major(state0, [&](std::size_t k, auto v) { state[k] = T(v); });
    std::vector<index_t> tok(n, sos);
    std::vector<std::vector<int>> out(n);
    std::vector<bool> done(n, false);
    std::size_t finished = 0;
    for (std::size_t t = 0; t < max_steps && finished < n; ++t) {
        step.feed(TokenName.view(), tok.data(), rshape{1, {n}});
        step.feed(StateName.view(), state.data(), rshape{2, {n, width}});
        step.forward();
        const rshape& next = step.template output_shape<0>();
        if (next.size() != state.size())
            throw shape_error("ctg::nn::decode: the step's next state has " + std::to_string(next.size()) +
                              " elements, its state input " + std::to_string(state.size()));
        const T* ns = step.template output_data<0>();
        std::copy(ns, ns + state.size(), state.begin());
        const T* z = step.template output_data<1>();
        const std::size_t vocab = step.template output_shape<1>()[1];
        for (std::size_t b = 0; b < n; ++b) {
            tok[b] = choose([&](std::size_t v) { return z[b * vocab + v]; }, vocab, how, rng);
            if (done[b]) continue;
            if (tok[b] == eos) {
                done[b] = true;
                ++finished;
            } else {
                out[b].push_back(tok[b]);
            }
        }
    }
    return out;
}

/// Checks a generator's prompts (gpt_generator::generate): a batch of 1 .. max_batch non-empty
/// prompts of tokens in [0, vocab), each with its new tokens within `capacity` positions (the
/// cache's and the positional table's); sets `longest`. (A template only so that the library can
/// compile it once: CTG_DECODE_INSTANCES.)
template <class = void>
void check_prompts(const std::vector<std::vector<int>>& prompts, std::size_t new_tokens, std::size_t& longest,
                   std::size_t max_batch, std::size_t vocab, std::size_t cache, std::size_t table) {
    if (prompts.empty() || prompts.size() > max_batch)
        throw error("ctg::nn::gpt_generator: " + std::to_string(prompts.size()) + " prompts for a batch of " +
                    std::to_string(max_batch));
    for (std::size_t b = 0; b < prompts.size(); ++b) {
        if (prompts[b].empty()) throw error("ctg::nn::gpt_generator: prompt " + std::to_string(b) + " is empty");
        for (std::size_t t = 0; t < prompts[b].size(); ++t)
            if (prompts[b][t] < 0 || std::size_t(prompts[b][t]) >= vocab)
                throw index_error("ctg::nn::gpt_generator: token " + std::to_string(prompts[b][t]) + " at position " +
                                  std::to_string(t) + " of prompt " + std::to_string(b) +
                                  " is outside the vocabulary [0, " + std::to_string(vocab) + ")");
        longest = std::max(longest, prompts[b].size());
        // Positions 0 .. len + new - 2 are fed (the last new token is only chosen).
        const std::size_t needed = prompts[b].size() + (new_tokens ? new_tokens - 1 : 0);
        if (needed > cache || needed > table)
            throw index_error("ctg::nn::gpt_generator: prompt " + std::to_string(b) + " (" +
                              std::to_string(prompts[b].size()) + " tokens) and " + std::to_string(new_tokens) +
                              " new tokens need " + std::to_string(needed) + " positions; the cache holds " +
                              std::to_string(cache) + " and the positional table " + std::to_string(table));
    }
}

// choose_from and check_prompts are compiled once, in the library (include/ctgraph/compiled.cpp),
// where CTG_SEPARATE_COMPILATION is defined.
#define CTG_DECODE_INSTANCES(how)                                                                                  \
    how int choose_from<float>(const float*, std::size_t, const sampling&, std::mt19937_64&, choice_scratch&);   \
    how int choose_from<double>(const double*, std::size_t, const sampling&, std::mt19937_64&, choice_scratch&); \
    how void check_prompts<void>(const std::vector<std::vector<int>>&, std::size_t, std::size_t&, std::size_t,    \
                                 std::size_t, std::size_t, std::size_t);
#if defined(CTG_SEPARATE_COMPILATION)
CTG_DECODE_INSTANCES(extern template)
#endif

}  // namespace ctg::nn
