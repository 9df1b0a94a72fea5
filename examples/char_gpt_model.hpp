// examples/char_gpt_model.hpp: the model of the flagship demo (char_gpt), shared with onnx_export,
// which loads char_gpt's checkpoint and exports it.
#pragma once
#include <ctgraph/ctgraph.hpp>

#include "chars.hpp"

namespace char_gpt_model {
// Vocabulary: '\n' and printable ASCII ' '..'~'.
constexpr int V = chars::vocab, Context = 128, D = 128, Heads = 4, Layers = 3;
/// nn::gpt with dropout 0.1 in training (none in the generator's inference programs).
using model = ctg::nn::gpt<V, Context, D, Heads, Layers, 4 * D, void, 0.1>;
}  // namespace char_gpt_model
