// tests/random_tokens.hpp: a batch of random token ids and targets fed to a language model's program.
#pragma once
#include <cstdint>
#include <random>
#include <string>
#include <vector>

#include <ctgraph/tensor.hpp>

namespace ctg::testing {

/// Feeds input `tokens` (and `targets`, unless empty) with rows x cols ids drawn from [0, vocab) by
/// a generator seeded with `seed` (the tokens' first, then the targets'), both of shape (rows, cols).
template <class P>
void feed_random_tokens(P& p, std::uint64_t seed, std::size_t rows, std::size_t cols, int vocab = 11,
                        const std::string& tokens = "tokens", const std::string& targets = "targets") {
    std::mt19937_64 rng(seed);
    std::vector<index_t> a(rows * cols), b(rows * cols);
    for (auto& v : a) v = index_t(rng() % std::uint64_t(vocab));
    for (auto& v : b) v = index_t(rng() % std::uint64_t(vocab));
    p.feed(tokens, a.data(), rshape{2, {rows, cols}});
    if (!targets.empty()) p.feed(targets, b.data(), rshape{2, {rows, cols}});
}

}  // namespace ctg::testing
