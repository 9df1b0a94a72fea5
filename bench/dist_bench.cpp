// dist-bench: data-parallel training steps over MPI (ctgraph/dist.hpp), overlapped against one
// all-reduce after backward. Run under mpirun, one OpenBLAS thread per rank:
//
//   OPENBLAS_NUM_THREADS=1 mpirun -np 2 bench/dist-bench [--model NAME|all] [--rounds R] [--steps N]
//                                                        [--bucket-kb K,K,...] [--batch B] [--allreduce]
//
// For each model (mlp-wide, gpt-s, gpt-m, and gpt2: GPT-2 small's 124 M parameters at batch 4 x 128,
// only when named; each rank its own batch, --batch B instead of each model's), in R rounds of N steps per mode
// (the modes interleaved, so that a slow moment of the machine hits them alike), rank 0 prints the
// median of:
//   forward, backward    this rank alone (no communication)
//   all-reduce           the whole gradient, blocking, alone
//   local                train_step without any communication (what the step would cost for free)
//   blocking             data_parallel{.overlap = false}: backward, then one all-reduce, then the update
//   overlap K KB         data_parallel with buckets of K KB started from backward (a repeat's
//                        stacked parameters in layers' rows, final layer by layer)
//   whole K KB           the same with buckets of whole parameters (data_parallel made from the
//                        store: a stacked parameter is final after the whole repeat's backward)
// with the exposed communication (time in MPI_Wait*/the blocking all-reduce after backward) and the
// time inside the MPI calls that start and progress the reductions during backward.
// --allreduce times MPI_Allreduce of 4 KB .. 64 MB (float32) for the cost model (docs/scaling.md).
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <random>
#include <sstream>
#include <string>
#include <vector>

#include <ctgraph/ctgraph.hpp>
#include <ctgraph/train.hpp>
#include <ctgraph/dist.hpp>

using namespace ctg;

