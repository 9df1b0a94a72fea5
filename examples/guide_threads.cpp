// Threads and the cost of a training step, checked: the same MLP trained from the same weights on
// the same batches at 1 thread and at 2 threads (ctg::set_num_threads), timing each step. Exits
// non-zero unless the two runs' losses agree (the first three steps to 1e-5 relative: a product's
// last bits may differ between thread counts; the last to 2 %: the differences compound through
// the updates) and a training step with unchanged sizes allocates no memory at 1 thread. (At 2
// threads the count is printed: where oneDNN runs the products, each thread builds its own oneDNN
// product for a block shape the first time it meets it, which may happen after the warm-up.)
// The times are printed, not checked: they depend on the machine and on what else runs on it.
//
//   guide_threads [steps]      (default 30)
//
// docs/guide/threads-and-performance.md walks through it.
#include <algorithm>
#include <atomic>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <new>
#include <random>
#include <string>
#include <vector>

#include <ctgraph/ctgraph.hpp>
#include <ctgraph/xtensor.hpp>
#include <ctgraph/train.hpp>

// [count]
// Every operator new of this program is counted; ctgraph's own buffers (arena, inputs, parameters,
// optimizer state) are counted by ctg::allocation_count(). Allocations inside oneDNN's calls (its
// argument maps, on CPUs where it runs the products) are its own, not ctgraph's: not counted.
namespace {
std::atomic<long> news{0};
long allocations() { return news.load() + ctg::allocation_count().load(); }
}  // namespace
// [count]
// Under AddressSanitizer, memory its runtime allocated before this replacement took over may come
// back through the free() below: not a bug of the program.
extern "C" const char* __asan_default_options() { return "alloc_dealloc_mismatch=0"; }
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic ignored "-Wmismatched-new-delete"
#endif
void* operator new(std::size_t n) {
    if (!ctg::kernels::inside_onednn()) ++news;
    if (void* p = std::malloc(n ? n : 1)) return p;
    throw std::bad_alloc();
}
void operator delete(void* p) noexcept { std::free(p); }
void operator delete(void* p, std::size_t) noexcept { std::free(p); }

using namespace ctg;

inline constexpr dim B = dyn('B');
constexpr int X = 256, H = 512, C = 10;
constexpr std::size_t batch = 256;

// [model]
constexpr auto loss() {
    auto h1 = relu(input<"x", B, X>{} * param<"W1", X, H>{} + param<"b1", H>{});
    auto h2 = relu(h1 * param<"W2", H, H>{} + param<"b2", H>{});
    return softmax_cross_entropy(h2 * param<"W3", H, C>{} + param<"b3", C>{}, index_input<"y", B>{});
}
// [model]

struct result {
    std::vector<float> losses;
    double ms_per_step;
    long allocations_in_steps;
};

// [train]
result train(int threads, int steps) {
    set_num_threads(threads);  // one pool for the whole process: the caller and threads - 1 workers
    auto prog = compile<float>(loss());
    prog.params().init(1);
    optim::adam<float> opt({.lr = 1e-3});
    std::mt19937_64 rng(2);  // the same batches for every thread count
    std::normal_distribution<float> normal;
    xt::xtensor<float, 2> x = xt::zeros<float>({batch, std::size_t(X)});
    xt::xtensor<index_t, 1> y = xt::zeros<index_t>({batch});
    result r{};
    r.losses.reserve(std::size_t(steps));  // no allocation of ours inside the measured steps either
    long before = 0;
    const auto t0 = std::chrono::steady_clock::now();
    auto t1 = t0;
    for (int step = 0; step < steps; ++step) {
        if (step == 2) {  // the first step plans the arena, the first update sizes Adam's state
            before = allocations();
            t1 = std::chrono::steady_clock::now();
        }
        for (auto& v : x) v = normal(rng);
        for (std::size_t i = 0; i < batch; ++i) y(i) = index_t(std::max(0.0f, x(i, 0) * 3 + 5)) % C;
        prog.feed<"x">(x);
        prog.feed<"y">(y);
        r.losses.push_back(train_step(prog, opt));  // zero_grad, forward, backward with the updates fused
    }
    const auto t2 = std::chrono::steady_clock::now();
    r.allocations_in_steps = allocations() - before;
    r.ms_per_step = std::chrono::duration<double, std::milli>(t2 - t1).count() / (steps - 2);
    return r;
}
// [train]

int main(int argc, char** argv) try {
    const int steps = argc > 1 ? std::stoi(argv[1]) : 30;
    if (steps < 3) throw error("guide_threads: at least 3 steps");
    // [compare]
    const result one = train(1, steps), two = train(2, steps);
    auto difference = [&](std::size_t i) { return std::abs(double(one.losses[i]) - two.losses[i]) / std::abs(double(one.losses[i])); };
    const double first = std::max({difference(0), difference(1), difference(2)}), last = difference(one.losses.size() - 1);
    std::printf("1 thread:  %.2f ms/step, loss %.4f -> %.4f\n", one.ms_per_step, one.losses.front(), one.losses.back());
    std::printf("2 threads: %.2f ms/step, loss %.4f -> %.4f (%.2fx the 1-thread rate)\n", two.ms_per_step,
                two.losses.front(), two.losses.back(), one.ms_per_step / two.ms_per_step);
    std::printf("relative difference between the two runs' losses: %.1e over the first 3 steps, %.1e at the last\n", first,
                last);
    std::printf("allocations during %d steps after the first two: %ld at 1 thread, %ld at 2 threads\n", steps - 2,
                one.allocations_in_steps, two.allocations_in_steps);
    // [compare]
    int failures = 0;
    failures += !(first < 1e-5) + !(last < 0.02);
    failures += one.allocations_in_steps != 0;
    failures += !(one.losses.back() < one.losses.front());
    std::printf("%s\n", failures ? "FAILED" : "all checks passed");
    return failures ? 1 : 0;
} catch (const std::exception& e) {
    std::fprintf(stderr, "error: %s\n", e.what());
    return 2;
}
