// gemm-shapes: one thread's matrix-product rate on the shapes of the reference workloads, OpenBLAS
// against ctgraph's register kernel, side by side, and oneDNN's float and bf16 kernels, the latter
// also with B in oneDNN's blocked layout (medians of 31 timings of 20 calls each). It is
// the measurement behind kernels::use_register_gemm, which chooses between them in gemm(): rerun
// it on a new machine before moving that crossover. Its first line names the policy the process
// chose for this machine (kernels::register_gemm_policy; CTG_REGISTER_GEMM=table|everywhere|onednn sets it).
//
//   build/bench/gemm-shapes            every shape of the table below
//   build/bench/gemm-shapes M N K TA TB  one shape (TA, TB: 0 or 1)
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <random>
#include <vector>

#include "ctgraph/kernels/gemm.hpp"
#if defined(CTG_WITH_ONEDNN)
#include <oneapi/dnnl/dnnl.hpp>  // (the blocked-layout comparison calls oneDNN itself)
#endif

namespace {

struct shape {
    bool ta, tb;
    std::size_t M, N, K;
    const char* where;
};

template <class F>
double median_us(F&& f) {
    std::vector<double> t;
    for (int r = 0; r < 31; ++r) {
        const auto t0 = std::chrono::steady_clock::now();
        for (int i = 0; i < 20; ++i) f();
        t.push_back(std::chrono::duration<double, std::micro>(std::chrono::steady_clock::now() - t0).count() / 20);
    }
    std::sort(t.begin(), t.end());
    return t[t.size() / 2];
}

#if defined(CTG_WITH_ONEDNN)
// oneDNN's bf16 kernel with B in the blocked layout oneDNN picks for the shape (format any,
// reordered once beforehand, as a weight's bf16 copy could be kept), against the plain row-major
// B ctgraph passes: what the plain layout costs on this machine (docs/mixed-precision.md).
double onednn_bf16_blocked_b_us(const shape& s, const ctg::kernels::bf16_bits* a, const ctg::kernels::bf16_bits* b, float* c) {
    using dt = dnnl::memory::data_type;
    using dims = dnnl::memory::dims;
    const auto M = dnnl::memory::dim(s.M), N = dnnl::memory::dim(s.N), K = dnnl::memory::dim(s.K);
    dnnl::engine eng(dnnl::engine::kind::cpu, 0);
    dnnl::stream st(eng);
    const dnnl::memory::desc a_md(dims{M, K}, dt::bf16, s.ta ? dims{1, M} : dims{K, 1}),
        b_plain(dims{K, N}, dt::bf16, s.tb ? dims{1, K} : dims{N, 1}), b_any(dims{K, N}, dt::bf16, dnnl::memory::format_tag::any),
        c_md(dims{M, N}, dt::f32, dims{N, 1});
    const dnnl::matmul::primitive_desc pd(dnnl::matmul::desc(a_md, b_any, c_md), eng);
    dnnl::memory am(a_md, eng, const_cast<ctg::kernels::bf16_bits*>(a)), bp(b_plain, eng, const_cast<ctg::kernels::bf16_bits*>(b)),
        bm(pd.weights_desc(), eng), cm(c_md, eng, c);
    dnnl::reorder(bp, bm).execute(st, bp, bm);
    st.wait();
    const dnnl::matmul product(pd);
    return median_us([&] {
        product.execute(st, {{DNNL_ARG_SRC, am}, {DNNL_ARG_WEIGHTS, bm}, {DNNL_ARG_DST, cm}});
        st.wait();
    });
}
#endif

void measure(const shape& s) {
    std::mt19937 gen(7);
    std::normal_distribution<float> normal;
    std::vector<float> A(s.M * s.K), B(s.K * s.N), C(s.M * s.N), R(s.M * s.N);
    for (auto& x : A) x = normal(gen);
    for (auto& x : B) x = normal(gen);
    const std::size_t lda = s.ta ? s.M : s.K, ldb = s.tb ? s.K : s.N;
    const auto blas = [&] {
        cblas_sgemm(CblasRowMajor, s.ta ? CblasTrans : CblasNoTrans, s.tb ? CblasTrans : CblasNoTrans, int(s.M), int(s.N),
                    int(s.K), 1.0f, A.data(), int(lda), B.data(), int(ldb), 0.0f, C.data(), int(s.N));
    };
    const auto reg = [&] {
        ctg::kernels::register_gemm(s.ta, s.tb, s.M, s.N, s.K, 1.0f, A.data(), lda, B.data(), ldb, 0.0f, C.data(), s.N);
    };
    ctg::kernels::gemm_reference(s.ta, s.tb, s.M, s.N, s.K, 1.0f, A.data(), lda, B.data(), ldb, 0.0f, R.data(), s.N);
    reg();
    double err = 0;
    for (std::size_t i = 0; i < R.size(); ++i) err = std::max(err, double(std::abs(R[i] - C[i])));
    const double mflop = 2.0 * double(s.M * s.N * s.K) / 1e6;
    const double tb = median_us(blas), tr = median_us(reg);
    // oneDNN's float and bf16 kernels on the same shape (bf16: operands converted beforehand, as a
    // weight's bf16 copy is; kernels/onednn.hpp), for the engine table of the docs.
    double tdf = 0, tdb = 0, tdk = 0;
#if defined(CTG_WITH_ONEDNN)
    {
        auto& m = ctg::kernels::detail::onednn_matmuls::here();
        tdf = median_us([&] { m.run(s.ta, s.tb, s.M, s.N, s.K, 1.0f, A.data(), lda, B.data(), ldb, 0.0f, C.data(), s.N, nullptr); });
        if (ctg::kernels::onednn_has_bf16()) {
            std::vector<ctg::kernels::bf16_bits> a(A.size()), b(B.size());
            ctg::kernels::pack_bf16(false, 1, A.size(), A.data(), A.size(), a.data());
            ctg::kernels::pack_bf16(false, 1, B.size(), B.data(), B.size(), b.data());
            tdb = median_us([&] { m.run(s.ta, s.tb, s.M, s.N, s.K, 1.0f, a.data(), lda, b.data(), ldb, 0.0f, C.data(), s.N, nullptr); });
            tdk = onednn_bf16_blocked_b_us(s, a.data(), b.data(), C.data());  // (after m: one oneDNN thread)
        }
    }
#endif
    const auto gf = [&](double us) { return us > 0 ? mflop * 1e3 / us : 0.0; };
    std::printf("%c%c %5zu %5zu %5zu  %-22s  OpenBLAS %8.2f us %6.1f GF/s   register %8.2f us %6.1f GF/s   %5.2fx  %s  (max err %.1e)"
                "   oneDNN f32 %6.1f GF/s  bf16 %6.1f GF/s  bf16 blocked B %6.1f GF/s\n",
                s.ta ? 'T' : 'N', s.tb ? 'T' : 'N', s.M, s.N, s.K, s.where, tb, mflop * 1e3 / tb, tr, mflop * 1e3 / tr,
                tb / tr, ctg::kernels::use_register_gemm<float>(s.ta, s.tb, s.M, s.N, s.K) ? "use_register_gemm: yes" : "use_register_gemm: no",
                err, gf(tdf), gf(tdb), gf(tdk));
}

}  // namespace

