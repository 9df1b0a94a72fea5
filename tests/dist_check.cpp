// Data parallelism over MPI (ctgraph/dist.hpp); ctest runs it under `mpirun -np 2`:
//
//   dist_check equivalence
//       N ranks with global batch N b against one process with batch N b, computed in each rank as a
//       reference (plain train_step / trainer, no MPI): the loss of every step and the weights after
//       K steps agree within 1e-5 (float32) and 1e-12 (float64). A GRU language model (scan) with SGD
//       momentum and AdamW, by hand, overlapped (small buckets: many of them) and blocking; a two-layer
//       GPT (repeat) with SGD momentum through ctg::trainer with dist::shard, partial last batches (one
//       that leaves rank 1 without a sample), the sharded validation loss, and clipping. The ranks'
//       weights end bit-identical; rank 1 writes no file.
//       (Not the GPT with Adam: the gradient of the attention's key bias is zero in exact arithmetic,
//       softmax being shift invariant, and Adam divides the rounding noise left there, 1e-9 in
//       float32, by its own magnitude: any change of summation order moves that bias by ~lr a step.)
//   dist_check mismatch shape|extra
//       rank 1 builds a different model (another hidden size, or one parameter more): every rank must
//       stop with the model_mismatch error, before any step.
#include <unistd.h>

#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <random>
#include <string>
#include <vector>

#include <ctgraph/ctgraph.hpp>
#include <ctgraph/train.hpp>
#include <ctgraph/dist.hpp>

using namespace ctg;

