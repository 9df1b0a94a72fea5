// ctgraph/kernels/quant_product_impl.hpp: the definitions of kernels/quant_product.hpp's
// functions: a product by a weight read from its quantised copy, and a tied table's lookups.
// Included by quant_product.hpp in header-only builds, and by the library's compiled part
// (include/ctgraph/compiled.cpp) where programs link it (CTG_SEPARATE_COMPILATION).
//
// A few rows (a decoding step, up to quant_gemv_max_rows): kernels::gemv_q8 / gemv_q4 read the
// quantised bytes, each weight once for all rows. More rows (a prefill): blocks of columns are
// dequantised into cache, (columns, K) floats, and multiplied by the float engine (kernels::gemm),
// so the prefill runs at the float product rate while reading the quantised bytes once.
#pragma once
#include <algorithm>
#include <cstddef>
#include <type_traits>

#include "ctgraph/kernels/gemm.hpp"
#include "ctgraph/kernels/quant.hpp"
#include "ctgraph/kernels/quant_product.hpp"
#include "ctgraph/op.hpp"

namespace ctg::kernels {

/// Rows up to which a quantised product runs the quantised kernels (gemv_q8 / gemv_q4); above,
/// it dequantises blocks of columns for the float engine.
inline constexpr std::size_t quant_gemv_max_rows = 8;
/// Columns dequantised at a time for a product by more rows (768 inputs: 768 KiB of floats).
inline constexpr std::size_t quant_dequantize_columns = 256;

/// Columns [n0, n1) of a quantised weight as floats, column after column: out (n1 - n0, K).
inline void dequantize_columns(const quantized_weight& w, std::size_t n0, std::size_t n1, float* out) {
    const std::size_t K = w.K;
    if (w.format == weight_format::int8) {
        for (std::size_t n = n0; n < n1; ++n) {
            const std::int8_t* q = &w.q8.q[n * w.q8.Kp];
            const float s = w.q8.scale[n];
            float* o = out + (n - n0) * K;
            for (std::size_t k = 0; k < K; ++k) o[k] = float(q[k]) * s;
        }
        return;
    }
    const std::size_t G = w.q4.G;
    for (std::size_t n = n0; n < n1; ++n)
        for (std::size_t g = 0; g < G; ++g) {
            const std::uint8_t* b = &w.q4.nibbles[(n * G + g) * 16];
            const float d = from_half(w.q4.scale[n * G + g]);
            float* o = out + (n - n0) * K + g * 32;
            for (std::size_t j = 0; j < 16; ++j) {
                o[j] = float(int(b[j] & 0x0f) - 8) * d;
                o[j + 16] = float(int(b[j] >> 4) - 8) * d;
            }
        }
}

template <class T>
bool quantized_rows(weight_format format, const T* table, std::size_t V, std::size_t E, const index_t* ids, std::size_t n, T* y) {
    if constexpr (!std::is_same_v<T, float>) return false;
    else {
        if (format == weight_format::f32 || !table) return false;
        const quantized_weight* w = quantized_weights::instance().find(table, true, format);
        if (!w || w->format != format || w->N != V || w->K != E) return false;
        for (std::size_t i = 0; i < n; ++i) dequantize_columns(*w, std::size_t(ids[i]), std::size_t(ids[i]) + 1, y + i * E);
        return true;
    }
}

template <class T>
bool quantized_product(weight_format format, bool trans_b, std::size_t M, std::size_t N, std::size_t K, const T* A,
                       std::size_t lda, const T* B, std::size_t ldb, const T* bias, T* C, std::size_t ldc) {
    if constexpr (!std::is_same_v<T, float>) return false;
    else {
    if (format == weight_format::f32 || !B || M == 0) return false;
    const quantized_weight* w = quantized_weights::instance().find(B, trans_b, format);
    if (!w || w->format != format || w->K != K || w->N != N || ldb != (trans_b ? K : N)) return false;
    gemm_flop_counter().fetch_add(2 * std::uint64_t(M) * N * K, std::memory_order_relaxed);
    if (M <= quant_gemv_max_rows) {
        if (format == weight_format::int8) gemv_q8(M, A, lda, w->q8, bias, C, ldc);
        else gemv_q4(M, A, lda, w->q4, bias, C, ldc);
        return true;
    }
    scratch<float> block(std::min(N, quant_dequantize_columns) * K);
    for (std::size_t n0 = 0; n0 < N; n0 += quant_dequantize_columns) {
        const std::size_t n1 = std::min(N, n0 + quant_dequantize_columns);
        dequantize_columns(*w, n0, n1, block.data());
        gemm(false, true, M, n1 - n0, K, 1.0f, A, lda, block.data(), K, 0.0f, C + n0, ldc, bias ? bias + n0 : nullptr);
    }
    return true;
    }
}

}  // namespace ctg::kernels
