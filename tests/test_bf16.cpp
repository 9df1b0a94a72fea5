// Mixed precision: bf16 rounding, bf16 products on every engine this machine can run against a
// float64 product of the same rounded operands, and programs compiled with
// options{.precision = precision::bf16} against float64 programs on rounded values.
#include <catch2/catch.hpp>

#include <unistd.h>

#include <algorithm>
#include <bit>
#include <filesystem>
#include <string>
#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <limits>
#include <map>
#include <random>
#include <stdexcept>
#include <type_traits>
#include <vector>

#include <ctgraph/ctgraph.hpp>
#include <ctgraph/xtensor.hpp>
#include <ctgraph/train.hpp>

#include "allocation_counter.hpp"
#include "attention_fixture.hpp"
#include "pool_threads.hpp"

using namespace ctg;
using kernels::bf16_bits;

namespace {

// Round to nearest even on the top 16 bits, written from the definition (not as the library does).
bf16_bits reference_bf16(float f) {
    const std::uint32_t u = std::bit_cast<std::uint32_t>(f);
    if (std::isnan(f)) return bf16_bits((u >> 16) | 0x40);
    if (std::fpclassify(f) == FP_SUBNORMAL || f == 0.0f) return bf16_bits((u >> 16) & 0x8000);
    const std::uint32_t lower = u & 0xFFFF, upper = u >> 16;
    if (lower > 0x8000 || (lower == 0x8000 && (upper & 1))) return bf16_bits(upper + 1);
    return bf16_bits(upper);
}

std::vector<float> special_and_random_floats() {
    std::vector<float> v = {0.0f, -0.0f, 1.0f, -1.0f, std::numeric_limits<float>::infinity(),
                            -std::numeric_limits<float>::infinity(), std::numeric_limits<float>::quiet_NaN(),
                            std::numeric_limits<float>::max(), std::numeric_limits<float>::lowest(),
                            std::numeric_limits<float>::min(), std::numeric_limits<float>::denorm_min(),
                            -std::numeric_limits<float>::denorm_min(), 1e-39f,
                            std::bit_cast<float>(0x3F808000u),   // a tie, lower bf16 even: stays
                            std::bit_cast<float>(0x3F818000u),   // a tie, lower bf16 odd: rounds up
                            std::bit_cast<float>(0x3F808001u),   // just above a tie
                            std::bit_cast<float>(0x7F7FFFFFu),   // the largest float: rounds to inf
                            std::bit_cast<float>(0x7FA00000u)};  // a signalling NaN: quiet
    std::mt19937 rng(7);
    for (int i = 0; i < 4000; ++i) v.push_back(std::bit_cast<float>(std::uint32_t(rng())));
    return v;
}

std::vector<float> randoms(std::size_t n, unsigned seed) {
    std::mt19937 rng(seed);
    std::normal_distribution<float> d;
    std::vector<float> v(n);
    for (auto& x : v) x = d(rng);
    return v;
}

// randoms(n, seed), drawn once per (n, seed): for the tests that ask again for the same ones.
const std::vector<float>& same_randoms(std::size_t n, unsigned seed) {
    static std::map<std::pair<std::size_t, unsigned>, std::vector<float>> drawn;
    auto it = drawn.find({n, seed});
    if (it == drawn.end()) it = drawn.emplace(std::pair{n, seed}, randoms(n, seed)).first;
    return it->second;
}

struct engine_scope {  // restores the process's engine after a test chose one
    kernels::bf16_engine saved = kernels::get_bf16_engine();
    ~engine_scope() { kernels::set_bf16_engine(saved); }
};

std::vector<kernels::bf16_engine> runnable_engines() {
    std::vector<kernels::bf16_engine> e{kernels::bf16_engine::emulated};
    if (kernels::bf16_engine_available(kernels::bf16_engine::onednn)) e.push_back(kernels::bf16_engine::onednn);
    return e;
}

}  // namespace

TEST_CASE("bf16 rounding: nearest even, NaN quiet, subnormals to zero, packing rounds the same in every path", "[bf16]") {
    const auto v = special_and_random_floats();
    std::vector<bf16_bits> bits(v.size());
    std::vector<float> rounded(v.size());
    kernels::pack_bf16(false, 1, v.size(), v.data(), v.size(), bits.data());      // vector path (AVX512-BF16 here)
    kernels::pack_bf16(false, 1, v.size(), v.data(), v.size(), rounded.data());
    for (std::size_t i = 0; i < v.size(); ++i) {
        INFO("element " << i << " bits 0x" << std::hex << std::bit_cast<std::uint32_t>(v[i]));
        const bf16_bits want = reference_bf16(v[i]);
        CHECK(kernels::to_bf16(v[i]) == want);
        CHECK(bits[i] == want);
        CHECK(std::bit_cast<std::uint32_t>(rounded[i]) == std::uint32_t(want) << 16);
    }
    CHECK(kernels::to_bf16(std::bit_cast<float>(0x3F808000u)) == 0x3F80);
    CHECK(kernels::to_bf16(std::bit_cast<float>(0x3F818000u)) == 0x3F82);
    CHECK(std::isinf(kernels::round_bf16(std::numeric_limits<float>::max())));
    CHECK(std::isnan(kernels::round_bf16(std::numeric_limits<float>::quiet_NaN())));
    // Transposed packing: the same values, transposed (tiles of 16 and their edges).
    const std::size_t R = 37, C = 21;
    const auto x = randoms(R * C, 3);
    std::vector<bf16_bits> t(R * C);
    kernels::pack_bf16(true, C, R, x.data(), C, t.data());  // op(X) = X^T, C x R
    for (std::size_t r = 0; r < R; ++r)
        for (std::size_t c = 0; c < C; ++c) CHECK(t[c * R + r] == reference_bf16(x[r * C + c]));
}

TEST_CASE("transposing bf16 packing: the bits of to_bf16 and of the portable tile path, on odd shapes and leading dimensions",
          "[bf16]") {
    // X (R x C, leading dimension ld >= C) packed as X^T (C x R): the vector path (AVX512-BF16
    // builds), the portable tiles and the scalar definition must agree bit for bit, on every float
    // class (NaN, infinities, subnormals, ties) and on shapes with edges in both directions. The
    // output buffers are 64-byte aligned scratch, as in a product, so the large shapes take the
    // streaming stores.
    struct shape {
        std::size_t R, C, ld;
    };
    const auto special = special_and_random_floats();
    for (const shape s : {shape{1, 1, 1}, shape{17, 33, 33}, shape{33, 17, 40}, shape{31, 16, 16}, shape{32, 15, 19},
                          shape{64, 48, 48}, shape{100, 70, 131}, shape{2048, 384, 384}, shape{2048, 384, 401},
                          shape{1024, 512, 512}}) {
        INFO("X " << s.R << " x " << s.C << ", ld " << s.ld);
        std::vector<float> x = randoms(s.R * s.ld, 11);
        for (std::size_t i = 0; i < x.size(); i += 7) x[i] = special[(i / 7) % special.size()];
        kernels::scratch<bf16_bits> bits(s.R * s.C), tiles(s.R * s.C);
        kernels::scratch<float> rounded(s.R * s.C), rounded_tiles(s.R * s.C);
        kernels::pack_bf16(true, s.C, s.R, x.data(), s.ld, bits.data());
        kernels::pack_bf16(true, s.C, s.R, x.data(), s.ld, rounded.data());
        kernels::pack_bf16_transposed_tiles(s.C, s.R, x.data(), s.ld, tiles.data());
        kernels::pack_bf16_transposed_tiles(s.C, s.R, x.data(), s.ld, rounded_tiles.data());
        std::size_t wrong = 0;
        for (std::size_t r = 0; r < s.C; ++r)
            for (std::size_t c = 0; c < s.R; ++c) {
                const std::size_t o = r * s.R + c;
                const bf16_bits want = kernels::to_bf16(x[c * s.ld + r]);
                wrong += bits.data()[o] != want || tiles.data()[o] != want || bits.data()[o] != reference_bf16(x[c * s.ld + r]) ||
                         std::bit_cast<std::uint32_t>(rounded.data()[o]) != std::uint32_t(want) << 16 ||
                         std::bit_cast<std::uint32_t>(rounded_tiles.data()[o]) != std::uint32_t(want) << 16;
            }
        CHECK(wrong == 0);
        // The same values as a plain packing of the transposed matrix.
        std::vector<float> xt(s.R * s.C);
        for (std::size_t r = 0; r < s.C; ++r)
            for (std::size_t c = 0; c < s.R; ++c) xt[r * s.R + c] = x[c * s.ld + r];
        std::vector<bf16_bits> plain(s.R * s.C);
        kernels::pack_bf16(false, s.C, s.R, xt.data(), s.R, plain.data());
        CHECK(std::equal(plain.begin(), plain.end(), bits.data()));
        // X already in bf16 (a value kept in bf16 only), transposed as bf16: each element moved as it is.
        std::vector<bf16_bits> xb(x.size());
        for (std::size_t i = 0; i < x.size(); ++i) xb[i] = bf16_bits(0x8000u ^ (i * 2654435761u >> 7));  // every bit pattern moves
        kernels::scratch<bf16_bits> moved(s.R * s.C);
        kernels::pack_bf16(true, s.C, s.R, xb.data(), s.ld, moved.data());
        // ... and as the floats those bits stand for (the emulated engine reading a weight's copy),
        // transposed and plain.
        kernels::scratch<float> widened(s.R * s.C), widened_plain(s.R * s.ld);
        kernels::pack_bf16(true, s.C, s.R, xb.data(), s.ld, widened.data());
        kernels::pack_bf16(false, s.R, s.C, xb.data(), s.ld, widened_plain.data());
        std::size_t misplaced = 0;
        for (std::size_t r = 0; r < s.C; ++r)
            for (std::size_t c = 0; c < s.R; ++c)
                misplaced += moved.data()[r * s.R + c] != xb[c * s.ld + r] ||
                             std::bit_cast<std::uint32_t>(widened.data()[r * s.R + c]) != std::uint32_t(xb[c * s.ld + r]) << 16 ||
                             std::bit_cast<std::uint32_t>(widened_plain.data()[c * s.C + r]) != std::uint32_t(xb[c * s.ld + r]) << 16;
        CHECK(misplaced == 0);
    }
}

