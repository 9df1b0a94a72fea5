// ctgraph/nn/checks.hpp: the static checks of the nn:: modules.
//
// One model applies a module in several graphs: a training loss, an evaluation or inference
// program, a generator's prefill and its one-token step, a cell's scan and its single step. A
// module's check is therefore a function template keyed on what it compares (the parameter's name
// and sizes, and the input's last dimension), not on the operands' node types, so an input of the
// wrong width is one error whatever graph applies the module and whatever the input's other
// dimensions are; the module's entry point then returns poison, so the ops it would have built add
// none. (A static_assert in a class template's body would leave clang an incomplete class, and an
// error at every use of it.)
#pragma once
#include "ctgraph/dim.hpp"
#include "ctgraph/error.hpp"
#include "ctgraph/graph/node.hpp"

namespace ctg::nn::detail {

/// Names the parameter of a failed check in the compiler's diagnostic.
template <fixed_string Name>
struct weight_named {};

/// The last dimension of expression X (0 for a scalar).
template <expr X>
inline constexpr dim last_dim = [] {
    using S = typename X::shape;
    if constexpr (S::rank == 0) return dim(0);
    else return S::dims[S::rank - 1];
}();

/// nn::linear with weight W (In, Out) applied to an input whose last dimension is Last.
template <fixed_string W, int In, int Out, dim Last>
constexpr bool linear_fits() {
    static_assert(with_shapes<Last == dim(In), weight_named<W>, shape_is<ctg::detail::pretty_dim<Last>()>,
                              shape_is<In, Out>>::value,
                  "ctg::nn::linear: the input (..., in) must end in the weight's row count (in, out)");
    return Last == dim(In);
}

/// nn::layer_norm with gamma G (D) applied to an input whose last dimension is Last.
template <fixed_string G, int D, dim Last>
constexpr bool layer_norm_fits() {
    static_assert(with_shapes<Last == dim(D), weight_named<G>, shape_is<ctg::detail::pretty_dim<Last>()>,
                              shape_is<D>>::value,
                  "ctg::nn::layer_norm: the input (..., D) must end in the layer's width D");
    return Last == dim(D);
}

/// nn::multi_head_attention of width D whose projection W reads an input whose last dimension is Last.
template <fixed_string W, int D, dim Last>
constexpr bool attention_input_fits() {
    static_assert(with_shapes<Last == dim(D), weight_named<W>, shape_is<ctg::detail::pretty_dim<Last>()>,
                              shape_is<D, D>>::value,
                  "ctg::nn::multi_head_attention: the queries' and the keys' inputs (..., D) must end in the "
                  "model width D");
    return Last == dim(D);
}

/// nn::multi_head_attention's width D against its number of heads.
template <int D, int Heads>
constexpr bool heads_divide_width() {
    static_assert(Heads > 0 && D % Heads == 0,
                  "ctg::nn::multi_head_attention: the width must be a multiple of the number of heads");
    return Heads > 0 && D % Heads == 0;
}

/// A recurrent cell whose input weight W (X, G) reads inputs whose last dimension is Last.
template <fixed_string W, int X, int G, dim Last>
constexpr bool cell_input_fits() {
    static_assert(with_shapes<Last == dim(X), weight_named<W>, shape_is<ctg::detail::pretty_dim<Last>()>,
                              shape_is<X, G>>::value,
                  "ctg::nn: a recurrent cell's input (..., X) must end in its input size X");
    return Last == dim(X);
}

}  // namespace ctg::nn::detail
