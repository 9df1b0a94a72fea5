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
#pragma once
#include <atomic>
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <stdexcept>
#include <string>
#include <string_view>
#include <vector>

#include "ctgraph/kernels/bf16.hpp"
#include "ctgraph/memory.hpp"

#if defined(CTG_WITH_ONEDNN)
#include <dlfcn.h>

#include <oneapi/dnnl/dnnl.hpp>
#endif

namespace ctg::kernels {

namespace detail {
// The instruction sets below, by what ctgraph asks of oneDNN.
enum class onednn_isa { avx512_core, avx512_core_bf16, avx512_core_amx };

// Whether oneDNN's effective ISA (which ONEDNN_MAX_CPU_ISA lowers; read once) includes `want`;
// false in a build without oneDNN.
inline bool onednn_dispatches([[maybe_unused]] onednn_isa want) {
#if defined(CTG_WITH_ONEDNN)
    static const unsigned effective = unsigned(dnnl::get_effective_cpu_isa());
    const unsigned isa = unsigned(want == onednn_isa::avx512_core_amx    ? dnnl::cpu_isa::avx512_core_amx
                                  : want == onednn_isa::avx512_core_bf16 ? dnnl::cpu_isa::avx512_core_bf16
                                                                         : dnnl::cpu_isa::avx512_core);
    return (effective & isa) == isa;  // ISA values are nested bit masks
#else
    return false;
#endif
}
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
inline std::string onednn_isa_name() {
#if defined(CTG_WITH_ONEDNN)
    switch (dnnl::get_effective_cpu_isa()) {
        case dnnl::cpu_isa::avx512_core_amx: return "avx512_core_amx";
        case dnnl::cpu_isa::avx512_core_bf16: return "avx512_core_bf16";
        case dnnl::cpu_isa::avx512_core_vnni: return "avx512_core_vnni";
        case dnnl::cpu_isa::avx512_core: return "avx512_core";
        case dnnl::cpu_isa::avx2_vnni: return "avx2_vnni";
        case dnnl::cpu_isa::avx2: return "avx2";
        default: return "other";
    }
#else
    return "none (built without oneDNN)";
#endif
}

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

// One thread's oneDNN state: engine, stream and the primitives of the shape classes it has run.
class onednn_matmuls {
public:
    static onednn_matmuls& here() {
        thread_local onednn_matmuls m;
        return m;
    }

    // C (M x N, leading dimension ldc) = alpha op(A) op(B) + beta C (+ bias in every row when
    // given), as kernels::gemm with row-major operands of leading dimensions lda, ldb (oneDNN reads
    // a transposed operand through its strides: no copy); A and B bf16 (or float: the f32
    // overload), C and bias float. alpha must be 1 where a bias is given.
    void run(bool trans_a, bool trans_b, std::size_t M, std::size_t N, std::size_t K, float alpha, const bf16_bits* A,
             std::size_t lda, const bf16_bits* B, std::size_t ldb, float beta, float* C, std::size_t ldc, const float* bias) {
        run_any(key{M, N, K, lda, ldb, ldc, alpha, beta, trans_a, trans_b, bias != nullptr, true}, A, B, C, bias);
    }
    void run(bool trans_a, bool trans_b, std::size_t M, std::size_t N, std::size_t K, float alpha, const float* A,
             std::size_t lda, const float* B, std::size_t ldb, float beta, float* C, std::size_t ldc, const float* bias) {
        run_any(key{M, N, K, lda, ldb, ldc, alpha, beta, trans_a, trans_b, bias != nullptr, false}, A, B, C, bias);
    }

private:
    struct key {
        std::size_t M, N, K, lda, ldb, ldc;
        float alpha, beta;
        bool trans_a, trans_b, bias, bf16;
        bool operator==(const key&) const = default;
    };

    void run_any(const key& k, const void* A, const void* B, float* C, const float* bias) {
        entry& e = find(k);
        e.a.set_data_handle(const_cast<void*>(A));
        e.b.set_data_handle(const_cast<void*>(B));
        e.c.set_data_handle(C);
        dnnl_exec_arg_t args[5] = {{DNNL_ARG_SRC, e.a.get()},
                                   {DNNL_ARG_WEIGHTS, e.b.get()},
                                   {DNNL_ARG_DST, e.c.get()},
                                   {DNNL_ARG_SCRATCHPAD, e.pad.get()},
                                   {DNNL_ARG_BIAS, nullptr}};
        int n = 4;
        if (bias) {
            e.bias.set_data_handle(const_cast<float*>(bias));
            args[n++].memory = e.bias.get();
        }
        inside_onednn() = true;
        const dnnl_status_t status = dnnl_primitive_execute(e.prim.get(), stream_.get(), n, args);
        inside_onednn() = false;
        onednn_executions().fetch_add(1, std::memory_order_relaxed);
        if (status != dnnl_success)
            throw std::runtime_error("ctg::kernels: oneDNN could not run a product of " + shape_text(e.k));
    }

