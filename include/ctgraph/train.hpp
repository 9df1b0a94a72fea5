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
#pragma once
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <climits>
#include <tuple>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <initializer_list>
#include <limits>
#include <numeric>
#include <random>
#include <sstream>
#include <string>
#include <type_traits>
#include <utility>
#include <vector>

#include <xtensor/xexpression.hpp>

#include "ctgraph/checkpoint.hpp"
#include "ctgraph/error.hpp"
#include "ctgraph/npz.hpp"
#include "ctgraph/optim.hpp"
#include "ctgraph/params.hpp"
#include "ctgraph/plot.hpp"
#include "ctgraph/tensor.hpp"

namespace ctg {

// ---------------------------------------------------------------------------------------- the step

/// One training step of a program whose first output is a scalar loss; returns the loss. Without
/// clipping (clip_norm = 0) each parameter is updated inside the backward pass, as soon as its
/// gradient is final; with clipping, after the whole backward pass and the clip.
template <class Program, class Optimizer>
typename Program::scalar train_step(Program& prog, Optimizer& opt, double clip_norm = 0) {
    using T = typename Program::scalar;
    static_assert(optim::optimizer_for<Optimizer, T>,
                  "ctg::train_step: the optimizer needs begin_step(store), update(store, slot), step(store), set_lr(lr)");
    static_assert(std::is_same_v<decltype(prog.forward()), T>,
                  "ctg::train_step: the program's first output must be a scalar loss");
    prog.zero_grad();
    const T loss = prog.forward();
    parameter_store<T>& store = prog.params();
    if (clip_norm > 0) {
        prog.backward();
        optim::clip_grad_norm(store, clip_norm);
        opt.step(store);
    } else {
        opt.begin_step(store);
        prog.backward_with([&](std::size_t slot) { opt.update(store, slot); });
    }
    return loss;
}

/// The trainer's default step policy: train_step() in this process, which writes the trainer's files
/// and progress output. A policy has `loss = policy(prog, opt, clip_norm, samples)` (samples: the
/// batch the trainer fed, the global batch when the data is sharded over processes; returns the
/// batch's mean loss) and `bool writes_output()`.
struct local_step {
    template <class Program, class Optimizer>
    typename Program::scalar operator()(Program& prog, Optimizer& opt, double clip_norm, std::size_t /*samples*/) {
        return train_step(prog, opt, clip_norm);
    }
    bool writes_output() const { return true; }
};

// ---------------------------------------------------------------------------------------- data

/// What the trainer reads batches from: `size()` samples, and `feed(prog, rows, n)` feeding the
/// samples rows[0..n) to the program's inputs as one batch.
template <class D, class Program>
concept batch_source = requires(D& d, Program& p, const std::size_t* rows, std::size_t n) {
    { d.size() } -> std::convertible_to<std::size_t>;
    d.feed(p, rows, n);
};

/// One named column of a dataset: the values of one program input for every sample, the first axis
/// indexing samples. Integer tensors become index data (token ids, class labels), others scalars.
template <class T>
struct column {
    std::string name;
    bool is_index = false;
    rshape shape{};  // all samples; shape.d[0] is the number of samples
    std::vector<T> values{};
    std::vector<index_t> indices{};