namespace {

inline constexpr dim B = dyn('B'), T = dyn('T');
constexpr int V = 11;

template <int H>
auto gru_loss() {
    using Tok = index_input<"tok", T, B>;
    auto hs = nn::gru<"gru", 6, H>::run(embedding(param<"E", V, 6>{}, Tok{}));
    return softmax_cross_entropy(hs * param<"out", H, V>{} + param<"out_b", V>{}, index_input<"tgt", T, B>{});
}
using small_gpt = nn::gpt<V, 8, 16, 2, 2, 32>;  // no dropout: one process must draw what two draw
auto gpt_loss() { return small_gpt::loss(index_input<"tokens", B, T>{}, index_input<"targets", B, T>{}); }

std::vector<index_t> token_stream(std::size_t n, unsigned seed) {
    std::mt19937_64 rng(seed);
    std::vector<index_t> ids(n);
    for (std::size_t i = 0; i < n; ++i) ids[i] = index_t(i % 3 == 0 ? rng() % V : (ids[i - 1] * 3 + 1) % V);
    return ids;
}

// Disjoint windows of a token stream fed time-major (T, n), for the GRU.
struct time_major_windows {
    std::vector<index_t> ids;
    std::size_t len;
    std::vector<index_t> x, y;
    std::size_t size() const { return (ids.size() - 1) / len; }
    template <class P>
    void feed(P& p, const std::size_t* rows, std::size_t n) {
        x.resize(len * n), y.resize(len * n);
        for (std::size_t k = 0; k < n; ++k)
            for (std::size_t t = 0; t < len; ++t) {
                x[t * n + k] = ids[rows[k] * len + t];
                y[t * n + k] = ids[rows[k] * len + t + 1];
            }
        p.feed("tok", x.data(), rshape{2, {len, n}});
        p.feed("tgt", y.data(), rshape{2, {len, n}});
    }
};

int failures = 0;
void expect(bool ok, const std::string& what) {
    if (!ok) {
        ++failures;
        std::fprintf(stderr, "FAILED: %s\n", what.c_str());
    }
}

template <class S>
double max_diff(const parameter_store<S>& a, const parameter_store<S>& b) {
    double d = 0;
    for (std::size_t i = 0; i < a.values().size(); ++i) d = std::max(d, std::abs(double(a.values()[i]) - double(b.values()[i])));
    return d;
}
template <class S>
constexpr double tolerance = std::is_same_v<S, float> ? 1e-5 : 1e-12;

// The GRU by hand: K steps of dist::data_parallel on this rank's share against train_step on the
// whole batch. Rank 1 starts from other weights: data_parallel copies rank 0's.
template <class S, class MakeOpt>
void gru_by_hand(const dist::communicator& comm, MakeOpt make, dist::parallel_config pc, const std::string& label) {
    const std::size_t per_rank = 4, global = per_rank * std::size_t(comm.size());
    time_major_windows data{token_stream(400, 1), 7, {}, {}};
    auto ref = compile<S>(gru_loss<8>());
    auto prog = compile<S>(gru_loss<8>());
    ref.params().init(3);
    prog.params().init(comm.rank() == 0 ? 3 : 99);
    dist::data_parallel dp(comm, prog, pc);
    dist::shard mine(data, comm);
    auto opt_ref = make(), opt = make();
    std::vector<std::size_t> rows(global);
    double worst_loss = 0;
    for (std::size_t step = 0; step < 8; ++step) {
        for (std::size_t k = 0; k < global; ++k) rows[k] = (step * 13 + k * 7) % data.size();
        data.feed(ref, rows.data(), global);
        const double l_ref = double(train_step(ref, opt_ref));
        mine.feed(prog, rows.data(), global);
        const double l = double(dp(prog, opt, 0.0, global));
        worst_loss = std::max(worst_loss, std::abs(l - l_ref));
    }
    const double w = max_diff(ref.params(), prog.params());
    if (comm.root())
        std::printf("%-44s %zu buckets  loss diff %.2e  weight diff %.2e  (tolerance %.0e)\n", label.c_str(), dp.buckets(),
                    worst_loss, w, tolerance<S>);
    expect(worst_loss <= tolerance<S> && w <= tolerance<S>, label + ": the runs differ");
    expect(max_diff(ref.params(), [&] {  // and the weights did move
               auto fresh = compile<S>(gru_loss<8>());
               fresh.params().init(3);
               return fresh.params();
           }()) > 1e-3,
           label + ": the weights did not move");
    dist::check_in_sync(comm, prog.params());
}

// The GPT through ctg::trainer: the reference trains with batch N b on the whole data, each rank
// with dist::shard and dist::data_parallel; same seed, so the same shuffled batches. accumulate k:
// the ranks take each step's batch as k micro-batches (train_config::accumulate), all-reduced once.
template <class S>
void gpt_trainer(const dist::communicator& comm, std::size_t stream, double clip, const std::string& label,
                 const std::filesystem::path& dir, std::size_t accumulate = 1) {
    const std::size_t global = 4 * std::size_t(comm.size());
    token_windows train(token_stream(stream, 2), 6), val(token_stream(100, 5), 6, 6);
    auto make_opt = [] { return optim::sgd<S>({.lr = 0.1, .momentum = 0.9, .weight_decay = 0.01}); };
    const train_config cfg{.batch = global, .epochs = 2, .seed = 4, .clip_norm = clip, .eval_every = 5, .log = nullptr};

    auto ref = compile<S>(gpt_loss());
    ref.params().init(8);
    auto opt_ref = make_opt();
    train_config ref_cfg = cfg;
    trainer fit_ref(ref, opt_ref, ref_cfg);
    const train_report r_ref = fit_ref.fit(train, val);

    auto prog = compile<S>(gpt_loss());
    prog.params().init(comm.rank() == 0 ? 8 : 1234);
    auto opt = make_opt();
    train_config dist_cfg = cfg;
    dist_cfg.batch = global / accumulate;
    dist_cfg.accumulate = accumulate;
    dist_cfg.out_dir = (dir / ("rank" + std::to_string(comm.rank()))).string();  // only rank 0 may write
    dist_cfg.name = "gpt";
    dist::shard mine(train, comm);
    trainer fit(prog, opt, dist_cfg, keep_lr{}, dist::data_parallel(comm, prog, {.bucket_bytes = 2048}));
    const train_report r = fit.fit(mine, val, dist::sharded_mean_loss{comm});

    double worst = 0;
    const auto& h_ref = fit_ref.history();
    const auto& h = fit.history();
    expect(h.size() == h_ref.size() && r.step == r_ref.step, label + ": different numbers of steps or evaluations");
    for (std::size_t i = 0; i < std::min(h.size(), h_ref.size()); ++i)
        worst = std::max({worst, std::abs(h[i].train_loss - h_ref[i].train_loss), std::abs(h[i].metric - h_ref[i].metric)});
    const double w = max_diff(ref.params(), prog.params());
    if (comm.root() && std::getenv("CTG_DEBUG_DIFF"))  // per parameter, to find what differs
        for (std::size_t s = 0; s < ref.params().size(); ++s) {
            double d = 0, g = 0;
            for (std::size_t i = 0; i < ref.params().at(s).shape.size(); ++i)
                d = std::max(d, std::abs(double(ref.params().value(s)[i]) - double(prog.params().value(s)[i]))),
                g = std::max(g, std::abs(double(ref.params().grad(s)[i])));
            std::printf("  %-24s diff %.2e  |grad| %.2e\n", ref.params().at(s).name.c_str(), d, g);
        }
    if (comm.root())
        std::printf("%-44s %zu buckets  %ld steps, last batch %zu  loss diff %.2e  weight diff %.2e\n", label.c_str(),
                    fit.step_policy().buckets(), r.step, train.size() % global, worst, w);
    expect(worst <= tolerance<S> && w <= tolerance<S>, label + ": the runs differ");
    auto fresh = compile<S>(gpt_loss());
    fresh.params().init(8);
    expect(max_diff(fresh.params(), prog.params()) > 1e-3, label + ": the weights did not move");
    dist::check_in_sync(comm, prog.params());
    const bool wrote = std::filesystem::exists(std::filesystem::path(dist_cfg.out_dir) / "gpt.npz");
    expect(wrote == comm.root(), label + (comm.root() ? ": rank 0 wrote no checkpoint" : ": a rank other than 0 wrote files"));
    expect(!std::filesystem::exists(dist_cfg.out_dir) || comm.root(), label + ": a rank other than 0 made its directory");
}

// The GPT (repeat) by hand, three ways from the same weights on the same batches: blocking; buckets
// of the ranges backward reports (each layer's rows of the stacked parameters, the last layer's
// first), updated layer by layer; buckets of whole parameters (data_parallel made from the store).
// Two ranks add the same two numbers whatever the bucket: the weights must agree bit for bit, and
// the layer buckets must be more (smaller, layer-sized) than the whole-parameter ones.
template <class S, class MakeOpt>
void gpt_schemes(const dist::communicator& comm, MakeOpt make, const std::string& label) {
    const std::size_t global = 3 * std::size_t(comm.size());
    token_windows data(token_stream(200, 3), 6);
    std::vector<std::vector<S>> weights;
    std::vector<std::size_t> buckets;
    for (int scheme = 0; scheme < 3; ++scheme) {
        auto prog = compile<S>(gpt_loss());
        prog.params().init(6);
        const dist::parallel_config pc{.bucket_bytes = 64 * sizeof(S), .overlap = scheme != 0};
        auto dp = scheme == 2 ? dist::data_parallel<S>(comm, prog.shared_params(), pc) : dist::data_parallel<S>(comm, prog, pc);
        dist::shard mine(data, comm);
        auto opt = make();
        std::vector<std::size_t> rows(global);
        for (std::size_t step = 0; step < 5; ++step) {
            for (std::size_t k = 0; k < global; ++k) rows[k] = (step * 5 + k * 3) % data.size();
            mine.feed(prog, rows.data(), global);
            dp(prog, opt, 0.0, global);
        }
        weights.emplace_back(prog.params().values().begin(), prog.params().values().end());
        buckets.push_back(dp.buckets());
    }
    const bool same = weights[0] == weights[1] && weights[0] == weights[2];
    if (comm.root())
        std::printf("%-44s %zu layer buckets, %zu whole  %s\n", label.c_str(), buckets[1], buckets[2],
                    same ? "bit-identical to blocking" : "DIFFERENT");
    expect(same, label + ": the overlapped weights differ from the blocking ones");
    expect(buckets[1] > buckets[2], label + ": the stacked parameters were not split into layers");
}

int equivalence(const dist::communicator& comm) {
    const auto dir = std::filesystem::temp_directory_path() / ("ctg_dist_check_" + std::to_string(::getpid()));
    std::string d0 = dir.string();  // rank 0's name for the directory, for every rank
    std::uint64_t n = d0.size();
    comm.broadcast(&n, 1);
    d0.resize(n);
    comm.broadcast(d0.data(), n);
    const std::filesystem::path root_dir(d0);

    auto sgd = []<class S>(S) { return optim::sgd<S>({.lr = 0.2, .momentum = 0.9, .weight_decay = 0.01}); };
    auto adamw = []<class S>(S) { return optim::adamw<S>({.lr = 0.01, .weight_decay = 0.05}); };
    gru_by_hand<float>(comm, [&] { return sgd(0.f); }, {.bucket_bytes = 256}, "GRU, SGD momentum, float32, overlapped");
    gru_by_hand<double>(comm, [&] { return sgd(0.); }, {.bucket_bytes = 256}, "GRU, SGD momentum, float64, overlapped");
    gru_by_hand<float>(comm, [&] { return adamw(0.f); }, {.bucket_bytes = 256}, "GRU, AdamW, float32, overlapped");
    gru_by_hand<double>(comm, [&] { return adamw(0.); }, {.bucket_bytes = 256}, "GRU, AdamW, float64, overlapped");
    gru_by_hand<float>(comm, [&] { return adamw(0.f); }, {.overlap = false}, "GRU, AdamW, float32, blocking");
    gru_by_hand<double>(comm, [&] { return adamw(0.); }, {.overlap = false}, "GRU, AdamW, float64, blocking");
    gpt_schemes<float>(comm, [&] { return adamw(0.f); }, "GPT, AdamW, float32, layer buckets");
    gpt_schemes<double>(comm, [&] { return sgd(0.); }, "GPT, SGD momentum, float64, layer buckets");
    // 55 windows: batches of 8 and a last one of 7 (4 + 3); 57 windows: a last batch of 1 (rank 1: 0)
    gpt_trainer<float>(comm, 61, 0, "GPT, SGD momentum, trainer, float32", root_dir);
    gpt_trainer<double>(comm, 61, 0, "GPT, SGD momentum, trainer, float64", root_dir);
    gpt_trainer<float>(comm, 63, 0.5, "GPT, SGD momentum, trainer, clip, float32", root_dir);
    gpt_trainer<double>(comm, 63, 0.5, "GPT, SGD momentum, trainer, clip, float64", root_dir);
    // the same steps as micro-batches of 4 (2 a rank) and 2 x 2 (1 a rank), the last micro-batch shorter
    gpt_trainer<double>(comm, 61, 0, "GPT, SGD, trainer, accumulate 2, float64", root_dir, 2);
    gpt_trainer<float>(comm, 61, 0, "GPT, SGD, trainer, accumulate 2, float32", root_dir, 2);
    gpt_trainer<double>(comm, 63, 0.5, "GPT, SGD, trainer, clip, accumulate 4, float64", root_dir, 4);

    comm.barrier();
    if (comm.root()) std::filesystem::remove_all(root_dir);
    double f = failures;
    comm.allreduce_sum(&f, 1);
    if (comm.root()) std::printf("%s\n", f == 0 ? "dist equivalence: all passed" : "dist equivalence: FAILED");
    return f == 0 ? 0 : 1;
}

// Rank 1 builds another model; data_parallel must throw on every rank before any step.
int mismatch(const dist::communicator& comm, const std::string& kind) {
    auto run = [&](auto prog) {
        if (kind == "extra" && comm.rank() == 1) prog.params().add("extra.bias", rshape{1, {5}});
        prog.params().init(1);
        dist::data_parallel dp(comm, prog);
        time_major_windows data{token_stream(100, 1), 5, {}, {}};
        std::vector<std::size_t> rows{0, 1, 2, 3};
        data.feed(prog, rows.data(), 4);
        auto opt = optim::sgd<float>({.lr = 0.1});
        std::printf("rank %d: step 1 loss %g\n", comm.rank(), double(dp(prog, opt, 0.0, 4)));
    };
    if (kind == "shape" && comm.rank() == 1) run(compile<float>(gru_loss<9>()));
    else run(compile<float>(gru_loss<8>()));
    return 0;
}

}  // namespace

int main(int argc, char** argv) {
    dist::environment env(argc, argv);
    try {
        const dist::communicator comm = env.world();
        const std::string mode = argc > 1 ? argv[1] : "equivalence";
        if (mode == "equivalence") return equivalence(comm);
        if (mode == "mismatch" && argc > 2) return mismatch(comm, argv[2]);
        std::fprintf(stderr, "usage: dist_check equivalence | mismatch shape|extra\n");
        return 2;
    } catch (const std::exception& e) {
        std::fprintf(stderr, "error: %s\n", e.what());
        return env.fail(2);
    }
}