int main(int argc, char** argv) {
    ctg::set_num_threads(1);
    // use_register_gemm below follows this process's policy (kernels/gemm.hpp): `table` where
    // OpenBLAS runs at the machine's full vector rate, `everywhere` where it does not
    std::printf("register_gemm_policy: %s%s\n",
                ctg::kernels::register_gemm_policy_name(ctg::kernels::get_register_gemm_policy()),
                std::getenv("CTG_REGISTER_GEMM") ? " (CTG_REGISTER_GEMM)" : " (this machine)");
    if (argc == 6) {
        measure({std::atoi(argv[4]) != 0, std::atoi(argv[5]) != 0, std::size_t(std::atol(argv[1])),
                 std::size_t(std::atol(argv[2])), std::size_t(std::atol(argv[3])), "given"});
        return 0;
    }
    const shape shapes[] = {
        {false, false, 16, 128, 128, "rnn recurrent step"},
        {true, false, 128, 128, 16, "rnn step weight grad"},
        {false, false, 1024, 65, 128, "rnn logits"},
        {false, true, 1024, 128, 65, "rnn logits VJP"},
        {true, false, 128, 65, 1024, "rnn head weight grad"},
        {false, false, 1024, 128, 64, "rnn input projection"},
        {true, false, 64, 128, 1024, "rnn input weight grad"},
        {false, true, 128, 128, 64, "attention scores"},
        {false, false, 128, 64, 128, "attention P V"},
        {true, false, 128, 64, 128, "attention dV, dK"},
        {false, false, 64, 64, 32, "gpt-s head P V"},
        {false, true, 64, 64, 32, "gpt-s head scores"},
        {false, false, 128, 64, 64, "below crossover"},
        {false, true, 128, 64, 128, "below crossover"},
        {false, false, 1024, 384, 128, "gpt-s qkv"},
        {false, false, 1024, 128, 512, "gpt-s ffn down"},
        {true, false, 128, 512, 1024, "gpt-s ffn weight grad"},
        {false, true, 1024, 512, 128, "gpt-s ffn VJP"},
        {false, false, 2048, 1536, 384, "gpt-m ffn up"},
        {false, true, 2048, 384, 1536, "gpt-m ffn down VJP"},
        {true, false, 384, 1536, 2048, "gpt-m ffn weight grad"},
        {false, false, 2048, 1152, 384, "gpt-m qkv"},
        {false, false, 2048, 384, 384, "gpt-m proj"},
        {false, true, 256, 256, 64, "gpt-m head scores"},
        {false, false, 256, 64, 256, "gpt-m head P V"},
        {true, false, 256, 64, 256, "gpt-m head dV, dK"},
        {false, true, 16, 128, 128, "rnn recurrent VJP"},
        {false, true, 32, 128, 128, "NT 32 rows"},
        {false, true, 64, 64, 64, "NT 64^3"},
        {false, true, 128, 128, 32, "NT 128x128x32"},
    };
    for (const auto& s : shapes) measure(s);
}