    template <class E>
    column(std::string input_name, const xt::xexpression<E>& e) : name(std::move(input_name)) {
        const auto& d = e.derived_cast();
        if (d.dimension() == 0 || d.dimension() > max_rank)
            throw shape_error("ctg::column '" + name + "': needs rank 1 to " + std::to_string(max_rank) +
                              " (samples first), got rank " + std::to_string(d.dimension()));
        shape.rank = d.dimension();
        for (std::size_t a = 0; a < shape.rank; ++a) shape.d[a] = d.shape()[a];
        is_index = std::is_integral_v<typename E::value_type>;
        std::size_t k = 0;
        if (is_index) {
            indices.resize(shape.size());
            for (auto v : d) {
                const long long id = static_cast<long long>(v);
                if (id < std::numeric_limits<index_t>::min() || id > std::numeric_limits<index_t>::max())
                    throw index_error("ctg::column '" + name + "': element " + std::to_string(k) + " = " +
                                      std::to_string(id) + " does not fit int32");
                indices[k++] = index_t(id);
            }
        } else {
            values.resize(shape.size());
            for (auto v : d) values[k++] = T(v);
        }
    }
    std::size_t samples() const { return shape.d[0]; }
    std::size_t row_size() const { return shape.size() / std::max<std::size_t>(1, shape.d[0]); }
};

/// Samples held in memory as named columns, one per program input: dataset<float> d{{"x", X}, {"y", Y}}.
/// Every column has the same number of samples. feed() gathers the chosen rows into a batch buffer
/// (allocated once, at the largest batch) and feeds the program by input name.
template <class T>
class dataset {
public:
    dataset(std::initializer_list<column<T>> cols) : cols_(cols) {
        if (cols_.empty()) throw error("ctg::dataset: give at least one column");
        for (const auto& c : cols_)
            if (c.samples() != cols_[0].samples())
                throw shape_error("ctg::dataset: column '" + c.name + "' has " + std::to_string(c.samples()) +
                                  " samples but column '" + cols_[0].name + "' has " +
                                  std::to_string(cols_[0].samples()));
        buffers_.resize(cols_.size());
        index_buffers_.resize(cols_.size());
    }

    std::size_t size() const { return cols_[0].samples(); }
    const std::vector<column<T>>& columns() const { return cols_; }

    template <class Program>
    void feed(Program& p, const std::size_t* rows, std::size_t n) {
        for (std::size_t c = 0; c < cols_.size(); ++c) {
            const column<T>& col = cols_[c];
            const std::size_t row = col.row_size();
            rshape s = col.shape;
            s.d[0] = n;
            for (std::size_t k = 0; k < n; ++k)
                if (rows[k] >= col.samples())
                    throw index_error("ctg::dataset::feed: sample " + std::to_string(rows[k]) + " of column '" +
                                      col.name + "' (" + std::to_string(col.samples()) + " samples)");
            if (col.is_index) {
                auto& b = index_buffers_[c];
                if (b.size() < n * row) b.resize(n * row);
                for (std::size_t k = 0; k < n; ++k)
                    std::copy_n(col.indices.data() + rows[k] * row, row, b.data() + k * row);
                p.feed(col.name, static_cast<const index_t*>(b.data()), s);
            } else {
                auto& b = buffers_[c];
                if (b.size() < n * row) b.resize(n * row);
                for (std::size_t k = 0; k < n; ++k) std::copy_n(col.values.data() + rows[k] * row, row, b.data() + k * row);
                p.feed(col.name, static_cast<const T*>(b.data()), s);
            }
        }
    }

private:
    std::vector<column<T>> cols_;
    std::vector<std::vector<T>> buffers_;
    std::vector<std::vector<index_t>> index_buffers_;
};

/// Next-token samples from one token stream: sample i is the window tokens[i*stride, i*stride + len)
/// fed as `input`, and the same window shifted by one token fed as `target`. stride 1 gives every
/// window (training: an epoch sees each start position once, in shuffled order); stride = len gives
/// the disjoint windows (evaluation).
class token_windows {
public:
    token_windows(std::vector<index_t> tokens, std::size_t len, std::size_t stride = 1, std::string input = "tokens",
                  std::string target = "targets")
        : tokens_(std::move(tokens)), len_(len), stride_(stride), input_(std::move(input)), target_(std::move(target)) {
        if (len_ == 0 || stride_ == 0) throw error("ctg::token_windows: the window length and stride must be positive");
        if (tokens_.size() < len_ + 1)
            throw shape_error("ctg::token_windows: " + std::to_string(tokens_.size()) +
                              " tokens are too few for one window of " + std::to_string(len_) + " plus its target");
    }
    std::size_t size() const { return (tokens_.size() - len_ - 1) / stride_ + 1; }
    std::size_t tokens_per_sample() const { return len_; }
    const std::vector<index_t>& tokens() const { return tokens_; }