    struct entry {
        key k;
        dnnl::matmul prim;
        dnnl::memory a, b, c, bias, pad;
    };

    onednn_matmuls() : engine_(dnnl::engine::kind::cpu, 0), stream_(engine_) {
        // oneDNN's OpenMP team for calls from this thread: one thread (see the file comment).
        // libgomp is loaded with libdnnl; found at run time so that nothing links it by name.
        using set_threads_fn = void (*)(int);
        if (auto set = reinterpret_cast<set_threads_fn>(::dlsym(RTLD_DEFAULT, "omp_set_num_threads"))) set(1);
    }

    static std::string shape_text(const key& k) {
        return std::string(k.trans_a ? "A^T " : "A ") + std::to_string(k.M) + " x " + std::to_string(k.K) +
               (k.trans_b ? " by B^T " : " by B ") + std::to_string(k.K) + " x " + std::to_string(k.N);
    }

    entry& find(const key& k) {
        for (entry& e : entries_)
            if (e.k == k) return e;
        struct inside {  // creation allocates too (once per shape class and thread)
            inside() { inside_onednn() = true; }
            ~inside() { inside_onednn() = false; }
        } mark;
        return create(k);
    }

    entry& create(const key& k) {
        using dt = dnnl::memory::data_type;
        using dims = dnnl::memory::dims;
        const auto M = dnnl::memory::dim(k.M), N = dnnl::memory::dim(k.N), K = dnnl::memory::dim(k.K);
        try {
            const dt in = k.bf16 ? dt::bf16 : dt::f32;
            const auto lda = dnnl::memory::dim(k.lda), ldb = dnnl::memory::dim(k.ldb);
            const dnnl::memory::desc a_md(dims{M, K}, in, k.trans_a ? dims{1, lda} : dims{lda, 1}),
                b_md(dims{K, N}, in, k.trans_b ? dims{1, ldb} : dims{ldb, 1}),
                c_md(dims{M, N}, dt::f32, dims{dnnl::memory::dim(k.ldc), 1}), bias_md(dims{1, N}, dt::f32, dims{N, 1});
            dnnl::primitive_attr attr;
            attr.set_scratchpad_mode(dnnl::scratchpad_mode::user);
            if (k.alpha != 1.0f) attr.set_output_scales(0, {k.alpha});
            if (k.beta != 0.0f) {
                dnnl::post_ops po;
                po.append_sum(k.beta);
                attr.set_post_ops(po);
            }
            const auto desc = k.bias ? dnnl::matmul::desc(a_md, b_md, bias_md, c_md) : dnnl::matmul::desc(a_md, b_md, c_md);
            const dnnl::matmul::primitive_desc pd(desc, attr, engine_);
            entry e{k, dnnl::matmul(pd), {}, {}, {}, {}, {}};
            // One scratchpad per thread, as large as its largest primitive's: the thread runs one
            // product at a time. Growing it re-points every primitive's scratchpad memory.
            const std::size_t pad_bytes = pd.scratchpad_desc().get_size() + 64;
            const bool grow = pad_bytes > scratchpad_.size();
            if (grow) scratchpad_.resize(pad_bytes);
            e.a = dnnl::memory(a_md, engine_, DNNL_MEMORY_NONE);
            e.b = dnnl::memory(b_md, engine_, DNNL_MEMORY_NONE);
            e.c = dnnl::memory(c_md, engine_, DNNL_MEMORY_NONE);
            e.bias = dnnl::memory(bias_md, engine_, DNNL_MEMORY_NONE);
            e.pad = dnnl::memory(pd.scratchpad_desc(), engine_, scratchpad_.data());
            if (grow)
                for (entry& old : entries_) old.pad.set_data_handle(scratchpad_.data());
            onednn_primitives_created().fetch_add(1, std::memory_order_relaxed);
            entries_.push_back(std::move(e));
            return entries_.back();
        } catch (const dnnl::error& err) {
            throw std::runtime_error(std::string("ctg::kernels: oneDNN could not create a ") + (k.bf16 ? "bf16" : "float") +
                                     " product of " + shape_text(k) + ": " +
                                     err.what());
        }
    }

    dnnl::engine engine_;
    dnnl::stream stream_;
    std::vector<entry> entries_;
    aligned_vector<std::byte> scratchpad_;  // shared by this thread's primitives (see create)
};

}  // namespace detail
#endif

}  // namespace ctg::kernels
