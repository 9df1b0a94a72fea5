// examples/gpt_text.hpp: text longer than a GPT's context, generated with a sliding window (char_gpt,
// subword_gpt): when the KV cache is full, the most recent half of the tokens is prefilled again and
// generation goes on.
#pragma once
#include <algorithm>
#include <cstddef>
#include <random>
#include <vector>

#include <ctgraph/nn/generate.hpp>

namespace gpt_text {

/// Continues the token ids `text` by `count` tokens with `gen` (an nn::gpt_generator whose cache holds
/// `window` positions), calling emit(id) for each new token in order.
template <class Generator, class Emit>
void continue_tokens(Generator& gen, std::vector<int> text, std::size_t count, std::size_t window,
                     const ctg::nn::sampling& how, std::mt19937_64& rng, Emit&& emit) {
    std::size_t done = 0;
    while (done < count) {
        if (text.size() >= window) text.erase(text.begin(), text.end() - long(window / 2));  // the recent half
        // A prompt of p tokens and n new ones take positions 0 .. p + n - 2 (the last one is only chosen).
        const std::size_t room = window + 1 - text.size(), n = std::min(room, count - done);
        const auto more = gen.generate({text}, n, how, rng)[0];
        for (int id : more) emit(id);
        done += more.size();
        text.insert(text.end(), more.begin(), more.end());
    }
}

}  // namespace gpt_text
