// Every SIMD kernel against its scalar reference on the same inputs.
#include <catch2/catch.hpp>

#include <algorithm>
#include <bit>
#include <atomic>
#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <limits>
#include <thread>
#include <random>
#include <stdexcept>
#include <string>
#include <vector>

#include <ctgraph/ctgraph.hpp>
#include <ctgraph/xtensor.hpp>

#include "pool_threads.hpp"

using namespace ctg;

namespace {
template <class T>
std::vector<T> random_vector(std::size_t n, unsigned seed, double lo = -3, double hi = 3) {
    std::mt19937 rng(seed);
    std::uniform_real_distribution<double> u(lo, hi);
    std::vector<T> v(n);
    for (auto& x : v) x = T(u(rng));
    return v;
}

struct scalar_mode {
    explicit scalar_mode(bool on) { kernels::scalar_only() = on; }
    ~scalar_mode() { kernels::scalar_only() = false; }
};

// Runs the same one-op program with and without SIMD and compares output and input gradient.
template <class T, class E>
void simd_matches_scalar(E e, double lo, double hi, double tol) {
    std::vector<T> out[2], grad[2];
    const std::size_t n = 37;  // not a multiple of any SIMD width: the tails run too
    auto x = random_vector<T>(n * 3, 3, lo, hi);
    for (int mode = 0; mode < 2; ++mode) {
        scalar_mode s(mode == 1);
        auto prog = compile<T, options{.input_grads = true}>(sum(mul(e, input<"g", dyn('B'), 37>{})));
        prog.feed("x", x.data(), rshape{2, {3, n}});
        auto g = random_vector<T>(n * 3, 5);
        prog.feed("g", g.data(), rshape{2, {3, n}});
        prog.forward();
        prog.backward();
        auto gx = prog.template input_grad<"x">();
        grad[mode].assign(gx.begin(), gx.end());
        out[mode].push_back(prog.forward());
    }
    CHECK(out[0][0] == Approx(out[1][0]).epsilon(tol));
    for (std::size_t i = 0; i < grad[0].size(); ++i) CHECK(grad[0][i] == Approx(grad[1][i]).epsilon(tol).margin(tol));
}
using X = input<"x", dyn('B'), 37>;

using ctg::testing::pool_threads;
}  // namespace

TEST_CASE("SIMD element-wise kernels match the scalar path", "[kernels]") {
    simd_matches_scalar<float>(tanh(X{}), -4, 4, 1e-5);
    simd_matches_scalar<float>(sigmoid(X{}), -6, 6, 1e-5);
    simd_matches_scalar<float>(exp(X{}), -4, 4, 1e-5);
    simd_matches_scalar<float>(log(X{}), 0.1, 5, 1e-5);
    simd_matches_scalar<float>(gelu(X{}), -4, 4, 1e-5);
    simd_matches_scalar<float>(relu(X{}), -4, 4, 1e-6);
    simd_matches_scalar<double>(tanh(X{}), -4, 4, 1e-12);
    simd_matches_scalar<double>(gelu(X{}), -4, 4, 1e-12);
    simd_matches_scalar<float>(gelu_erf(X{}), -5, 5, 1e-5);
    simd_matches_scalar<double>(gelu_erf(X{}), -5, 5, 1e-12);
    simd_matches_scalar<float>(softmax(X{}), -4, 4, 1e-5);
    simd_matches_scalar<float>(log_softmax(X{}), -4, 4, 1e-5);
    simd_matches_scalar<float>(mul(X{}, param<"p", 37>{}), -4, 4, 1e-6);
}

TEMPLATE_TEST_CASE("GEMM (OpenBLAS and the small-shape paths) matches the reference loop", "[kernels]", float, double) {
    // Shapes reach every path: one row (combine_rows, dot products), few rows of A B^T with K >= 64 (through
    // C^T = B A^T), an outer product (K = 1), and OpenBLAS. At beta = 0, C starts as NaN: it must
    // not be read.
    for (std::size_t M : {1, 2, 7, 16, 64})
        for (std::size_t K : {1, 19, 70})
            for (TestType alpha : {TestType(1), TestType(0.5)})
                for (TestType beta : {TestType(0), TestType(1), TestType(0.5)})
                    for (bool ta : {false, true})
                        for (bool tb : {false, true})
                            for (bool with_bias : {false, true}) {
                            const std::size_t N = 33;
                            auto A = random_vector<TestType>(M * K, 1), Bm = random_vector<TestType>(K * N, 2);
                            auto C1 = random_vector<TestType>(M * N, 3), C2 = C1;
                            const auto bias_values = random_vector<TestType>(N, 4);
                            const TestType* bias = with_bias ? bias_values.data() : nullptr;
                            if (beta == TestType(0)) std::fill(C1.begin(), C1.end(), std::numeric_limits<TestType>::quiet_NaN());
                            const std::size_t lda = ta ? M : K, ldb = tb ? K : N;
                            kernels::gemm(ta, tb, M, N, K, alpha, A.data(), lda, Bm.data(), ldb, beta, C1.data(), N, bias);
                            kernels::gemm_reference(ta, tb, M, N, K, alpha, A.data(), lda, Bm.data(), ldb, beta, C2.data(), N, bias);
                            INFO("M " << M << " K " << K << " ta " << ta << " tb " << tb << " alpha " << alpha << " beta " << beta
                                      << " bias " << with_bias);
                            // float: K products of values up to 3 in magnitude, summed in another order
                            const double margin = (std::is_same_v<TestType, float> ? 1e-5 : 1e-13) * double(K);
                            for (std::size_t i = 0; i < M * N; ++i) CHECK(C1[i] == Approx(C2[i]).epsilon(1e-5).margin(margin));
                        }
}

