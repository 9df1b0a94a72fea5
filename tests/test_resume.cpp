// Resuming a training run the way it is used: a language model (a small GPT with dropout, AdamW,
// warm-up + cosine, clipping, shuffled token windows with a partial last batch, evaluation every 5
// steps, a checkpoint every 7, 40 steps over 3 epochs) trained once without interruption, then
// killed with SIGKILL at every phase (mid-step, during an evaluation, inside each file write, after
// the final checkpoint, during the curve writes, before exit, twice in a row) and resumed until it
// completes: the final checkpoint's every array, the best weights, the history and the curves equal
// the uninterrupted run's bit for bit (but the seconds), and resuming the finished run once more
// changes no file. Also: a configuration mismatch is refused naming the field with nothing changed,
// keep_last and checkpoint::latest, and the temporary files of killed writers.
//
// Each run is a new process (this executable, its hidden test case "[.resume_run]", told what to
// do by environment variables), killed from inside by the test hooks: the data source's feed() and
// binary_file's after_write hook raise SIGKILL at the chosen call.
#include <catch2/catch.hpp>

#include <fcntl.h>
#include <signal.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <map>
#include <set>
#include <sstream>
#include <string>
#include <vector>

#include <ctgraph/ctgraph.hpp>
#include <ctgraph/train.hpp>

extern char** environ;

using namespace ctg;
namespace fs = std::filesystem;

namespace {

inline constexpr dim B = dyn('B'), T = dyn('T');
using small_gpt = nn::gpt<11, 8, 8, 2, 2, 16, void, 0.1>;  // dropout: its generator must resume too
auto lm_loss() { return small_gpt::loss(index_input<"tokens", B, T>{}, index_input<"targets", B, T>{}); }

std::vector<index_t> token_stream(std::size_t n, std::size_t salt) {
    std::vector<index_t> ids(n);
    for (std::size_t i = 0; i < ids.size(); ++i) ids[i] = index_t((i * 7 + i / 5 + salt) % 11);
    return ids;
}

// Token windows whose feed() counts its calls and raises SIGKILL at call `kill_at` (0: never).
struct counted_windows {
    token_windows w;
    long calls = 0, kill_at = 0;
    std::size_t size() const { return w.size(); }
    std::size_t tokens_per_sample() const { return w.tokens_per_sample(); }
    template <class P>
    void feed(P& p, const std::size_t* rows, std::size_t n) {
        if (++calls == kill_at) ::raise(SIGKILL);
        w.feed(p, rows, n);
    }
};

struct lm_config {
    std::size_t batch = 4, keep_last = 0;
    double clip_norm = 0.5, peak_lr = 0.02;
    std::size_t train_tokens = 61;
    long max_steps = 40;
    long patience = 100;  // never stops (the best weights are saved)
    double min_delta = 0;
};

// 55 training windows of 6 tokens in batches of 4: 14 batches an epoch, the last of 3; 40 steps end
// in the 3rd epoch. 11 validation windows (stride 6) in batches of 4: 3 feeds an evaluation.
struct lm_run {
    decltype(compile<float>(lm_loss())) prog = compile<float>(lm_loss());
    optim::adam<float> opt = optim::adamw<float>({.lr = 0.02, .weight_decay = 0.05});
    counted_windows train, val;
    trainer<decltype(prog), optim::adam<float>, optim::warmup_cosine_lr, local_step> training;

