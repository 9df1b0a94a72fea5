// ctgraph/ops/detail/lanes.hpp: element loops written once for SIMD batches and scalars, for fused
// ops that read and write several arrays per element (gru_gates, lstm_gates), which kernels::map
// (one output) does not cover: kernels::lanes (each, load, store; kernels/simd.hpp) plus what
// these ops share (write, sigmoid, the gates' shape rule).
#pragma once
#include <cmath>
#include <cstddef>
#include <type_traits>

#include "ctgraph/dim.hpp"
#include "ctgraph/kernels/simd.hpp"

namespace ctg::ops::lanes {

using kernels::lanes::each;  // the loop and the moves live with the other kernels (optimizers use them)
using kernels::lanes::load;
using kernels::lanes::store;

/// *p = v when `fresh` (a first write, op_io::fresh), else *p += v.
template <class T, class V>
inline void write(bool fresh, T* p, const V& v) {
    // Qualified: unqualified, ADL would pick xsimd::store, the ALIGNED store (it crashed at -O0).
    if (fresh) lanes::store(p, v); else lanes::store(p, lanes::load<V>(static_cast<const T*>(p)) + v);
}
template <class V>
inline V sigmoid(V x) {
    using std::exp;
    return V(1) / (V(1) + exp(-x));  // as ops::sigmoid_fn, so fused and composed agree
}

/// The shape rule of a fused recurrent step (gru_gates, lstm_gates): p and q one shape (..., Gates H),
/// the state (..., Parts H) with the same leading dimensions, H static.
template <std::size_t Gates, std::size_t Parts, class P, class Q, class S>
consteval bool gate_shapes() {
    if constexpr (P::rank < 1 || !std::is_same_v<P, Q> || S::rank != P::rank) {
        return false;
    } else {
        for (std::size_t i = 0; i + 1 < P::rank; ++i)
            if (!(P::dims[i] == S::dims[i])) return false;
        const dim g = P::dims[P::rank - 1], s = S::dims[S::rank - 1];
        return g.is_static() && s.is_static() && s.n % long(Parts) == 0 && g.n == long(Gates) * (s.n / long(Parts));
    }
}

}  // namespace ctg::ops::lanes