TEST_CASE("register GEMM kernel matches the reference loop on every tile and tail", "[kernels]") {
    using TestType = float;  // the kernel is float only (double products go to OpenBLAS)
    // Called directly, so every shape runs it (gemm() uses it above a size only). Rows: whole
    // 8-row tiles and the 4/2/1 tails; columns: two-vector panels, a one-vector panel, tails of one
    // column (dot products / weighted row sums) and of more (a zero-padded panel); A and B^T in
    // either layout (B^T through the 16 x 16 transposes and their edges, or, for A B^T with fewer
    // than 8 or 9-15 rows, as dot products in 4 x 4 blocks and their edges); strides wider than the
    // matrices; C only written inside its rows, and not read at beta 0 (NaN there).
    constexpr std::size_t W = kernels::batch<TestType>::size;
    for (std::size_t M : {1, 3, 5, 8, 12, 15, 37})
        for (std::size_t N : {std::size_t(1), W - 1, W, 2 * W + 1, 2 * W + W / 2, 4 * W + 3})
            for (std::size_t K : {1, 17, 130})
                for (TestType beta : {TestType(0), TestType(1), TestType(0.5)})
                    for (bool ta : {false, true})
                        for (bool tb : {false, true})
                            for (bool with_bias : {false, true}) {  // a linear layer's bias, added as C is stored
                            const std::size_t lda = (ta ? M : K) + 3, ldb = (tb ? K : N) + 5, ldc = N + 2;
                            auto A = random_vector<TestType>((ta ? K : M) * lda, 1), Bm = random_vector<TestType>((tb ? N : K) * ldb, 2);
                            auto C0 = random_vector<TestType>(M * ldc, 3);
                            const auto bias_values = random_vector<TestType>(N, 4);
                            const TestType* bias = with_bias ? bias_values.data() : nullptr;
                            if (beta == TestType(0)) std::fill(C0.begin(), C0.end(), std::numeric_limits<TestType>::quiet_NaN());
                            auto C1 = C0, Cref = C0;
                            kernels::register_gemm(ta, tb, M, N, K, TestType(1.5), A.data(), lda, Bm.data(), ldb, beta, C1.data(), ldc, bias);
                            kernels::gemm_reference(ta, tb, M, N, K, TestType(1.5), A.data(), lda, Bm.data(), ldb, beta, Cref.data(), ldc, bias);
                            INFO("M " << M << " N " << N << " K " << K << " ta " << ta << " tb " << tb << " beta " << beta
                                      << " bias " << with_bias);
                            const double margin = (std::is_same_v<TestType, float> ? 1e-5 : 1e-13) * double(K);
                            for (std::size_t i = 0; i < M; ++i) {
                                for (std::size_t j = 0; j < N; ++j)
                                    CHECK(C1[i * ldc + j] == Approx(Cref[i * ldc + j]).epsilon(1e-5).margin(margin));
                                for (std::size_t j = N; j < ldc; ++j)
                                    CHECK((std::isnan(C0[i * ldc + j]) ? std::isnan(C1[i * ldc + j]) : C1[i * ldc + j] == C0[i * ldc + j]));
                            }
                        }
}

TEST_CASE("register GEMM kernel: A^T copied in blocks and long k summed in stretches", "[kernels]") {
    // A^T over packed_min_bytes is copied a block of rows and a stretch of k at a time; k beyond
    // packed_k is summed in stretches added to C. Rows in several blocks and a tail, two stretches
    // of k and a short one, column tails of one and of more, B in either layout, strided operands.
    using kernels::detail::packed_k;
    for (std::size_t M : {std::size_t(20), std::size_t(100), std::size_t(161)})
        for (std::size_t N : {std::size_t(70), std::size_t(97)})
            for (std::size_t K : {packed_k - 7, 2 * packed_k + 9})
                for (bool tb : {false, true})
                    for (float beta : {0.0f, 0.5f}) {
                        const std::size_t lda = M + 3, ldb = (tb ? K : N) + 5, ldc = N + 2;
                        // (M = 20: A^T under packed_min_bytes, read in place in the same stretches of k)
                        REQUIRE((M == 20) == (K * M * sizeof(float) <= kernels::detail::packed_min_bytes));
                        auto A = random_vector<float>(K * lda, 1), Bm = random_vector<float>((tb ? N : K) * ldb, 2);
                        auto C0 = random_vector<float>(M * ldc, 3);
                        const auto bias = random_vector<float>(N, 4);
                        if (beta == 0.0f) std::fill(C0.begin(), C0.end(), std::numeric_limits<float>::quiet_NaN());
                        auto C1 = C0, Cref = C0;
                        kernels::register_gemm(true, tb, M, N, K, 1.5f, A.data(), lda, Bm.data(), ldb, beta, C1.data(), ldc, bias.data());
                        kernels::gemm_reference(true, tb, M, N, K, 1.5f, A.data(), lda, Bm.data(), ldb, beta, Cref.data(), ldc, bias.data());
                        INFO("M " << M << " N " << N << " K " << K << " tb " << tb << " beta " << beta);
                        for (std::size_t i = 0; i < M; ++i) {
                            for (std::size_t j = 0; j < N; ++j)
                                CHECK(C1[i * ldc + j] == Approx(Cref[i * ldc + j]).epsilon(1e-5).margin(1e-5 * double(K)));
                            for (std::size_t j = N; j < ldc; ++j)
                                CHECK((std::isnan(C0[i * ldc + j]) ? std::isnan(C1[i * ldc + j]) : C1[i * ldc + j] == C0[i * ldc + j]));
                        }
                    }
}

