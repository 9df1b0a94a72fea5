// Every SIMD kernel against its scalar reference on the same inputs.
#include <catch2/catch.hpp>

#include <limits>
#include <random>
#include <vector>

#include <ctgraph/ctgraph.hpp>

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
                        for (bool tb : {false, true}) {
                            const std::size_t N = 33;
                            auto A = random_vector<TestType>(M * K, 1), Bm = random_vector<TestType>(K * N, 2);
                            auto C1 = random_vector<TestType>(M * N, 3), C2 = C1;
                            if (beta == TestType(0)) std::fill(C1.begin(), C1.end(), std::numeric_limits<TestType>::quiet_NaN());
                            const std::size_t lda = ta ? M : K, ldb = tb ? K : N;
                            kernels::gemm(ta, tb, M, N, K, alpha, A.data(), lda, Bm.data(), ldb, beta, C1.data(), N);
                            kernels::gemm_reference(ta, tb, M, N, K, alpha, A.data(), lda, Bm.data(), ldb, beta, C2.data(), N);
                            INFO("M " << M << " K " << K << " ta " << ta << " tb " << tb << " alpha " << alpha << " beta " << beta);
                            // float: K products of values up to 3 in magnitude, summed in another order
                            const double margin = (std::is_same_v<TestType, float> ? 1e-5 : 1e-13) * double(K);
                            for (std::size_t i = 0; i < M * N; ++i) CHECK(C1[i] == Approx(C2[i]).epsilon(1e-5).margin(margin));
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

TEST_CASE("combine_rows: SIMD register blocks match the scalar loop", "[kernels]") {
    for (std::size_t width : {1, 15, 16, 64, 65, 200})
        for (std::size_t count : {1, 7, 32}) {
            const std::size_t stride = width + 3;
            auto w = random_vector<float>(count, 4), rows = random_vector<float>(count * stride, 5);
            std::vector<float> fast(width), slow(width);
            kernels::combine_rows(count, width, w.data(), rows.data(), stride, fast.data());
            kernels::scalar_only() = true;
            kernels::combine_rows(count, width, w.data(), rows.data(), stride, slow.data());
            kernels::scalar_only() = false;
            for (std::size_t c = 0; c < width; ++c) CHECK(fast[c] == Approx(slow[c]).epsilon(1e-5).margin(1e-5));
        }
}
