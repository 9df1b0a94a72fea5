// ctgraph/kernels/softmax.hpp: row-wise softmax and log-softmax (numerically stable).
// A manual xsimd row kernel measured 6.3 us against 25-146 us for xtensor expressions (128x128).
#pragma once
#include <cmath>
#include <cstddef>
#include <utility>

#include "ctgraph/kernels/simd.hpp"

namespace ctg::kernels {

/// y = exp(x - max(x)) for one row; returns max(x) and sum(y).
template <class T>
inline std::pair<T, T> exp_shifted_row(std::size_t n, const T* x, T* y) {
    const T m = max(n, x);
    map(n, y, [m](auto v) {
        using std::exp;
        return exp(v - decltype(v)(m));
    }, x);
    return {m, sum(n, static_cast<const T*>(y))};
}

/// y = softmax(x) for one row of n elements.
template <class T>
inline void softmax_row(std::size_t n, const T* x, T* y) {
    const T inv = T(1) / exp_shifted_row(n, x, y).second;
    map(n, y, [inv](auto v) { return v * decltype(v)(inv); }, static_cast<const T*>(y));
}

/// y = log_softmax(x) for one row; returns log(sum(exp(x))) (the log-partition).
template <class T>
inline T log_softmax_row(std::size_t n, const T* x, T* y) {
    const auto [m, s] = exp_shifted_row(n, x, y);
    const T lse = m + std::log(s);
    map(n, y, [lse](auto v) { return v - decltype(v)(lse); }, x);
    return lse;
}

}  // namespace ctg::kernels
