// ctgraph/ops/instances.hpp: the op executors compiled once, in the ctgraph library.
//
// A node runs through detail::exec_forward<Op, K, T> and detail::exec_backward<Op, K, true, T>
// (graph/exec.hpp): one body per op type, arity and scalar type, whatever the model. For the ops
// below, whose type names no model (an op without template arguments, or with the ones every model
// uses), those bodies are the same in every program: the library (ctgraph::ctgraph,
// include/ctgraph/compiled.cpp) compiles them for float and double once, and a program that defines
// CTG_SEPARATE_COMPILATION (CMake's ctgraph::ctgraph does) declares them `extern template` here and
// generates none of their code: a GPT trained and decoded in float and double compiles a fifth
// faster (docs/compile-time.md). Ops with a model's numbers in their type (a scale, a head count,
// a mask's window, a repeat's cell) are compiled where they are used.
//
// CTG_OP_INSTANCE_LIST(X) calls X(Op, K) for each (op type, arity); an op with a comma in its type
// spells it through an alias.
#pragma once
#include "ctgraph/graph/exec.hpp"
#include "ctgraph/ops/add.hpp"
#include "ctgraph/ops/additive_scores.hpp"
#include "ctgraph/ops/affine.hpp"
#include "ctgraph/ops/affine_activation.hpp"
#include "ctgraph/ops/attention_values.hpp"
#include "ctgraph/ops/div.hpp"
#include "ctgraph/ops/embedding.hpp"
#include "ctgraph/ops/exp.hpp"
#include "ctgraph/ops/gelu.hpp"
#include "ctgraph/ops/gru_gates.hpp"
#include "ctgraph/ops/kv_cache.hpp"
#include "ctgraph/ops/l2_normalize.hpp"
#include "ctgraph/ops/layer_norm.hpp"
#include "ctgraph/ops/log.hpp"
#include "ctgraph/ops/log_softmax.hpp"
#include "ctgraph/ops/lstm_gates.hpp"
#include "ctgraph/ops/matmul.hpp"
#include "ctgraph/ops/matmul_transposed.hpp"
#include "ctgraph/ops/mse_loss.hpp"
#include "ctgraph/ops/mul.hpp"
#include "ctgraph/ops/neg.hpp"
#include "ctgraph/ops/reduce.hpp"
#include "ctgraph/ops/scaled_dot_weights.hpp"
#include "ctgraph/ops/relu.hpp"
#include "ctgraph/ops/sigmoid.hpp"
#include "ctgraph/ops/softmax.hpp"
#include "ctgraph/ops/softmax_cross_entropy.hpp"
#include "ctgraph/ops/sub.hpp"
#include "ctgraph/ops/tanh.hpp"
#include "ctgraph/ops/transpose.hpp"

namespace ctg::detail::instances {
using sum_all = ops::reduce_op<ops::all_axes, false>;
using mean_all = ops::reduce_op<ops::all_axes, true>;
using layer_norm = ops::layer_norm_op<>;  // eps 1e-5, PyTorch's and nn's default
using cross_entropy = ops::softmax_cross_entropy_op<-100>;  // PyTorch's ignore_index, the default
using cache_store = ops::cache_store_op<false, false>;  // values (B, C, D)
using cache_store_feature_major = ops::cache_store_op<true, false>;  // keys (B, D, C)
}  // namespace ctg::detail::instances

// clang-format off
#define CTG_OP_INSTANCE_LIST(X)                                                                         \
    X(ops::tanh_op, 1) X(ops::sigmoid_op, 1) X(ops::relu_op, 1) X(ops::exp_op, 1) X(ops::log_op, 1)      \
    X(ops::neg_op, 1) X(ops::gelu_op, 1) X(ops::gelu_erf_op, 1) X(ops::softmax_op, 1)                    \
    X(ops::log_softmax_op, 1) X(ops::l2_normalize_op, 1) X(ops::transpose_op, 1)                         \
    X(detail::instances::sum_all, 1) X(detail::instances::mean_all, 1)       \
    X(ops::add_op, 2) X(ops::sub_op, 2) X(ops::mul_op, 2) X(ops::div_op, 2) X(ops::matmul_op, 2)         \
    X(ops::matmul_transposed_op, 2) X(ops::embedding_op, 2) X(ops::mse_loss_op, 2)                       \
    X(detail::instances::cross_entropy, 2) X(detail::instances::cache_store, 2)                          \
    X(detail::instances::cache_store_feature_major, 2)                                                            \
    X(ops::affine_op, 3) X(ops::affine_activation_op<ops::gelu_fn>, 3)                                   \
    X(ops::affine_activation_op<ops::gelu_erf_fn>, 3) X(ops::affine_activation_op<ops::relu_fn>, 3)      \
    X(detail::instances::layer_norm, 3) X(ops::gru_gates_op, 3) X(ops::lstm_gates_op, 3)                 \
    X(ops::additive_scores_op, 3)
// clang-format on

/// The executors of (Op, K) for scalar T, declared (`how` = `extern template`) or defined (`how` =
/// `template`): forward, backward, and the remake of a bf16 shadow (float only; a no-op for most).
#define CTG_OP_EXECUTORS_OF(how, Op, K, T)                                           \
    how void exec_forward<Op, K, T, false>(const exec_state&, std::size_t);          \
    how void exec_backward<Op, K, true, T, false>(const exec_state&, std::size_t);
#define CTG_OP_EXECUTORS_FLOAT(how, Op, K) \
    CTG_OP_EXECUTORS_OF(how, Op, K, float) how void exec_remake<Op, K, float>(const exec_state&, std::size_t);
#define CTG_OP_EXECUTORS_DOUBLE(how, Op, K) CTG_OP_EXECUTORS_OF(how, Op, K, double)

#if defined(CTG_SEPARATE_COMPILATION)
namespace ctg::detail {
#define CTG_OP_EXTERN(Op, K) CTG_OP_EXECUTORS_FLOAT(extern template, Op, K) CTG_OP_EXECUTORS_DOUBLE(extern template, Op, K)
CTG_OP_INSTANCE_LIST(CTG_OP_EXTERN)
#undef CTG_OP_EXTERN
}  // namespace ctg::detail
#endif