TEST_CASE("bf16 packing on the pool: the bits of one thread's, every form, on odd shapes", "[bf16]") {
    // The products' operand conversions share op(X)'s rows among the pool's threads: each element
    // is converted alone, so two threads must give exactly one thread's bits, plain and
    // transposed, rounding floats or moving / widening bf16 values.
    testing::pool_threads pool(2);
    struct shape {
        std::size_t rows, cols, ld;  // op(X)'s rows and columns; X's leading dimension
    };
    for (const shape s : {shape{31, 1100, 1100}, shape{33, 1024, 1030}, shape{100, 700, 701}, shape{2048, 384, 384},
                          shape{384, 2048, 2048}, shape{8, 4096, 4096}}) {
        for (const bool trans : {false, true}) {
            INFO("op(X) " << s.rows << " x " << s.cols << ", ld " << s.ld << (trans ? ", transposed" : ""));
            const std::size_t stored_rows = trans ? s.cols : s.rows;  // X is stored_rows x ld
            const std::size_t ld = trans ? std::max(s.ld - s.cols + s.rows, s.rows) : s.ld;
            const auto x = randoms(stored_rows * ld, 31);
            std::vector<bf16_bits> xb(x.size());
            kernels::pack_bf16(false, 1, x.size(), x.data(), x.size(), xb.data());
            const std::size_t n = s.rows * s.cols;
            kernels::scratch<bf16_bits> one_bits(n), pool_bits(n), one_moved(n), pool_moved(n);
            kernels::scratch<float> one_rounded(n), pool_rounded(n), one_widened(n), pool_widened(n);
            {
                testing::pool_threads single(1);
                kernels::pack_bf16(trans, s.rows, s.cols, x.data(), ld, one_bits.data());
                kernels::pack_bf16(trans, s.rows, s.cols, x.data(), ld, one_rounded.data());
                kernels::pack_bf16(trans, s.rows, s.cols, xb.data(), ld, one_moved.data());
                kernels::pack_bf16(trans, s.rows, s.cols, xb.data(), ld, one_widened.data());
            }
            kernels::pack_bf16_on_pool(trans, s.rows, s.cols, x.data(), ld, pool_bits.data());
            kernels::pack_bf16_on_pool(trans, s.rows, s.cols, x.data(), ld, pool_rounded.data());
            kernels::pack_bf16_on_pool(trans, s.rows, s.cols, xb.data(), ld, pool_moved.data());
            kernels::pack_bf16_on_pool(trans, s.rows, s.cols, xb.data(), ld, pool_widened.data());
            CHECK(std::equal(one_bits.data(), one_bits.data() + n, pool_bits.data()));
            CHECK(std::memcmp(one_rounded.data(), pool_rounded.data(), n * sizeof(float)) == 0);
            CHECK(std::equal(one_moved.data(), one_moved.data() + n, pool_moved.data()));
            CHECK(std::memcmp(one_widened.data(), pool_widened.data(), n * sizeof(float)) == 0);
            // and the values themselves: op(X) rounded
            std::size_t wrong = 0;
            for (std::size_t r = 0; r < s.rows; ++r)
                for (std::size_t c = 0; c < s.cols; ++c)
                    wrong += pool_bits.data()[r * s.cols + c] != reference_bf16(trans ? x[c * ld + r] : x[r * ld + c]);
            CHECK(wrong == 0);
        }
    }
}

TEST_CASE("column sums (a linear layer's bias gradient), converting dY to bf16 in the same pass: the bits of "
          "row-by-row sums and of a plain conversion, at 1 and 2 threads",
          "[bf16]") {
    struct shape {
        std::size_t R, C, ld;
    };
    for (const shape s : {shape{0, 5, 5}, shape{1, 1, 1}, shape{3, 17, 20}, shape{64, 100, 100}, shape{300, 130, 131},
                          shape{512, 384, 384}}) {
        for (const int threads : {1, 2}) {
            testing::pool_threads pool(threads);
            INFO("X " << s.R << " x " << s.C << ", ld " << s.ld << ", " << threads << " thread(s)");
            const auto x = randoms(std::max<std::size_t>(1, s.R * s.ld), 21);
            // The reference: a plain conversion, and each column summed over the rows in order
            // (the first row assigned when fresh), as the VJP summed before.
            std::vector<bf16_bits> want(s.R * s.C);
            kernels::pack_bf16(false, s.R, s.C, x.data(), s.ld, want.data());
            const auto start = randoms(s.C, 22);
            std::vector<float> fresh_sums(s.C, 0.0f), added_sums = start;
            for (std::size_t r = 0; r < s.R; ++r)
                for (std::size_t c = 0; c < s.C; ++c) {
                    fresh_sums[c] = r == 0 ? x[c] : fresh_sums[c] + x[r * s.ld + c];
                    added_sums[c] += x[r * s.ld + c];
                }
            for (const bool fresh : {true, false}) {
                INFO((fresh ? "fresh" : "adding"));
                std::vector<bf16_bits> got(s.R * s.C, 0xFFFF);
                std::vector<float> sums = fresh ? std::vector<float>(s.C, std::numeric_limits<float>::quiet_NaN()) : start;
                kernels::column_sums(s.R, s.C, x.data(), s.ld, sums.data(), fresh, got.data());
                CHECK(got == want);
                const auto& expected = fresh ? fresh_sums : added_sums;
                std::size_t different = 0;
                for (std::size_t c = 0; c < s.C; ++c)
                    different += std::bit_cast<std::uint32_t>(sums[c]) != std::bit_cast<std::uint32_t>(expected[c]);
                CHECK(different == 0);
            }
            std::vector<float> only_sums(s.C, std::numeric_limits<float>::quiet_NaN());  // no conversion asked
            kernels::column_sums(s.R, s.C, x.data(), s.ld, only_sums.data(), true);
            std::size_t differ = 0;
            for (std::size_t c = 0; c < s.C; ++c)
                differ += std::bit_cast<std::uint32_t>(only_sums[c]) != std::bit_cast<std::uint32_t>(fresh_sums[c]);
            CHECK(differ == 0);
        }
    }
}

TEST_CASE("bf16 products on every engine equal a float64 product of the rounded operands", "[bf16]") {
    engine_scope restore;
    struct shape {
        std::size_t M, N, K;
    };
    const std::vector<kernels::bf16_engine> engines = runnable_engines();
    for (const shape s : {shape{1, 1, 1}, shape{3, 5, 7}, shape{1, 384, 96}, shape{9, 33, 17}, shape{64, 48, 40},
                          shape{200, 130, 77}, shape{256, 64, 256},
                          shape{300, 8, 1000},  // A^T: converted transposed (small A) and read through strides (this one)
                          // the emulation's blocks (an operand over 2^20 floats): op(A) by rows, op(B) by columns
                          shape{1100, 8, 1000}, shape{8, 1100, 1000}}) {
        const std::size_t M = s.M, N = s.N, K = s.K;
        const auto A = randoms(M * K, 1), B = randoms(K * N, 2), bias = randoms(N, 3), C0 = randoms(M * N, 4);
        std::vector<bf16_bits> A16(A.size()), B16(B.size());
        kernels::pack_bf16(false, 1, A.size(), A.data(), A.size(), A16.data());
        kernels::pack_bf16(false, 1, B.size(), B.data(), B.size(), B16.data());
        std::vector<double> Ar(A.size()), Br(B.size());  // the operands as the products see them
        for (std::size_t i = 0; i < A.size(); ++i) Ar[i] = kernels::round_bf16(A[i]);
        for (std::size_t i = 0; i < B.size(); ++i) Br[i] = kernels::round_bf16(B[i]);
        for (int ta = 0; ta < 2; ++ta)
            for (int tb = 0; tb < 2; ++tb) {
                // op(A) op(B) in float64, once for every engine and mode (the sums a test under the
                // sanitizers spends its time in)
                std::vector<double> AB(M * N, 0.0);
                for (std::size_t i = 0; i < M; ++i)
                    for (std::size_t k = 0; k < K; ++k) {
                        const double a = ta ? Ar[k * M + i] : Ar[i * K + k];
                        double* row = AB.data() + i * N;
                        if (tb)
                            for (std::size_t j = 0; j < N; ++j) row[j] += a * Br[j * K + k];
                        else
                            for (std::size_t j = 0; j < N; ++j) row[j] += a * Br[k * N + j];
                    }
                for (const kernels::bf16_engine engine : engines) {
                    kernels::set_bf16_engine(engine);
                    for (int mode = 0; mode < 4; ++mode) {
                        std::vector<float> C = C0;
                        // mode 0: C = A B + bias; 1: C = 0.5 A B + C; 2: C = 2 A B - 0.5 C + bias;
                        // 3: as 0, with A and B given only as their bf16 values (values kept in bf16 only)
                        const float alpha = mode == 1 ? 0.5f : mode == 2 ? 2.0f : 1.0f;
                        const float beta = mode == 1 ? 1.0f : mode == 2 ? -0.5f : 0.0f;
                        const float* b = mode == 1 ? nullptr : bias.data();
                        if (beta == 0.0f) std::fill(C.begin(), C.end(), std::numeric_limits<float>::quiet_NaN());  // never read
                        const bool only16 = mode == 3;
                        kernels::gemm<float>(ta, tb, M, N, K, alpha, only16 ? nullptr : A.data(), ta ? M : K,
                                             only16 ? nullptr : B.data(), tb ? K : N, beta, C.data(), N, b, true,
                                             only16 ? A16.data() : nullptr, only16 ? B16.data() : nullptr);
                        double worst = 0, scale = 0;
                        for (std::size_t i = 0; i < M; ++i)
                            for (std::size_t j = 0; j < N; ++j) {
                                const double want = alpha * AB[i * N + j] + (b ? b[j] : 0.0) + (beta != 0 ? beta * C0[i * N + j] : 0.0);
                                const double e = std::abs(want - double(C[i * N + j]));
                                worst = std::isnan(e) ? std::numeric_limits<double>::infinity() : std::max(worst, e);
                                scale = std::max(scale, std::abs(want));
                            }
                        INFO(kernels::bf16_engine_name(engine) << " " << M << "x" << N << "x" << K << " ta " << ta << " tb " << tb
                                                               << " mode " << mode);
                        // float accumulation of K exact products: a few float roundings of the scale
                        CHECK(worst <= 1e-6 * std::sqrt(double(K)) * scale + 1e-30);
                    }
                }
            }
    }
}

