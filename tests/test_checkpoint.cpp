// Training checkpoints: exact resume in a new process, a writer killed during a save, checkpoints
// that disagree with the model.
#include <catch2/catch.hpp>

#include <chrono>

#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <set>
#include <string>
#include <vector>

#include <ctgraph/ctgraph.hpp>
#include <ctgraph/train.hpp>

using namespace ctg;

namespace {

inline constexpr dim B = dyn('B'), T = dyn('T');
using small_gpt = nn::gpt<11, 8, 8, 2, 2, 16, void, 0.1>;  // dropout: its generator must resume too
auto lm_loss() { return small_gpt::loss(index_input<"tokens", B, T>{}, index_input<"targets", B, T>{}); }

std::vector<index_t> token_stream() {
    std::vector<index_t> ids(61);
    for (std::size_t i = 0; i < ids.size(); ++i) ids[i] = index_t((i * 7 + i / 5) % 11);
    return ids;
}

std::filesystem::path scratch(const std::string& name) {
    auto d = std::filesystem::temp_directory_path() / ("ctg_ckpt_" + std::to_string(::getpid()) + "_" + name);
    std::filesystem::create_directories(d);
    return d;
}

// Trains the language model up to `steps` steps (55 windows of 6 tokens, batch 4: 14 batches an
// epoch, the last of 3), resuming from dir/lm.npz first when asked; the trainer writes dir/lm.npz at
// the end.
template <class S, class Opt>
void train_lm(const std::string& dir, long steps, bool resume, Opt opt) {
    auto prog = compile<S>(lm_loss());
    prog.params().init(5);
    prog.dropout_seed(9);
    token_windows data(token_stream(), 6);
    trainer training(prog, opt, {.batch = 4, .epochs = 0, .max_steps = steps, .seed = 2, .out_dir = dir, .name = "lm",
                            .log = nullptr});
    if (resume) training.resume(dir + "/lm.npz");
    training.fit(data);
}

template <class S>
void train_lm_with(const std::string& kind, const std::string& dir, long steps, bool resume) {
    if (kind == "sgd") train_lm<S>(dir, steps, resume, optim::sgd<S>({.lr = 0.05, .momentum = 0.9, .weight_decay = 0.01}));
    else train_lm<S>(dir, steps, resume, optim::adamw<S>({.lr = 0.01, .weight_decay = 0.05}));
}

// Every array of the two files (weights, optimizer state, run state) equal bit for bit, but those
// named in `except` (present in both).
void same_files(const std::string& a, const std::string& b, const std::set<std::string>& except = {}) {
    const auto fa = npz::read(a), fb = npz::read(b);
    REQUIRE(fa.size() == fb.size());
    for (const auto& [name, x] : fa) {
        INFO(name);
        if (except.count(name)) {
            CHECK(fb.count(name));
            continue;
        }
        REQUIRE(fb.count(name));
        CHECK(x.descr == fb.at(name).descr);
        CHECK(x.shape == fb.at(name).shape);
        CHECK(x.bytes == fb.at(name).bytes);
    }
}

}  // namespace

// Run by the test below in a new process: resume from $CTG_RESUME_DIR/lm.npz, train to 20 steps.
TEST_CASE("resume child", "[.resume_child]") {
    const char* dir = std::getenv("CTG_RESUME_DIR");
    const char* kind = std::getenv("CTG_RESUME_KIND");
    const char* dtype = std::getenv("CTG_RESUME_DTYPE");
    REQUIRE(dir);
    REQUIRE(kind);
    REQUIRE(dtype);
    if (std::string(dtype) == "float") train_lm_with<float>(kind, dir, 20, true);
    else train_lm_with<double>(kind, dir, 20, true);
}

