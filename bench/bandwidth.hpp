// bench/bandwidth.hpp: the machine's memory read bandwidth, the bound of a decoding step that reads
// every weight once: what ctg-bench --rates and ctg-quant-bench report beside their timings.
#pragma once
#include <algorithm>
#include <chrono>
#include <cstddef>
#include <stdexcept>
#include <vector>

#include <xsimd/xsimd.hpp>

#include "ctgraph/kernels/parallel.hpp"
#include "ctgraph/memory.hpp"

namespace ctg::bench {

/// Read bandwidth in GB/s at `threads` threads: 1 GiB of floats (on huge pages where the kernel
/// grants them, as the weights are: ctg::aligned_allocator) summed with SIMD loads into eight
/// independent accumulators, so that neither a dependency chain nor the TLB bounds the pass; the
/// array split among the pool's threads; best of 5 passes after one that faults the pages in.
inline double read_bandwidth_gbps(int threads) {
    using batch = xsimd::batch<float>;
    constexpr std::size_t W = batch::size;
    aligned_vector<float> mem(std::size_t(1) << 28, 1.0f);
    const std::size_t P = std::size_t(std::max(threads, 1)), part = mem.size() / P / (8 * W) * (8 * W);
    std::vector<float> sums(P * 16);  // one cache line per thread
    double best = 0;
    for (int r = 0; r < 6; ++r) {
        const auto t0 = std::chrono::steady_clock::now();
        kernels::thread_pool::instance().run(P, [&](std::size_t p) {
            const float* a = mem.data() + p * part;
            batch acc[8] = {batch(0.0f), batch(0.0f), batch(0.0f), batch(0.0f), batch(0.0f), batch(0.0f), batch(0.0f), batch(0.0f)};
            for (std::size_t i = 0; i < part; i += 8 * W)
                for (std::size_t j = 0; j < 8; ++j) acc[j] += batch::load_aligned(a + i + j * W);
            batch t = acc[0];
            for (std::size_t j = 1; j < 8; ++j) t += acc[j];
            sums[p * 16] = xsimd::hadd(t);
        });
        const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
        double total = 0;
        for (std::size_t p = 0; p < P; ++p) total += sums[p * 16];
        if (total != double(part * P)) throw std::logic_error("read_bandwidth_gbps: the pass summed wrong");
        if (r > 0) best = std::max(best, double(part * P * sizeof(float)) / s / 1e9);
    }
    return best;
}

}  // namespace ctg::bench
