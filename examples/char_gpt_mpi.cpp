// The char_gpt demo's model (character-level GPT on data/text) trained data-parallel over MPI
// processes with ctgraph/dist.hpp:
//
//   OPENBLAS_NUM_THREADS=1 mpirun -np 2 build/examples/char_gpt_mpi [--steps N] [--batch B] [--out DIR]
//       [--text FILE] [--eval-every N] [--bucket-kb K] [--no-overlap] [--require NATS]
//
// Every rank builds the same model; rank 0's initial weights are copied to the others. The batch is
// global (default 8, as char_gpt): each step, rank r trains on rows r, r + N, ... of the same
// shuffled batch, the gradients are averaged across ranks (overlapped with backward, bucket by
// bucket), and every rank applies the same AdamW update, so the run is the one-process run with the
// same batch up to rounding. Only rank 0 prints progress and writes DIR/char_gpt.npz (the same
// checkpoint as char_gpt's: `char_gpt generate DIR/char_gpt.npz "prompt"` reads it), the loss CSV and
// PNG. Dropout draws different masks on every rank (its seed is 1 + rank). The validation loss is
// computed over the disjoint windows of the last 10 %, split across the ranks. With --require, exits
// non-zero unless the validation loss ends below NATS.
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <random>
#include <string>
#include <vector>

#include <ctgraph/ctgraph.hpp>
#include <ctgraph/train.hpp>
#include <ctgraph/dist.hpp>

#include "chars.hpp"

using namespace ctg;

namespace {

// char_gpt's model, parameter for parameter (so that its checkpoints are interchangeable).
constexpr int V = chars::vocab, Context = 128, D = 128, Heads = 4, Layers = 3;
using model = nn::gpt<V, Context, D, Heads, Layers, 4 * D, void, 0.1>;
inline constexpr dim B = dyn('B'), T = dyn('T');
constexpr auto loss() { return model::loss(index_input<"tokens", B, T>{}, index_input<"targets", B, T>{}); }

int train(const dist::communicator& comm, int argc, char** argv) {
    std::string out_dir = ".", text_path = CTG_SOURCE_DIR "/data/text/gnu-licenses.txt";
    long steps = 3000, eval_every = 100;
    std::size_t batch = 8, bucket_kb = 1024;
    bool overlap = true;
    double require = 0;
    for (int i = 1; i < argc; ++i) {
        const std::string a = argv[i];
        auto value = [&]() -> std::string {
            if (i + 1 >= argc) throw error("char_gpt_mpi: " + a + " needs a value");
            return argv[++i];
        };
        if (a == "--steps") steps = std::stol(value());
        else if (a == "--batch") batch = std::stoul(value());
        else if (a == "--out") out_dir = value();
        else if (a == "--text") text_path = value();
        else if (a == "--eval-every") eval_every = std::stol(value());
        else if (a == "--bucket-kb") bucket_kb = std::stoul(value());
        else if (a == "--no-overlap") overlap = false;
        else if (a == "--require") require = std::stod(value());
        else throw error("char_gpt_mpi: unknown option '" + a + "'");
    }
    const auto ids = chars::read_text(text_path, 10 * Context, "char_gpt_mpi");
    const std::size_t n_val = ids.size() / 10;
    token_windows train_set({ids.begin(), ids.end() - long(n_val)}, Context),
        val_set({ids.end() - long(n_val), ids.end()}, Context, Context);

    auto prog = compile<float>(loss());
    auto& params = prog.params();
    params.init(11);  // rank 0's weights are the ones that count: data_parallel copies them
    params.init("tok_embed", [](std::mt19937_64& rng, std::size_t) { return float(std::normal_distribution<double>(0, 0.02)(rng)); });
    prog.dropout_seed(1 + std::uint64_t(comm.rank()));
    auto opt = optim::adamw<float>({.lr = 3e-3, .weight_decay = 0.01});
    const char* threads = std::getenv("OPENBLAS_NUM_THREADS");
    if (comm.root())
        std::printf("char_gpt_mpi: %d ranks x %s OpenBLAS thread(s), global batch %zu (%zu per rank), %s, %zu parameters\n",
                    comm.size(), threads ? threads : "?", batch, dist::share(batch, 0, comm.size()),
                    overlap ? ("all-reduce overlapped with backward, buckets of " + std::to_string(bucket_kb) + " KB").c_str()
                            : "one all-reduce after backward",
                    params.num_elements());

    dist::shard my_share(train_set, comm);
    trainer training(prog, opt,
                     {.batch = batch, .epochs = 0, .max_steps = steps, .seed = 3, .clip_norm = 1.0, .eval_every = eval_every,
                      .checkpoint_every = 100, .out_dir = out_dir, .name = "char_gpt", .metric_name = "val"},
                     optim::warmup_cosine_lr{3e-3, 100, steps, 1e-4},
                     dist::data_parallel(comm, prog, {.bucket_bytes = bucket_kb * 1024, .overlap = overlap}));
    const train_report r = training.fit(my_share, val_set, dist::sharded_mean_loss{comm});
    dist::check_in_sync(comm, params);  // the ranks end with the same weights, bit for bit
    if (comm.root()) {
        const auto& st = training.step_policy().statistics();
        std::printf("validation loss %.3f nats/char after %ld steps in %s: %.0f tokens/s; communication not hidden "
                    "by backward: %.2f ms a step\n",
                    r.metric, r.step, clock_text(r.seconds).c_str(), r.samples_per_second * Context,
                    1e3 * st.wait_seconds / double(std::max(1L, st.steps)));
        std::printf("wrote %s (char_gpt generate %s \"prompt\")\n", training.path(".npz").c_str(), training.path(".npz").c_str());
    }
    return require > 0 && !(r.metric < require) ? 1 : 0;
}

}  // namespace

int main(int argc, char** argv) {
    dist::environment env(argc, argv);
    try {
        return train(env.world(), argc, argv);
    } catch (const std::exception& e) {
        std::fprintf(stderr, "error: %s\n", e.what());
        return env.fail(2);
    }
}
