// Quantised weights (kernels/quant.hpp): the int8 and 4-bit formats' rules, and their products on
// every path this CPU runs (the scalar reference always; AVX2; AVX-VNNI; AVX-512; AVX-512 VNNI) against float64
// products of the dequantised weights; the int8 dot products bit for bit.
#include <catch2/catch.hpp>

#include <cmath>
#include <cstdlib>
#include <random>
#include <vector>

#include "ctgraph/kernels/quant.hpp"

using namespace ctg;
using namespace ctg::kernels;

namespace {
std::vector<float> normal(std::size_t n, unsigned seed, float sd = 1.0f) {
    std::mt19937_64 rng(seed);
    std::normal_distribution<float> d(0.0f, sd);
    std::vector<float> v(n);
    for (auto& x : v) x = d(rng);
    return v;
}
std::vector<quant_path> paths_here() {
    std::vector<quant_path> p;
    for (quant_path q : all_quant_paths)
        if (quant_path_supported(q)) p.push_back(q);
    return p;
}
}  // namespace

TEST_CASE("float16 scales: conversion rounds to nearest even and converts back exactly", "[quant]") {
    CHECK(from_half(to_half(1.0f)) == 1.0f);
    CHECK(from_half(to_half(-2.5f)) == -2.5f);
    CHECK(to_half(65504.0f) == 0x7bff);              // the largest half
    CHECK(to_half(1e6f) == 0x7c00);                  // overflow: inf
    CHECK(from_half(0x0001) == std::ldexp(1.0f, -24));  // the smallest subnormal
    CHECK(to_half(1.0f + std::ldexp(1.0f, -11)) == 0x3c00);  // a tie: to even (1.0)
    CHECK(to_half(1.0f + 3 * std::ldexp(1.0f, -11)) == 0x3c02);  // a tie: to even (1 + 2^-9)
    std::mt19937_64 rng(3);
    std::uniform_real_distribution<float> u(-8, 8);
    for (int i = 0; i < 20000; ++i) {  // against the nearest of the two neighbouring halves
        const float f = std::ldexp(u(rng), int(i % 40) - 30);
        const float back = from_half(to_half(f));
        const float ulp = std::ldexp(1.0f, std::max(std::ilogb(std::abs(back == 0 ? f : back)), -14) - 10);
        REQUIRE(std::abs(back - f) <= 0.5f * ulp);
    }
}

TEST_CASE("int8 weights: one symmetric scale per column, codes rounded and clamped", "[quant]") {
    // Column 0: largest magnitude 2.54 -> scale 0.02; column 1 all zeros; column 2 one value.
    const std::vector<float> w = {2.54f, 0.0f, 0.0f,   //
                                  -1.27f, 0.0f, 0.0f,  //
                                  0.011f, 0.0f, -3.0f};
    const q8_matrix m = quantize_q8(w.data(), 3, 3, 3);
    CHECK(m.Kp == 64);
    CHECK(m.scale[0] == Approx(0.02f));
    CHECK(m.q[0] == 127);
    CHECK(m.q[1] == -64);  // -63.5 rounds to even
    CHECK(m.q[2] == 1);    // 0.55
    CHECK(m.scale[1] == 0.0f);
    CHECK(m.q[m.Kp + 0] == 0);
    CHECK(m.q[2 * m.Kp + 2] == -127);
    CHECK(m.q[3] == 0);  // padding
    std::vector<float> bad = w;
    bad[4] = std::nanf("");
    CHECK_THROWS_AS(quantize_q8(bad.data(), 3, 3, 3), numeric_error);
}

TEST_CASE("4-bit weights: ggml's Q4_0 rule and nibble layout, the extreme weight exact", "[quant]") {
    const std::size_t K = 64, N = 3;
    auto w = normal(K * N, 4);
    w[5 * N + 1] = -4.0f;  // column 1, group 0: the extreme weight, negative
    w[40 * N + 2] = 3.5f;  // column 2, group 1: positive
    const q4_matrix m = quantize_q4(w.data(), K, N, N);
    CHECK(m.G == 2);
    CHECK(from_half(m.scale[1 * m.G + 0]) == 0.5f);   // d = -4 / -8
    CHECK(m.value(5, 1) == -8);                       // the extreme at -8 d: exact
    CHECK(m.at(5, 1) == -4.0);
    CHECK(m.at(40, 2) == Approx(3.5).epsilon(1e-3));   // d = -3.5 / 8, rounded to half
    for (std::size_t n = 0; n < N; ++n)
        for (std::size_t k = 0; k < K; ++k) {
            const double d = from_half(m.scale[n * m.G + k / 32]);
            REQUIRE(std::abs(m.at(k, n) - double(w[k * N + n])) <= std::abs(d) * 0.5 + 1e-6);  // within half a step
        }
    // Byte j of a group holds value j (low nibble) and value j + 16 (high nibble).
    const std::uint8_t b = m.nibbles[(1 * m.G + 0) * 16 + 5];
    CHECK(int(b & 0x0f) - 8 == m.value(5, 1));
    CHECK(int(b >> 4) - 8 == m.value(21, 1));
    CHECK_THROWS_AS(quantize_q4(w.data(), 48, 1, 1), shape_error);
}