/// Each column c < n of y against bias + x_0 w_0 + x_1 w_1 + ... in row order, one std::fma per
/// term: how many differ in any bit.
std::size_t differing_from_chain(std::size_t K, std::size_t n, const std::vector<float>& x, const std::vector<bf16_bits>& w,
                                 std::size_t ldw, const float* bias, const float* y) {
    std::size_t differ = 0;
    for (std::size_t c = 0; c < n; ++c) {
        float acc = bias ? bias[c] : 0.0f;
        for (std::size_t k = 0; k < K; ++k) acc = std::fma(x[k], kernels::from_bf16(w[k * ldw + c]), acc);
        differ += std::bit_cast<std::uint32_t>(acc) != std::bit_cast<std::uint32_t>(y[c]);
    }
    return differ;
}

TEST_CASE("one row times a weight's bf16 copy (a decoding step's product): bias + sum of x_k w_k, in order", "[bf16]") {
    // Widths around the vector (16), the sums kept in registers (up to 4 vectors) and the column
    // chunk (65,536) edges, and a leading dimension wider than the columns read (a column range of a
    // larger weight, as the pool splits one).
    for (const std::size_t N : {std::size_t(1), std::size_t(15), std::size_t(16), std::size_t(17), std::size_t(32),
                                std::size_t(63), std::size_t(64), std::size_t(79), std::size_t(80), std::size_t(300),
                                std::size_t(2048), std::size_t(2064), std::size_t(5003), std::size_t(65536 + 37)})
        for (const std::size_t K : {std::size_t(1), std::size_t(7), std::size_t(96)})
            for (const bool with_bias : {false, true}) {
                const std::size_t ldw = N + 5;
                auto x = randoms(K, 11);
                for (auto& v : x) v = kernels::round_bf16(v);  // the caller passes rounded values
                const auto wf = randoms(K * ldw, 12), bias = randoms(N, 13);
                std::vector<bf16_bits> w(K * ldw);
                kernels::pack_bf16(false, K, ldw, wf.data(), ldw, w.data());
                std::vector<float> y(N + 1, 7.0f);  // y[N] must stay as it is
                kernels::combine_rows(K, N, x.data(), w.data(), ldw, y.data(), with_bias ? bias.data() : nullptr);
                INFO("N " << N << " K " << K << " bias " << with_bias);
                CHECK(differing_from_chain(K, N, x, w, ldw, with_bias ? bias.data() : nullptr, y.data()) == 0);
                CHECK(y[N] == 7.0f);
            }
}

/// The one-row kernels at instruction set A (whatever this build's own is): the widening load and
/// both forms of the sums, register blocks and four rows a pass.
template <class A>
void check_one_row_kernels_at() {
    using V = xsimd::batch<float, A>;
    constexpr std::size_t W = V::size;
    INFO(A::name() << ", " << W << " lanes");
    std::vector<bf16_bits> bits(W);
    for (std::size_t i = 0; i < W; ++i) bits[i] = kernels::to_bf16(float(i) * -1.75f + 0.3f);
    alignas(64) float lanes[W];
    kernels::load_lanes<V>(bits.data()).store_aligned(lanes);
    for (std::size_t i = 0; i < W; ++i) CHECK(lanes[i] == kernels::from_bf16(bits[i]));
    for (const std::size_t K : {std::size_t(1), std::size_t(5), std::size_t(9)})
        for (const std::size_t n : {W, 3 * W, 40 * W, 65536 + 2 * W})  // (65,536 floats of sums: a chunk)
            for (const bool with_bias : {false, true}) {
                const std::size_t ldw = n + 3;
                auto x = randoms(K, 21);
                for (auto& v : x) v = kernels::round_bf16(v);
                const auto wf = randoms(K * ldw, 22), bias = randoms(n, 23);
                std::vector<bf16_bits> w(K * ldw);
                kernels::pack_bf16(false, K, ldw, wf.data(), ldw, w.data());
                const float* b = with_bias ? bias.data() : nullptr;
                std::vector<float> wide(n), block(W);
                kernels::detail::combine_wide<V>(K, n, x.data(), w.data(), ldw, wide.data(), b);
                kernels::detail::combine_block<V, 1, 1>(K, x.data(), w.data(), ldw, block.data(), b);
                INFO("K " << K << " n " << n << " bias " << with_bias);
                CHECK(differing_from_chain(K, n, x, w, ldw, b, wide.data()) == 0);
                CHECK(differing_from_chain(K, W, x, w, ldw, b, block.data()) == 0);
            }
}

TEST_CASE("one row times bf16 rows: the same bits at every instruction set this build can run", "[bf16]") {
    // A CPU without AVX-512 runs the AVX2 or SSE2 form of these kernels: each is checked here on
    // any host whose build has it (the generic form, one lane at a time, at a made-up width).
#if XSIMD_WITH_SSE2
    check_one_row_kernels_at<xsimd::sse2>();
#endif
#if XSIMD_WITH_AVX2
    check_one_row_kernels_at<xsimd::avx2>();
#endif
#if XSIMD_WITH_FMA3_AVX2
    check_one_row_kernels_at<xsimd::fma3<xsimd::avx2>>();
#endif
#if XSIMD_WITH_AVX512BW
    check_one_row_kernels_at<xsimd::avx512bw>();
#endif
}

TEST_CASE("bf16 engines: the environment's choice is checked, and the engines agree", "[bf16]") {
    engine_scope restore;
    ::setenv("CTG_BF16_ENGINE", "bogus", 1);
    CHECK_THROWS_WITH(kernels::detail::choose_bf16_engine(), Catch::Contains("expected onednn or emulated"));
    ::setenv("CTG_BF16_ENGINE", "emulated", 1);
    CHECK(kernels::detail::choose_bf16_engine() == kernels::bf16_engine::emulated);
    ::unsetenv("CTG_BF16_ENGINE");
    // The default by the machine: oneDNN where its bf16 kernels run on AMX or on a CPU that is not
    // Intel's (AMD Zen 4/5: bf16 dot products at twice the float rate); the emulation on Intel
    // without AMX (bf16 dot products at half the float rate) and where oneDNN has no bf16 kernels.
    const bool intel = kernels::detail::this_cpu_vendor() == kernels::detail::cpu_vendor::intel;
    const auto by_machine = !kernels::onednn_has_bf16()                  ? kernels::bf16_engine::emulated
                            : kernels::onednn_has_amx() || !intel ? kernels::bf16_engine::onednn
                                                                         : kernels::bf16_engine::emulated;
    CHECK(kernels::detail::choose_bf16_engine() == by_machine);
    CHECK((kernels::detail::why_bf16_emulated_by_default() != nullptr) == (by_machine == kernels::bf16_engine::emulated));
    // ONEDNN_MAX_CPU_ISA below AVX512_CORE_BF16 (ctest bf16.below_bf16_isa) leaves oneDNN without bf16
    // kernels: the default is then the emulation, as on a CPU without bf16 instructions.
    if (const char* isa = std::getenv("ONEDNN_MAX_CPU_ISA"); isa && (std::string(isa) == "AVX512_CORE" || std::string(isa) == "AVX2")) {
        CHECK_FALSE(kernels::onednn_has_bf16());
        CHECK(kernels::get_bf16_engine() == kernels::bf16_engine::emulated);
    }
    if (!kernels::onednn_has_bf16()) {
        CHECK_THROWS_WITH(kernels::set_bf16_engine(kernels::bf16_engine::onednn), Catch::Contains("cannot run here"));
        return;
    }
    // The two engines on one product: equal to float summation order.
    const std::size_t M = 96, N = 80, K = 200;
    const auto A = randoms(M * K, 5), B = randoms(K * N, 6);
    std::vector<float> c[2];
    int i = 0;
    for (const auto e : {kernels::bf16_engine::onednn, kernels::bf16_engine::emulated}) {
        kernels::set_bf16_engine(e);
        c[i].assign(M * N, 0.0f);
        kernels::gemm<float>(false, false, M, N, K, 1.0f, A.data(), K, B.data(), N, 0.0f, c[i].data(), N, nullptr, true);
        ++i;
    }
    double worst = 0, scale = 0;
    for (std::size_t j = 0; j < M * N; ++j)
        worst = std::max(worst, double(std::abs(c[0][j] - c[1][j]))), scale = std::max(scale, double(std::abs(c[1][j])));
    CHECK(worst <= 1e-5 * scale);
    CHECK(worst > 0);  // the bf16 rounding is the same, but the engines do sum differently (not one path twice)
}

