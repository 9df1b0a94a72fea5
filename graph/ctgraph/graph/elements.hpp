// ctgraph/graph/elements.hpp: what the engine needs of a user's tensors, without xtensor's headers.
//
// A program takes any tensor with shape() and row-major begin()/end() (an xtensor container or
// expression, or a type of the user's), and gives its results as views whose type comes from
// <ctgraph/xtensor.hpp> (xtensor adaptors over the program's memory). The core headers do not parse
// xtensor: a program that feeds raw memory and reads raw pointers compiles without it (xtensor was
// a fifth of the headers' parse time and 28 MB of clang's memory: docs/compile-time.md).
#pragma once
#include <cstddef>

#include "ctgraph/tensor.hpp"

namespace ctg::detail {

/// Views of a program's memory (param, grad, output, value_of, adjoint_of, input_grad): declared
/// here, defined by <ctgraph/xtensor.hpp> as xtensor adaptors.
template <class T>
struct tensor_views;

/// Whether <ctgraph/xtensor.hpp> was included (the views' type is known).
template <class T>
concept tensor_views_defined = requires { sizeof(tensor_views<T>); };

/// Whether `e` holds its elements in one row-major block from e.data() (an xtensor container, or a
/// strided view that happens to be contiguous): then feeding is one copy loop over that block.
template <class E>
bool contiguous_row_major(const E& e) {
    if constexpr (requires { e.data(); e.strides(); e.data_offset(); e.shape(); }) {
        if (e.data_offset() != 0) return false;
        const auto& shp = e.shape();
        const auto& str = e.strides();
        std::ptrdiff_t expected = 1;
        for (std::size_t a = shp.size(); a-- > 0;) {
            if (shp[a] != 1 && std::ptrdiff_t(str[a]) != expected) return false;  // xtensor: 0 for extent 1
            expected *= std::ptrdiff_t(shp[a]);
        }
        return true;
    } else {
        return false;
    }
}

/// Calls f(k, v) for the elements v of `e` in row-major order (k = 0, 1, ...): a plain loop over
/// e.data() when the block is contiguous, else e's own iterators.
template <class E, class F>
void for_each_row_major(const E& e, F&& f) {
    if constexpr (requires { e.data(); e.size(); }) {
        if (contiguous_row_major(e)) {
            const auto* p = e.data();
            const std::size_t n = e.size();
            for (std::size_t k = 0; k < n; ++k) f(k, p[k]);
            return;
        }
    }
    std::size_t k = 0;
    for (auto it = e.begin(); it != e.end(); ++it) f(k++, *it);
}

}  // namespace ctg::detail