    lm_run(const std::string& dir, const lm_config& c = {})
        : train{token_windows(token_stream(c.train_tokens, 0), 6)},
          val{token_windows(token_stream(67, 3), 6, 6)},
          training(prog, opt,
                   {.batch = c.batch, .epochs = 3, .max_steps = c.max_steps, .seed = 2, .clip_norm = c.clip_norm,
                    .eval_every = 5, .checkpoint_every = 7, .keep_last = c.keep_last, .out_dir = dir, .name = "lm",
                    .patience = c.patience, .min_delta = c.min_delta, .log = nullptr},
                   optim::warmup_cosine_lr{c.peak_lr, 6, 40, 0.001}) {
        prog.params().init(5);
        prog.dropout_seed(9);
    }
    train_report fit() { return training.fit(train, val); }
};

// ---- the child process

// What kills the child: "feed:<k>" (the k-th training feed), "eval:<k>" (the k-th validation feed),
// "write:<target>:<file>:<call>" (the <call>-th write() chunk of the <file>-th file written whose
// path contains <target>; "@ckpt" stands for the checkpoint's name), "exit" (after fit() returns).
struct kill_plan {
    std::string kind, target;
    long file = 0, call = 0;
    std::string last_path;
    std::size_t last_written = 0;
    long files = 0, calls = 0;
};
kill_plan plan;

void kill_on_write(const std::string& path, std::size_t written) {
    if (path.find(plan.target) == std::string::npos) return;
    // A file begins when the path changes or the byte count starts over (a later save of the same
    // file: its first chunk is smaller than the previous file); a file written in one call (a CSV)
    // written twice with growing sizes would count once, which the phases below do not need.
    if (path != plan.last_path || written <= plan.last_written) ++plan.files, plan.calls = 0;
    plan.last_path = path, plan.last_written = written;
    if (plan.files == plan.file && ++plan.calls == plan.call) ::raise(SIGKILL);
}

std::vector<std::string> split(const std::string& s, char sep) {
    std::vector<std::string> parts;
    std::stringstream in(s);
    for (std::string p; std::getline(in, p, sep);) parts.push_back(p);
    return parts;
}

std::string env_or(const char* name, const std::string& fallback) {
    const char* v = std::getenv(name);
    return v ? v : fallback;
}

}  // namespace

// One run in a new process: resume from the newest checkpoint in $CTG_RUN_DIR if any, train to the
// end, write what it did to $CTG_RUN_DIR.stats (training and validation feeds, the report's step,
// epoch and early stop, checkpoint files written); killed where $CTG_KILL says.
TEST_CASE("resume: one run of the language model", "[.resume_run]") {
    const std::string dir = env_or("CTG_RUN_DIR", "");
    REQUIRE(!dir.empty());
    lm_config c;
    c.keep_last = std::stoul(env_or("CTG_KEEP_LAST", "0"));
    lm_run run(dir, c);
    const auto k = split(env_or("CTG_KILL", ""), ':');
    // Without a write to kill in, the hook counts the checkpoint files written (never file 0's call).
    plan.target = c.keep_last ? "lm-step" : "lm.npz";
    binary_file::detail::after_write = kill_on_write;
    if (!k.empty()) {
        plan.kind = k[0];
        if (plan.kind == "feed") run.train.kill_at = std::stol(k.at(1));
        if (plan.kind == "eval") run.val.kill_at = std::stol(k.at(1));
        if (plan.kind == "write") {
            plan.target = k.at(1) == "@ckpt" ? (c.keep_last ? "lm-step" : "lm.npz") : k.at(1);
            plan.file = std::stol(k.at(2)), plan.call = std::stol(k.at(3));
        }
    }
    run.training.resume_latest();
    const train_report r = run.fit();
    if (plan.kind == "exit") ::raise(SIGKILL);
    std::ofstream(dir + ".stats") << run.train.calls << ' ' << run.val.calls << ' ' << r.step << ' ' << r.epoch << ' '
                                  << r.stopped_early << ' ' << plan.files << '\n';
}