TEST_CASE("the register kernel is chosen where it measured faster, and gemm() agrees there", "[kernels]") {
    CHECK(kernels::register_gemm_faster<float>(false, false, 128, 64, 128));        // an attention head's P V
    CHECK(kernels::register_gemm_faster<float>(false, true, 64, 64, 32));           // A B^T from 2^17
    CHECK_FALSE(kernels::register_gemm_faster<float>(false, false, 16, 128, 128));  // OpenBLAS's small kernels
    CHECK_FALSE(kernels::register_gemm_faster<float>(false, false, 2048, 1536, 384));  // A from L3, many panels
    CHECK_FALSE(kernels::register_gemm_faster<float>(true, false, 384, 1536, 2048));   // A^T from L3
#if defined(__OPTIMIZE__)
    CHECK(kernels::use_register_gemm<float>(false, false, 128, 64, 128));
#else
    CHECK_FALSE(kernels::use_register_gemm<float>(false, false, 128, 64, 128));  // Debug: OpenBLAS
#endif
    // Through gemm() on one thread, at a size that takes it (optimised builds), in every layout.
    pool_threads pool(1);
    for (bool ta : {false, true})
        for (bool tb : {false, true}) {
            const std::size_t M = 130, N = 65, K = 131;
            auto A = random_vector<float>(M * K, 4), Bm = random_vector<float>(K * N, 5), bias = random_vector<float>(N, 6);
            std::vector<float> C1(M * N), C2(M * N);
            kernels::gemm(ta, tb, M, N, K, 1.0f, A.data(), ta ? M : K, Bm.data(), tb ? K : N, 0.0f, C1.data(), N, bias.data());
            kernels::gemm_reference(ta, tb, M, N, K, 1.0f, A.data(), ta ? M : K, Bm.data(), tb ? K : N, 0.0f, C2.data(), N, bias.data());
            for (std::size_t i = 0; i < M * N; ++i) CHECK(C1[i] == Approx(C2[i]).epsilon(1e-5).margin(2e-3));
        }
}

TEST_CASE("every float-product policy: gemm() matches the reference on every path, the choice can be named", "[kernels]") {
    struct restore {
        kernels::register_gemm_policy before = kernels::get_register_gemm_policy();
        ~restore() { kernels::set_register_gemm_policy(before); }
    } restore_policy;
    pool_threads pool(1);
    struct shape {
        bool ta, tb;
        std::size_t M, N, K;
    };
    // the rnn's recurrent step and its VJP (OpenBLAS and the few-row A B^T path under `table`), a
    // head's products, one row, an outer product, N below one vector, tails in every dimension
    const shape shapes[] = {{false, false, 16, 128, 128}, {false, true, 16, 128, 128}, {true, false, 128, 128, 16},
                            {false, true, 64, 64, 32},    {false, false, 1, 70, 33},   {true, false, 9, 40, 1},
                            {false, false, 20, 12, 30},   {true, true, 37, 45, 19},    {false, true, 3, 100, 64},
                            // oneDNN's under `onednn` (32+ rows, 2^18+ multiply-adds), each transpose, tails
                            {false, false, 64, 72, 64},   {true, false, 40, 96, 80},   {false, true, 96, 33, 100},
                            {true, true, 33, 80, 128}};
    std::vector<kernels::register_gemm_policy> policies{kernels::register_gemm_policy::table,
                                                        kernels::register_gemm_policy::everywhere};
    if (kernels::onednn_has_avx512()) policies.push_back(kernels::register_gemm_policy::onednn);
    else CHECK_THROWS_WITH(kernels::set_register_gemm_policy(kernels::register_gemm_policy::onednn),
                           Catch::Contains("oneDNN has no AVX-512 kernels here"));
    for (auto policy : policies) {
        kernels::set_register_gemm_policy(policy);
        CHECK(kernels::use_onednn_gemm<float>(64, 72, 64) == (policy == kernels::register_gemm_policy::onednn));
        CHECK_FALSE(kernels::use_onednn_gemm<float>(16, 128, 128));    // few rows: the register kernel
        CHECK_FALSE(kernels::use_onednn_gemm<float>(32, 64, 64));      // below 2^18 multiply-adds
        CHECK_FALSE(kernels::use_onednn_gemm<double>(256, 256, 256));  // double: OpenBLAS
#if defined(__OPTIMIZE__)
        // below the table's crossover: OpenBLAS by the table, the register kernel everywhere else
        CHECK(kernels::use_register_gemm<float>(false, false, 16, 128, 128) == (policy != kernels::register_gemm_policy::table));
        CHECK_FALSE(kernels::use_register_gemm<float>(false, false, 64, 8, 64));  // N under one vector: never
        CHECK_FALSE(kernels::use_register_gemm<double>(false, false, 256, 256, 256));  // double: OpenBLAS
#endif
        for (const auto& s : shapes)
            for (float beta : {0.0f, 0.5f}) {
                auto A = random_vector<float>(s.M * s.K, 11), Bm = random_vector<float>(s.K * s.N, 12);
                auto C1 = random_vector<float>(s.M * s.N, 13);
                auto C2 = C1;
                const std::size_t lda = s.ta ? s.M : s.K, ldb = s.tb ? s.K : s.N;
                kernels::gemm(s.ta, s.tb, s.M, s.N, s.K, 1.0f, A.data(), lda, Bm.data(), ldb, beta, C1.data(), s.N);
                kernels::gemm_reference(s.ta, s.tb, s.M, s.N, s.K, 1.0f, A.data(), lda, Bm.data(), ldb, beta, C2.data(), s.N);
                for (std::size_t i = 0; i < C1.size(); ++i) CHECK(C1[i] == Approx(C2[i]).epsilon(1e-5).margin(1e-4));
                // with a bias (a linear layer's): in the kernel at beta 0, added after otherwise
                const auto bias = random_vector<float>(s.N, 14);
                auto D1 = random_vector<float>(s.M * s.N, 15);
                auto D2 = D1;
                kernels::gemm(s.ta, s.tb, s.M, s.N, s.K, 1.0f, A.data(), lda, Bm.data(), ldb, beta, D1.data(), s.N, bias.data());
                kernels::gemm_reference(s.ta, s.tb, s.M, s.N, s.K, 1.0f, A.data(), lda, Bm.data(), ldb, beta, D2.data(), s.N,
                                        bias.data());
                for (std::size_t i = 0; i < D1.size(); ++i) CHECK(D1[i] == Approx(D2[i]).epsilon(1e-5).margin(1e-4));
            }
    }
    // The policy follows the machine: the register kernel everywhere only with full-width AVX-512
    // vectors in this build and no AVX-512 kernels in OpenBLAS
    using kernels::register_gemm_policy;
    using kernels::detail::policy_for;
    CHECK(policy_for({true, true, "Haswell"}) == register_gemm_policy::everywhere);   // Zen 5
    CHECK(policy_for({true, false, "Zen"}) == register_gemm_policy::table);          // Zen 4
    CHECK(policy_for({true, true, "SkylakeX"}) == register_gemm_policy::table);      // OpenBLAS's own AVX-512
    CHECK(policy_for({false, true, "Haswell"}) == register_gemm_policy::table);      // an AVX2 build
    CHECK(policy_for({true, true, ""}) == register_gemm_policy::everywhere);         // another BLAS
    CHECK(policy_for({true, true, "Prescott", true, true}) == register_gemm_policy::onednn);   // Intel AVX-512 with oneDNN
    CHECK(policy_for({true, true, "SkylakeX", true, true}) == register_gemm_policy::onednn);   // ... whatever OpenBLAS runs
    CHECK(policy_for({true, true, "Prescott", true, false}) == register_gemm_policy::everywhere);  // no oneDNN
    CHECK(policy_for({true, true, "Haswell", false, true}) == register_gemm_policy::everywhere);   // AMD: not measured faster
    // CTG_REGISTER_GEMM names the policy instead; anything else is an error
    const char* saved = std::getenv("CTG_REGISTER_GEMM");
    const std::string saved_value = saved ? saved : "";
    ::setenv("CTG_REGISTER_GEMM", "table", 1);
    CHECK(kernels::detail::choose_register_gemm_policy() == kernels::register_gemm_policy::table);
    ::setenv("CTG_REGISTER_GEMM", "everywhere", 1);
    CHECK(kernels::detail::choose_register_gemm_policy() == kernels::register_gemm_policy::everywhere);
    if (kernels::onednn_has_avx512()) {
        ::setenv("CTG_REGISTER_GEMM", "onednn", 1);
        CHECK(kernels::detail::choose_register_gemm_policy() == kernels::register_gemm_policy::onednn);
    }
    ::setenv("CTG_REGISTER_GEMM", "fastest", 1);
    CHECK_THROWS_WITH(kernels::detail::choose_register_gemm_policy(), Catch::Contains("CTG_REGISTER_GEMM='fastest'"));
    if (saved) ::setenv("CTG_REGISTER_GEMM", saved_value.c_str(), 1);
    else ::unsetenv("CTG_REGISTER_GEMM");
}