    template <class Program>
    void feed(Program& p, const std::size_t* rows, std::size_t n) {
        if (x_.size() < n * len_) x_.resize(n * len_), y_.resize(n * len_);
        for (std::size_t k = 0; k < n; ++k) {
            if (rows[k] >= size())
                throw index_error("ctg::token_windows::feed: window " + std::to_string(rows[k]) + " of " +
                                  std::to_string(size()));
            const index_t* w = tokens_.data() + rows[k] * stride_;
            std::copy_n(w, len_, x_.data() + k * len_);
            std::copy_n(w + 1, len_, y_.data() + k * len_);
        }
        p.feed(input_, static_cast<const index_t*>(x_.data()), rshape{2, {n, len_}});
        p.feed(target_, static_cast<const index_t*>(y_.data()), rshape{2, {n, len_}});
    }

private:
    std::vector<index_t> tokens_;
    std::size_t len_, stride_;
    std::string input_, target_;
    std::vector<index_t> x_, y_;
};

/// The mean of the program's scalar output over every sample of `data`, in order, in batches of
/// `batch` (each batch's loss weighted by its size): a validation loss.
template <class Program, class Data>
double mean_output(Program& p, Data& data, std::size_t batch) {
    const std::size_t n = data.size();
    if (n == 0) throw error("ctg::mean_output: the data set is empty");
    std::vector<std::size_t> rows(std::min(batch, n));
    double sum = 0;
    for (std::size_t b = 0; b < n; b += batch) {
        const std::size_t m = std::min(batch, n - b);
        std::iota(rows.begin(), rows.begin() + long(m), b);
        data.feed(p, rows.data(), m);
        sum += double(p.forward()) * double(m);
    }
    return sum / double(n);
}

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
    explicit progress_line(std::FILE* out = stdout) : out_(out), terminal_(out && isatty(fileno(out))) {}
    bool terminal() const { return terminal_; }
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
    template <class Program, class Data>
    double operator()(Program& eval, Data& data, std::size_t batch) const {
        return mean_output(eval, data, batch);
    }
};

/// No validation data.
struct no_validation {
    std::size_t size() const { return 0; }
    template <class Program>
    void feed(Program&, const std::size_t*, std::size_t) {}
};

struct train_config {
    std::size_t batch = 32;
    long epochs = 1;               // passes over the training data (0: no limit, then max_steps must be set)
    long max_steps = 0;            // stop after this many steps (0: no limit); whichever comes first
    bool shuffle = true;           // a new order of the samples every epoch
    bool drop_last = false;        // false: the last, smaller batch of an epoch is trained on too
    std::uint64_t seed = 0;        // the shuffling
    double clip_norm = 0;          // > 0: global-norm clipping (the update then runs after backward)
    long eval_every = 0;           // steps between evaluations (0: at the end of every epoch); always at the end
    std::size_t eval_batch = 0;    // batch of the evaluation (0: batch)
    long checkpoint_every = 0;     // steps between checkpoints (0: only at the end); needs out_dir
    std::string out_dir{};         // where <name>.npz (checkpoint), <name>_best.npz (the best weights, with
                                   // patience), <name>_loss.csv/.png go ("": no files)
    std::string name = "train";
    long patience = 0;             // stop after this many evaluations without improvement (0: never)
    double min_delta = 0;          // an improvement must exceed this
    bool higher_is_better = false; // the validation metric's direction (loss: lower; accuracy: higher)
    std::string metric_name = "val";
    std::FILE* log = stdout;       // progress output (nullptr: silent)
};

struct train_report;
/// The trainer's default evaluation hook: nothing.
struct no_eval_hook {
    void operator()(const train_report&) const {}
};