namespace {
inline constexpr dim B = dyn('B'), T = dyn('T');

template <class S>
xt::xtensor<S, 3> tensor3(const std::vector<float>& v, std::size_t a, std::size_t b, std::size_t c, bool round) {
    xt::xtensor<S, 3> t = xt::zeros<S>({a, b, c});
    for (std::size_t i = 0; i < v.size(); ++i) t.data()[i] = S(round ? kernels::round_bf16(v[i]) : v[i]);
    return t;
}
}  // namespace

TEST_CASE("a bf16 program: each product equals float64 on bf16-rounded operands, forward and backward", "[bf16]") {
    engine_scope restore;
    using X = input<"x", B, T, 12>;
    using G = input<"g", B, T, 8>;
    using W = param<"W", 12, 8>;
    using Bias = param<"b", 8>;
    // affine (a linear layer) and matmul by a weight.
    const auto loss = sum(mul(affine(X{}, W{}, Bias{}), G{})) + sum(mul(matmul(X{}, W{}), G{}));
    for (const kernels::bf16_engine engine : runnable_engines()) {
        kernels::set_bf16_engine(engine);
        auto mixed = compile<float, options{.precision = precision::bf16, .input_grads = true}>(loss);
        auto exact = compile<double, options{.input_grads = true}>(loss);
        // float64 program on the rounded weights and inputs (G enters the products as the adjoint:
        // rounded too, as the bf16 backward rounds it).
        mixed.params().init(11);
        exact.params().init(11);
        for (std::size_t s = 0; s < mixed.params().size(); ++s)
            for (std::size_t k = 0; k < mixed.params().at(s).shape.size(); ++k)
                exact.params().value(s)[k] = double(kernels::round_bf16(mixed.params().value(s)[k]));
        const auto x = randoms(2 * 5 * 12, 12), g = randoms(2 * 5 * 8, 13);
        mixed.feed<"x">(tensor3<float>(x, 2, 5, 12, false));
        mixed.feed<"g">(tensor3<float>(g, 2, 5, 8, false));
        exact.feed<"x">(tensor3<double>(x, 2, 5, 12, true));
        exact.feed<"g">(tensor3<double>(g, 2, 5, 8, true));
        mixed.zero_grad();
        exact.zero_grad();
        const double lm = mixed.forward(), le = exact.forward();
        mixed.backward();
        exact.backward();
        INFO(kernels::bf16_engine_name(engine));
        // The loss multiplies the (bf16) products by the unrounded G in float; the reference by the
        // rounded G: within G's rounding (2^-9 relative) of the loss's terms.
        CHECK(std::abs(lm - le) <= 4e-3 * (std::abs(le) + 1));
        // dW = x^T G (twice), db = column sums of G (float, not a product): each within float
        // accumulation of the same rounded operands.
        for (std::size_t s = 0; s < mixed.params().size(); ++s) {
            const auto& e = mixed.params().at(s);
            double worst = 0, scale = 0;
            for (std::size_t k = 0; k < e.shape.size(); ++k) {
                worst = std::max(worst, std::abs(double(mixed.params().grad(s)[k]) - exact.params().grad(s)[k]));
                scale = std::max(scale, std::abs(exact.params().grad(s)[k]));
            }
            INFO("parameter " << e.name);
            if (e.name == "b") CHECK(worst <= 4e-3 * scale);  // sums of the unrounded G (the reference's is rounded)
            else CHECK(worst <= 1e-5 * scale);
        }
        // db exactly: G's float rows summed in order (the bias gradient is not a product; oneDNN's
        // VJP sums it in the pass that rounds dY for the products, from the unrounded floats).
        const std::size_t b_slot = mixed.params().at(0).name == "b" ? 0 : 1;
        REQUIRE(mixed.params().at(b_slot).name == "b");
        std::size_t bias_bits_differ = 0;
        for (std::size_t c = 0; c < 8; ++c) {
            float sum = g[c];
            for (std::size_t r = 1; r < 2 * 5; ++r) sum += g[r * 8 + c];
            bias_bits_differ += std::bit_cast<std::uint32_t>(mixed.params().grad(b_slot)[c]) != std::bit_cast<std::uint32_t>(sum);
        }
        CHECK(bias_bits_differ == 0);
        // dx = G W^T (twice): one bf16 product each.
        const auto dx = mixed.input_grad<"x">();
        const auto dxe = exact.input_grad<"x">();
        double worst = 0, scale = 0;
        for (std::size_t k = 0; k < dx.size(); ++k)
            worst = std::max(worst, std::abs(double(dx.data()[k]) - dxe.data()[k])), scale = std::max(scale, std::abs(dxe.data()[k]));
        CHECK(worst <= 1e-5 * scale);
    }
}

TEST_CASE("bf16 copies of weights: the optimizer's copy equals a fresh conversion, a weight written by hand is read anew",
          "[bf16]") {
    using X = input<"x", B, 12>;
    using Y = index_input<"y", B>;
    const auto loss = softmax_cross_entropy(
        affine(relu(affine(X{}, param<"W1", 12, 16>{}, param<"b1", 16>{})), param<"W2", 16, 5>{}, param<"b2", 5>{}), Y{});
    using P = decltype(compile<float, options{.precision = precision::bf16}>(loss));
    P a = compile<float, options{.precision = precision::bf16}>(loss), b = compile<float, options{.precision = precision::bf16}>(loss);
    a.params().init(3);
    b.params().init(3);
    CHECK(a.params().has_bf16());
    auto opt_a = optim::adamw<float>({.lr = 1e-2, .weight_decay = 0.1}), opt_b = optim::adamw<float>({.lr = 1e-2, .weight_decay = 0.1});
    auto sgd_a = optim::sgd<float>({.lr = 0.05, .momentum = 0.9}), sgd_b = optim::sgd<float>({.lr = 0.05, .momentum = 0.9});
    xt::xtensor<float, 2> x = xt::zeros<float>({24, 12});
    const auto xs = randoms(24 * 12, 21);
    std::copy(xs.begin(), xs.end(), x.data());
    xt::xtensor<int, 1> y = xt::zeros<int>({24});
    for (std::size_t i = 0; i < 24; ++i) y(i) = int(i % 5);
    for (auto* p : {&a, &b}) p->feed<"x">(x), p->feed<"y">(y);
    for (int step = 0; step < 6; ++step) {
        // a: the fused step (each copy rewritten as its parameter is updated, inside backward);
        // b: the plain loop, then every copy marked stale (converted afresh before the next forward)
        if (step < 3) train_step(a, opt_a); else train_step(a, sgd_a);
        b.zero_grad();
        b.forward();
        b.backward();
        if (step < 3) opt_b.step(b.params()); else sgd_b.step(b.params());
        b.params().values();  // (a write access: marks every copy stale)
    }
    for (std::size_t s = 0; s < a.params().size(); ++s)
        for (std::size_t k = 0; k < a.params().at(s).shape.size(); ++k) {
            INFO(a.params().at(s).name << "[" << k << "]");
            REQUIRE(a.params().value(s)[k] == b.params().value(s)[k]);
            REQUIRE(a.params().bf16_value(s)[k] == kernels::to_bf16(a.params().value(s)[k]));
        }
    // A weight written through value() is what the next forward multiplies with.
    const std::size_t w1 = a.params().slot("W1");
    const double before = a.forward();
    for (std::size_t k = 0; k < a.params().at(w1).shape.size(); ++k) a.params().value(w1)[k] *= -2.0f;
    const double after = a.forward();
    CHECK(after != before);
    auto fresh = compile<float, options{.precision = precision::bf16}>(loss);
    fresh.params().values() = a.params().values();
    fresh.feed<"x">(x);
    fresh.feed<"y">(y);
    CHECK(fresh.forward() == after);
}

TEST_CASE("a bf16 run saved and resumed from a checkpoint goes on bit for bit", "[bf16]") {
    using model = nn::gpt<11, 8, 16, 2, 2>;
    const auto loss = model::loss(index_input<"x", B, T>{}, index_input<"y", B, T>{});
    using P = decltype(compile<float, options{.precision = precision::bf16}>(loss));
    xt::xtensor<int, 2> x = xt::zeros<int>({3, 8}), y = xt::zeros<int>({3, 8});
    for (std::size_t i = 0; i < x.size(); ++i) x.data()[i] = int(i * 7 % 11), y.data()[i] = int(i * 5 % 11);
    auto run = [&](P& p, optim::adam<float>& opt, int steps) {
        for (int s = 0; s < steps; ++s) {
            p.feed<"x">(x);
            p.feed<"y">(y);
            train_step(p, opt);
        }
    };
    P whole = compile<float, options{.precision = precision::bf16}>(loss), first = compile<float, options{.precision = precision::bf16}>(loss);
    whole.params().init(5);
    first.params().init(5);
    auto opt_whole = optim::adamw<float>({.lr = 1e-2}), opt_first = optim::adamw<float>({.lr = 1e-2});
    run(whole, opt_whole, 6);
    run(first, opt_first, 3);
    const std::string path = (std::filesystem::temp_directory_path() / ("ctg_bf16_resume_" + std::to_string(::getpid()) + ".npz")).string();
    checkpoint::save(path, first.params(), opt_first, run_state{});
    P second = compile<float, options{.precision = precision::bf16}>(loss);  // a new program: its copies start stale
    auto opt_second = optim::adamw<float>({.lr = 1e-2});
    checkpoint::load(path, second.params(), opt_second);
    std::filesystem::remove(path);
    run(second, opt_second, 3);
    for (std::size_t s = 0; s < whole.params().size(); ++s)
        for (std::size_t k = 0; k < whole.params().at(s).shape.size(); ++k) {
            INFO(whole.params().at(s).name << "[" << k << "]");
            REQUIRE(whole.params().value(s)[k] == second.params().value(s)[k]);
        }
}