namespace {

inline constexpr dim B = dyn('B'), T = dyn('T');
using clock_type = std::chrono::steady_clock;
double ms_since(clock_type::time_point t0) { return std::chrono::duration<double, std::milli>(clock_type::now() - t0).count(); }
double median(std::vector<double> v) {
    if (v.empty()) return 0;
    std::sort(v.begin(), v.end());
    return v.size() % 2 ? v[v.size() / 2] : 0.5 * (v[v.size() / 2 - 1] + v[v.size() / 2]);
}

// A wide MLP: much gradient for little compute (each layer's parameters final one after another).
auto mlp_wide_loss() {
    auto h1 = relu(input<"x", B, 1024>{} * param<"W1", 1024, 2048>{} + param<"b1", 2048>{});
    auto h2 = relu(h1 * param<"W2", 2048, 2048>{} + param<"b2", 2048>{});
    auto h3 = relu(h2 * param<"W3", 2048, 1024>{} + param<"b3", 1024>{});
    return softmax_cross_entropy(h3 * param<"W4", 1024, 10>{} + param<"b4", 10>{}, index_input<"y", B>{});
}
// ctg-bench's gpt-s and gpt-m (nn::gpt: the blocks are one repeat over stacked parameters).
using gpt_s = nn::gpt<65, 64, 128, 4, 2>;
using gpt_m = nn::gpt<65, 256, 384, 6, 4>;
using gpt2_small = nn::gpt2<50257, 1024, 768, 12, 12>;  // the tied head: 124 M parameters
auto gpt_s_loss() { return gpt_s::loss(index_input<"x", B, T>{}, index_input<"y", B, T>{}); }
auto gpt_m_loss() { return gpt_m::loss(index_input<"x", B, T>{}, index_input<"y", B, T>{}); }
auto gpt2_loss() { return gpt2_small::loss(index_input<"x", B, T>{}, index_input<"y", B, T>{}); }

template <class P>
void feed_mlp(P& p, std::size_t batch, unsigned seed) {
    std::mt19937_64 rng(seed);
    std::normal_distribution<float> n01;
    std::vector<float> x(batch * 1024);
    std::vector<index_t> y(batch);
    for (auto& v : x) v = n01(rng);
    for (auto& v : y) v = index_t(rng() % 10);
    p.feed("x", x.data(), rshape{2, {batch, 1024}});
    p.feed("y", y.data(), rshape{1, {batch}});
}
template <class P>
void feed_tokens(P& p, std::size_t batch, std::size_t len, unsigned seed, unsigned vocab = 65) {
    std::mt19937_64 rng(seed);
    std::vector<index_t> x(batch * len), y(batch * len);
    for (auto& v : x) v = index_t(rng() % vocab);
    for (auto& v : y) v = index_t(rng() % vocab);
    p.feed("x", x.data(), rshape{2, {batch, len}});
    p.feed("y", y.data(), rshape{2, {batch, len}});
}

struct bench_options {
    std::string model = "all";
    int rounds = 5, steps = 4;
    std::vector<std::size_t> bucket_kb{1024};
    bool allreduce = false;
    std::size_t batch = 0;  // per rank; 0: each model's own
};

template <class Loss, class Feed>
void bench_model(const dist::communicator& comm, const bench_options& o, const char* name, Loss loss, std::size_t batch, Feed feed) {
    if (o.batch) batch = o.batch;
    auto prog = compile<float>(loss);
    prog.params().init(1);
    feed(prog, batch, unsigned(17 + comm.rank()));
    auto opt = optim::sgd<float>({.lr = 1e-4, .momentum = 0.9});
    const std::size_t global = batch * std::size_t(comm.size());
    const double mb = double(prog.params().grads().size() * sizeof(float)) / 1e6;

    // The modes: the data_parallel steps (the first is the blocking one), then local and alone.
    std::vector<dist::data_parallel<float>> dps;
    dps.emplace_back(comm, prog, dist::parallel_config{.overlap = false});
    for (std::size_t kb : o.bucket_kb) dps.emplace_back(comm, prog, dist::parallel_config{.bucket_bytes = kb * 1024});
    for (std::size_t kb : o.bucket_kb)
        dps.emplace_back(comm, prog.shared_params(), dist::parallel_config{.bucket_bytes = kb * 1024});
    std::vector<std::vector<double>> step_ms(dps.size()), wait_ms(dps.size()), start_ms(dps.size());
    std::vector<double> local_ms, fwd_ms, bwd_ms, reduce_ms;
    for (auto& dp : dps) dp(prog, opt, 0.0, global);  // warm-up (and the optimizer's state)
    train_step(prog, opt);
    for (int r = 0; r < o.rounds; ++r) {
        for (std::size_t m = 0; m < dps.size(); ++m)
            for (int s = 0; s < o.steps; ++s) {
                comm.barrier();
                const double w0 = dps[m].statistics().wait_seconds, s0 = dps[m].statistics().start_seconds;
                const auto t0 = clock_type::now();
                dps[m](prog, opt, 0.0, global);
                step_ms[m].push_back(ms_since(t0));
                wait_ms[m].push_back(1e3 * (dps[m].statistics().wait_seconds - w0));
                start_ms[m].push_back(1e3 * (dps[m].statistics().start_seconds - s0));
            }
        for (int s = 0; s < o.steps; ++s) {
            comm.barrier();
            auto t0 = clock_type::now();
            train_step(prog, opt);
            local_ms.push_back(ms_since(t0));
            comm.barrier();
            prog.zero_grad();
            t0 = clock_type::now();
            prog.forward();
            fwd_ms.push_back(ms_since(t0));
            t0 = clock_type::now();
            prog.backward();
            bwd_ms.push_back(ms_since(t0));
            comm.barrier();
            t0 = clock_type::now();
            comm.allreduce_sum(prog.params().grads().data(), prog.params().grads().size());
            reduce_ms.push_back(ms_since(t0));
        }
    }
    if (!comm.root()) return;
    std::printf("%s: %.2f M parameters (%.1f MB of float32 gradient), %d ranks x batch %zu; median of %d steps\n", name,
                double(prog.params().num_elements()) / 1e6, mb, comm.size(), batch, o.rounds * o.steps);
    std::printf("  forward %.2f ms, backward %.2f ms, all-reduce of the gradient alone %.2f ms (%.2f GB/s)\n",
                median(fwd_ms), median(bwd_ms), median(reduce_ms), mb / median(reduce_ms));
    std::printf("  %-30s %8.2f ms\n", "local step (no communication)", median(local_ms));
    for (std::size_t m = 0; m < dps.size(); ++m) {
        std::ostringstream label;
        if (m == 0) label << "blocking (one all-reduce)";
        else if (m <= o.bucket_kb.size()) label << "overlap, " << dps[m].buckets() << " x " << o.bucket_kb[m - 1] << " KB";
        else label << "whole, " << dps[m].buckets() << " x " << o.bucket_kb[m - 1 - o.bucket_kb.size()] << " KB";
        std::printf("  %-30s %8.2f ms   exposed communication %6.2f ms, in MPI during backward %6.2f ms\n",
                    label.str().c_str(), median(step_ms[m]), median(wait_ms[m]), median(start_ms[m]));
    }
    std::fflush(stdout);
}

void bench_allreduce(const dist::communicator& comm, int reps) {
    if (comm.root()) std::printf("MPI_Allreduce (sum, float32, in place), %d ranks, median of %d:\n", comm.size(), reps);
    for (std::size_t bytes = 4096; bytes <= (std::size_t(64) << 20); bytes *= 4) {
        std::vector<float> v(bytes / sizeof(float), 1.0f);
        std::vector<double> t;
        for (int i = 0; i < reps + 2; ++i) {
            comm.barrier();
            const auto t0 = clock_type::now();
            comm.allreduce_sum(v.data(), v.size());
            if (i >= 2) t.push_back(ms_since(t0));
        }
        if (comm.root())
            std::printf("  %9.0f KB  %9.3f ms  %6.2f GB/s\n", double(bytes) / 1024, median(t), double(bytes) / 1e6 / median(t));
    }
}

}  // namespace

