// ctgraph/kernels/gemm.hpp: row-major matrix products.
//
// C = alpha * op(A) op(B) + beta * C, op = identity or transpose. The fast path is OpenBLAS's
// cblas_?gemm (a well-kept library matching the best single-core kernel measured here and scaling
// to two threads), except a single row times a matrix (a decoding step), which kernels::combine_rows
// does in registers (OpenBLAS's small-matrix path was 2/3 of a cached decoding step); `gemm_reference`
// is the plain triple loop the tests compare both with.
#pragma once
#include <cstddef>
#include <cstdint>

extern "C" {
#include <cblas.h>
}

#include "ctgraph/kernels/simd.hpp"

namespace ctg::kernels {

/// Plain reference product, same contract as gemm().
template <class T>
inline void gemm_reference(bool trans_a, bool trans_b, std::size_t M, std::size_t N, std::size_t K, T alpha,
                           const T* A, std::size_t lda, const T* B, std::size_t ldb, T beta, T* C,
                           std::size_t ldc) {
    for (std::size_t i = 0; i < M; ++i)
        for (std::size_t j = 0; j < N; ++j) {
            T acc = 0;
            for (std::size_t k = 0; k < K; ++k) {
                T a = trans_a ? A[k * lda + i] : A[i * lda + k];
                T b = trans_b ? B[j * ldb + k] : B[k * ldb + j];
                acc += a * b;
            }
            C[i * ldc + j] = alpha * acc + (beta == T(0) ? T(0) : beta * C[i * ldc + j]);
        }
}

/// Floating-point operations (2 M N K per call) of every gemm() since the last reset: what
/// ctg-bench reports as the matrix-product work of a step (its "GEMM bound"). Not synchronised:
/// read it around single-threaded calls.
inline std::uint64_t& gemm_flop_counter() {
    static std::uint64_t flops = 0;
    return flops;
}

/// C (M x N) = alpha * op(A) (M x K) * op(B) (K x N) + beta * C; all row-major.
template <class T>
inline void gemm(bool trans_a, bool trans_b, std::size_t M, std::size_t N, std::size_t K, T alpha, const T* A,
                 std::size_t lda, const T* B, std::size_t ldb, T beta, T* C, std::size_t ldc) {
    if (M == 0 || N == 0) return;
    gemm_flop_counter() += 2ULL * M * N * K;
    if (K == 0 || scalar_only()) {
        gemm_reference(trans_a, trans_b, M, N, K, alpha, A, lda, B, ldb, beta, C, ldc);
        return;
    }
    if (M == 1 && !trans_a && !trans_b && alpha == T(1) && beta == T(0)) {
        combine_rows(K, N, A, B, ldb, C);  // a vector times a matrix (a decoding step): no BLAS call overhead
        return;
    }
    const auto ta = trans_a ? CblasTrans : CblasNoTrans;
    const auto tb = trans_b ? CblasTrans : CblasNoTrans;
    if constexpr (std::is_same_v<T, float>)
        cblas_sgemm(CblasRowMajor, ta, tb, int(M), int(N), int(K), alpha, A, int(lda), B, int(ldb), beta, C, int(ldc));
    else
        cblas_dgemm(CblasRowMajor, ta, tb, int(M), int(N), int(K), alpha, A, int(lda), B, int(ldb), beta, C, int(ldc));
}

}  // namespace ctg::kernels

namespace ctg {
/// Threads used by ctgraph's kernels (OpenBLAS's pool). Default: OpenBLAS's own default.
inline void set_num_threads(int k) { openblas_set_num_threads(k); }
inline int num_threads() { return openblas_get_num_threads(); }
}  // namespace ctg