TEST_CASE("a bf16 (mixed-precision) GPT step and decoding allocate nothing, no oneDNN primitive is made per step",
          "[allocation][bf16]") {
    using model = nn::gpt<11, 8, 16, 2, 2>;  // the resume test's program type: compiled once for both
    auto prog = compile<float, options{.precision = precision::bf16}>(
        model::loss(index_input<"x", B, T>{}, index_input<"y", B, T>{}));
    prog.params().init(4);
    auto opt = optim::adamw<float>({.lr = 1e-3, .weight_decay = 0.1});
    xt::xtensor<int, 2> x = xt::ones<int>({3, 8});
    const auto primitives = [] { return kernels::onednn_primitives_created().load(); };
    prog.feed<"x">(x);
    prog.feed<"y">(x);
    train_step(prog, opt);  // the first step makes each shape class's primitives
    train_step(prog, opt);
    const auto made = primitives();
    CHECK(allocations_during([&] {
              prog.feed<"x">(x);
              prog.feed<"y">(x);
              train_step(prog, opt);
          }) == 0);
    CHECK(primitives() == made);
    nn::gpt_generator<model, float, precision::bf16> gen(prog.shared_params(), 1, 8);
    std::mt19937_64 rng(1);
    std::vector<std::vector<int>> out;
    const std::vector<std::vector<int>> prompt = {{1, 2, 3}};
    gen.generate_into(out, prompt, 4, {}, rng);
    const long before = allocations();
    const auto made_decoding = primitives();
    for (int r = 0; r < 3; ++r) gen.generate_into(out, prompt, 4, {}, rng);
    CHECK(allocations() - before == 0);
    CHECK(primitives() == made_decoding);
}

namespace {
// Programs of one loss side by side, each trained for 4 AdamW steps on the same data: bf16 with
// shadows and values kept in bf16 only (the default), with shadows only, converting every operand
// at each product, and the first two recomputing each layer (options::recompute); every loss and
// every weight must be the converting program's bit for bit. Then each shadow holds its value
// rounded (that of the program that keeps the floats, for a value kept in bf16 only), and the
// summary at the fed sizes counts each program's arena exactly.
template <class Loss, class Feed>
void check_shadows_and_bf16_only(Loss loss, Feed feed, std::initializer_list<std::pair<char, std::size_t>> sizes) {
    for (const kernels::bf16_engine engine : runnable_engines()) {
        kernels::set_bf16_engine(engine);
        INFO(kernels::bf16_engine_name(engine));
        auto only = compile<float, options{.precision = precision::bf16, .bf16_saved = false}>(loss);
        auto kept = compile<float, options{.precision = precision::bf16, .bf16_only = false}>(loss);
        auto converting = compile<float, options{.precision = precision::bf16, .bf16_shadows = false}>(loss);
        // options::recompute reruns each layer's forward in backward: the shadows are made again with it.
        auto recomputing = compile<float, options{.precision = precision::bf16, .recompute = true, .bf16_saved = false}>(loss);
        auto recomputing_kept = compile<float, options{.precision = precision::bf16, .recompute = true, .bf16_only = false}>(loss);
        // Values that VJPs read rounded too (options::bf16_saved, the default): other bits than
        // converting's (GELU's input is rounded for its value and its VJP), the same with and
        // without recomputing.
        auto saved = compile<float, options{.precision = precision::bf16}>(loss);
        auto recomputing_saved = compile<float, options{.precision = precision::bf16, .recompute = true}>(loss);
        using S = decltype(only);
        using SS = decltype(saved);
        static_assert(decltype(converting)::num_bf16_shadows == 0);
        for (auto* p : {&only.params(), &kept.params(), &converting.params(), &recomputing.params(), &recomputing_kept.params(),
                        &saved.params(), &recomputing_saved.params()})
            p->init(5);
        auto opt_o = optim::adamw<float>({.lr = 1e-2, .weight_decay = 0.1}), opt_k = optim::adamw<float>({.lr = 1e-2, .weight_decay = 0.1}), opt_c = optim::adamw<float>({.lr = 1e-2, .weight_decay = 0.1}),
             opt_r = optim::adamw<float>({.lr = 1e-2, .weight_decay = 0.1}), opt_rk = optim::adamw<float>({.lr = 1e-2, .weight_decay = 0.1}), opt_s = optim::adamw<float>({.lr = 1e-2, .weight_decay = 0.1}),
             opt_rs = optim::adamw<float>({.lr = 1e-2, .weight_decay = 0.1});
        for (int step = 0; step < 4; ++step) {
            feed(only), feed(kept), feed(converting), feed(recomputing), feed(recomputing_kept), feed(saved), feed(recomputing_saved);
            const auto lo = train_step(only, opt_o), lk = train_step(kept, opt_k), lc = train_step(converting, opt_c),
                       lr = train_step(recomputing, opt_r), lrk = train_step(recomputing_kept, opt_rk),
                       ls = train_step(saved, opt_s), lrs = train_step(recomputing_saved, opt_rs);
            INFO("step " << step);
            REQUIRE(lk == lc);
            REQUIRE(lo == lc);
            REQUIRE(lr == lc);
            REQUIRE(lrk == lc);
            REQUIRE(lrs == ls);
            // (GELU's value comes from its rounded input there, as its VJP reads it: a forward within
            // bf16's rounding of converting's; tests/test_affine_activation.cpp checks the rule's bits)
            REQUIRE(std::abs(ls - lc) <= 2e-3f * std::abs(lc));
        }
        for (std::size_t s = 0; s < only.params().size(); ++s)
            for (std::size_t k = 0; k < only.params().at(s).shape.size(); ++k) {
                INFO(only.params().at(s).name << "[" << k << "]");
                const auto bits = [&](auto& p) { return std::bit_cast<std::uint32_t>(p.params().value(s)[k]); };
                REQUIRE(bits(kept) == bits(converting));
                REQUIRE(bits(only) == bits(converting));
                REQUIRE(bits(recomputing) == bits(converting));
                REQUIRE(bits(recomputing_kept) == bits(converting));
                REQUIRE(bits(recomputing_saved) == bits(saved));
            }
        {  // bf16_saved's gradient from the same weights and batch: not converting's, but within bf16's
           // rounding of it (relative 2^-9 a value; the products' operands are rounded as much)
            saved.params().init(7), converting.params().init(7);
            double diff = 0, norm = 0;
            feed(saved), feed(converting);
            saved.zero_grad(), converting.zero_grad();
            saved.forward(), converting.forward();
            saved.backward(), converting.backward();
            for (std::size_t s = 0; s < only.params().size(); ++s)
                for (std::size_t k = 0; k < only.params().at(s).shape.size(); ++k) {
                    const double a = saved.params().grad(s)[k], b = converting.params().grad(s)[k];
                    diff += (a - b) * (a - b), norm += b * b;
                }
            INFO("|g_saved - g_converting| / |g_converting| = " << std::sqrt(diff / norm));
            CHECK(diff > 0);
            CHECK(std::sqrt(diff / norm) <= 1e-2);
        }
        // The shadows live in the arena (a repeat's frames: its scratch), and a value kept in bf16
        // only has no float of its own there: less memory than keeping both, and than converting;
        // less again with the values that VJPs read rounded.
        CHECK(kept.arena_elements() > converting.arena_elements());
        CHECK(only.arena_elements() < kept.arena_elements());
        CHECK(only.arena_elements() < converting.arena_elements());
        CHECK(saved.arena_elements() < only.arena_elements());
        CHECK(only.summary(sizes).arena_bytes == only.arena_elements() * sizeof(float));
        CHECK(kept.summary(sizes).arena_bytes == kept.arena_elements() * sizeof(float));
        CHECK(recomputing.summary(sizes).arena_bytes == recomputing.arena_elements() * sizeof(float));
        CHECK(saved.summary(sizes).arena_bytes == saved.arena_elements() * sizeof(float));
        CHECK(recomputing_saved.summary(sizes).arena_bytes == recomputing_saved.arena_elements() * sizeof(float));
        // After one forward pass from the same weights, every shadow holds the float value rounded:
        // that of the program that keeps the floats (for saved, whose GELU reads its input
        // rounded, where saved keeps the float itself: not the values in bf16 only, whose float
        // memory forward shares; the ops that write those are only's).
        for (auto* p : {&only.params(), &kept.params(), &saved.params()}) p->init(6);
        feed(only), feed(kept), feed(saved);
        only.forward();
        kept.forward();
        saved.forward();
        const auto check_shadows = [&](auto& prog, auto tag, auto& reference) {
            using P = typename decltype(tag)::type;
            for (std::size_t i = 0; i < P::N; ++i) {
                INFO("node " << i);
                CHECK((prog.value_view(i).ptr == nullptr) == P::bf16_no_float_nodes[i]);  // the op wrote its shadow alone
                if (!P::bf16_shadowed_nodes[i]) {
                    CHECK(prog.bf16_shadow(i) == nullptr);
                    continue;
                }
                const view& v = reference.value_view(i);
                const bf16_bits* sh = prog.bf16_shadow(i);
                REQUIRE(sh != nullptr);
                if (v.ptr == nullptr || (&reference.params() == &prog.params() && P::bf16_only_nodes[i])) continue;  // (its float: scratch)
                for (std::size_t k = 0; k < v.size(); ++k) REQUIRE(sh[k] == kernels::to_bf16(v.as<float>()[k]));
            }
        };
        check_shadows(only, std::type_identity<S>{}, kept);
        check_shadows(saved, std::type_identity<SS>{}, saved);
    }
}

// The labels of a graph's nodes that `which` marks, in topological order.
template <class G, std::size_t N>
std::vector<std::string> labels_of(const std::array<bool, N>& which) {
    std::vector<std::string> r;
    for (std::size_t i = 0; i < N; ++i)
        if (which[i]) r.emplace_back(G::label[i]);
    return r;
}
// The labels of the nodes that `with` marks and `without` does not.
template <class G, std::size_t N>
std::vector<std::string> added_by_saved(const std::array<bool, N>& without, const std::array<bool, N>& with) {
    std::array<bool, N> added{};
    for (std::size_t i = 0; i < N; ++i) added[i] = with[i] && !without[i];
    return labels_of<G>(added);
}
std::string joined(const std::vector<std::string>& v) {
    std::string r;
    for (const auto& s : v) r += (r.empty() ? "" : ", ") + s;
    return r;
}
}  // namespace