TEST_CASE("scratch frames nest, stay aligned and valid, and allocate only past the reservation", "[kernels]") {
    std::thread([] {  // a thread of its own: an empty stack
        using kernels::scratch;
        using kernels::scratch_stack;
        auto& stack = scratch_stack::here();
        stack.reserve(scratch_stack::scratch_reserve_bytes);
        const long before = allocation_count().load();
        {
            scratch<float> a(1000);
            std::fill(a.data(), a.data() + 1000, 1.0f);
            {
                scratch<double> b(3);
                scratch<float> c(10);
                CHECK(reinterpret_cast<std::uintptr_t>(b.data()) % 64 == 0);
                CHECK(reinterpret_cast<std::uintptr_t>(c.data()) % 64 == 0);
                CHECK(reinterpret_cast<std::byte*>(c.data()) >= reinterpret_cast<std::byte*>(b.data() + 3));
                CHECK(reinterpret_cast<std::byte*>(b.data()) >= reinterpret_cast<std::byte*>(a.data() + 1000));
            }
            scratch<float> d(10);  // reuses what b and c gave back
            CHECK(reinterpret_cast<std::byte*>(d.data()) == reinterpret_cast<std::byte*>(a.data()) + 4032);
            CHECK(allocation_count().load() == before);
            {
                // Past the reservation: a block of its own; a's memory stays where it was.
                scratch<float> big(scratch_stack::scratch_reserve_bytes / sizeof(float));
                std::fill(big.data(), big.data() + scratch_stack::scratch_reserve_bytes / sizeof(float), 2.0f);
                CHECK(allocation_count().load() == before + 1);
                scratch<float> after(16);  // fits in the new block
                CHECK(allocation_count().load() == before + 1);
            }
            CHECK(std::all_of(a.data(), a.data() + 1000, [](float v) { return v == 1.0f; }));
        }
        // The stack kept its largest block: the same frames again allocate nothing.
        const long settled = allocation_count().load();
        {
            scratch<float> a(1000);
            scratch<float> big(scratch_stack::scratch_reserve_bytes / sizeof(float));
        }
        CHECK(allocation_count().load() == settled);
    }).join();
}

