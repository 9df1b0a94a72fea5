// ctgraph/train.hpp: the generated training step and a trainer.
//
// train_step(prog, opt): zero_grad, forward, and a backward pass in which each parameter's optimizer
// update runs right after the backward node that completes its gradient (the graph knows which node
// that is at compile time), while the gradient is still in cache, instead of a second pass over every
// parameter. The weights are bit-identical to the hand-written loop
//
//   prog.zero_grad(); prog.forward(); prog.backward(); opt.step(prog.params());
//
// because the optimizer's step() runs the same per-parameter loops. Global-norm clipping needs every
// gradient first, so with clip_norm > 0 the step runs in that plain order.
//
// trainer: epochs over a dataset (shuffled with a seed, the last partial batch included), an
// evaluation program sharing the weights run every N steps, a progress line (redrawn on a terminal,
// plain lines otherwise), train/validation curves as CSV and PNG, checkpoints, a learning-rate
// schedule and early stopping. Everything it calls per step is a template parameter (the schedule,
// the data source, the metric, the hook, the step): no virtual call, no std::function.
//
// The step is a policy (default local_step: train_step in this process, and this process writes the
// files and the progress output); ctg::dist::data_parallel (ctgraph/dist.hpp) is the one that
// averages gradients over MPI processes, where only rank 0 writes.
//
//   ctg::dataset<float> train{{"x", x_train}, {"y", y_train}}, val{{"x", x_val}, {"y", y_val}};
//   ctg::trainer training(prog, opt, {.batch = 64, .epochs = 10, .eval_every = 100, .out_dir = "run"});
//   ctg::train_report r = training.fit(train, val);
//
// Resuming: training.resume(path) or training.resume_latest() before fit(). The checkpoint holds
// the run's position, generators, early-stopping counters, history and a record of its
// configuration; a resumed run gives the weights, history and curves of the uninterrupted run bit
// for bit (but the seconds), wherever it was killed, and a run that had finished trains, evaluates
// and saves nothing. resume() checks the file and the configuration and stages them; fit() checks
// the data sizes and only then applies the checkpoint, so a mismatch (named, with both values)
// changes nothing. The data sources (dataset, token_windows, mean_output) are in ctgraph/data.hpp.
#pragma once
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <climits>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <iterator>
#include <map>
#include <numeric>
#include <optional>
#include <random>
#include <span>
#include <sstream>
#include <string>
#include <tuple>
#include <type_traits>
#include <utility>
#include <vector>

#include "ctgraph/binary_file.hpp"
#include "ctgraph/checkpoint.hpp"
#include "ctgraph/data.hpp"
#include "ctgraph/error.hpp"
#include "ctgraph/npz.hpp"
#include "ctgraph/optim.hpp"
#include "ctgraph/params.hpp"
#include "ctgraph/paths.hpp"
#include "ctgraph/plot.hpp"
#include "ctgraph/tensor.hpp"

