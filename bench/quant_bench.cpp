// ctg-quant-bench: the matrix products of one GPT-2 decoding step (one token, batch 1) with float32,
// int8 and 4-bit weights (kernels/quant.hpp), on every path this CPU runs, against the machine's
// memory read bandwidth measured in the same run.
//
//   ctg-quant-bench [--reps 20] [--layers 12] [--threads 1]
//
// A step's products: per layer x W for the attention's q, k, v (768 x 2304), its projection
// (768 x 768) and the FFN (768 x 3072, 3072 x 768), then the head (768 x 50257): 163 M weights
// (GPT-2 small in nn::gpt's form, untied head), 652 MB in float32. float32 runs kernels::gemm with
// M = 1, what a float decoding step runs; int8 and 4-bit run kernels::gemv_q8 / gemv_q4. Each
// line: the median time of the products of one step, the bytes they read (weights and scales),
// the bandwidth that makes, its fraction of the measured read bandwidth, and the speed-up over
// float32. The memory bound of a format is bytes / bandwidth. One thread unless --threads says
// otherwise, as the decoding figures are (the pool would otherwise share the larger products).
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <functional>
#include <numeric>
#include <random>
#include <string>
#include <vector>

#include "bandwidth.hpp"
#include "ctgraph/kernels/gemm.hpp"
#include "ctgraph/kernels/quant.hpp"

using namespace ctg;
using namespace ctg::kernels;

namespace {
double median_ms(int reps, const std::function<void()>& f) {
    f();  // warm
    std::vector<double> ms;
    for (int r = 0; r < reps; ++r) {
        const auto t0 = std::chrono::steady_clock::now();
        f();
        ms.push_back(std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count());
    }
    std::sort(ms.begin(), ms.end());
    return ms[ms.size() / 2];
}

}  // namespace

int main(int argc, char** argv) {
    int reps = 20, layers = 12, threads = 1;
    for (int i = 1; i + 1 < argc; i += 2) {
        const std::string a = argv[i];
        if (a == "--reps") reps = std::atoi(argv[i + 1]);
        else if (a == "--layers") layers = std::atoi(argv[i + 1]);
        else if (a == "--threads") threads = std::max(1, std::atoi(argv[i + 1]));
    }
    thread_pool::instance().resize(threads);
    const double bw = bench::read_bandwidth_gbps(threads);  // first: its gigabyte on huge pages while memory is unfragmented
    struct shape {
        std::size_t K, N;
    };
    std::vector<shape> shapes;
    for (int l = 0; l < layers; ++l)
        for (shape s : {shape{768, 2304}, shape{768, 768}, shape{768, 3072}, shape{3072, 768}}) shapes.push_back(s);
    shapes.push_back({768, 50257});
    std::mt19937_64 rng(1);
    std::normal_distribution<float> n01(0.0f, 0.02f);
    std::vector<std::vector<float>> w;
    std::vector<q8_matrix> w8;
    std::vector<q4_matrix> w4;
    std::size_t bytes32 = 0, bytes8 = 0, bytes4 = 0, widest = 0;
    for (shape s : shapes) {
        w.emplace_back(s.K * s.N);
        for (float& v : w.back()) v = n01(rng);
        w8.push_back(quantize_q8(w.back().data(), s.K, s.N, s.N));
        w4.push_back(quantize_q4(w.back().data(), s.K, s.N, s.N));
        bytes32 += s.K * s.N * 4, bytes8 += w8.back().bytes(), bytes4 += w4.back().bytes();
        widest = std::max({widest, s.K, s.N});
    }
    std::vector<float> x(widest), y(widest);
    for (float& v : x) v = n01(rng) * 50;
    std::printf("GPT-2 step's products: %zu weight matrices, %.1f M weights; %d thread(s); memory read %.1f GB/s\n", shapes.size(),
                double(bytes32) / 4e6, threads, bw);
    std::printf("%-8s %-12s %10s %10s %9s %8s %9s\n", "weights", "path", "ms/token", "MB read", "GB/s", "% bw", "vs f32");
    const double f32_ms = median_ms(reps, [&] {
        for (std::size_t i = 0; i < shapes.size(); ++i)
            gemm(false, false, 1, shapes[i].N, shapes[i].K, 1.0f, x.data(), shapes[i].K, w[i].data(), shapes[i].N, 0.0f, y.data(),
                 shapes[i].N);
    });
    auto line = [&](const char* fmt, const char* path, double ms, std::size_t bytes) {
        const double gbs = double(bytes) / (ms * 1e6);
        std::printf("%-8s %-12s %10.2f %10.1f %9.1f %8.0f %9.2f\n", fmt, path, ms, double(bytes) / 1e6, gbs, 100 * gbs / bw, f32_ms / ms);
    };
    line("f32", "gemm", f32_ms, bytes32);
    for (quant_path p : all_quant_paths) {
        if (!quant_path_supported(p)) continue;
        const int r = p == quant_path::scalar ? 3 : reps;
        line("int8", std::string(quant_path_name(p)).c_str(), median_ms(r, [&] {
                 for (std::size_t i = 0; i < shapes.size(); ++i) gemv_q8(1, x.data(), shapes[i].K, w8[i], nullptr, y.data(), shapes[i].N, p);
             }), bytes8);
        line("q4", std::string(quant_path_name(p)).c_str(), median_ms(r, [&] {
                 for (std::size_t i = 0; i < shapes.size(); ++i) gemv_q4(1, x.data(), shapes[i].K, w4[i], nullptr, y.data(), shapes[i].N, p);
             }), bytes4);
    }
}
