// ctgraph/kernels/onednn_impl.hpp: what calls oneDNN (kernels/onednn.hpp declares it). Included by
// kernels/onednn.hpp in a header-only build, and by the library's compiled part
// (include/ctgraph/compiled.cpp, CTG_ONEDNN_DEFINITIONS) where CTG_SEPARATE_COMPILATION is defined:
// the only header that includes oneDNN's.
#pragma once
#include <cstddef>
#include <stdexcept>
#include <string>
#include <vector>

#include "ctgraph/kernels/onednn.hpp"
#include "ctgraph/memory.hpp"

#if defined(CTG_WITH_ONEDNN)
#include <dlfcn.h>

#include <oneapi/dnnl/dnnl.hpp>

namespace ctg::kernels {
namespace detail {

CTG_ONEDNN_INLINE bool onednn_dispatches(onednn_isa want) {
    static const unsigned effective = unsigned(dnnl::get_effective_cpu_isa());
    const unsigned isa = unsigned(want == onednn_isa::avx512_core_amx    ? dnnl::cpu_isa::avx512_core_amx
                                  : want == onednn_isa::avx512_core_bf16 ? dnnl::cpu_isa::avx512_core_bf16
                                                                         : dnnl::cpu_isa::avx512_core);
    return (effective & isa) == isa;  // ISA values are nested bit masks
}

// One thread's oneDNN objects: engine, stream, and one primitive per shape class it has run.
struct onednn_matmuls::state {
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

    state() : engine_(dnnl::engine::kind::cpu, 0), stream_(engine_) {
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

CTG_ONEDNN_INLINE onednn_matmuls::onednn_matmuls() : s_(std::make_unique<state>()) {}
CTG_ONEDNN_INLINE onednn_matmuls::~onednn_matmuls() = default;

CTG_ONEDNN_INLINE onednn_matmuls& onednn_matmuls::here() {
    thread_local onednn_matmuls m;
    return m;
}

CTG_ONEDNN_INLINE void onednn_matmuls::run(bool trans_a, bool trans_b, std::size_t M, std::size_t N, std::size_t K,
                                           float alpha, const bf16_bits* A, std::size_t lda, const bf16_bits* B,
                                           std::size_t ldb, float beta, float* C, std::size_t ldc, const float* bias) {
    s_->run_any(state::key{M, N, K, lda, ldb, ldc, alpha, beta, trans_a, trans_b, bias != nullptr, true}, A, B, C, bias);
}
CTG_ONEDNN_INLINE void onednn_matmuls::run(bool trans_a, bool trans_b, std::size_t M, std::size_t N, std::size_t K,
                                           float alpha, const float* A, std::size_t lda, const float* B, std::size_t ldb,
                                           float beta, float* C, std::size_t ldc, const float* bias) {
    s_->run_any(state::key{M, N, K, lda, ldb, ldc, alpha, beta, trans_a, trans_b, bias != nullptr, false}, A, B, C, bias);
}

}  // namespace detail

CTG_ONEDNN_INLINE std::string onednn_isa_name() {
    switch (dnnl::get_effective_cpu_isa()) {
        case dnnl::cpu_isa::avx512_core_amx: return "avx512_core_amx";
        case dnnl::cpu_isa::avx512_core_bf16: return "avx512_core_bf16";
        case dnnl::cpu_isa::avx512_core_vnni: return "avx512_core_vnni";
        case dnnl::cpu_isa::avx512_core: return "avx512_core";
        case dnnl::cpu_isa::avx2_vnni: return "avx2_vnni";
        case dnnl::cpu_isa::avx2: return "avx2";
        default: return "other";
    }
}

}  // namespace ctg::kernels
#endif