TEST_CASE("transpose: the 16 x 16 register blocks and their edges", "[kernels]") {
    for (std::size_t rows : {1, 16, 33, 48})
        for (std::size_t cols : {1, 15, 16, 40}) {
            const std::size_t lds = cols + 3, ldd = rows + 2;
            auto src = random_vector<float>(rows * lds, 6);
            std::vector<float> dst(cols * ldd, -7.0f);
            kernels::transpose(rows, cols, src.data(), lds, dst.data(), ldd);
            INFO("rows " << rows << " cols " << cols);
            for (std::size_t c = 0; c < cols; ++c) {
                for (std::size_t r = 0; r < rows; ++r) CHECK(dst[c * ldd + r] == src[r * lds + c]);
                for (std::size_t r = rows; r < ldd; ++r) CHECK(dst[c * ldd + r] == -7.0f);
            }
            kernels::transpose(rows, cols, src.data(), lds, dst.data(), ldd, true);  // accumulates
            for (std::size_t c = 0; c < cols; ++c) {
                for (std::size_t r = 0; r < rows; ++r) CHECK(dst[c * ldd + r] == 2 * src[r * lds + c]);
                for (std::size_t r = rows; r < ldd; ++r) CHECK(dst[c * ldd + r] == -7.0f);
            }
        }
}

TEST_CASE("softmax rows are stable for large logits", "[kernels]") {
    std::vector<float> x = {1000.f, 1001.f, 999.f, -1000.f}, y(4);
    kernels::softmax_row(4, x.data(), y.data());
    CHECK(y[1] == Approx(0.66524096f));
    CHECK(y[3] == 0.0f);
    std::vector<float> ly(4);
    const float lse = kernels::log_softmax_row(4, x.data(), ly.data());
    CHECK(lse == Approx(1001.4076f));
    CHECK(std::isfinite(ly[3]));
}

TEST_CASE("max and sum reductions handle every length", "[kernels]") {
    for (std::size_t n : {1u, 7u, 16u, 17u, 64u, 100u}) {
        auto v = random_vector<double>(n, unsigned(n));
        double m = v[0], s = 0;
        for (double x : v) {
            m = std::max(m, x);
            s += x;
        }
        CHECK(kernels::max(n, v.data()) == m);
        CHECK(kernels::sum(n, v.data()) == Approx(s));
    }
}

/// bias[c] + sum_r w[r] rows[r * stride + c] in double (bias may be null): combine_rows' reference.
std::vector<double> combine_exact(std::size_t count, std::size_t width, const std::vector<float>& w, const std::vector<float>& rows,
                                  std::size_t stride, const float* bias) {
    std::vector<double> exact(width);
    for (std::size_t c = 0; c < width; ++c) {
        exact[c] = bias ? bias[c] : 0.0;
        for (std::size_t r = 0; r < count; ++r) exact[c] += double(w[r]) * rows[r * stride + c];
    }
    return exact;
}

TEST_CASE("combine_rows: SIMD register blocks match the scalar loop", "[kernels]") {
    // Widths reach every block: 8-batch blocks, each rest of 1 to 7 batches, scalar tails.
    for (std::size_t width : {1, 15, 16, 32, 48, 64, 65, 80, 96, 112, 128, 200, 255, 257})
        for (std::size_t count : {1, 2, 7, 32})
            for (bool with_bias : {false, true}) {
                const std::size_t stride = width + 3;
                auto w = random_vector<float>(count, 4), rows = random_vector<float>(count * stride, 5);
                auto bias = random_vector<float>(width, 6);
                const float* b = with_bias ? bias.data() : nullptr;
                std::vector<float> fast(width), slow(width);
                kernels::combine_rows(count, width, w.data(), rows.data(), stride, fast.data(), b);
                kernels::scalar_only() = true;
                kernels::combine_rows(count, width, w.data(), rows.data(), stride, slow.data(), b);
                kernels::scalar_only() = false;
                const auto exact = combine_exact(count, width, w, rows, stride, b);
                for (std::size_t c = 0; c < width; ++c) {
                    CHECK(slow[c] == Approx(exact[c]).epsilon(1e-5).margin(1e-4));
                    CHECK(fast[c] == Approx(slow[c]).epsilon(1e-5).margin(1e-5));
                }
            }
}

TEST_CASE("combine_rows: rows of 1 KB and more (sums in memory, four rows a pass) add each column's terms in row order", "[kernels]") {
    // combine_wide and the 8-batch register blocks must both compute bias + w_0 r_0 + w_1 r_1 + ...
    // in row order, one fused multiply-add per term (kernels::fmadd: the instruction wherever the
    // target has one, at any optimisation level): the decoding step's products (and exact resume)
    // keep their bits whichever form the width picks.
    using V = kernels::batch<float>;
    constexpr std::size_t block = 8 * V::size;
    for (std::size_t width : {std::size_t(1024 / sizeof(float)), 3 * block + 5, std::size_t(768 + 9), 65536 + 2 * block + 3})
        for (std::size_t count : {1, 3, 4, 9})
            for (bool with_bias : {false, true}) {
                const std::size_t stride = width + 1;
                auto w = random_vector<float>(count, 7), rows = random_vector<float>(count * stride, 8);
                auto bias = random_vector<float>(width, 9);
                const float* b = with_bias ? bias.data() : nullptr;
                std::vector<float> out(width), blocks(width);
                kernels::combine_rows(count, width, w.data(), rows.data(), stride, out.data(), b);
                const std::size_t whole = width / block * block;
                for (std::size_t c = 0; c < whole; c += block)  // one block at a time: under 1 KB, in registers
                    kernels::combine_rows(count, block, w.data(), rows.data() + c, stride, blocks.data() + c, b ? b + c : nullptr);
                // (A rest narrower than a batch has the last batch of columns summed again, rows interleaved.)
                const std::size_t kept = width % V::size ? std::min(whole, width - V::size) : whole;
                std::size_t differ = 0, differ_blocks = 0;
                for (std::size_t c = 0; c < kept; ++c) {
                    float chain = b ? b[c] : 0.0f;
                    for (std::size_t r = 0; r < count; ++r) chain = kernels::fmadd(w[r], rows[r * stride + c], chain);
                    differ += std::bit_cast<std::uint32_t>(out[c]) != std::bit_cast<std::uint32_t>(chain);
                    differ_blocks += std::bit_cast<std::uint32_t>(blocks[c]) != std::bit_cast<std::uint32_t>(chain);
                }
                INFO("width " << width << ", rows " << count << ", bias " << with_bias);
                CHECK(differ == 0);
                CHECK(differ_blocks == 0);
                const auto exact = combine_exact(count, width, w, rows, stride, b);  // and the sums are right (every column)
                double worst = 0;
                for (std::size_t c = 0; c < width; ++c) worst = std::max(worst, std::abs(out[c] - exact[c]) / (1 + std::abs(exact[c])));
                CHECK(worst < 1e-5);
            }
}

