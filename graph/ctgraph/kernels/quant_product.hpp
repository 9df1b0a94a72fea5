// ctgraph/kernels/quant_product.hpp: what an op calls to read a weight from its quantised copy
// (options::weights): affine, affine_activation, matmul and matmul_transposed call
// quantized_product before their float product, embedding calls quantized_rows before its copy.
// This header only declares them: a program that links the library (CTG_SEPARATE_COMPILATION)
// compiles none of the quantisation code, whatever ops it uses; the definitions
// (kernels/quant_product_impl.hpp) are included here in header-only builds.
#pragma once
#include <cstddef>

#include "ctgraph/op.hpp"
#include "ctgraph/tensor.hpp"

namespace ctg::kernels {

/// C (M, N) = A (M, K) op(B) + bias (optional; C's leading dimension ldc), with op(B) = B or, with
/// trans_b, B^T, read from B's quantised copy in `format` (kernels::quantized_weights) when B is a
/// whole quantised matrix of that format and orientation: up to quant_gemv_max_rows rows by the
/// quantised kernels (kernels/quant.hpp), more by blocks of dequantised columns and the float
/// engine. Returns false, having done nothing, where there is none (format f32, an activation, a
/// part of a matrix): the caller then runs its float product. (double: always false.)
template <class T>
bool quantized_product(weight_format format, bool trans_b, std::size_t M, std::size_t N, std::size_t K, const T* A,
                       std::size_t lda, const T* B, std::size_t ldb, const T* bias, T* C, std::size_t ldc);

/// Rows ids[0..n) of a table (V, E) that a product reads transposed (a tied head's x E^T) from its
/// quantised copy in `format`, dequantised into y (n, E): row v is the copy's column v. Returns
/// false, having done nothing, where the table has no such copy (format f32, double, a table no
/// product reads). The ids must be in [0, V) (the caller checks them).
template <class T>
bool quantized_rows(weight_format format, const T* table, std::size_t V, std::size_t E, const index_t* ids, std::size_t n, T* y);

// Compiled once in the library (include/ctgraph/compiled.cpp) where programs link it.
#define CTG_QUANT_INSTANCES(how)                                                                                     \
    how bool quantized_product<float>(weight_format, bool, std::size_t, std::size_t, std::size_t, const float*,     \
                                      std::size_t, const float*, std::size_t, const float*, float*, std::size_t);    \
    how bool quantized_product<double>(weight_format, bool, std::size_t, std::size_t, std::size_t, const double*,   \
                                       std::size_t, const double*, std::size_t, const double*, double*, std::size_t); \
    how bool quantized_rows<float>(weight_format, const float*, std::size_t, std::size_t, const index_t*, std::size_t, float*); \
    how bool quantized_rows<double>(weight_format, const double*, std::size_t, std::size_t, const index_t*, std::size_t, double*);
#if defined(CTG_SEPARATE_COMPILATION)
CTG_QUANT_INSTANCES(extern template)
#endif

}  // namespace ctg::kernels

#if !defined(CTG_SEPARATE_COMPILATION)
#include "ctgraph/kernels/quant_product_impl.hpp"
#endif