/// What fit() reports (also passed to the evaluation hook after every evaluation).
struct train_report {
    long step = 0, epoch = 0;     // steps taken; epochs begun
    double train_loss = NAN;      // mean training loss since the previous evaluation
    double metric = NAN;          // the last validation metric (NaN without validation data)
    double best_metric = NAN;
    long best_step = 0;
    double lr = 0;
    double seconds = 0;
    double samples_per_second = 0;
    bool stopped_early = false;
};

/// Trains `prog` with `opt`: see the file comment. The evaluator (`evaluator()`) is a second program
/// of the same type over the same parameter store, in evaluation mode (no dropout). `Step` runs each
/// training step (local_step, or dist::data_parallel across processes); when its writes_output() is
/// false, the trainer writes no file and prints nothing (the other ranks of a distributed run).
template <class Program, class Optimizer, class Schedule = keep_lr, class Step = local_step>
class trainer {
public:
    using T = typename Program::scalar;
    static_assert(optim::optimizer_for<Optimizer, T>,
                  "ctg::trainer: the optimizer needs begin_step(store), update(store, slot), step(store), set_lr(lr)");
    static_assert(requires(Step& s, Program& p, Optimizer& o) {
        { s(p, o, 0.0, std::size_t(1)) } -> std::convertible_to<T>;
        { s.writes_output() } -> std::convertible_to<bool>;
    }, "ctg::trainer: the step policy needs loss = step(prog, opt, clip_norm, samples) and writes_output()");

    trainer(Program& prog, Optimizer& opt, train_config cfg, Schedule schedule = {}, Step step = {})
        : prog_(prog), opt_(opt), cfg_(std::move(cfg)), schedule_(schedule), step_(std::move(step)),
          writes_(step_.writes_output()), eval_(prog.shared_params()), log_(writes_ ? cfg_.log : nullptr) {
        if (cfg_.batch == 0) throw error("ctg::trainer: the batch size must be positive");
        if (cfg_.epochs < 0 || cfg_.max_steps < 0) throw error("ctg::trainer: epochs and max_steps must not be negative");
        if (cfg_.epochs == 0 && cfg_.max_steps == 0)
            throw error("ctg::trainer: set epochs or max_steps (both 0 would train forever)");
        if (cfg_.checkpoint_every > 0 && cfg_.out_dir.empty())
            throw error("ctg::trainer: checkpoint_every needs out_dir");
        eval_.training(false);
    }

    /// The evaluation program (shares the weights; dropout off).
    Program& evaluator() { return eval_; }
    /// The step policy (local_step, dist::data_parallel, ...).
    Step& step_policy() { return step_; }

    /// Loads a checkpoint this trainer (same model, optimizer kind and data size) wrote: weights,
    /// optimizer state, position in the data, shuffling and dropout generators, early-stopping
    /// counters. The next fit() goes on from there and gives the weights the uninterrupted run would
    /// have given, bit for bit. All-or-nothing (see ctgraph/checkpoint.hpp).
    void resume(const std::string& checkpoint_path) {
        run_ = checkpoint::load(checkpoint_path, prog_.params(), opt_);
        resumed_ = true;
    }
    /// One row per evaluation: step, epoch, training loss, metric, learning rate, seconds.
    struct row {
        long step, epoch;
        double train_loss, metric, lr, seconds;
    };
    const std::vector<row>& history() const { return history_; }

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
        const std::size_t n = train.size(), batch = cfg_.batch;
        if (n == 0) throw error("ctg::trainer::fit: the training data is empty");
        if constexpr (validating && requires { val.size(); })
            if (val.size() == 0) throw error("ctg::trainer::fit: the validation data is empty");
        if (!validating && cfg_.patience > 0) throw error("ctg::trainer::fit: early stopping (patience) needs validation data");
        const long per_epoch = long(cfg_.drop_last ? n / batch : (n + batch - 1) / batch);
        if (per_epoch == 0)
            throw error("ctg::trainer::fit: drop_last with " + std::to_string(n) + " samples and batch " +
                        std::to_string(batch) + " leaves no batch");
        long total = cfg_.epochs > 0 ? cfg_.epochs * per_epoch : LONG_MAX;
        if (cfg_.max_steps > 0) total = std::min(total, cfg_.max_steps);
        if (!cfg_.out_dir.empty() && writes_) {
            std::error_code ec;
            std::filesystem::create_directories(cfg_.out_dir, ec);
            if (ec || !std::filesystem::is_directory(cfg_.out_dir))
                throw io_error("ctg::trainer: cannot use '" + cfg_.out_dir + "' as the output directory" +
                               (ec ? ": " + ec.message() : ": it is not a directory"));
        }