TEST_CASE("thread pool: a late worker never claims a task of the next job (short jobs, then long ones)", "[kernels][threads]") {
    // A worker still in the last job's claim loop that read the next job's (larger) size could
    // claim an index under the last epoch: that task ran twice and the caller stopped waiting one
    // task early. Before the fix this loop found such tasks in every run of 400,000 jobs (1-67).
    pool_threads pool(3);
    auto& p = kernels::thread_pool::instance();
    std::vector<std::atomic<int>> hits(64);
    long wrong = 0;
#if defined(__OPTIMIZE__)
    constexpr int jobs = 400000;
#else
    constexpr int jobs = 40000;
#endif
    for (int job = 0; job < jobs; ++job) {
        const std::size_t n = (job & 1) ? 2 : 64;
        for (std::size_t i = 0; i < n; ++i) hits[i].store(0, std::memory_order_relaxed);
        p.run(n, [&](std::size_t i) { hits[i].fetch_add(1, std::memory_order_relaxed); });
        for (std::size_t i = 0; i < n; ++i) wrong += hits[i].load() != 1;
    }
    CHECK(wrong == 0);
}

TEST_CASE("thread pool: every task runs once, nested and concurrent jobs run serially", "[kernels][threads]") {
    for (int threads : {2, 3}) {
        pool_threads pool(threads);
        REQUIRE(num_threads() == threads);
        auto& p = kernels::thread_pool::instance();
        for (std::size_t n : {1, 2, 3, 7, 64}) {
            for (int job = 0; job < 200; ++job) {  // many short jobs: a late worker must not run a stale task
                std::vector<std::atomic<int>> hits(n);
                p.run(n, [&](std::size_t i) { hits[i].fetch_add(1); });
                for (std::size_t i = 0; i < n; ++i) REQUIRE(hits[i].load() == 1);
            }
        }
        // A task that itself runs a job: the inner job runs on the task's thread.
        std::atomic<int> inner{0};
        p.run(4, [&](std::size_t) { p.run(3, [&](std::size_t) { inner.fetch_add(1); }); });
        CHECK(inner.load() == 12);
        // Two user threads submitting at once: one gets the pool, the other runs serially.
        std::atomic<long> total{0};
        auto submit = [&] {
            for (int job = 0; job < 500; ++job) p.run(5, [&](std::size_t i) { total.fetch_add(long(i) + 1); });
        };
        std::thread other(submit);
        submit();
        other.join();
        CHECK(total.load() == 2L * 500 * 15);
        // A task that throws: its exception reaches the caller once the job has ended, the job's
        // other tasks run or are skipped, and the pool runs the next job whole.
        for (int job = 0; job < 50; ++job) {
            std::atomic<int> ran{0};
            CHECK_THROWS_WITH(p.run(8,
                                    [&](std::size_t i) {
                                        ran.fetch_add(1);
                                        if (i == 3) throw std::runtime_error("task 3 failed");
                                    }),
                              "task 3 failed");
            CHECK(ran.load() >= 1);
            std::vector<std::atomic<int>> hits(5);
            p.run(5, [&](std::size_t i) { hits[i].fetch_add(1); });
            for (auto& h : hits) REQUIRE(h.load() == 1);
        }
    }
}

TEMPLATE_TEST_CASE("GEMM split over two threads matches the reference loop and the one-thread result", "[kernels][threads]", float, double) {
    // Shapes above the split threshold: row blocks (M >= N), column blocks (N > M), odd sizes that leave
    // a short last block, leading dimensions wider than the matrices, NaN C at beta 0.
    struct shape { std::size_t M, N, K; };
    for (shape s : {shape{16, 128, 128}, shape{131, 40, 70}, shape{9, 301, 64}, shape{64, 64, 33}, shape{200, 17, 90}})
        for (TestType beta : {TestType(0), TestType(0.5)})
            for (bool ta : {false, true})
                for (bool tb : {false, true}) {
                    const auto [M, N, K] = s;
                    const std::size_t lda = (ta ? M : K) + 3, ldb = (tb ? K : N) + 5, ldc = N + 2;
                    auto A = random_vector<TestType>((ta ? K : M) * lda, 1), Bm = random_vector<TestType>((tb ? N : K) * ldb, 2);
                    auto C0 = random_vector<TestType>(M * ldc, 3);
                    if (beta == TestType(0)) std::fill(C0.begin(), C0.end(), std::numeric_limits<TestType>::quiet_NaN());
                    auto C1 = C0, C2 = C0, Cref = C0;
                    const auto bias_values = random_vector<TestType>(N, 4);
                    const TestType* bias = tb ? bias_values.data() : nullptr;  // row and column blocks both take it
                    {
                        pool_threads pool(2);
                        kernels::gemm(ta, tb, M, N, K, TestType(1.5), A.data(), lda, Bm.data(), ldb, beta, C2.data(), ldc, bias);
                    }
                    {
                        pool_threads pool(1);
                        kernels::gemm(ta, tb, M, N, K, TestType(1.5), A.data(), lda, Bm.data(), ldb, beta, C1.data(), ldc, bias);
                    }
                    kernels::gemm_reference(ta, tb, M, N, K, TestType(1.5), A.data(), lda, Bm.data(), ldb, beta, Cref.data(), ldc, bias);
                    INFO("M " << M << " N " << N << " K " << K << " ta " << ta << " tb " << tb << " beta " << beta);
                    const double margin = (std::is_same_v<TestType, float> ? 1e-5 : 1e-13) * double(K);
                    for (std::size_t i = 0; i < M; ++i)
                        for (std::size_t j = 0; j < N; ++j) {
                            CHECK(C2[i * ldc + j] == Approx(Cref[i * ldc + j]).epsilon(1e-5).margin(margin));
                            CHECK(C2[i * ldc + j] == Approx(C1[i * ldc + j]).epsilon(1e-5).margin(margin));
                        }
                    for (std::size_t i = 0; i < M; ++i)  // the padding between rows is not written
                        for (std::size_t j = N; j < ldc; ++j)
                            CHECK((std::isnan(C0[i * ldc + j]) ? std::isnan(C2[i * ldc + j]) : C2[i * ldc + j] == C0[i * ldc + j]));
                }
}

