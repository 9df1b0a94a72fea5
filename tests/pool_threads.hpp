// tests/pool_threads.hpp: sets the kernel pool's size for one test and restores it. (The suite runs
// with OPENBLAS_NUM_THREADS=1, a one-thread pool: tests of threaded paths size it themselves.)
#pragma once
#include <ctgraph/kernels/gemm.hpp>

namespace ctg::testing {
struct pool_threads {
    int before = num_threads();
    explicit pool_threads(int k) { set_num_threads(k); }
    ~pool_threads() { set_num_threads(before); }
    pool_threads(const pool_threads&) = delete;
    pool_threads& operator=(const pool_threads&) = delete;
};
}  // namespace ctg::testing