namespace {

// ---- the parent

// Runs this executable's "[.resume_run]" in a new process with the extra environment; its wait status.
int run_child(const std::map<std::string, std::string>& extra, const std::string& log) {
    const std::string exe = fs::read_symlink("/proc/self/exe").string();
    std::vector<std::string> env;
    for (char** e = environ; *e; ++e) env.emplace_back(*e);
    for (const auto& [k, v] : extra) env.push_back(k + "=" + v);
    std::vector<char*> envp, argv{const_cast<char*>(exe.c_str()), const_cast<char*>("[.resume_run]"), nullptr};
    for (auto& e : env) envp.push_back(e.data());
    envp.push_back(nullptr);
    const int fd = ::open(log.c_str(), O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0644);
    REQUIRE(fd >= 0);
    const pid_t pid = ::fork();
    REQUIRE(pid >= 0);
    if (pid == 0) {  // only async-signal-safe calls until exec
        ::dup2(fd, 1), ::dup2(fd, 2);
        ::execve(exe.c_str(), argv.data(), envp.data());
        ::_exit(127);
    }
    ::close(fd);
    int status = 0;
    ::waitpid(pid, &status, 0);
    return status;
}

bool killed(int status) { return WIFSIGNALED(status) && WTERMSIG(status) == SIGKILL; }
bool exited_ok(int status) { return WIFEXITED(status) && WEXITSTATUS(status) == 0; }

std::string slurp(const fs::path& p) {
    std::ifstream in(p, std::ios::binary);
    return {std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>()};
}

std::set<std::string> file_names(const fs::path& dir) {
    std::set<std::string> names;
    for (const auto& e : fs::directory_iterator(dir)) names.insert(e.path().filename().string());
    return names;
}

// Every array equal bit for bit, but the seconds: column 5 of run/history and entry 3 of
// run/progress.
void same_checkpoints(const fs::path& a, const fs::path& b) {
    INFO(a.string() << " against " << b.string());
    const auto fa = npz::read(a.string()), fb = npz::read(b.string());
    REQUIRE(fa.size() == fb.size());
    for (const auto& [name, x] : fa) {
        INFO(name);
        REQUIRE(fb.count(name));
        const npz::array& y = fb.at(name);
        CHECK(x.descr == y.descr);
        REQUIRE(x.shape == y.shape);
        if (name == "run/history" || name == "run/progress") {
            const auto u = npz::to_vector<double>(x), v = npz::to_vector<double>(y);
            const std::size_t width = name == "run/history" ? 6 : 4, seconds = width - 1;
            for (std::size_t i = 0; i < u.size(); ++i)
                if (i % width != seconds) CHECK(std::memcmp(&u[i], &v[i], sizeof(double)) == 0);
        } else {
            CHECK(x.bytes == y.bytes);
        }
    }
}

// The CSV without its last column (seconds).
std::vector<std::string> csv_without_seconds(const fs::path& p) {
    std::vector<std::string> rows;
    std::ifstream in(p);
    for (std::string line; std::getline(in, line);) rows.push_back(line.substr(0, line.rfind(',')));
    return rows;
}

// The run in `dir` ended as the uninterrupted one in `whole`.
void same_run(const fs::path& dir, const fs::path& whole) {
    CHECK(file_names(dir) == file_names(whole));  // no temporary left, the same checkpoints kept
    for (const auto& name : file_names(whole)) {
        INFO(name);
        if (name.ends_with(".npz") && name != "lm_best.npz") same_checkpoints(dir / name, whole / name);
        else if (name.ends_with(".csv")) CHECK(csv_without_seconds(dir / name) == csv_without_seconds(whole / name));
        else CHECK(slurp(dir / name) == slurp(whole / name));  // the best weights, the chart
    }
    CHECK(csv_without_seconds(whole / "lm_loss.csv").size() == 9);  // the header, evaluations at 5, 10, .., 40
}

struct file_state {
    std::string bytes;
    fs::file_time_type mtime;
    ino_t inode;
    bool operator==(const file_state&) const = default;
};
std::map<std::string, file_state> dir_state(const fs::path& dir) {
    std::map<std::string, file_state> s;
    for (const auto& e : fs::directory_iterator(dir)) {
        struct stat st {};
        ::stat(e.path().c_str(), &st);
        s[e.path().filename().string()] = {slurp(e.path()), fs::last_write_time(e.path()), st.st_ino};
    }
    return s;
}

// Resumes the finished run in `dir` once more: no step, no evaluation, every file as it was (bytes,
// time, inode: an identical file written anew would have a new inode), the report it ended with.
void resume_finished(const fs::path& dir, std::size_t keep_last, const std::string& log) {
    const auto before = dir_state(dir);
    fs::remove(dir.string() + ".stats");
    REQUIRE(exited_ok(run_child({{"CTG_RUN_DIR", dir.string()}, {"CTG_KEEP_LAST", std::to_string(keep_last)}}, log)));
    CHECK(dir_state(dir) == before);
    std::ifstream stats(dir.string() + ".stats");
    long feeds = -1, evals = -1, step = -1, epoch = -1, stopped = -1, saves = -1;
    stats >> feeds >> evals >> step >> epoch >> stopped >> saves;
    CHECK(feeds == 0);
    CHECK(evals == 0);
    CHECK(step == 40);
    CHECK(epoch == 3);
    CHECK(stopped == 0);
    CHECK(saves == 0);
}

fs::path scratch(const std::string& name) {
    const auto d = fs::temp_directory_path() / ("ctg_resume_" + std::to_string(::getpid()) + "_" + name);
    fs::remove_all(d);
    fs::create_directories(d);
    return d;
}

template <class S>
std::vector<S> values_of(const parameter_store<S>& store) {
    return {store.values().begin(), store.values().end()};
}

}  // namespace