TEST_CASE("N steps, a checkpoint, N more steps in a new process: the uninterrupted run, bit for bit", "[checkpoint]") {
    for (std::string dtype : {"float", "double"})
        for (std::string kind : {"sgd", "adamw"}) {
            INFO(kind << ", " << dtype);
            const auto whole = scratch("whole_" + kind + dtype), halves = scratch("halves_" + kind + dtype);
            // 20 steps at once; 9 steps (mid-epoch), then 11 more in a child process (across the epoch)
            if (dtype == "float") {
                train_lm_with<float>(kind, whole.string(), 20, false);
                train_lm_with<float>(kind, halves.string(), 9, false);
            } else {
                train_lm_with<double>(kind, whole.string(), 20, false);
                train_lm_with<double>(kind, halves.string(), 9, false);
            }
            const std::string cmd = "CTG_RESUME_DIR='" + halves.string() + "' CTG_RESUME_KIND=" + kind +
                                    " CTG_RESUME_DTYPE=" + dtype + " /proc/" + std::to_string(::getpid()) +
                                    "/exe '[.resume_child]' > '" + halves.string() + "/child.log' 2>&1";
            REQUIRE(std::system(cmd.c_str()) == 0);
            // All but the history and the progress sums: they hold seconds, which differ between any
            // two runs, and the 9-step run's end added an evaluation at step 9 (test_resume.cpp
            // compares the histories of interrupted and uninterrupted runs).
            same_files((whole / "lm.npz").string(), (halves / "lm.npz").string(), {"run/history", "run/progress"});
            // and the runs did train: the weights differ from the 9-step ones
            std::filesystem::remove_all(halves);
            train_lm_with<double>(kind, halves.string(), 9, false);
            CHECK(npz::read((halves / "lm.npz").string()).at("head.weight").bytes !=
                  npz::read((whole / "lm.npz").string()).at("head.weight").bytes);
            std::filesystem::remove_all(whole);
            std::filesystem::remove_all(halves);
        }
}

TEST_CASE("a writer killed during a save leaves the previous checkpoint intact", "[checkpoint]") {
    const auto dir = scratch("kill");
    const std::string path = (dir / "ck.npz").string();
    parameter_store<float> store;
    store.add("a", rshape{2, {512, 1024}});  // 2 MB a copy: a save takes long enough to be cut short
    store.add("b", rshape{1, {1000}});
    auto opt = optim::adam<float>({.lr = 0.1});
    auto fill = [&](float v) {
        std::fill(store.values().begin(), store.values().end(), v);
        std::fill(store.grads().begin(), store.grads().end(), 1.0f);
    };
    fill(0);
    opt.step(store);  // (the optimizer has state to save)
    fill(0);
    // The kill schedule in units of one save's time here (an -O0 build under load saves ten times
    // slower than a Release one alone): from inside the first save to about ten saves later.
    const auto t0 = std::chrono::steady_clock::now();
    checkpoint::save(path, store, opt, run_state{.step = 0});
    const double save_us = std::max(200.0, std::chrono::duration<double, std::micro>(std::chrono::steady_clock::now() - t0).count());
    int cut_short = 0;
    std::set<long> versions;
    for (int k = 0; k < 40; ++k) {
        const pid_t pid = ::fork();
        REQUIRE(pid >= 0);
        if (pid == 0) {  // the writer: versions 1000 k + 1, + 2, ... until killed
            for (int v = 1000 * k + 1;; ++v) {
                fill(float(v));
                checkpoint::save(path, store, opt, run_state{.step = v});
            }
        }
        ::usleep(useconds_t(save_us * (0.2 + 0.25 * k)));  // from inside the first save to many saves later
        ::kill(pid, SIGKILL);
        int status = 0;
        ::waitpid(pid, &status, 0);
        // The file is a whole checkpoint: every value is the version its run state names.
        parameter_store<float> back;
        back.add("a", rshape{2, {512, 1024}});
        back.add("b", rshape{1, {1000}});
        auto opt2 = optim::adam<float>({.lr = 0.1});
        run_state run;
        REQUIRE_NOTHROW(run = checkpoint::load(path, back, opt2));
        const float v = float(run.step);
        versions.insert(run.step);
        bool whole = true;
        for (std::size_t s = 0; s < back.size(); ++s)
            for (std::size_t i = 0; i < back.at(s).shape.size(); ++i) whole = whole && back.value(s)[i] == v;
        CHECK(whole);
        // temporary files of killed writers are what a kill leaves; count the cut-short saves
        for (const auto& f : std::filesystem::directory_iterator(dir))
            if (f.path().filename().string().rfind("ck.npz.tmp", 0) == 0) {
                ++cut_short;
                std::filesystem::remove(f.path());
            }
    }
    INFO("saves cut short by the kill: " << cut_short << " of 40; versions read: " << versions.size());
    CHECK(cut_short > 5);        // the kills did land inside saves
    CHECK(versions.size() > 5);  // and other kills came after whole saves: new versions replaced old ones
    std::filesystem::remove_all(dir);
}

