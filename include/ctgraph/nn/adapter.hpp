// ctgraph/nn/adapter.hpp: how the modules of ctg::nn make their projections (a template
// parameter `Adapt` of multi_head_attention, ffn, the blocks, gpt and gpt2): no_adapter, the plain
// linear layer, by default; nn::lora (nn/lora.hpp) adds low-rank adapters to the projections it names.
// An adapter is a type with `adapts<P>` (whether projection P has one) and `linear<P, In, Out>(x)`.
#pragma once
#include "ctgraph/graph/node.hpp"
#include "ctgraph/ops/affine.hpp"

namespace ctg::nn {

/// How a module makes its projections: the plain linear layer x W + b (every module's default).
struct no_adapter {
    /// Whether the projection named P has an adapter: never.
    template <fixed_string P>
    static constexpr bool adapts = false;
    /// The projection P (In -> Out) of x: x `<P>weight` + `<P>bias`.
    template <fixed_string P, int In, int Out, expr X>
    static constexpr auto linear(X x) {
        return affine(x, param<P + fixed_string("weight"), In, Out>{}, param<P + fixed_string("bias"), Out>{});
    }
};

}  // namespace ctg::nn