namespace ctg {

// ---------------------------------------------------------------------------------------- the step

/// One training step of a program whose first output is a scalar loss; returns the loss. Without
/// clipping (clip_norm = 0) each parameter is updated inside the backward pass, as soon as its
/// gradient is final (a stacked parameter of ctg::repeat layer by layer, when the optimizer updates
/// ranges); with clipping, after the whole backward pass and the clip, which needs every gradient.
template <class Program, class Optimizer>
typename Program::scalar train_step(Program& prog, Optimizer& opt, double clip_norm = 0) {
    return train_step(prog, opt, std::span<const std::size_t>(), [](std::size_t) {}, clip_norm);
}

/// One optimizer step over micro-batches (gradient accumulation): feed(i) feeds micro-batch i, of
/// samples[i] samples, and its gradient is added with weight samples[i] / (their sum), so the step
/// equals one step on the whole batch (the mean loss over every sample, a shorter last micro-batch
/// included). The optimizer's update is fused into the last micro-batch's backward (as
/// train_step's); with clipping, it runs after it, on the accumulated gradient. Returns the mean
/// loss over the samples. An empty `samples`: one batch already fed, weight 1 (train_step).
template <class Program, class Optimizer, class Feed>
typename Program::scalar train_step(Program& prog, Optimizer& opt, std::span<const std::size_t> samples, Feed&& feed,
                                    double clip_norm = 0) {
    using T = typename Program::scalar;
    static_assert(optim::optimizer_for<Optimizer, T>,
                  "ctg::train_step: the optimizer needs begin_step(store), update(store, slot), step(store), set_lr(lr)");
    static_assert(std::is_same_v<decltype(prog.forward()), T>,
                  "ctg::train_step: the program's first output must be a scalar loss");
    std::size_t total = 0;
    for (std::size_t n : samples) total += n;
    if (!samples.empty() && total == 0) throw error("ctg::train_step: the micro-batches hold no sample");
    const std::size_t k = std::max<std::size_t>(1, samples.size());
    auto weight = [&](std::size_t i) { return samples.empty() ? T(1) : T(double(samples[i]) / double(total)); };
    prog.zero_grad();
    parameter_store<T>& store = prog.params();
    double loss = 0;
    for (std::size_t i = 0; i + 1 < k; ++i) {  // every micro-batch but the last: accumulate
        feed(i);
        loss += double(prog.forward()) * double(weight(i));
        prog.backward(weight(i));
    }
    feed(k - 1);
    const T last = prog.forward();
    if (samples.empty()) loss = double(last);  // (the loss as the program computed it, bit for bit)
    else loss += double(last) * double(weight(k - 1));
    if (clip_norm > 0) {
        prog.backward(weight(k - 1));
        optim::clip_grad_norm(store, clip_norm);
        opt.step(store);
    } else if constexpr (optim::range_optimizer_for<Optimizer, T>) {
        opt.begin_step(store);  // (step count and constants once; each element updated once)
        prog.backward_with([&](std::size_t slot, std::size_t first, std::size_t count) { opt.update(store, slot, first, count); },
                           weight(k - 1));
    } else {
        opt.begin_step(store);
        prog.backward_with([&](std::size_t slot) { opt.update(store, slot); }, weight(k - 1));
    }
    return T(loss);
}

/// The trainer's default step policy: train_step() in this process, which writes the trainer's files
/// and progress output. A policy has `loss = policy(prog, opt, clip_norm, samples)` (samples: the
/// batch the trainer fed, the global batch when the data is sharded over processes; returns the
/// batch's mean loss) and `bool writes_output()`.
struct local_step {
    /// One ctg::train_step; returns the batch's mean loss.
    template <class Program, class Optimizer>
    typename Program::scalar operator()(Program& prog, Optimizer& opt, double clip_norm, std::size_t /*samples*/) {
        return train_step(prog, opt, clip_norm);
    }
    /// One ctg::train_step over micro-batches (gradient accumulation; feed(i) feeds micro-batch i).
    template <class Program, class Optimizer, class Feed>
    typename Program::scalar operator()(Program& prog, Optimizer& opt, double clip_norm, std::span<const std::size_t> samples,
                                        Feed&& feed) {
        return train_step(prog, opt, samples, feed, clip_norm);
    }
    bool writes_output() const { return true; }  ///< this process writes files and progress output
};

// ---------------------------------------------------------------------------------------- progress

/// "1:05" from seconds (h:mm:ss from an hour on).
inline std::string clock_text(double seconds) {
    const long s = std::lround(std::max(0.0, seconds));
    char buf[32];
    if (s >= 3600) std::snprintf(buf, sizeof buf, "%ld:%02ld:%02ld", s / 3600, s / 60 % 60, s % 60);
    else std::snprintf(buf, sizeof buf, "%ld:%02ld", s / 60, s % 60);
    return buf;
}

/// A progress line: on a terminal it is redrawn in place (at most ten times a second); otherwise
/// only the permanent lines (print()) appear, so a log file gets one plain line per event.
class progress_line {
public:
    /// Writes to `out` (nullptr: nothing).
    explicit progress_line(std::FILE* out = stdout) : out_(out), terminal_(out && isatty(fileno(out))) {}
    bool terminal() const { return terminal_; }  ///< whether `out` is a terminal
    /// Redraws the transient line (terminal only).
    void draw(const std::string& text) {
        if (!terminal_) return;
        const auto now = std::chrono::steady_clock::now();
        if (drawn_ && now - last_ < std::chrono::milliseconds(100)) return;
        last_ = now;
        std::fprintf(out_, "\r%s\033[K", text.c_str());
        std::fflush(out_);
        drawn_ = true;
    }
    /// A permanent line (replaces the transient one on a terminal).
    void print(const std::string& text) {
        if (!out_) return;
        std::fprintf(out_, "%s%s\n", terminal_ && drawn_ ? "\r\033[K" : "", text.c_str());
        std::fflush(out_);
        drawn_ = false;
    }

private:
    std::FILE* out_;
    bool terminal_;
    bool drawn_ = false;
    std::chrono::steady_clock::time_point last_{};
};

// ---------------------------------------------------------------------------------------- trainer

/// Keeps the optimizer's learning rate (the trainer's default schedule).
struct keep_lr {};

/// Validation metric of the trainer's default: the evaluation program's mean loss over the data.
struct mean_loss {
    /// The mean of `eval`'s loss over every sample of `data`, in batches of `batch`.
    template <class Program, class Data>
    double operator()(Program& eval, Data& data, std::size_t batch) const {
        return mean_output(eval, data, batch);
    }
};

/// No validation data.
struct no_validation {
    std::size_t size() const { return 0; }  ///< no samples
    /// Feeds nothing.
    template <class Program>
    void feed(Program&, const std::size_t*, std::size_t) {}
};

/// What ctg::trainer does: batch size, epochs or steps, shuffling, clipping, evaluation, checkpoints,
/// early stopping, files and progress output. Designated initialisers: `{.batch = 32, .epochs = 30}`.
struct train_config {
    std::size_t batch = 32;        ///< samples per training step (per micro-batch with accumulate > 1)
    /// Gradient accumulation: micro-batches of `batch` samples per optimizer step, so a step sees
    /// batch x accumulate samples (an epoch's last step may hold fewer, and a shorter last
    /// micro-batch); it equals one step on that whole batch (ctg::train_step over micro-batches).
    std::size_t accumulate = 1;
    long epochs = 1;               ///< passes over the training data (0: no limit, then max_steps must be set)
    long max_steps = 0;            ///< stop after this many steps (0: no limit); whichever comes first
    bool shuffle = true;           ///< a new order of the samples every epoch
    bool drop_last = false;        ///< false: the last, smaller batch of an epoch is trained on too
    std::uint64_t seed = 0;        ///< the shuffling
    double clip_norm = 0;          ///< > 0: global-norm clipping (the update then runs after backward)
    long eval_every = 0;           ///< steps between evaluations (0: at the end of every epoch); always at the end
    std::size_t eval_batch = 0;    ///< batch of the evaluation (0: batch)
    long checkpoint_every = 0;     ///< steps between checkpoints (0: only at the end); needs out_dir
    std::size_t keep_last = 0;     ///< 0: one checkpoint `<name>.npz`, overwritten; k > 0: `<name>-step00000042.npz`
                                   ///< per checkpoint, the newest k kept (checkpoint::latest finds the newest)
    std::string out_dir{};         ///< where the checkpoints, `<name>_best.npz` (the best weights, with
                                   ///< patience), `<name>_loss.csv`/`.png` go ("": no files)
    std::string name = "train";    ///< the files' base name
    long patience = 0;             ///< stop after this many evaluations without improvement (0: never)
    double min_delta = 0;          ///< an improvement must exceed this
    bool higher_is_better = false; ///< the validation metric's direction (loss: lower; accuracy: higher)
    std::string metric_name = "val";  ///< the metric's name in the progress lines and the CSV header
    std::FILE* log = stdout;       ///< progress output (nullptr: silent)
};

struct train_report;
/// The trainer's default evaluation hook: nothing.
struct no_eval_hook {
    void operator()(const train_report&) const {}  ///< does nothing
};

/// What fit() reports (also passed to the evaluation hook after every evaluation).
struct train_report {
    /// @{ steps taken; epochs begun
    long step = 0, epoch = 0;
    /// @}
    double train_loss = NAN;      ///< mean training loss since the previous evaluation
    double metric = NAN;          ///< the last validation metric (NaN without validation data)
    double best_metric = NAN;     ///< the best validation metric so far
    long best_step = 0;           ///< the step where it was reached
    double lr = 0;                ///< the learning rate of the last step
    double seconds = 0;           ///< training time (evaluations excluded)
    double samples_per_second = 0;  ///< training throughput
    bool stopped_early = false;   ///< stopped by patience or by the hook
};

/// Trains `prog` with `opt`: see the file comment. The evaluator (`evaluator()`) is a second program
/// of the same type over the same parameter store, in evaluation mode (no dropout). `Step` runs each
/// training step (local_step, or dist::data_parallel across processes); when its writes_output() is
/// false, the trainer writes no file and prints nothing (the other ranks of a distributed run).
template <class Program, class Optimizer, class Schedule = keep_lr, class Step = local_step>
class trainer {
public:
    using T = typename Program::scalar;  ///< the program's scalar type
    static_assert(optim::optimizer_for<Optimizer, T>,
                  "ctg::trainer: the optimizer needs begin_step(store), update(store, slot), step(store), set_lr(lr)");
    static_assert(requires(Step& s, Program& p, Optimizer& o) {
        { s(p, o, 0.0, std::size_t(1)) } -> std::convertible_to<T>;
        { s.writes_output() } -> std::convertible_to<bool>;
    }, "ctg::trainer: the step policy needs loss = step(prog, opt, clip_norm, samples) and writes_output()");

