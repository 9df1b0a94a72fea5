// ctgraph/ctgraph.hpp: everything (the engine and every primitive). Single-concept headers are
// under ctgraph/ (core), ctgraph/graph/ (engine) and ctgraph/ops/ (one primitive each).
#pragma once

/// @namespace ctg
/// @brief ctgraph: leaves, ops, `compile`, programs, `scan` and `repeat`, attention, the parameter
/// store and the training loop. Dimensions are `int` (static) or `dyn('B')` (bound at run time).
/// @namespace ctg::nn
/// @brief Modules built from the primitives: linear layers, layer norm, recurrent cells,
/// multi-head attention, transformer blocks, GPT, sequence-to-sequence, generation and decoding
/// (parameter names and shapes with their PyTorch equivalents: docs/modules.md).
/// @namespace ctg::optim
/// @brief Optimizers (SGD, Adam, AdamW), gradient clipping and learning-rate schedules, with
/// PyTorch's update rules.
/// @namespace ctg::npz
/// @brief NumPy `.npz` archives: save and load a parameter store, read and write raw arrays.

#include "ctgraph/attention.hpp"
#include "ctgraph/dim.hpp"
#include "ctgraph/error.hpp"
#include "ctgraph/graph/node.hpp"
#include "ctgraph/graph/program.hpp"
#include "ctgraph/graph/repeat.hpp"
#include "ctgraph/graph/scan.hpp"
#include "ctgraph/ops/add.hpp"
#include "ctgraph/ops/additive_scores.hpp"
#include "ctgraph/ops/affine.hpp"
#include "ctgraph/ops/affine_activation.hpp"
#include "ctgraph/ops/instances.hpp"
#include "ctgraph/ops/at_time.hpp"
#include "ctgraph/ops/concat.hpp"
#include "ctgraph/ops/div.hpp"
#include "ctgraph/ops/dropout.hpp"
#include "ctgraph/ops/embedding.hpp"
#include "ctgraph/ops/exp.hpp"
#include "ctgraph/ops/full.hpp"
#include "ctgraph/ops/gelu.hpp"
#include "ctgraph/ops/gru_gates.hpp"
#include "ctgraph/ops/kv_cache.hpp"
#include "ctgraph/ops/l2_normalize.hpp"
#include "ctgraph/ops/layer_norm.hpp"
#include "ctgraph/ops/log.hpp"
#include "ctgraph/ops/log_softmax.hpp"
#include "ctgraph/ops/lstm_gates.hpp"
#include "ctgraph/ops/masked_softmax.hpp"
#include "ctgraph/ops/masks.hpp"
#include "ctgraph/ops/matmul.hpp"
#include "ctgraph/ops/matmul_transposed.hpp"
#include "ctgraph/ops/mse_loss.hpp"
#include "ctgraph/ops/mul.hpp"
#include "ctgraph/ops/neg.hpp"
#include "ctgraph/ops/operators.hpp"
#include "ctgraph/ops/permute.hpp"
#include "ctgraph/ops/positions.hpp"
#include "ctgraph/ops/reduce.hpp"
#include "ctgraph/ops/relu.hpp"
#include "ctgraph/ops/reshape.hpp"
#include "ctgraph/ops/reverse_time.hpp"
#include "ctgraph/ops/scale.hpp"
#include "ctgraph/ops/attention_values.hpp"
#include "ctgraph/ops/scaled_dot_weights.hpp"
#include "ctgraph/ops/sigmoid.hpp"
#include "ctgraph/ops/slice.hpp"
#include "ctgraph/ops/softmax.hpp"
#include "ctgraph/ops/softmax_cross_entropy.hpp"
#include "ctgraph/ops/stop_gradient.hpp"
#include "ctgraph/ops/sub.hpp"
#include "ctgraph/ops/tanh.hpp"
#include "ctgraph/ops/transpose.hpp"
#include "ctgraph/nn/cells.hpp"
#include "ctgraph/nn/decode.hpp"
#include "ctgraph/nn/generate.hpp"
#include "ctgraph/nn/gpt2.hpp"
#include "ctgraph/nn/multi_head_attention.hpp"
#include "ctgraph/nn/seq2seq.hpp"
#include "ctgraph/nn/transformer.hpp"
#include "ctgraph/npz.hpp"
#include "ctgraph/optim.hpp"
#include "ctgraph/params.hpp"
#include "ctgraph/version.hpp"