int main(int argc, char** argv) {
    dist::environment env(argc, argv);
    try {
        const dist::communicator comm = env.world();
        bench_options o;
        for (int i = 1; i < argc; ++i) {
            const std::string a = argv[i];
            auto value = [&]() -> std::string {
                if (i + 1 >= argc) throw error("dist-bench: " + a + " needs a value");
                return argv[++i];
            };
            if (a == "--model") o.model = value();
            else if (a == "--rounds") o.rounds = std::stoi(value());
            else if (a == "--steps") o.steps = std::stoi(value());
            else if (a == "--allreduce") o.allreduce = true;
            else if (a == "--batch") o.batch = std::stoul(value());
            else if (a == "--bucket-kb") {
                o.bucket_kb.clear();
                std::istringstream in(value());
                for (std::string k; std::getline(in, k, ',');) o.bucket_kb.push_back(std::stoul(k));
            } else throw error("dist-bench: unknown option '" + a + "'");
        }
        if (o.allreduce) bench_allreduce(comm, 20);
        auto want = [&](const char* m) { return o.model == "all" || o.model == m; };
        if (want("mlp-wide")) bench_model(comm, o, "mlp-wide", mlp_wide_loss(), 32, [](auto& p, std::size_t b, unsigned s) { feed_mlp(p, b, s); });
        if (want("gpt-s")) bench_model(comm, o, "gpt-s", gpt_s_loss(), 8, [](auto& p, std::size_t b, unsigned s) { feed_tokens(p, b, 64, s); });
        if (want("gpt-m")) bench_model(comm, o, "gpt-m", gpt_m_loss(), 4, [](auto& p, std::size_t b, unsigned s) { feed_tokens(p, b, 256, s); });
        if (o.model == "gpt2")  // (a step of seconds: only when named)
            bench_model(comm, o, "gpt2", gpt2_loss(), 4, [](auto& p, std::size_t b, unsigned s) { feed_tokens(p, b, 128, s, 50257); });
        return 0;
    } catch (const std::exception& e) {
        std::fprintf(stderr, "error: %s\n", e.what());
        return env.fail(2);
    }
}