    /// Trains `prog` (held by reference) with `opt` as `cfg` says; `schedule(step)` gives each step's
    /// learning rate (keep_lr: the optimizer's); `step` runs each training step (local_step, or
    /// dist::data_parallel).
    trainer(Program& prog, Optimizer& opt, train_config cfg, Schedule schedule = {}, Step step = {})
        : prog_(prog), opt_(opt), cfg_(std::move(cfg)), schedule_(schedule), step_(std::move(step)),
          writes_(step_.writes_output()), eval_(prog.shared_params()), log_(writes_ ? cfg_.log : nullptr) {
        if (cfg_.batch == 0) throw error("ctg::trainer: the batch size must be positive");
        if (cfg_.epochs < 0 || cfg_.max_steps < 0) throw error("ctg::trainer: epochs and max_steps must not be negative");
        if (cfg_.epochs == 0 && cfg_.max_steps == 0)
            throw error("ctg::trainer: set epochs or max_steps (both 0 would train forever)");
        if (cfg_.checkpoint_every > 0 && cfg_.out_dir.empty())
            throw error("ctg::trainer: checkpoint_every needs out_dir");
        if (cfg_.keep_last > 0 && cfg_.out_dir.empty()) throw error("ctg::trainer: keep_last needs out_dir");
        eval_.training(false);
    }