TEST_CASE("a run killed at any phase and resumed ends as the uninterrupted run, bit for bit", "[resume]") {
    const fs::path root = scratch("phases");
    const std::string log = (root / "children.log").string();
    for (const std::size_t keep_last : {std::size_t(0), std::size_t(2)}) {
        INFO("keep_last " << keep_last);
        const fs::path whole = root / ("whole" + std::to_string(keep_last));
        fs::create_directories(whole);
        REQUIRE(exited_ok(run_child({{"CTG_RUN_DIR", whole.string()}, {"CTG_KEEP_LAST", std::to_string(keep_last)}}, log)));
        {  // 40 steps, 160 samples of 55 a epoch; checkpoints at 7, 14, .., 35 and the end, each written once
            std::ifstream stats(whole.string() + ".stats");
            long feeds = -1, evals = -1, step = -1, epoch = -1, stopped = -1, saves = -1;
            stats >> feeds >> evals >> step >> epoch >> stopped >> saves;
            CHECK(feeds == 40);
            CHECK(evals == 8 * 3);  // 8 evaluations of 11 windows in batches of 4
            CHECK(step == 40);
            CHECK(epoch == 3);
            CHECK(saves == 6);
        }
        // keep_last = 0: the one checkpoint; 2: the two newest of steps 7, 14, .., 35 and the final 40
        const std::set<std::string> expected =
            keep_last ? std::set<std::string>{"lm-step00000035.npz", "lm-step00000040.npz", "lm_best.npz", "lm_loss.csv", "lm_loss.png"}
                      : std::set<std::string>{"lm.npz", "lm_best.npz", "lm_loss.csv", "lm_loss.png"};
        REQUIRE(file_names(whole) == expected);
        const auto final_path = checkpoint::latest(whole.string(), "lm");
        REQUIRE(final_path);
        // the calls of one checkpoint save: a local header and the data per array, then the directory
        const long calls = 2 * long(npz::read(*final_path).size()) + 1;
        resume_finished(whole, keep_last, log);

        const std::vector<std::vector<std::string>> phases{
            {"feed:3"},                                  // mid-step before the first checkpoint
            {"feed:15"},                                 // the first step of epoch 2, after the checkpoint at its start
            {"feed:33"},                                 // mid-step in epoch 3
            {"eval:5"},                                  // during the 2nd evaluation (3 batches each)
            {"write:@ckpt:1:1"},                         // inside the first checkpoint's write, its first chunk
            {"write:@ckpt:3:" + std::to_string(calls / 2)},  // half of the checkpoint at step 21
            {"write:@ckpt:6:" + std::to_string(calls)},  // the final checkpoint all in its temporary file, not renamed
            {"write:lm_best:2:2"},                       // inside a write of the best weights
            {"write:lm_loss.csv:1:1"},                   // after the final checkpoint: the CSV in its temporary
            {"write:lm_loss.png:1:1"},                   // the CSV written, the chart in its temporary
            {"exit"},                                    // everything written, before exit
            {"feed:10", "feed:12"},                      // twice in a row: at step 10, then at step 19
            {"write:@ckpt:2:5", "write:@ckpt:1:" + std::to_string(calls)},  // in a save, then in the resumed run's first
        };
        for (std::size_t i = 0; i < phases.size(); ++i) {
            const fs::path dir = root / ("phase" + std::to_string(keep_last) + "_" + std::to_string(i));
            fs::create_directories(dir);
            const std::map<std::string, std::string> env{{"CTG_RUN_DIR", dir.string()},
                                                         {"CTG_KEEP_LAST", std::to_string(keep_last)}};
            for (const std::string& kill : phases[i]) {
                INFO("phase " << i << ": killed at " << kill);
                auto e = env;
                e["CTG_KILL"] = kill;
                REQUIRE(killed(run_child(e, log)));
            }
            INFO("phase " << i << " (" << phases[i][0] << ")");
            REQUIRE(exited_ok(run_child(env, log)));
            same_run(dir, whole);
            resume_finished(dir, keep_last, log);
        }
    }
    fs::remove_all(root);
}