TEST_CASE("bf16 shadows and values in bf16 only: a GPT's step is bit for bit the converting one's (in a repeat)", "[bf16]") {
    engine_scope restore;
    using model = nn::gpt<11, 8, 16, 2, 2>;  // the resume test's model: a repeat of 2 blocks, then the head
    const auto loss = model::loss(index_input<"x", B, T>{}, index_input<"y", B, T>{});
    xt::xtensor<int, 2> x = xt::zeros<int>({3, 8}), y = xt::zeros<int>({3, 8});
    for (std::size_t i = 0; i < x.size(); ++i) x.data()[i] = int(i * 7 % 11), y.data()[i] = int(i * 5 % 11);
    using S = decltype(compile<float, options{.precision = precision::bf16}>(loss));
    static_assert(S::num_bf16_shadows >= 1);  // the head's input (the repeat's values are in its frames)
    // In the repeat's block (a pre-norm GPT block), 9 values: read by products only, the layer
    // norms' outputs, q, k and v (the projections' outputs, whose heads attention reads in place),
    // attention's output (the heads side by side, which the output projection reads) and the FFN's
    // activation (affine_gelu's result); read in forward only, the output projection's and the
    // second FFN product's (the residual sums add them). Not the attention weights (softmax's VJP
    // reads them) nor the residual sums (the layer norms' VJPs read them). (The first FFN product
    // is affine_gelu's own scratch.)
    using block = detail::cell_info<decltype(nn::gpt<11, 8, 16, 2, 2>::block{}(input<"h", B, T, 16>{}, causal{})), true>;
    const auto in_block = labels_of<typename block::G>(block::bf16_only.only);
    const auto in_program = labels_of<typename S::graph_type>(S::bf16_only_nodes);
    INFO("in the block: " << joined(in_block) << "; in the program: " << joined(in_program));
    CHECK(joined(in_block) == "layer_norm, affine, affine, affine, attention_values, affine, layer_norm, affine_gelu, affine");
    // With the values that VJPs read rounded (options::bf16_saved), one more: the attention weights
    // (their op writes the shadow alone).
    CHECK(added_by_saved<typename block::G>(block::bf16_only.only, block::bf16_saved.only) ==
          std::vector<std::string>{"scaled_dot_weights"});
    CHECK(added_by_saved<typename block::G>(block::bf16_only.no_float, block::bf16_saved.no_float) ==
          std::vector<std::string>{"scaled_dot_weights"});
    CHECK(in_program.size() == 1);  // the final layer norm's output, read by the head
    CHECK(labels_of<typename S::graph_type>(S::bf16_no_float_nodes) == in_program);  // layer norm writes the shadow alone
    // Of those, the FFN's activation keeps no shadow in the layers' frames where it keeps no float
    // (values in bf16 only): affine_gelu makes it again from its pre-activation before the second
    // FFN product's VJP, into the adjoint block; while forward reads it, it lives with the transients.
    CHECK(joined(labels_of<typename block::G>(block::remakable)) == "affine_gelu");
    for (const int level : {0, 1, 2, 3}) {
        INFO("bf16 level " << level);
        detail::cell_frame<block> frame;
        std::size_t h = 0;
        while (block::G::kind[h] != leaf_kind::input) ++h;  // ("h": the block as this test composes it)
        const typename detail::cell_frame<block>::binding known{h, rshape{3, {3, 8, 16}}, 0};
        frame.plan(&known, 1, false, level);
        const auto remade = labels_of<typename block::G>(frame.remade);
        CHECK(joined(remade) == (level >= 2 ? "affine_gelu" : ""));
        for (std::size_t i = 0; i < block::N; ++i)
            if (frame.remade[i]) {
                const std::size_t shadow = (frame.shapes[i].size() + 1) / 2;  // 3 x 8 x 64 bf16 values
                CHECK(shadow == 3 * 8 * 64 / 2);
                CHECK(frame.rm_off[i] + shadow <= frame.adj_block);
                CHECK(frame.tr_off[i] + shadow <= frame.tr_size);
            }
        detail::cell_frame<block> inference;  // a forward-only frame keeps no shadows
        inference.plan(&known, 1, true, level);
        CHECK(labels_of<typename block::G>(inference.remade).empty());
    }
    check_shadows_and_bf16_only(
        loss,
        [&](auto& p) {
            p.template feed<"x">(x);
            p.template feed<"y">(y);
        },
        {{'B', 3}, {'T', 8}});
}

TEST_CASE("values in bf16 only outside a repeat: one GPT block's step is bit for bit the converting one's, at 1 and 2 threads",
          "[bf16]") {
    engine_scope restore;
    using block = nn::gpt<11, 8, 16, 2, 2>::block;
    const auto loss = mse_loss(block{}(input<"h", B, T, 16>{}, causal{}), input<"t", B, T, 16>{});
    using S = decltype(compile<float, options{.precision = precision::bf16, .bf16_saved = false}>(loss));
    using SS = decltype(compile<float, options{.precision = precision::bf16}>(loss));
    const auto nodes = labels_of<typename S::graph_type>(S::bf16_only_nodes);
    INFO(joined(nodes));
    CHECK(joined(nodes) == "layer_norm, affine, affine, affine, attention_values, affine, layer_norm, affine_gelu, affine");
    // Of those, the ones whose op writes the shadow alone, with no float at all (a null value): both
    // layer norms' outputs and the FFN's activation.
    const auto no_float = labels_of<typename S::graph_type>(S::bf16_no_float_nodes);
    INFO(joined(no_float));
    CHECK(joined(no_float) == "layer_norm, layer_norm, affine_gelu");
    // options::bf16_saved adds the attention weights (no float either). (The FFN's pre-activation,
    // which GELU's VJP reads, is affine_gelu's scratch: in bf16 with bf16_saved, tests/test_affine_activation.cpp.)
    using G = typename S::graph_type;
    CHECK(added_by_saved<G>(S::bf16_only_nodes, SS::bf16_only_nodes) == std::vector<std::string>{"scaled_dot_weights"});
    CHECK(added_by_saved<G>(S::bf16_no_float_nodes, SS::bf16_no_float_nodes) == std::vector<std::string>{"scaled_dot_weights"});
    CHECK(added_by_saved<G>(S::bf16_shadowed_nodes, SS::bf16_shadowed_nodes).empty());
    // 512 rows: GELU's 32,768 elements are split over the pool's threads (kernels::map's pieces),
    // and it writes its shadow piece by piece in each.
    xt::xtensor<float, 3> h = xt::zeros<float>({8, 64, 16}), t = xt::zeros<float>({8, 64, 16});
    const auto r1 = randoms(h.size(), 41), r2 = randoms(t.size(), 42);
    std::copy(r1.begin(), r1.end(), h.data());
    std::copy(r2.begin(), r2.end(), t.data());
    for (const int threads : {1, 2}) {
        INFO(threads << " threads");
        testing::pool_threads pool(threads);
        check_shadows_and_bf16_only(
            loss,
            [&](auto& p) {
                p.template feed<"h">(h);
                p.template feed<"t">(t);
            },
            {{'B', 8}, {'T', 64}});
    }
}