TEST_CASE("a checkpoint that disagrees with the model throws naming the difference, and changes nothing", "[checkpoint]") {
    const auto dir = scratch("disagree");
    const std::string path = (dir / "ck.npz").string();
    parameter_store<double> store;
    store.add("w", rshape{2, {2, 3}});
    store.add("b", rshape{1, {3}});
    store.init(1);
    optim::sgd<double> opt({.lr = 0.1, .momentum = 0.9});
    std::fill(store.grads().begin(), store.grads().end(), 0.5);
    opt.step(store);
    checkpoint::save(path, store, opt, run_state{.step = 7});

    auto unchanged = [](auto& st, auto& o, double fill) {
        for (std::size_t s = 0; s < st.size(); ++s)
            for (std::size_t i = 0; i < st.at(s).shape.size(); ++i)
                if (double(st.value(s)[i]) != fill) return false;
        return o.steps() == 0;
    };
    {  // a shape differs
        parameter_store<double> other;
        other.add("w", rshape{2, {3, 2}});
        other.add("b", rshape{1, {3}});
        optim::sgd<double> o({.lr = 0.1, .momentum = 0.9});
        CHECK_THROWS_WITH(checkpoint::load(path, other, o),
                          Catch::Contains("parameter 'w' has shape (2,3) in the file but (3,2) in the store"));
        CHECK(unchanged(other, o, 0.0));
    }
    {  // the dtype differs
        parameter_store<float> other;
        other.add("w", rshape{2, {2, 3}});
        other.add("b", rshape{1, {3}});
        optim::sgd<float> o({.lr = 0.1, .momentum = 0.9});
        CHECK_THROWS_WITH(checkpoint::load(path, other, o), Catch::Contains("parameter 'w' has dtype <f8 in the file but the store holds <f4"));
        CHECK(unchanged(other, o, 0.0));
    }
    {  // a parameter is missing from the file, or the file has one the store lacks
        parameter_store<double> more;
        more.add("w", rshape{2, {2, 3}});
        more.add("b", rshape{1, {3}});
        more.add("c", rshape{1, {3}});
        optim::sgd<double> o({.lr = 0.1, .momentum = 0.9});
        CHECK_THROWS_WITH(checkpoint::load(path, more, o), Catch::Contains("no array 'c'"));
        CHECK(unchanged(more, o, 0.0));
        parameter_store<double> fewer;
        fewer.add("w", rshape{2, {2, 3}});
        CHECK_THROWS_WITH(checkpoint::load(path, fewer, o), Catch::Contains("parameter 'b' is in the file but not in the store"));
    }
    {  // another optimizer
        parameter_store<double> same;
        same.add("w", rshape{2, {2, 3}});
        same.add("b", rshape{1, {3}});
        auto o = optim::adamw<double>();
        CHECK_THROWS_WITH(checkpoint::load(path, same, o), Catch::Contains("the checkpoint's optimizer is 'sgd', this run's is 'adam'"));
        CHECK(unchanged(same, o, 0.0));
    }
    {  // the matching store loads weights, momentum and step count; load_weights reads the weights only
        parameter_store<double> same;
        same.add("w", rshape{2, {2, 3}});
        same.add("b", rshape{1, {3}});
        optim::sgd<double> o({.lr = 0.1, .momentum = 0.9});
        const run_state run = checkpoint::load(path, same, o);
        CHECK(run.step == 7);
        CHECK(o.steps() == 1);
        CHECK(std::memcmp(same.values().data(), store.values().data(), store.values().size() * sizeof(double)) == 0);
        // one more step from each gives the same weights
        std::fill(same.grads().begin(), same.grads().end(), 0.25);
        std::fill(store.grads().begin(), store.grads().end(), 0.25);
        o.step(same);
        opt.step(store);
        CHECK(std::memcmp(same.values().data(), store.values().data(), store.values().size() * sizeof(double)) == 0);
        parameter_store<double> weights;
        weights.add("w", rshape{2, {2, 3}});
        weights.add("b", rshape{1, {3}});
        checkpoint::load_weights(path, weights);
        CHECK(weights.value(0)[4] == Approx(same.value(0)[4] + 0.1 * (0.25 + 0.9 * 0.5)));
    }
    std::filesystem::remove_all(dir);
}