TEST_CASE("a checkpoint of another configuration or data is refused naming the field, and nothing changes", "[resume]") {
    const fs::path dir = scratch("mismatch");
    {
        lm_config c;
        c.max_steps = 12;  // checkpoints at 7 and the end, 12
        lm_run first(dir.string(), c);
        first.fit();
    }
    const std::string path = (dir / "lm.npz").string();
    lm_config batch;
    batch.batch = 5;
    {
        lm_run run(dir.string(), batch);
        const auto weights = values_of(run.prog.params());
        CHECK_THROWS_WITH(run.training.resume(path), Catch::Contains("'" + path + "' was written with batch 4, this trainer has batch 5"));
        CHECK(values_of(run.prog.params()) == weights);
        CHECK(run.opt.steps() == 0);
    }
    lm_config clip;
    clip.clip_norm = 1;
    {
        lm_run run(dir.string(), clip);
        CHECK_THROWS_WITH(run.training.resume(path), Catch::Contains("was written with clip_norm 0.5, this trainer has clip_norm 1"));
    }
    lm_config schedule;
    schedule.peak_lr = 0.03;
    {
        lm_run run(dir.string(), schedule);
        CHECK_THROWS_WITH(run.training.resume(path), Catch::Contains("was written with schedule lr(0)=0.0033333333333333335"));
    }
    lm_config data;
    data.train_tokens = 60;  // one window fewer: checked by fit(), before anything changes
    {
        lm_run run(dir.string(), data);
        const auto weights = values_of(run.prog.params());
        REQUIRE_NOTHROW(run.training.resume(path));
        CHECK_THROWS_WITH(run.fit(), Catch::Contains("was written with train_samples 55, this trainer has train_samples 54"));
        CHECK(values_of(run.prog.params()) == weights);
        CHECK(run.opt.steps() == 0);
        CHECK(run.train.calls == 0);
        CHECK(run.training.history().empty());
    }
    {  // the matching trainer resumes: the weights and the step count are the checkpoint's, nothing trains
        lm_config c;
        c.max_steps = 12;
        lm_run run(dir.string(), c);
        run.training.resume(path);
        const train_report r = run.fit();
        CHECK(r.step == 12);
        CHECK(run.train.calls == 0);
        CHECK(run.opt.steps() == 12);
        CHECK(run.training.history().size() == 3);  // evaluations at 5, 10 and the end, 12
        lm_run fresh(dir.string(), c);
        checkpoint::load_weights(path, fresh.prog.params());
        CHECK(values_of(fresh.prog.params()) == values_of(run.prog.params()));
    }
    {  // a checkpoint without a configuration record (checkpoint::save of a bare run state)
        lm_run run(dir.string());
        checkpoint::save((dir / "bare.npz").string(), run.prog.params(), run.opt, run_state{});
        CHECK_THROWS_WITH(run.training.resume((dir / "bare.npz").string()), Catch::Contains("has no configuration record"));
        CHECK(checkpoint::load((dir / "bare.npz").string(), run.prog.params(), run.opt).config.empty());
    }
    fs::remove_all(dir);
}

TEST_CASE("keep_last keeps the newest step-numbered checkpoints, latest() finds the newest", "[resume]") {
    const fs::path dir = scratch("keep");
    CHECK_FALSE(checkpoint::latest(dir.string(), "lm"));
    lm_config c;
    c.keep_last = 2;
    c.max_steps = 28;  // saves at 7, 14, 21 and the final 28, which is also a multiple of 7: saved once
    plan = {};
    plan.target = "lm-step";
    binary_file::detail::after_write = kill_on_write;  // counts the checkpoint files written
    {
        lm_run run(dir.string(), c);
        CHECK_FALSE(run.training.resume_latest());  // none yet: a fresh run
        run.fit();
    }
    binary_file::detail::after_write = nullptr;
    CHECK(plan.files == 4);
    CHECK(file_names(dir) == std::set<std::string>{"lm-step00000021.npz", "lm-step00000028.npz", "lm_best.npz",
                                                    "lm_loss.csv", "lm_loss.png"});
    CHECK(checkpoint::latest(dir.string(), "lm") == (dir / "lm-step00000028.npz").string());
    CHECK(checkpoint::step_of_file_name("lm-step00000030.npz", "lm") == 30);
    CHECK(checkpoint::step_of_file_name("lm-step30.npz", "lm") == -1);
    CHECK(checkpoint::step_of_file_name("lmx-step00000030.npz", "lm") == -1);
    // a damaged newest file (cut short by a copy) is passed over
    fs::resize_file(dir / "lm-step00000028.npz", 1000);
    CHECK(checkpoint::latest(dir.string(), "lm") == (dir / "lm-step00000021.npz").string());
    // one checkpoint (keep_last = 0) is <name>.npz
    const fs::path single = scratch("single");
    lm_config one;
    one.max_steps = 8;
    {
        lm_run run(single.string(), one);
        run.fit();
    }
    CHECK(checkpoint::latest(single.string(), "lm") == (single / "lm.npz").string());
    CHECK(file_names(single).count("lm.npz"));
    fs::remove_all(dir);
    fs::remove_all(single);
}