    /// The evaluation program (shares the weights; dropout off).
    Program& evaluator() { return eval_; }
    /// The step policy (local_step, dist::data_parallel, ...).
    Step& step_policy() { return step_; }

    /// Reads a checkpoint this trainer (same model, optimizer kind, configuration and data) wrote and
    /// checks it: the file, every parameter and optimizer state (names, shapes, dtypes), and the
    /// recorded configuration (every train_config field that defines the run, and the schedule's
    /// learning rate at a few steps). Nothing changes yet: the next fit() checks the data sizes
    /// against the record and only then applies the weights, optimizer state and run state, and goes
    /// on from there, giving the weights and history the uninterrupted run would have given, bit for
    /// bit. A resumed run that had finished trains nothing and writes no checkpoint. Any mismatch
    /// throws ctg::error naming the field and both values ("'run.npz' was written with batch 8, this
    /// trainer has batch 4"); then nothing has changed. Checkpoints without a configuration record
    /// (written by an older ctgraph) are refused; checkpoint::load reads them.
    void resume(const std::string& checkpoint_path) {
        checkpoint::staged<T> s = checkpoint::read(checkpoint_path, prog_.params(), opt_);
        if (s.run.config.empty())
            throw error("ctg::trainer::resume: '" + checkpoint_path +
                        "' has no configuration record (run/config: written by an older ctgraph), so it cannot be "
                        "checked against this trainer; checkpoint::load(path, store, opt) reads its weights and optimizer");
        check_record(s, config_record(), false);  // the data's sizes are checked by fit()
        pending_ = std::move(s);
    }
    /// Resumes (as resume()) from the newest checkpoint of this run in out_dir
    /// (checkpoint::latest(out_dir, name)); false when there is none (a fresh run).
    bool resume_latest() {
        const auto p = checkpoint::latest(cfg_.out_dir, cfg_.name);
        if (!p) return false;
        resume(*p);
        return true;
    }

    /// One row per evaluation: step, epoch, training loss, metric, learning rate, seconds. A resumed
    /// run's history begins with the rows of the run it resumes.
    using row = history_row;
    const std::vector<row>& history() const { return history_; }  ///< every evaluation so far

    /// Trains without validation data.
    template <class Train>
    train_report fit(Train& train) {
        no_validation none;
        return fit(train, none);
    }

