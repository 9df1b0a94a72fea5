// ctgraph/xtensor.hpp: a program's results as xtensor views.
//
//   #include <ctgraph/ctgraph.hpp>
//   #include <ctgraph/xtensor.hpp>
//   auto W = prog.param<"W">();          // xt::xtensor_adaptor over the store's memory (writable)
//   W = xt::zeros<float>({4, 3});        // writes the parameter
//   auto y = prog.output<0>();           // after forward(): the output's memory, shaped
//
// param, grad, output, value_of, adjoint_of, input_grad and seed give these views; they need this
// header. The core headers do not parse xtensor (a third of their parse, docs/compile-time.md): a
// program that feeds raw memory (feed(name, data, shape)) and reads raw memory (output_data,
// output_shape, params()) compiles without it. Feeding takes xtensor tensors with or without it.
#pragma once
#include <cstddef>
#include <vector>

#include <xtensor/xadapt.hpp>
#include <xtensor/xexpression.hpp>
#include <xtensor/xnoalias.hpp>
#include <xtensor/xtensor.hpp>

#include "ctgraph/graph/elements.hpp"

namespace ctg::detail {

/// The views (declared in graph/elements.hpp): xt::adapt over the program's memory, not owning it.
template <class T>
struct tensor_views {
    static auto adapt(T* p, const rshape& s) { return xt::adapt(p, s.size(), xt::no_ownership(), s.to_vector()); }
};

}  // namespace ctg::detail