TEST_CASE("temporary files of killed writers are removed, those of live ones kept", "[resume]") {
    const fs::path dir = scratch("stale");
    const pid_t dead = ::fork();
    REQUIRE(dead >= 0);
    if (dead == 0) ::_exit(0);
    ::waitpid(dead, nullptr, 0);  // reaped: no such process now
    const long live = long(::getppid());
    auto touch = [&](const std::string& name) { std::ofstream(dir / name) << "partial"; };
    const std::string dead_tmp = "lm.npz.tmp." + std::to_string(dead), live_tmp = "lm.npz.tmp." + std::to_string(live);
    touch(dead_tmp), touch(live_tmp), touch("lm_loss.csv.tmp." + std::to_string(dead)), touch("other.tmp.x");
    CHECK(binary_file::temporary_pid(dead_tmp) == dead);
    CHECK(binary_file::temporary_pid("other.tmp.x") == 0);
    CHECK(binary_file::remove_stale_temporaries(dir.string(), "lm.npz") == 1);  // only that file's
    CHECK(file_names(dir) == std::set<std::string>{live_tmp, "lm_loss.csv.tmp." + std::to_string(dead), "other.tmp.x"});
    touch(dead_tmp);
    {  // the trainer removes its run's before it writes; checkpoint::save its file's
        lm_config c;
        c.max_steps = 3;
        lm_run run(dir.string(), c);
        run.fit();
    }
    const auto names = file_names(dir);
    CHECK_FALSE(names.count(dead_tmp));
    CHECK_FALSE(names.count("lm_loss.csv.tmp." + std::to_string(dead)));
    CHECK(names.count(live_tmp));
    CHECK(names.count("other.tmp.x"));
    CHECK(names.count("lm.npz"));
    touch(dead_tmp);
    parameter_store<double> store;
    store.add("w", rshape{1, {3}});
    optim::sgd<double> opt({.lr = 0.1});
    checkpoint::save((dir / "lm.npz").string(), store, opt, run_state{});
    CHECK_FALSE(file_names(dir).count(dead_tmp));
    fs::remove_all(dir);
}

TEST_CASE("a finished run resumed is not evaluated again, a run stopped early stays stopped", "[resume]") {
    // min_delta 100: only the first evaluation improves; patience 2 stops at the third
    lm_config c;
    c.patience = 2, c.min_delta = 100, c.max_steps = 10;  // evaluations at 5 and 10: one without improvement
    for (const bool stops : {false, true}) {
        INFO((stops ? "stopped early at step 15" : "finished at step 10, one evaluation short of stopping"));
        if (stops) c.max_steps = 40;
        const fs::path dir = scratch(stops ? "stopped" : "patience");
        train_report first;
        {
            lm_run run(dir.string(), c);
            first = run.fit();
        }
        CHECK(first.step == (stops ? 15 : 10));
        CHECK(first.stopped_early == stops);
        const auto before = dir_state(dir);
        lm_run run(dir.string(), c);
        REQUIRE(run.training.resume_latest());
        const train_report r = run.fit();
        CHECK(run.train.calls == 0);  // no step
        CHECK(run.val.calls == 0);    // no evaluation
        CHECK(dir_state(dir) == before);
        CHECK(r.step == first.step);
        CHECK(r.epoch == 2 - !stops);
        CHECK(r.stopped_early == stops);
        CHECK(r.best_step == 5);
        CHECK(std::memcmp(&r.metric, &first.metric, sizeof(double)) == 0);
        CHECK(std::memcmp(&r.train_loss, &first.train_loss, sizeof(double)) == 0);
        CHECK(run.training.history().size() == std::size_t(stops ? 3 : 2));
        const auto counters = npz::read(*checkpoint::latest(dir.string(), "lm"));
        CHECK(npz::to_vector<double>(counters.at("counter/bad_evals")) == std::vector<double>{stops ? 2.0 : 1.0});
        fs::remove_all(dir);
    }
}