        double tokens_per_sample = 0;
        if constexpr (requires { train.tokens_per_sample(); }) tokens_per_sample = double(train.tokens_per_sample());
        const std::size_t eval_batch = cfg_.eval_batch ? cfg_.eval_batch : batch;

        std::vector<std::size_t> order(n);
        std::iota(order.begin(), order.end(), std::size_t(0));
        std::mt19937_64 rng(cfg_.seed);
        train_report r;
        r.best_metric = NAN;
        history_.clear();
        double loss_sum = 0, loss_samples = 0, samples_done = 0;
        long bad_evals = 0, first_epoch = 1, first_batch = 0;
        bool stop = false;
        if (resumed_) {  // go on where the checkpoint was written
            resumed_ = false;
            if (run_.order.size() != n)
                throw error("ctg::trainer::resume: the checkpoint's epoch orders " + std::to_string(run_.order.size()) +
                            " samples, the training data has " + std::to_string(n));
            for (std::size_t i = 0; i < n; ++i) {
                if (run_.order[i] < 0 || std::size_t(run_.order[i]) >= n)
                    throw error("ctg::trainer::resume: the checkpoint's sample order is corrupt");
                order[i] = std::size_t(run_.order[i]);
            }
            std::istringstream is(run_.shuffle_rng);
            is >> rng;
            if (!is) throw error("ctg::trainer::resume: the checkpoint's generator state is corrupt");
            prog_.set_dropout_state(run_.dropout_seed, run_.dropout_passes);
            r.step = run_.step;
            first_epoch = run_.epoch;
            first_batch = run_.batch_in_epoch;
            if (first_epoch == 0 || first_batch >= per_epoch) ++first_epoch, first_batch = 0;  // at an epoch's end
            if (auto it = run_.counters.find("best_metric"); it != run_.counters.end()) r.best_metric = it->second;
            if (auto it = run_.counters.find("best_step"); it != run_.counters.end()) r.best_step = long(it->second);
            if (auto it = run_.counters.find("bad_evals"); it != run_.counters.end()) bad_evals = long(it->second);
        }
        // The run's state after `batches_done` batches of the current epoch, for a checkpoint.
        auto snapshot = [&](long batches_done) {
            run_.step = r.step;
            run_.epoch = r.epoch;
            run_.batch_in_epoch = batches_done;
            run_.order.assign(order.begin(), order.end());
            std::ostringstream os;
            os << rng;
            run_.shuffle_rng = os.str();
            std::tie(run_.dropout_seed, run_.dropout_passes) = prog_.dropout_state();
            run_.counters = {{"best_metric", r.best_metric}, {"best_step", double(r.best_step)},
                             {"bad_evals", double(bad_evals)}};
        };
        const auto t0 = std::chrono::steady_clock::now();
        auto seconds = [&] { return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count(); };

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
            progress_.print(status(r, total, tokens_per_sample) + (r.stopped_early ? "  (early stop)" : ""));
            if constexpr (std::is_same_v<decltype(on_eval(r)), bool>) stop = on_eval(r) || stop;
            else on_eval(r);
        };

        progress_ = progress_line(log_);
        bool evaluated_last = false;
        long batches_done = first_batch;
        for (r.epoch = first_epoch; !stop && r.step < total; ++r.epoch) {
            const long b0 = r.epoch == first_epoch ? first_batch : 0;
            if (cfg_.shuffle && b0 == 0)
                for (std::size_t i = n; i > 1; --i) std::swap(order[i - 1], order[rng() % i]);  // Fisher-Yates
            for (long b = b0; b < per_epoch && r.step < total && !stop; ++b) {
                const std::size_t first = std::size_t(b) * batch, m = std::min(batch, n - first);
                train.feed(prog_, order.data() + first, m);
                if constexpr (!std::is_same_v<Schedule, keep_lr>) opt_.set_lr(schedule_(r.step));
                r.lr = opt_.lr();
                const T loss = step_(prog_, opt_, cfg_.clip_norm, m);
                loss_sum += double(loss) * double(m);
                loss_samples += double(m);
                samples_done += double(m);
                ++r.step;
                evaluated_last = false;
                const bool epoch_end = b + 1 == per_epoch;
                if (cfg_.eval_every > 0 ? r.step % cfg_.eval_every == 0 : epoch_end) {
                    evaluate();
                    evaluated_last = true;
                } else if (progress_.terminal()) {
                    r.seconds = seconds();
                    r.samples_per_second = samples_done / std::max(r.seconds, 1e-9);
                    r.train_loss = loss_sum / loss_samples;
                    progress_.draw(status(r, total, tokens_per_sample));
                }
                batches_done = b + 1;
                if (cfg_.checkpoint_every > 0 && r.step % cfg_.checkpoint_every == 0) {
                    snapshot(batches_done);
                    save_checkpoint();
                }
            }
        }
        --r.epoch;
        if (!evaluated_last) evaluate();
        if (!cfg_.out_dir.empty()) {
            snapshot(batches_done);
            save_checkpoint();
            write_curves();
        }
        r.seconds = seconds();
        return r;
    }

    /// Writes <name>_loss.csv and <name>_loss.png from the history (fit() does at the end; nothing
    /// when the step policy does not write).
    void write_curves() const {
        if (!writes_) return;
        std::ofstream csv(path("_loss.csv"));
        csv << "step,epoch,train_loss," << cfg_.metric_name << ",lr,seconds\n";
        for (const row& h : history_)
            csv << h.step << ',' << h.epoch << ',' << h.train_loss << ',' << h.metric << ',' << h.lr << ',' << h.seconds
                << '\n';
        if (!csv) throw io_error("ctg::trainer: cannot write '" + path("_loss.csv") + "'");
        plot::chart c{.title = cfg_.name, .x_label = "step", .y_label = "loss"};
        plot::series tr{"train", {}, {}, {31, 119, 180}}, va{cfg_.metric_name, {}, {}, {214, 39, 40}};
        for (const row& h : history_) {
            if (std::isfinite(h.train_loss)) tr.x.push_back(double(h.step)), tr.y.push_back(h.train_loss);
            if (std::isfinite(h.metric)) va.x.push_back(double(h.step)), va.y.push_back(h.metric);
        }
        if (tr.x.size() < 2 && va.x.size() < 2) return;  // a chart needs a line
        if (tr.x.size() >= 2) c.lines.push_back(tr);
        if (va.x.size() >= 2) c.lines.push_back(va);
        plot::write_png(c, path("_loss.png"));
    }
    /// Saves the checkpoint of the last step fit() took (weights, optimizer, run) to <out_dir>/<name>.npz,
    /// atomically. Its parameters are under their own names: npz::load(store, path, true) and
    /// checkpoint::load_weights read them.
    void save_checkpoint() const {
        if (!cfg_.out_dir.empty() && writes_) checkpoint::save(path(".npz"), prog_.params(), opt_, run_);
    }
    std::string path(const std::string& suffix) const {
        return (std::filesystem::path(cfg_.out_dir) / (cfg_.name + suffix)).string();
    }

private:
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
    run_state run_{};
    bool resumed_ = false;
};

}  // namespace ctg