    /// Trains; evaluates `metric(evaluator(), val, eval_batch)` (default: the mean loss over val, which
    /// is then a batch_source; a metric of your own may take anything as val) every eval_every steps
    /// and at the end, and calls on_eval(report) after each evaluation (a hook that returns bool stops
    /// training by returning true).
    template <class Train, class Val, class Metric = mean_loss, class OnEval = no_eval_hook>
    train_report fit(Train& train, Val& val, Metric metric = {}, OnEval on_eval = {}) {
        static_assert(batch_source<Train, Program>, "ctg::trainer::fit: the training data needs size() and feed(program, rows, n)");
        static_assert(!std::is_same_v<Metric, mean_loss> || batch_source<Val, Program>,
                      "ctg::trainer::fit: the validation data needs size() and feed(program, rows, n) (or give a metric "
                      "that reads it)");
        constexpr bool validating = !std::is_same_v<Val, no_validation>;
        if (cfg_.batch == 0 || cfg_.accumulate == 0) throw error("ctg::trainer::fit: batch and accumulate must be at least 1");
        // (with accumulation, a step's batch: its micro-batches of cfg_.batch samples each)
        const std::size_t n = train.size(), batch = cfg_.batch * cfg_.accumulate;
        if (n == 0) throw error("ctg::trainer::fit: the training data is empty");
        std::string val_samples = validating ? "unknown" : "none";
        if constexpr (validating && requires { val.size(); }) {
            if (val.size() == 0) throw error("ctg::trainer::fit: the validation data is empty");
            val_samples = std::to_string(val.size());
        }
        if (!validating && cfg_.patience > 0) throw error("ctg::trainer::fit: early stopping (patience) needs validation data");
        const long per_epoch = long(cfg_.drop_last ? n / batch : (n + batch - 1) / batch);
        if (per_epoch == 0)
            throw error("ctg::trainer::fit: drop_last with " + std::to_string(n) + " samples and batch " +
                        std::to_string(batch) + " leaves no batch");
        long total = cfg_.epochs > 0 ? cfg_.epochs * per_epoch : LONG_MAX;
        if (cfg_.max_steps > 0) total = std::min(total, cfg_.max_steps);
        auto record = config_record();
        record["train_samples"] = std::to_string(n);
        record["val_samples"] = val_samples;
        // The schedule at this run's last step; a resumed run compares its own schedule at the
        // recorded step (the end may move: see check_record).
        record["schedule_at_end"] = total == LONG_MAX ? "none" : lr_at(total - 1);

        std::vector<std::size_t> order(n);
        std::iota(order.begin(), order.end(), std::size_t(0));
        std::mt19937_64 rng(cfg_.seed);
        if (pending_) {  // check what depends on the data, before anything changes
            const run_state& run = pending_->run;
            check_record(*pending_, record, true);
            auto corrupt = [&](const std::string& what) {
                throw error("ctg::trainer::resume: '" + pending_->path + "': " + what);
            };
            if (run.order.size() != n)
                corrupt("the epoch's sample order has " + std::to_string(run.order.size()) + " samples, the training data " +
                        std::to_string(n));
            std::vector<bool> seen(n);
            for (std::size_t i = 0; i < n; ++i) {
                const std::int64_t k = run.order[i];
                if (k < 0 || std::size_t(k) >= n || seen[std::size_t(k)]) corrupt("the sample order is not a permutation");
                seen[std::size_t(k)] = true;
                order[i] = std::size_t(k);
            }
            std::istringstream is(run.shuffle_rng);
            is >> rng;
            if (!is) corrupt("the shuffling generator's state is corrupt");
            if (run.step < 0 || run.epoch < 0 || run.batch_in_epoch < 0 ||
                run.batch_in_epoch > per_epoch || (run.epoch == 0 && run.step > 0))
                corrupt("the position (step " + std::to_string(run.step) + ", epoch " + std::to_string(run.epoch) +
                        ", batch " + std::to_string(run.batch_in_epoch) + ") is outside this run");
        }
        if (!cfg_.out_dir.empty() && writes_) {
            if (const std::string why = paths::make_directories(cfg_.out_dir); !why.empty())
                throw io_error("ctg::trainer: cannot use '" + cfg_.out_dir + "' as the output directory: " + why);
            binary_file::remove_stale_temporaries(cfg_.out_dir, cfg_.name);  // of writers killed before
        }

        double tokens_per_sample = 0;
        if constexpr (requires { train.tokens_per_sample(); }) tokens_per_sample = double(train.tokens_per_sample());
        const std::size_t eval_batch = cfg_.eval_batch ? cfg_.eval_batch : cfg_.batch;

        // The position: epoch `e` begun (0: none yet), `done` of its batches trained. A new epoch
        // begins, reshuffled, when the next step is due and the current one is used up.
        train_report r;
        r.best_metric = NAN;
        long e = 0, done = 0, bad_evals = 0;
        double loss_sum = 0, loss_samples = 0, samples_done = 0, seconds_before = 0;
        bool stop = false, evaluated_last = false, finished = false, was_finished = false;
        history_.clear();
        if (pending_) {  // everything is checked: apply the checkpoint
            checkpoint::commit(*pending_, prog_.params(), opt_);
            run_state run = std::move(pending_->run);
            pending_.reset();
            prog_.set_dropout_state(run.dropout_seed, run.dropout_passes);
            r.step = run.step;
            e = run.epoch, done = run.batch_in_epoch;
            auto counter = [&](const char* name, double fallback) {
                const auto it = run.counters.find(name);
                return it == run.counters.end() ? fallback : it->second;
            };
            r.best_metric = counter("best_metric", NAN);
            r.best_step = long(counter("best_step", 0));
            bad_evals = long(counter("bad_evals", 0));
            r.stopped_early = counter("stopped_early", 0) != 0;
            evaluated_last = run.evaluated_last;
            // A run that ended (stopped, or every step done) stays ended unless this trainer's end
            // lies further (more epochs or steps: the run goes on from where it ended).
            was_finished = run.finished && (run.stopped || r.step >= total);
            stop = run.stopped;
            history_ = std::move(run.history);
            loss_sum = run.loss_sum, loss_samples = run.loss_samples, samples_done = run.samples_done;
            seconds_before = run.seconds;
        }
        const auto t0 = std::chrono::steady_clock::now();
        auto seconds = [&] {
            return seconds_before + std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
        };
        // The run's state for a checkpoint.
        auto snapshot = [&] {
            run_.step = r.step;
            run_.epoch = e;
            run_.batch_in_epoch = done;
            run_.order.assign(order.begin(), order.end());
            std::ostringstream os;
            os << rng;
            run_.shuffle_rng = os.str();
            std::tie(run_.dropout_seed, run_.dropout_passes) = prog_.dropout_state();
            run_.counters = {{"best_metric", r.best_metric}, {"best_step", double(r.best_step)},
                             {"bad_evals", double(bad_evals)}, {"stopped_early", r.stopped_early ? 1.0 : 0.0}};
            run_.evaluated_last = evaluated_last;
            run_.finished = finished;
            run_.stopped = stop;
            run_.history = history_;
            run_.loss_sum = loss_sum, run_.loss_samples = loss_samples, run_.samples_done = samples_done;
            run_.seconds = seconds();
            run_.config = record;
        };
        progress_ = progress_line(log_);
        r.epoch = e;

        if (was_finished) {  // a finished run resumed: nothing to train, evaluate or save; the report it ended with
            if (!history_.empty()) {
                const row& last = history_.back();
                r.train_loss = last.train_loss, r.metric = last.metric, r.lr = last.lr;
            }
            r.seconds = seconds_before;
            r.samples_per_second = samples_done / std::max(r.seconds, 1e-9);
            finished = true;
            snapshot();
            run_.seconds = seconds_before;
            // Curves are rewritten only where their bytes differ (a run killed while writing them).
            if (!cfg_.out_dir.empty()) write_curves();
            progress_.print(status(r, total, tokens_per_sample) + "  (the run had finished: nothing to train)");
            return r;
        }

        auto evaluate = [&] {
            r.train_loss = loss_samples > 0 ? loss_sum / loss_samples : NAN;
            loss_sum = loss_samples = 0;
            if constexpr (validating) {
                r.metric = metric(eval_, val, eval_batch);
                const bool better = std::isnan(r.best_metric) ||
                                    (cfg_.higher_is_better ? r.metric > r.best_metric + cfg_.min_delta
                                                           : r.metric < r.best_metric - cfg_.min_delta);
                if (better) {
                    r.best_metric = r.metric;
                    r.best_step = r.step;
                    bad_evals = 0;
                    if (!cfg_.out_dir.empty() && writes_ && cfg_.patience > 0) npz::save(prog_.params(), path("_best.npz"));
                } else if (cfg_.patience > 0 && ++bad_evals >= cfg_.patience) {
                    r.stopped_early = stop = true;
                }
            }
            r.seconds = seconds();
            r.samples_per_second = samples_done / std::max(r.seconds, 1e-9);
            history_.push_back({r.step, r.epoch, r.train_loss, r.metric, r.lr, r.seconds});
            evaluated_last = true;
            progress_.print(status(r, total, tokens_per_sample) + (r.stopped_early ? "  (early stop)" : ""));
            if constexpr (std::is_same_v<decltype(on_eval(r)), bool>) stop = on_eval(r) || stop;
            else on_eval(r);
        };

        while (!stop && r.step < total) {
            if (e == 0 || done == per_epoch) {
                ++e, done = 0;
                if (cfg_.shuffle)
                    for (std::size_t i = n; i > 1; --i) std::swap(order[i - 1], order[rng() % i]);  // Fisher-Yates
            }
            r.epoch = e;
            const std::size_t first = std::size_t(done) * batch, m = std::min(batch, n - first);
            if constexpr (!std::is_same_v<Schedule, keep_lr>) opt_.set_lr(schedule_(r.step));
            r.lr = opt_.lr();
            T loss;
            if (cfg_.accumulate == 1) {
                train.feed(prog_, order.data() + first, m);
                loss = step_(prog_, opt_, cfg_.clip_norm, m);
            } else {  // micro-batches of cfg_.batch samples, the last one what is left
                micro_.clear();
                for (std::size_t at = 0; at < m; at += cfg_.batch) micro_.push_back(std::min(cfg_.batch, m - at));
                auto feed = [&](std::size_t i) { train.feed(prog_, order.data() + first + i * cfg_.batch, micro_[i]); };
                if constexpr (requires { step_(prog_, opt_, 0.0, std::span<const std::size_t>(micro_), feed); })
                    loss = step_(prog_, opt_, cfg_.clip_norm, std::span<const std::size_t>(micro_), feed);
                else
                    throw error("ctg::trainer: the step policy does not accumulate micro-batches (train_config::accumulate)");
            }
            loss_sum += double(loss) * double(m);
            loss_samples += double(m);
            samples_done += double(m);
            ++r.step, ++done;
            evaluated_last = false;
            if (cfg_.eval_every > 0 ? r.step % cfg_.eval_every == 0 : done == per_epoch) {
                evaluate();
            } else if (progress_.terminal()) {
                r.seconds = seconds();
                r.samples_per_second = samples_done / std::max(r.seconds, 1e-9);
                r.train_loss = loss_sum / loss_samples;
                progress_.draw(status(r, total, tokens_per_sample));
            }
            // A checkpoint due at the run's last step (the step count reached, or an evaluation
            // stopped the run) is left to the end of fit(), which writes it once, finished and after
            // the final evaluation: written here too, the same step would be saved twice, the first
            // copy without the end's evaluation.
            if (cfg_.checkpoint_every > 0 && r.step % cfg_.checkpoint_every == 0 && r.step < total && !stop) {
                snapshot();
                save_checkpoint();
            }
        }
        if (!evaluated_last) evaluate();
        finished = true;
        if (!cfg_.out_dir.empty()) {
            snapshot();
            save_checkpoint();
            write_curves();
        }
        r.seconds = seconds();
        return r;
    }