namespace {
// dx of sum(op(tanh(x), b) * g) with b's bf16 shadow negated after forward: the backward product
// dC B^T (matmul) or dy b (matmul_transposed) reads b from its shadow, so dx is negated exactly.
template <class Loss, class B, std::size_t BR, std::size_t BC>
void check_products_read_shadow(Loss loss, B) {
    for (const kernels::bf16_engine engine : runnable_engines()) {
        kernels::set_bf16_engine(engine);
        INFO(kernels::bf16_engine_name(engine));
        auto prog = compile<float, options{.precision = precision::bf16, .input_grads = true}>(loss);
        using P = decltype(prog);
        constexpr std::size_t ib = std::size_t(P::graph_type::template index_of<std::remove_cv_t<B>>);
        static_assert(P::bf16_shadowed_nodes[ib] && P::num_bf16_shadows == 2);  // tanh(x) and b
        xt::xtensor<float, 2> xv = xt::zeros<float>({6, 12}), yv = xt::zeros<float>({BR, BC}), gv = xt::zeros<float>({6, 8});
        const auto r1 = randoms(xv.size(), 31), r2 = randoms(yv.size(), 32), r3 = randoms(gv.size(), 33);
        std::copy(r1.begin(), r1.end(), xv.data());
        std::copy(r2.begin(), r2.end(), yv.data());
        std::copy(r3.begin(), r3.end(), gv.data());
        prog.template feed<"x">(xv);
        prog.template feed<"y">(yv);
        prog.template feed<"g">(gv);
        prog.forward();
        prog.backward();
        const auto dx = xt::xtensor<float, 2>(prog.template input_grad<"x">());
        prog.forward();
        // A shadow negated behind the engine's back: the backward product reads it.
        auto* sh = const_cast<bf16_bits*>(prog.bf16_shadow(ib));
        for (std::size_t k = 0; k < BR * BC; ++k) sh[k] = bf16_bits(sh[k] ^ 0x8000u);
        prog.backward();
        const auto dx_neg = xt::xtensor<float, 2>(prog.template input_grad<"x">());
        for (std::size_t k = 0; k < dx.size(); ++k) {
            INFO(k);
            CHECK(dx_neg.data()[k] == -dx.data()[k]);
        }
    }
}
}  // namespace

TEST_CASE("bf16 shadows: the products read the shadow, not the float value", "[bf16]") {
    engine_scope restore;
    using X = input<"x", B, 12>;
    using G = input<"g", B, 8>;
    // an activation read as a product's right operand, forward and backward
    const auto b = tanh(input<"y", 12, 8>{});
    check_products_read_shadow<decltype(sum(mul(matmul(tanh(X{}), b), G{}))), decltype(b), 12, 8>(
        sum(mul(matmul(tanh(X{}), b), G{})), b);
    const auto bt = tanh(input<"y", 8, 12>{});  // matmul_transposed: x bt^T
    check_products_read_shadow<decltype(sum(mul(matmul_transposed(tanh(X{}), bt), G{}))), decltype(bt), 8, 12>(
        sum(mul(matmul_transposed(tanh(X{}), bt), G{})), bt);
}

TEST_CASE("a VJP reading its value rounded (options::bf16_saved) computes what it computes from the rounded float", "[bf16]") {
    engine_scope restore;
    // GELU's VJP from its input's shadow alone (x null): the same bits as from the float input
    // rounded to bf16, written fresh and added to, over pieces of 4,096 and a tail.
    {
        const std::size_t n = 10'000;
        const rshape shape{1, {n}};
        const auto x = randoms(n, 51), gy = randoms(n, 52);
        std::vector<bf16_bits> xb(n);
        std::vector<float> rounded(n);
        for (std::size_t i = 0; i < n; ++i) xb[i] = kernels::to_bf16(4 * x[i]), rounded[i] = kernels::from_bf16(xb[i]);
        for (const bool fresh : {true, false}) {
            INFO("fresh " << fresh);
            std::vector<float> g_shadow(n, 0.25f), g_float(n, 0.25f);
            op_io<float, 1> a, b;
            a.y = b.y = view{nullptr, shape};
            a.gy = b.gy = view{const_cast<float*>(gy.data()), shape};
            a.x[0] = view{nullptr, shape};
            a.xb[0] = xb.data();
            b.x[0] = view{rounded.data(), shape};
            a.gx[0] = view{g_shadow.data(), shape};
            b.gx[0] = view{g_float.data(), shape};
            a.assign[0] = b.assign[0] = fresh;
            ops::gelu_op::backward<float>(a);
            ops::gelu_op::backward<float>(b);
            for (std::size_t i = 0; i < n; ++i) REQUIRE(std::bit_cast<std::uint32_t>(g_shadow[i]) == std::bit_cast<std::uint32_t>(g_float[i]));
        }
        static_assert(ops::gelu_op::vjp_reads_bf16 == 1 && ops::unary_op<ops::tanh_fn>::vjp_reads_bf16 == 0);
    }
    // The attention weights P = causal softmax(c Q K^T): forward with no float P writes the same
    // shadow as with one, and the VJP from that shadow alone (P null) gives gQ and gK bit for bit
    // as from P's float rounded to bf16, on every bf16 engine.
    for (const kernels::bf16_engine engine : runnable_engines()) {
        kernels::set_bf16_engine(engine);
        INFO(kernels::bf16_engine_name(engine));
        using op = ops::scaled_dot_weights_op<cval(0.5), causal>;
        static_assert(op::vjp_reads_bf16 == reads_result && op::writes_bf16_result);
        constexpr std::size_t F = 3, n = 9, d = 5;
        const rshape qs{3, {F, n, d}}, ps{3, {F, n, n}};
        const auto q = randoms(F * n * d, 61), k = randoms(F * n * d, 62), gp = randoms(F * n * n, 63);
        std::vector<bf16_bits> qb(q.size()), kb(k.size());
        for (std::size_t i = 0; i < q.size(); ++i) qb[i] = kernels::to_bf16(q[i]), kb[i] = kernels::to_bf16(k[i]);
        auto io = [&](float* p, bf16_bits* pb) {
            op_io<float, 2> c;
            c.y = view{p, ps};
            c.yb = pb;
            c.x[0] = view{const_cast<float*>(q.data()), qs};
            c.x[1] = view{const_cast<float*>(k.data()), qs};
            c.xb = {qb.data(), kb.data()};
            c.run.bf16 = true;
            return c;
        };
        std::vector<float> p(F * n * n);
        std::vector<bf16_bits> pb_with(F * n * n), pb_alone(F * n * n);
        auto with_float = io(p.data(), pb_with.data()), alone = io(nullptr, pb_alone.data());
        op::forward<float>(with_float);
        op::forward<float>(alone);
        for (std::size_t i = 0; i < p.size(); ++i) {
            REQUIRE(pb_with[i] == kernels::to_bf16(p[i]));
            REQUIRE(pb_alone[i] == pb_with[i]);
        }
        std::vector<float> rounded(p.size()), scratch(n * n);
        for (std::size_t i = 0; i < p.size(); ++i) rounded[i] = kernels::from_bf16(pb_with[i]);
        std::vector<float> gq_a(q.size()), gk_a(k.size()), gq_b(q.size()), gk_b(k.size());
        auto a = io(nullptr, pb_alone.data()), b = io(rounded.data(), nullptr);
        for (auto* c : {&a, &b}) {
            c->gy = view{const_cast<float*>(gp.data()), ps};
            c->scratch = view{scratch.data(), rshape{1, {n * n}}};
            c->assign = {true, true};
        }
        a.gx = {view{gq_a.data(), qs}, view{gk_a.data(), qs}};
        b.gx = {view{gq_b.data(), qs}, view{gk_b.data(), qs}};
        op::backward<float>(a);
        op::backward<float>(b);
        for (std::size_t i = 0; i < q.size(); ++i) {
            REQUIRE(std::bit_cast<std::uint32_t>(gq_a[i]) == std::bit_cast<std::uint32_t>(gq_b[i]));
            REQUIRE(std::bit_cast<std::uint32_t>(gk_a[i]) == std::bit_cast<std::uint32_t>(gk_b[i]));
        }
        CHECK(std::any_of(gq_a.begin(), gq_a.end(), [](float v) { return v != 0; }));
    }
}