TEMPLATE_TEST_CASE("GEMM of one row (a decoding step's product) split into column pieces: the same bits at 1, 2 and 3 threads", "[kernels][threads]", float, double) {
    // Pieces of whole 128-column blocks: wide rows (sums in memory), 8-batch blocks, rests of 1 to 7
    // batches and rests narrower than a batch must each sum a column as one thread does. Widths
    // whose last piece would be narrower than a batch are not cut (257 on 2 threads).
    for (std::size_t N : {std::size_t(256), std::size_t(257), std::size_t(300), std::size_t(777), std::size_t(2304 + 5),
                          std::size_t(4096 + 129), std::size_t(20000 + 3)})
        for (std::size_t K : {std::size_t(64), std::size_t(203)})
            for (bool with_bias : {false, true}) {
                const std::size_t ldb = N + 7;
                auto A = random_vector<TestType>(K, 11), Bm = random_vector<TestType>(K * ldb, 12), bias_values = random_vector<TestType>(N, 13);
                const TestType* bias = with_bias ? bias_values.data() : nullptr;
                std::vector<TestType> C1(N + 1, TestType(7)), C2 = C1, C3 = C1, Cref = C1;
                const auto run = [&](int threads, std::vector<TestType>& C) {
                    pool_threads pool(threads);
                    kernels::gemm(false, false, 1, N, K, TestType(1), A.data(), K, Bm.data(), ldb, TestType(0), C.data(), N, bias);
                };
                run(1, C1);
                run(2, C2);
                run(3, C3);
                kernels::gemm_reference(false, false, 1, N, K, TestType(1), A.data(), K, Bm.data(), ldb, TestType(0), Cref.data(), N, bias);
                INFO("N " << N << " K " << K << " bias " << with_bias);
                std::size_t differ = 0;
                for (std::size_t j = 0; j < N; ++j) {
                    differ += C2[j] != C1[j] || C3[j] != C1[j];
                    CHECK(C1[j] == Approx(Cref[j]).epsilon(1e-5).margin((std::is_same_v<TestType, float> ? 1e-5 : 1e-13) * double(K)));
                }
                CHECK(differ == 0);
                CHECK((C1[N] == TestType(7) && C2[N] == TestType(7) && C3[N] == TestType(7)));  // nothing past the row
            }
}

TEMPLATE_TEST_CASE("gemm_together: products cut into pieces of one job equal each product alone", "[kernels][threads]", float, double) {
    // A linear layer's two VJPs of unequal cost (dX = dY W^T, dW = x^T dY), large enough to be cut
    // into several pieces each, and small ones (one task each); a product without C is skipped.
    struct layer { std::size_t M, K, N; };
    for (layer l : {layer{1024, 256, 160}, layer{512, 200, 96}, layer{40, 24, 16}, layer{300, 65, 130}})
        for (bool skip_dx : {false, true}) {
            const std::size_t M = l.M, K = l.K, N = l.N;  // (not a structured binding: clang 14 cannot capture one)
            auto x = random_vector<TestType>(M * K, 1), w = random_vector<TestType>(K * N, 2), dy = random_vector<TestType>(M * N, 3);
            auto dx0 = random_vector<TestType>(M * K, 4), dw0 = random_vector<TestType>(K * N, 5);
            auto dx1 = dx0, dw1 = dw0, dx2 = dx0, dw2 = dw0;
            const auto args = [&](TestType* dx, TestType* dw) {
                return std::array{kernels::gemm_args<TestType>{false, true, M, K, N, TestType(1), dy.data(), N, w.data(), N, TestType(0.5), skip_dx ? nullptr : dx, K},
                                  kernels::gemm_args<TestType>{true, false, K, N, M, TestType(1), x.data(), K, dy.data(), N, TestType(0), dw, N}};
            };
            {
                pool_threads pool(2);
                kernels::gemm_together(args(dx2.data(), dw2.data()));
            }
            {
                pool_threads pool(1);
                if (!skip_dx) kernels::gemm(false, true, M, K, N, TestType(1), dy.data(), N, w.data(), N, TestType(0.5), dx1.data(), K);
                kernels::gemm(true, false, K, N, M, TestType(1), x.data(), K, dy.data(), N, TestType(0), dw1.data(), N);
            }
            INFO("M " << M << " K " << K << " N " << N << " skip dx " << skip_dx);
            const double margin = (std::is_same_v<TestType, float> ? 1e-5 : 1e-13) * double(std::max(M, N));
            for (std::size_t i = 0; i < M * K; ++i)
                CHECK((skip_dx ? dx2[i] == dx0[i] : dx2[i] == Approx(dx1[i]).epsilon(1e-5).margin(margin)));
            for (std::size_t i = 0; i < K * N; ++i) CHECK(dw2[i] == Approx(dw1[i]).epsilon(1e-5).margin(margin));
        }
}