TEST_CASE("int8 products on every path of this CPU against float64, the int8 dot products exact", "[quant]") {
    INFO("paths: " << paths_here().size());
    for (auto [K, N, M] : {std::array<std::size_t, 3>{768, 64, 1}, {100, 7, 3}, {64, 4, 2}, {3072, 10, 1}}) {
        const auto w = normal(K * N, 5, 0.05f), x = normal(M * K, 6), bias = normal(N, 7);
        const q8_matrix q = quantize_q8(w.data(), K, N, N);
        for (quant_path p : paths_here()) {
            INFO("path " << quant_path_name(p) << ", K " << K << ", N " << N << ", M " << M);
            std::vector<float> y(M * N);
            gemv_q8(M, x.data(), K, q, bias.data(), y.data(), N, p);
            for (std::size_t m = 0; m < M; ++m) {
                // The reference: float64 over the dequantised weights, with x as the path reads it.
                std::vector<float> xr(x.begin() + long(m * K), x.begin() + long((m + 1) * K));
                std::vector<std::int64_t> dots(N);
                const float sx = int8_dot_q8(xr.data(), q, dots.data(), quant_path::scalar);
                if (quant_int8_activations(p)) {
                    std::vector<std::int64_t> vnni(N);
                    int8_dot_q8(xr.data(), q, vnni.data(), p);
                    REQUIRE(vnni == dots);  // bit for bit
                }
                for (std::size_t n = 0; n < N; ++n) {
                    double ref = 0, mag = 0;
                    if (quant_int8_activations(p)) {
                        ref = double(sx) * double(q.scale[n]) * double(dots[n]);
                        mag = std::abs(ref);
                    } else {
                        for (std::size_t k = 0; k < K; ++k) {
                            ref += double(xr[k]) * q.at(k, n);
                            mag += std::abs(double(xr[k]) * q.at(k, n));
                        }
                    }
                    const double tol = (double(K) + 4) * std::ldexp(1.0, -24) * mag + 1e-6 * std::abs(bias[n]);
                    REQUIRE(std::abs(double(y[m * N + n]) - (ref + bias[n])) <= tol);
                }
            }
        }
    }
}

TEST_CASE("4-bit products on every path of this CPU against float64", "[quant]") {
    for (auto [K, N, M] : {std::array<std::size_t, 3>{768, 48, 1}, {64, 5, 3}, {3072, 9, 1}, {96, 5, 2}, {160, 3, 1}, {544, 4, 1}}) {
        const auto w = normal(K * N, 8, 0.05f), x = normal(M * K, 9);
        const q4_matrix q = quantize_q4(w.data(), K, N, N);
        for (quant_path p : paths_here()) {
            INFO("path " << quant_path_name(p) << ", K " << K << ", N " << N << ", M " << M);
            std::vector<float> y(M * N);
            gemv_q4(M, x.data(), K, q, nullptr, y.data(), N, p);
            for (std::size_t m = 0; m < M; ++m)
                for (std::size_t n = 0; n < N; ++n) {
                    double ref = 0, mag = 0;
                    for (std::size_t g = 0; g < q.G; ++g) {
                        // The VNNI path reads x quantised per group of 32 (ggml's Q8_0).
                        float xs[32];
                        std::int8_t xq[32];
                        float sx = 1;
                        if (quant_int8_activations(p)) sx = kernels::detail::quantize_row_q8(&x[m * K + g * 32], 32, xq, 32);
                        for (std::size_t j = 0; j < 32; ++j) xs[j] = quant_int8_activations(p) ? float(xq[j]) * sx : x[m * K + g * 32 + j];
                        for (std::size_t j = 0; j < 32; ++j) {
                            ref += double(xs[j]) * q.at(g * 32 + j, n);
                            mag += std::abs(double(xs[j]) * q.at(g * 32 + j, n));
                        }
                    }
                    REQUIRE(std::abs(double(y[m * N + n]) - ref) <= (double(K) + 4) * std::ldexp(1.0, -24) * mag + 1e-30);
                }
        }
    }
}

TEST_CASE("CTG_QUANT_ISA restricts the path, and an unsupported path is refused", "[quant]") {
    ::setenv("CTG_QUANT_ISA", "scalar", 1);
    CHECK(choose_quant_path() == quant_path::scalar);
    ::setenv("CTG_QUANT_ISA", "avx2", 1);
    CHECK(choose_quant_path() == (quant_path_supported(quant_path::avx2) ? quant_path::avx2 : quant_path::scalar));
    // A cap the CPU lacks gives the fastest path below it that it has.
    ::setenv("CTG_QUANT_ISA", "avx_vnni", 1);
    CHECK(choose_quant_path() == (quant_path_supported(quant_path::avx_vnni) ? quant_path::avx_vnni
                                  : quant_path_supported(quant_path::avx2)   ? quant_path::avx2
                                                                             : quant_path::scalar));
    ::setenv("CTG_QUANT_ISA", "avx-512", 1);
    try {
        (void)choose_quant_path();
        FAIL("an unknown CTG_QUANT_ISA was accepted");
    } catch (const std::invalid_argument& e) {
        CHECK(std::string(e.what()).find("CTG_QUANT_ISA='avx-512'") != std::string::npos);
    }
    ::unsetenv("CTG_QUANT_ISA");
    CHECK(quant_path_supported(choose_quant_path()));
    if (!quant_path_supported(quant_path::avx512_vnni)) {
        const auto w = normal(64, 1);
        const q8_matrix q = quantize_q8(w.data(), 64, 1, 1);
        float y = 0;
        CHECK_THROWS_AS(gemv_q8(1, w.data(), 64, q, nullptr, &y, 1, quant_path::avx512_vnni), error);
    }
}