namespace {
// Attention weights P = masked softmax(c Q K^T) and the VJP's gQ, gK run by the op (double, or float
// with bf16 products on `engine`) against float64 sums over the same (rounded) operands. The op
// computes only the score blocks the mask leaves visible: the sizes give 1 to 17 row blocks, block
// edges off the 64-row grid, n < m (an offset) and n > m (causal rows that see nothing).
// The value product O = P V of those weights (attention_values_op, on the same blocks) and its VJP:
// gV in full, gP where a row may see (elsewhere the op may leave 0: P's producer never reads it).
template <class T, class Mask, class Visible>
void check_values_on_blocks(const Visible& visible, bool bf16, std::size_t n, std::size_t m,
                            std::vector<T>& p) {
    using op = ops::attention_values_op<Mask>;
    constexpr std::size_t F = 2, dv = 6;
    const rshape ps{3, {F, n, m}}, vs{3, {F, m, dv}}, os{3, {F, n, dv}};
    const auto &vf = same_randoms(F * m * dv, 81), &gof = same_randoms(F * n * dv, 82);
    // (gP and gV start as NaN: a fresh adjoint must be written whole, hidden scores included)
    std::vector<T> v(vf.begin(), vf.end()), go(gof.begin(), gof.end()), o(F * n * dv, T(7)),
        gp(p.size(), std::numeric_limits<T>::quiet_NaN()), gv(v.size(), std::numeric_limits<T>::quiet_NaN());
    std::vector<bf16_bits> vb(v.size());
    const auto seen = [bf16](const auto& x) {  // the values as the products see them
        std::vector<double> r(x.size());
        for (std::size_t i = 0; i < x.size(); ++i) r[i] = bf16 ? double(kernels::round_bf16(float(x[i]))) : double(x[i]);
        return r;
    };
    for (std::size_t i = 0; i < v.size(); ++i) vb[i] = kernels::to_bf16(float(v[i]));
    op_io<T, 2> io;
    io.y = view{o.data(), os};
    io.x[0] = view{p.data(), ps};
    io.x[1] = view{v.data(), vs};
    if constexpr (std::is_same_v<T, float>)
        if (bf16) io.xb = {nullptr, vb.data()};  // P rounded by the product itself
    io.run.bf16 = bf16;
    io.gy = view{go.data(), os};
    io.gx = {view{gp.data(), ps}, view{gv.data(), vs}};
    io.assign = {true, true};
    op::template forward<T>(io);
    op::template backward<T>(io);
    std::vector<double> orf(o.size(), 0.0), gvr(v.size(), 0.0);
    double worst_p = 0, scale_p = 0;
    std::size_t hidden_nonzero = 0, hidden_unwritten = 0;
    const long long offset = (long long)m - (long long)n;
    const std::vector<double> pr = seen(p), vr = seen(v), gor = seen(go);
    for (std::size_t f = 0; f < F; ++f)
        for (std::size_t i = 0; i < n; ++i)
            for (std::size_t j = 0; j < m; ++j) {
                const double pij = pr[(f * n + i) * m + j];
                const double* vj = vr.data() + (f * m + j) * dv;
                const double* goi = gor.data() + (f * n + i) * dv;
                double* oi = orf.data() + (f * n + i) * dv;
                double* gvj = gvr.data() + (f * m + j) * dv;
                double gpij = 0;
                for (std::size_t t = 0; t < dv; ++t) {
                    oi[t] += pij * vj[t];
                    gvj[t] += pij * goi[t];
                    gpij += goi[t] * vj[t];
                }
                scale_p = std::max(scale_p, std::abs(gpij));
                const double got = double(gp[(f * n + i) * m + j]);
                if (visible((long long)i + offset, (long long)j)) {
                    worst_p = std::isnan(got) ? std::numeric_limits<double>::infinity() : std::max(worst_p, std::abs(got - gpij));
                } else {
                    hidden_nonzero += p[(f * n + i) * m + j] != T(0);  // (what the op relies on)
                    hidden_unwritten += !(got == 0 || std::abs(got - gpij) <= 1e-3 * (1 + std::abs(gpij)));  // 0, or gO V^T there
                }
            }
    const auto worst = [](const auto& got, const std::vector<double>& want) {
        double w = 0, sc = 0;
        for (std::size_t i = 0; i < want.size(); ++i) {
            const double e = std::abs(double(got[i]) - want[i]);
            w = std::isnan(e) ? std::numeric_limits<double>::infinity() : std::max(w, e);  // (NaN: an element never written)
            sc = std::max(sc, std::abs(want[i]));
        }
        return std::pair{w, sc};
    };
    const double rel = std::is_same_v<T, float> ? 1e-5 : 1e-13;  // (float sums of the same rounded products)
    const auto [wo, so] = worst(o, orf);
    const auto [wv, sv] = worst(gv, gvr);
    CHECK(wo <= rel * so);
    CHECK(wv <= rel * sv);
    CHECK(worst_p <= rel * scale_p);
    CHECK(hidden_nonzero == 0);
    CHECK(hidden_unwritten == 0);
}

template <class T, class Mask, class Visible>
void check_visible_blocks(const Visible& visible, bool bf16, std::size_t n, std::size_t m) {
    using op = ops::scaled_dot_weights_op<cval(0.25), Mask>;
    constexpr std::size_t F = 2, d = 8;
    const rshape qs{3, {F, n, d}}, ks{3, {F, m, d}}, ps{3, {F, n, m}};
    const auto &qf = same_randoms(F * n * d, 71), &kf = same_randoms(F * m * d, 72), &gpf = same_randoms(F * n * m, 73);
    std::vector<T> q(qf.begin(), qf.end()), k(kf.begin(), kf.end()), gp(gpf.begin(), gpf.end());
    std::vector<bf16_bits> qb(q.size()), kb(k.size());
    std::vector<double> qr(q.size()), kr(k.size());  // the operands as the products see them
    for (std::size_t i = 0; i < q.size(); ++i) qb[i] = kernels::to_bf16(float(q[i])), qr[i] = bf16 ? kernels::from_bf16(qb[i]) : double(q[i]);
    for (std::size_t i = 0; i < k.size(); ++i) kb[i] = kernels::to_bf16(float(k[i])), kr[i] = bf16 ? kernels::from_bf16(kb[i]) : double(k[i]);
    std::vector<T> p(F * n * m, T(7)), gq(q.size()), gk(k.size()), scratch(n * m);
    op_io<T, 2> io;
    io.y = view{p.data(), ps};
    io.x[0] = view{q.data(), qs};
    io.x[1] = view{k.data(), ks};
    if constexpr (std::is_same_v<T, float>)
        if (bf16) io.xb = {qb.data(), kb.data()};
    io.run.bf16 = bf16;
    io.gy = view{gp.data(), ps};
    io.gx = {view{gq.data(), qs}, view{gk.data(), ks}};
    io.scratch = view{scratch.data(), rshape{1, {n * m}}};
    op::template forward<T>(io);
    // The reference.
    std::vector<double> sc(F * n * m, 0.0);
    for (std::size_t f = 0; f < F; ++f)
        for (std::size_t i = 0; i < n; ++i)
            for (std::size_t j = 0; j < m; ++j) {
                const double *qi = qr.data() + (f * n + i) * d, *kj = kr.data() + (f * m + j) * d;
                double acc = 0;
                for (std::size_t t = 0; t < d; ++t) acc += qi[t] * kj[t];
                sc[(f * n + i) * m + j] = 0.25 * acc;
            }
    const long long offset = (long long)m - (long long)n;
    const auto pr = testing::attn::reference_weights(sc, F, n, m, [&](std::size_t, std::size_t i, std::size_t j) {
        return visible((long long)i + offset, (long long)j);
    });
    std::vector<double> gqr(q.size(), 0.0), gkr(k.size(), 0.0);
    for (std::size_t f = 0; f < F; ++f)
        for (std::size_t i = 0; i < n; ++i) {
            const std::size_t row = (f * n + i) * m;
            double dot = 0;
            for (std::size_t j = 0; j < m; ++j) dot += double(gp[row + j]) * pr[row + j];
            for (std::size_t j = 0; j < m; ++j) {
                const double gs = 0.25 * pr[row + j] * (double(gp[row + j]) - dot);
                const double *qi = qr.data() + (f * n + i) * d, *kj = kr.data() + (f * m + j) * d;
                double *gqi = gqr.data() + (f * n + i) * d, *gkj = gkr.data() + (f * m + j) * d;
                for (std::size_t t = 0; t < d; ++t) {
                    gqi[t] += gs * kj[t];
                    gkj[t] += gs * qi[t];
                }
            }
        }
    const auto scale = [](const std::vector<double>& v) {
        double s = 0;
        for (double x : v) s = std::max(s, std::abs(x));
        return s;
    };
    // The largest difference and where: float runs exp and the sums in float (P); bf16 products round
    // gS too (gQ, gK).
    const auto worst = [](const auto& got, const std::vector<double>& want, double base) {
        std::pair<double, std::size_t> w{0.0, 0};
        for (std::size_t i = 0; i < want.size(); ++i) w = std::max(w, std::pair{std::abs(double(got[i]) - base - want[i]), i});
        return w;
    };
    const double rel = bf16 ? 1e-2 : std::is_same_v<T, float> ? 1e-5 : 1e-12;
    const auto wp = worst(p, pr, 0.0);
    INFO("P element " << wp.second);
    REQUIRE(wp.first <= (std::is_same_v<T, float> ? 1e-5 : 1e-14));
    // Fresh adjoints, then accumulated onto ones: rows and keys the mask hides get 0, then keep 1.
    for (const bool fresh : {true, false}) {
        INFO((fresh ? "fresh" : "accumulated"));
        const double base = fresh ? 0.0 : 1.0;
        std::fill(gq.begin(), gq.end(), fresh ? T(-5) : T(1));
        std::fill(gk.begin(), gk.end(), fresh ? T(-5) : T(1));
        io.assign = {fresh, fresh};
        op::template backward<T>(io);
        const auto wq = worst(gq, gqr, base), wk = worst(gk, gkr, base);
        INFO("gQ element " << wq.second << ", gK element " << wk.second);
        REQUIRE(wq.first <= rel * scale(gqr));
        REQUIRE(wk.first <= rel * scale(gkr));
    }
    CHECK(scale(gqr) > 0);
    check_values_on_blocks<T, Mask>(visible, bf16, n, m, p);
}

template <class T>
void check_visible_blocks_all(bool bf16) {
    const std::pair<std::size_t, std::size_t> sizes[] = {{70, 70}, {200, 200}, {1100, 1100}, {130, 300}, {300, 130}};
    for (const auto& [n, m] : sizes) {
        INFO("n " << n << ", m " << m);
        check_visible_blocks<T, causal>([](long long p, long long j) { return j <= p; }, bf16, n, m);
        check_visible_blocks<T, local_window<40>>([](long long p, long long j) { return std::abs(j - p) <= 40; }, bf16, n, m);
        check_visible_blocks<T, local_window<100, window::past>>([](long long p, long long j) { return p - 100 <= j && j <= p; }, bf16, n, m);
        check_visible_blocks<T, no_mask>([](long long, long long) { return true; }, bf16, n, m);
    }
}
}  // namespace

TEST_CASE("attention's products on the blocks a mask leaves visible equal float64 sums over all keys", "[bf16][attention]") {
    check_visible_blocks_all<double>(false);
    engine_scope restore;
    for (const kernels::bf16_engine engine : runnable_engines()) {
        kernels::set_bf16_engine(engine);
        INFO(kernels::bf16_engine_name(engine));
        check_visible_blocks_all<float>(true);
    }
    check_visible_blocks_all<float>(false);
}