    /// Writes `<name>_loss.csv` and `<name>_loss.png` from the history (fit() does at the end; nothing
    /// when the step policy does not write). Each file is written atomically, and only when its
    /// bytes differ from the file's: curves that are already right keep their file and its time.
    void write_curves() const {
        if (!writes_) return;
        std::ostringstream csv;
        csv << "step,epoch,train_loss," << cfg_.metric_name << ",lr,seconds\n";
        for (const row& h : history_)
            csv << h.step << ',' << h.epoch << ',' << h.train_loss << ',' << h.metric << ',' << h.lr << ',' << h.seconds
                << '\n';
        const std::string text = csv.str();
        write_if_changed(path("_loss.csv"), text.data(), text.size());
        plot::chart c{.title = cfg_.name, .x_label = "step", .y_label = "loss"};
        plot::series tr{"train", {}, {}, {31, 119, 180}}, va{cfg_.metric_name, {}, {}, {214, 39, 40}};
        for (const row& h : history_) {
            if (std::isfinite(h.train_loss)) tr.x.push_back(double(h.step)), tr.y.push_back(h.train_loss);
            if (std::isfinite(h.metric)) va.x.push_back(double(h.step)), va.y.push_back(h.metric);
        }
        if (tr.x.size() < 2 && va.x.size() < 2) return;  // a chart needs a line
        if (tr.x.size() >= 2) c.lines.push_back(tr);
        if (va.x.size() >= 2) c.lines.push_back(va);
        const std::vector<unsigned char> png = plot::png_bytes(c);
        write_if_changed(path("_loss.png"), png.data(), png.size());
    }
    /// Saves the checkpoint of the last step fit() took (weights, optimizer, run), atomically: to
    /// `<out_dir>/<name>.npz` (keep_last = 0), or to `<out_dir>/<name>-step<8 digits>.npz`, then removes
    /// the older step-numbered files of this run beyond the newest keep_last (files of later steps,
    /// from a run resumed from an earlier checkpoint, are left alone). Its parameters are under their
    /// own names: npz::load(store, path, true) and checkpoint::load_weights read them.
    void save_checkpoint() const {
        if (cfg_.out_dir.empty() || !writes_) return;
        if (cfg_.keep_last == 0) {
            checkpoint::save(path(".npz"), prog_.params(), opt_, run_);
            return;
        }
        checkpoint::save(checkpoint_path(run_.step), prog_.params(), opt_, run_);
        std::vector<std::string> older;  // step-numbered files up to this step, oldest first
        for (const auto& [step, file] : checkpoint::step_files(cfg_.out_dir, cfg_.name))
            if (step <= run_.step) older.push_back(file);
        for (std::size_t i = 0; i + cfg_.keep_last < older.size(); ++i) paths::remove_file(older[i]);
    }
    /// `<out_dir>/<name><suffix>`.
    std::string path(const std::string& suffix) const {
        return paths::join(cfg_.out_dir, cfg_.name + suffix);
    }
    /// The step-numbered checkpoint of `step` (keep_last > 0): `<out_dir>/<name>-step00000042.npz`.
    std::string checkpoint_path(long step) const {
        return paths::join(cfg_.out_dir, checkpoint::step_file_name(cfg_.name, step));
    }

private:
    // A number as text that reads back to the same double (shortest round trip). As a double, also
    // for a float learning rate: checkpoints record these texts and resume() compares them.
    static std::string number(double v) { return ctg::detail::shortest_text(v); }
    // The learning rate the step `step` would use.
    std::string lr_at(long step) {
        if constexpr (std::is_same_v<Schedule, keep_lr>) return "constant " + number(opt_.lr());
        else return "lr(" + std::to_string(step) + ")=" + number(double(schedule_(step)));
    }
    // What defines the run, as the checkpoint records it (run/config/...); fit() adds the data's
    // sizes and the schedule's last step. The schedule is compared through its learning rate at a
    // few fixed steps (a functor cannot be compared otherwise).
    std::map<std::string, std::string> config_record() {
        std::map<std::string, std::string> c;
        auto flag = [](bool b) { return std::string(b ? "true" : "false"); };
        c["batch"] = std::to_string(cfg_.batch);
        if (cfg_.accumulate != 1) c["accumulate"] = std::to_string(cfg_.accumulate);  // (absent: 1, as before it existed)
        c["epochs"] = std::to_string(cfg_.epochs);
        c["max_steps"] = std::to_string(cfg_.max_steps);
        c["shuffle"] = flag(cfg_.shuffle);
        c["drop_last"] = flag(cfg_.drop_last);
        c["seed"] = std::to_string(cfg_.seed);
        c["clip_norm"] = number(cfg_.clip_norm);
        c["eval_every"] = std::to_string(cfg_.eval_every);
        c["eval_batch"] = std::to_string(cfg_.eval_batch ? cfg_.eval_batch : cfg_.batch);
        c["checkpoint_every"] = std::to_string(cfg_.checkpoint_every);
        c["patience"] = std::to_string(cfg_.patience);
        c["min_delta"] = number(cfg_.min_delta);
        c["higher_is_better"] = flag(cfg_.higher_is_better);
        std::string schedule;
        for (const long s : {0L, 1L, 2L, 10L, 100L, 1000L})
            if (schedule.empty() || !std::is_same_v<Schedule, keep_lr>) schedule += (schedule.empty() ? "" : " ") + lr_at(s);
        c["schedule"] = schedule;
        return c;
    }
    // Throws naming the first field where the checkpoint's record and this run's differ (with the
    // data known, every field; else those that do not depend on the data). epochs and max_steps are
    // recorded but may differ: they say where the run ends, so a finished run can be extended (or
    // a run ended sooner); the schedule must then agree at the recorded run's last step, which is
    // compared instead of this run's (a cosine schedule over another length differs there).
    void check_record(const checkpoint::staged<T>& s, std::map<std::string, std::string> mine, bool data_known) {
        auto data_field = [](const std::string& f) { return f == "train_samples" || f == "val_samples"; };
        const auto& file = s.run.config;
        for (const char* f : {"epochs", "max_steps"}) mine.erase(f);
        mine.erase("schedule_at_end");
        if (const auto it = file.find("schedule_at_end"); it != file.end()) {
            long end = -1;
            if (std::sscanf(it->second.c_str(), "lr(%ld)=", &end) == 1 && end >= 0) mine["schedule_at_end"] = lr_at(end);
            else mine["schedule_at_end"] = it->second;  // "none", or this trainer's keep_lr record
            if constexpr (std::is_same_v<Schedule, keep_lr>) mine["schedule_at_end"] = lr_at(0);
        }
        for (const auto& [field, value] : mine) {
            if (!data_known && data_field(field)) continue;
            const auto it = file.find(field);
            if (it == file.end())
                throw error("ctg::trainer::resume: '" + s.path + "' does not record " + field + " (this trainer has " +
                            field + " " + value + ")");
            if (it->second != value)
                throw error("ctg::trainer::resume: '" + s.path + "' was written with " + field + " " + it->second +
                            ", this trainer has " + field + " " + value);
        }
        for (const auto& [field, value] : file)
            if (!mine.count(field) && field != "epochs" && field != "max_steps" && (data_known || !data_field(field)))
                throw error("ctg::trainer::resume: '" + s.path + "' records " + field + " " + value +
                            ", which this trainer does not know");
    }
    // Writes the bytes to `file` atomically unless the file holds exactly these bytes already.
    static void write_if_changed(const std::string& file, const void* data, std::size_t n) {
        std::ifstream in(file, std::ios::binary);
        if (in) {
            std::string old((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
            if (old.size() == n && std::memcmp(old.data(), data, n) == 0) return;
        }
        binary_file::write_atomically(file, data, n, "ctg::trainer");
    }
    std::string status(const train_report& r, long total, double tokens_per_sample) const {
        char buf[256];
        const bool bounded = total != LONG_MAX;
        const double rate = tokens_per_sample > 0 ? r.samples_per_second * tokens_per_sample : r.samples_per_second;
        int k = std::snprintf(buf, sizeof buf, "step %6ld", r.step);
        if (bounded) k += std::snprintf(buf + k, sizeof buf - std::size_t(k), "/%ld", total);
        k += std::snprintf(buf + k, sizeof buf - std::size_t(k), "  epoch %ld  loss %.4f", r.epoch, r.train_loss);
        if (!std::isnan(r.metric))
            k += std::snprintf(buf + k, sizeof buf - std::size_t(k), "  %s %.4f", cfg_.metric_name.c_str(), r.metric);
        k += std::snprintf(buf + k, sizeof buf - std::size_t(k), "  %.0f %s/s", rate,
                           tokens_per_sample > 0 ? "tokens" : "samples");
        if (bounded && r.step > 0) {
            const double eta = r.seconds / double(r.step) * double(total - r.step);
            std::snprintf(buf + k, sizeof buf - std::size_t(k), "  ETA %s", clock_text(eta).c_str());
        }
        return buf;
    }

    Program& prog_;
    Optimizer& opt_;
    train_config cfg_;
    Schedule schedule_;
    Step step_;
    bool writes_;
    Program eval_;
    std::FILE* log_;
    progress_line progress_{nullptr};
    std::vector<row> history_;
    std::vector<std::size_t> micro_;  // a step's micro-batch sizes (train_config::accumulate)
    run_state run_{};
    std::optional<checkpoint::staged<T>> pending_;  // a checkpoint resume() read, applied by fit()
};

}  // namespace ctg
