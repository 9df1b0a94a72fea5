// ctgraph/kernels/onednn.hpp: bf16 matrix products on oneDNN's kernels (AMX, AVX512-BF16).
//
// oneDNN (Debian's libdnnl-dev 2.6) dispatches each product to the best kernel the CPU has: AMX
// tiles on Intel Xeons that have them (brg:avx512_core_amx_bf16), AVX512-BF16 dot products on AMD
// Zen 4/5 and Intel Cooper Lake (brg:avx512_core_bf16). It does the job better than our own code
// could: its kernels are tuned per microarchitecture, and AMX needs tile configuration and memory
// layouts that only a library with a JIT keeps up with.
//
// gemm() runs bf16 products here wherever oneDNN has bf16 kernels for the CPU
// (kernels::bf16_engine in kernels/gemm.hpp has the rule and the fallback).
//
// Primitives: one per (thread, shape class), created by a thread's first product of that class
// and reused by every later one: a training step's products are the same from step to step, so a
// steady-state step creates none (kernels::onednn_primitives_created() counts them). Memory objects
// are created with the primitive and re-pointed with set_data_handle, a thread's primitives share
// one scratchpad (user mode; a thread runs one product at a time), and execution goes through the
// C API with a fixed argument array.
// ctgraph's side of a product thus allocates nothing; oneDNN 2.6's dnnl_primitive_execute itself
// allocates 6 small blocks per call (its argument map and scratchpad wrappers: measured by
// counting operator new around the call). inside_onednn() tells an allocation counter which ones
// are oneDNN's (ctg-bench reports them apart).
//
// Threads: Debian's oneDNN runs on OpenMP. ctgraph's pool splits a product into pieces (row blocks)
// and each piece is one single-threaded oneDNN call: every thread that calls oneDNN sets its own
// OpenMP thread count to 1 first (omp_set_num_threads is per thread), so oneDNN never starts a team
// of its own beside the pool and the cores are never oversubscribed.
//
// What calls oneDNN (the product's state per thread, the ISA queries) is in
// kernels/onednn_impl.hpp, the one header that includes oneDNN's: a program's units that link the
// library's compiled part (CTG_SEPARATE_COMPILATION) see only the declarations below and do not
// parse oneDNN's headers (0.3 s and 25 MB a unit); header-only, this header includes it.
#pragma once
#include <atomic>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>

#include "ctgraph/kernels/bf16.hpp"

#if defined(CTG_WITH_ONEDNN)
#if defined(CTG_SEPARATE_COMPILATION)
#define CTG_ONEDNN_INLINE  // defined once, in the library (include/ctgraph/compiled.cpp)
#else
#define CTG_ONEDNN_INLINE inline
#endif
#endif

namespace ctg::kernels {

namespace detail {
// The instruction sets below, by what ctgraph asks of oneDNN.
enum class onednn_isa { avx512_core, avx512_core_bf16, avx512_core_amx };

// Whether oneDNN's effective ISA (which ONEDNN_MAX_CPU_ISA lowers; read once) includes `want`;
// false in a build without oneDNN.
#if defined(CTG_WITH_ONEDNN)
CTG_ONEDNN_INLINE bool onednn_dispatches(onednn_isa want);
#else
inline bool onednn_dispatches(onednn_isa) { return false; }
#endif
}  // namespace detail

/// Whether oneDNN has bf16 kernels for this CPU (honours ONEDNN_MAX_CPU_ISA); false in a build
/// without oneDNN.
inline bool onednn_has_bf16() { return detail::onednn_dispatches(detail::onednn_isa::avx512_core_bf16); }

/// Whether oneDNN dispatches AMX kernels here (honours ONEDNN_MAX_CPU_ISA); false in a build
/// without oneDNN.
inline bool onednn_has_amx() { return detail::onednn_dispatches(detail::onednn_isa::avx512_core_amx); }

/// Whether oneDNN dispatches AVX-512 (or better) kernels here (honours ONEDNN_MAX_CPU_ISA): its f32
/// kernels are then a candidate for float products (kernels::register_gemm_policy::onednn).
inline bool onednn_has_avx512() { return detail::onednn_dispatches(detail::onednn_isa::avx512_core); }

/// The name of the ISA oneDNN dispatches to ("avx512_core_bf16", "avx512_core_amx", ...), for reports.
#if defined(CTG_WITH_ONEDNN)
CTG_ONEDNN_INLINE std::string onednn_isa_name();
#else
inline std::string onednn_isa_name() { return "none (built without oneDNN)"; }
#endif

/// oneDNN product calls so far in this process.
inline std::atomic<std::uint64_t>& onednn_executions() {
    static std::atomic<std::uint64_t> n{0};
    return n;
}
/// True on a thread while it is inside oneDNN (creating or running a primitive): what an
/// allocation counter reads to tell oneDNN's allocations from ctgraph's.
inline bool& inside_onednn() {
    thread_local bool inside = false;
    return inside;
}

/// oneDNN primitives created so far in this process (tests: none per steady-state step).
inline std::atomic<std::uint64_t>& onednn_primitives_created() {
    static std::atomic<std::uint64_t> n{0};
    return n;
}

#if defined(CTG_WITH_ONEDNN)
namespace detail {

// One thread's oneDNN state: engine, stream and the primitives of the shape classes it has run
// (kernels/onednn_impl.hpp).
class onednn_matmuls {
public:
    /// This thread's.
    CTG_ONEDNN_INLINE static onednn_matmuls& here();

    // C (M x N, leading dimension ldc) = alpha op(A) op(B) + beta C (+ bias in every row when
    // given), as kernels::gemm with row-major operands of leading dimensions lda, ldb (oneDNN reads
    // a transposed operand through its strides: no copy); A and B bf16 (or float: the f32
    // overload), C and bias float. alpha must be 1 where a bias is given.
    CTG_ONEDNN_INLINE void run(bool trans_a, bool trans_b, std::size_t M, std::size_t N, std::size_t K, float alpha,
                               const bf16_bits* A, std::size_t lda, const bf16_bits* B, std::size_t ldb, float beta,
                               float* C, std::size_t ldc, const float* bias);
    CTG_ONEDNN_INLINE void run(bool trans_a, bool trans_b, std::size_t M, std::size_t N, std::size_t K, float alpha,
                               const float* A, std::size_t lda, const float* B, std::size_t ldb, float beta, float* C,
                               std::size_t ldc, const float* bias);

    struct state;  ///< oneDNN's objects (kernels/onednn_impl.hpp)
    CTG_ONEDNN_INLINE ~onednn_matmuls();

private:
    CTG_ONEDNN_INLINE onednn_matmuls();
    std::unique_ptr<state> s_;
};

}  // namespace detail
#endif

}  // namespace ctg::kernels

#if defined(CTG_WITH_ONEDNN) && (!defined(CTG_SEPARATE_COMPILATION) || defined(CTG_ONEDNN_DEFINITIONS))
#include "ctgraph/kernels/onednn_impl.hpp"
#endif
