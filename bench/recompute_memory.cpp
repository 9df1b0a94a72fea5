// Memory at full context (issue 28 §4): GPT-2 small's training step at batch 4 x 1024 tokens with
// and without options{.recompute = true}. Peak RSS is the process's: run it under /usr/bin/time -v,
// once per mode (docs/performance.md, "Recomputation at context 1024").
//
//   /usr/bin/time -v build/bench/recompute-memory [--recompute] [--steps 3] [--batch 4] [--threads 2]
//
// The model is nn::gpt2<50257, 1024, 768, 12, 12> (124 M parameters, the tied head), trained by
// train_step with AdamW on random tokens; the first step (planning, page faults) is timed apart.
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <ctime>
#include <random>
#include <string>
#include <vector>

#include <ctgraph/ctgraph.hpp>
#include <ctgraph/xtensor.hpp>
#include <ctgraph/nn/gpt2.hpp>
#include <ctgraph/train.hpp>

using namespace ctg;

namespace {
// The process's CPU time (all threads): less disturbed than the wall clock when other work shares the cores.
double cpu_seconds() {
    timespec ts{};
    clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &ts);
    return double(ts.tv_sec) + 1e-9 * double(ts.tv_nsec);
}
inline constexpr dim B = dyn('B'), T = dyn('T');
using Tok = index_input<"tokens", B, T>;
using Tgt = index_input<"targets", B, T>;
constexpr int V = 50257, Ctx = 1024;
using model = nn::gpt2<V, Ctx, 768, 12, 12>;

template <options Opt>
int run(int steps, std::size_t batch) {
    auto prog = compile<float, Opt>(model::loss(Tok{}, Tgt{}));
    prog.params().init(1);
    const model_summary s = prog.summary({{'B', batch}, {'T', std::size_t(Ctx)}});
    std::printf("%s", s.to_string().c_str());
    auto opt = optim::adamw<float>({.lr = 1e-4, .weight_decay = 0.01});
    std::mt19937 gen(7);
    std::uniform_int_distribution<int> id(0, V - 1);
    xt::xtensor<int, 2> tok = xt::zeros<int>({batch, std::size_t(Ctx)});
    std::vector<double> times, cpu;
    for (int step = 0; step <= steps; ++step) {
        for (std::size_t i = 0; i < tok.size(); ++i) tok.data()[i] = id(gen);
        prog.template feed<"tokens">(tok);
        prog.template feed<"targets">(tok);
        const auto t0 = std::chrono::steady_clock::now();
        const double c0 = cpu_seconds();
        const float loss = train_step(prog, opt, 1.0);
        const double sec = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
        const double csec = cpu_seconds() - c0;
        std::printf("step %d: loss %.4f, %.2f s (CPU %.2f s)%s\n", step, double(loss), sec, csec,
                    step == 0 ? " (first: planning, page faults)" : "");
        std::fflush(stdout);
        if (step > 0) times.push_back(sec), cpu.push_back(csec);
    }
    std::sort(times.begin(), times.end());
    std::sort(cpu.begin(), cpu.end());
    const double median = times.empty() ? 0 : times[times.size() / 2];
    const double median_cpu = cpu.empty() ? 0 : cpu[cpu.size() / 2];
    std::printf("recompute %s, batch %zu x %d, %d threads: median step %.2f s (CPU %.2f s) over %zu; arena %.0f MiB\n",
                Opt.recompute ? "on" : "off", batch, Ctx, num_threads(), median, median_cpu, times.size(),
                double(prog.arena_elements() * sizeof(float)) / (1 << 20));
    return 0;
}
}  // namespace

int main(int argc, char** argv) {
    bool recompute = false;
    int steps = 3, threads = 2;
    std::size_t batch = 4;
    for (int a = 1; a < argc; ++a) {
        const std::string arg = argv[a];
        if (arg == "--recompute") recompute = true;
        else if (arg == "--steps" && a + 1 < argc) steps = std::atoi(argv[++a]);
        else if (arg == "--batch" && a + 1 < argc) batch = std::size_t(std::atoi(argv[++a]));
        else if (arg == "--threads" && a + 1 < argc) threads = std::atoi(argv[++a]);
        else {
            std::fprintf(stderr, "usage: recompute-memory [--recompute] [--steps N] [--batch B] [--threads K]\n");
            return 2;
        }
    }
    set_num_threads(threads);
    return recompute ? run<options{.recompute = true}>(steps, batch) : run<options{}>(steps, batch);
}