TEST_CASE("element-wise maps split over two threads equal the one-thread result", "[kernels][threads]") {
    const std::size_t n = kernels::parallel_map_min_size * 3 + 13;  // a ragged last piece
    auto x = random_vector<float>(n, 7), y = random_vector<float>(n, 8);
    std::vector<float> one(n), two(n);
    auto f = [](auto a, auto b) { return a * b + a * a * decltype(a)(0.25f); };
    {
        pool_threads pool(1);
        kernels::map(n, one.data(), f, x.data(), y.data());
    }
    {
        pool_threads pool(2);
        kernels::map(n, two.data(), f, x.data(), y.data());
    }
    CHECK(one == two);  // the same kernel on the same elements: bit for bit
}

TEST_CASE("constant operands: A B^T multiplies by B's transpose kept from the scope's first call", "[kernels]") {
    // Called through register_gemm directly (float): a declared B is transposed once into the
    // scope's buffer; a B that is not declared, or declared with another shape or stride, takes
    // the per-call path; the scope ends with the object and an outer scope answers again.
    const std::size_t M = 8, N = 40, K = 33;
    const auto A = random_vector<float>(M * K, 1), Bm = random_vector<float>(N * K, 2), other = random_vector<float>(N * K, 3);
    std::vector<float> buffer(N * K, std::numeric_limits<float>::quiet_NaN()), inner_buffer(N * K);
    auto product = [&](const std::vector<float>& b) {
        std::vector<float> c(M * N);
        kernels::register_gemm(false, true, M, N, K, 1.0f, A.data(), K, b.data(), K, 0.0f, c.data(), N);
        return c;
    };
    auto reference = [&](const std::vector<float>& b) {
        std::vector<float> c(M * N);
        kernels::gemm_reference(false, true, M, N, K, 1.0f, A.data(), K, b.data(), K, 0.0f, c.data(), N);
        return c;
    };
    auto check_close = [](const std::vector<float>& x, const std::vector<float>& y) {
        for (std::size_t i = 0; i < x.size(); ++i) CHECK(x[i] == Approx(y[i]).epsilon(1e-5).margin(1e-5));
    };
    {
        kernels::constant_operands constants;
        constants.add(Bm.data(), N, K, buffer.data());
        CHECK(constants.transposed(Bm.data(), K + 1, N, K) == nullptr);  // another stride: not this matrix
        CHECK(constants.transposed(Bm.data(), K, N - 1, K) == nullptr);
        CHECK(constants.transposed(other.data(), K, N, K) == nullptr);
        check_close(product(Bm), reference(Bm));
        CHECK(buffer[1] == Bm[K]);  // the transpose was kept: row 0 of B^T is column 0 of B
        buffer[1] += 1.0f;          // and is what later calls multiply by
        const auto changed = product(Bm);
        CHECK(changed[1] == Approx(reference(Bm)[1] + A[0]).epsilon(1e-5));
        check_close(product(other), reference(other));  // not declared: transposed per call
        {
            kernels::constant_operands inner;  // nested: the innermost scope is asked
            inner.add(other.data(), N, K, inner_buffer.data());
            check_close(product(other), reference(other));
            check_close(product(Bm), reference(Bm));  // not in the inner scope: per call
        }
        CHECK(kernels::constant_operands::active() == &constants);
    }
    CHECK(kernels::constant_operands::active() == nullptr);
    check_close(product(Bm), reference(Bm));
}

TEST_CASE("gelu_erf is x Phi(x) to the last bits, and the tanh form differs from it by at most 4.8e-4", "[kernels]") {
    // Reference: 0.5 x (1 + erf(x / sqrt 2)) and its derivative in long double, on a grid over
    // [-8, 8] (the tails, where erf saturates, included), through a program (the SIMD path).
    const std::size_t n = 4001;
    std::vector<double> x(n);
    for (std::size_t i = 0; i < n; ++i) x[i] = -8.0 + 16.0 * double(i) / double(n - 1);
    auto prog = compile<double, options{.input_grads = true}>(sum(gelu_erf(input<"x", dyn('N')>{})));
    prog.feed("x", x.data(), rshape{1, {n}});
    prog.forward();
    prog.backward();
    const auto y = prog.value_of(gelu_erf(input<"x", dyn('N')>{}));
    const auto gx = prog.input_grad<"x">();
    auto tanh_form = compile<double>(sum(gelu(input<"x", dyn('N')>{})));
    tanh_form.feed("x", x.data(), rshape{1, {n}});
    tanh_form.forward();
    const auto yt = tanh_form.value_of(gelu(input<"x", dyn('N')>{}));
    double worst_value = 0, worst_slope = 0, largest_gap = 0;
    for (std::size_t i = 0; i < n; ++i) {
        const long double v = x[i];
        const long double phi = 0.5L * (1 + std::erf(v / std::sqrt(2.0L)));
        const long double want = v * phi;
        const long double slope = phi + v * std::exp(-v * v / 2) / std::sqrt(2 * 3.14159265358979323846264338327950288L);
        worst_value = std::max(worst_value, double(std::fabs(y[i] - want) / std::max(1.0L, std::fabs(want))));
        worst_slope = std::max(worst_slope, double(std::fabs(gx[i] - slope)));
        largest_gap = std::max(largest_gap, std::fabs(yt[i] - y[i]));
    }
    INFO("worst value error " << worst_value << ", slope " << worst_slope << ", tanh-form gap " << largest_gap);
    CHECK(worst_value < 5e-14);  // xsimd::erf: within about 50 units in the last place
    CHECK(worst_slope < 5e-14);
    CHECK(largest_gap > 4.0e-4);  // the forms really differ (a ported BERT drifts by this much)
    CHECK(largest_gap < 4.8e-4);
}
