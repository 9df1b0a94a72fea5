// The generated training step (update fused into backward) against the hand-written loop, bit for
// bit; the trainer's epochs, partial batches, evaluation, early stop, schedule and files.
#include <catch2/catch.hpp>

#include <cstring>
#include <filesystem>
#include <fstream>
#include <random>
#include <set>
#include <string>
#include <vector>

#include <ctgraph/ctgraph.hpp>
#include <ctgraph/xtensor.hpp>
#include <ctgraph/train.hpp>

#include "random_tokens.hpp"

using namespace ctg;

namespace {

inline constexpr dim B = dyn('B'), T = dyn('T');

// A GRU language model (scan) and a two-layer GPT with dropout (repeat): every kind of node that
// writes a parameter gradient (plain ops, a scan, a repeat over stacked parameters).
auto gru_loss() {
    using Tok = index_input<"tok", T, B>;
    auto hs = nn::gru<"gru", 6, 8>::run(embedding(param<"E", 11, 6>{}, Tok{}));
    return softmax_cross_entropy(hs * param<"out", 8, 11>{} + param<"out_b", 11>{}, index_input<"tgt", T, B>{});
}
// Parameters read by two nodes: an embedding tied to the output head (a gather and a product
// through its transpose) and a weight applied twice, tanh(tanh(x W) W): the fused update must wait
// for each one's last contribution.
auto tied_loss() {
    using E = param<"E", 11, 8>;
    using W = param<"W", 8, 8>;
    auto h = tanh(tanh(embedding(E{}, index_input<"tokens", B, T>{}) * W{}) * W{});
    return softmax_cross_entropy(h * transpose(E{}), index_input<"targets", B, T>{});
}
using small_gpt = nn::gpt<11, 8, 8, 2, 2, 16, void, 0.1>;
auto gpt_loss() { return small_gpt::loss(index_input<"tokens", B, T>{}, index_input<"targets", B, T>{}); }

template <class P>
void feed_tokens(P& p, std::uint64_t seed) {
    if constexpr (P::template has_input<"tok">) testing::feed_random_tokens(p, seed, 6, 4, 11, "tok", "tgt");  // (T, B)
    else testing::feed_random_tokens(p, seed, 4, 6);
}

template <class T_>
bool same_bits(const parameter_store<T_>& a, const parameter_store<T_>& b) {
    return a.values().size() == b.values().size() &&
           std::memcmp(a.values().data(), b.values().data(), a.values().size() * sizeof(T_)) == 0;
}

// K steps of the hand-written loop and K generated steps from the same start: weights and losses
// must agree bit for bit. The store also holds a parameter the program does not read (a shared
// store): opt.step updates it (weight decay, momentum), so the fused step must too.
template <class Scalar, class Loss, class MakeOpt>
void compare_fused(Loss loss, MakeOpt make_opt, double clip = 0) {
    auto plain = compile<Scalar>(loss);
    auto fused = compile<Scalar>(loss);
    for (auto* p : {&plain.params(), &fused.params()}) {
        p->add("extra", rshape{2, {3, 5}});
        p->init(7);
    }
    plain.dropout_seed(3);
    fused.dropout_seed(3);
    auto opt_a = make_opt(), opt_b = make_opt();
    const bool plant = clip == 0;  // (with clipping the gradient would be planted after the clip)
    for (int step = 0; step < 4; ++step) {
        feed_tokens(plain, std::uint64_t(step));
        plain.zero_grad();
        if (plant) plain.params().grad(plain.params().slot("extra"))[1] = Scalar(0.25);  // a gradient from elsewhere
        const Scalar la = plain.forward();
        plain.backward();
        if (clip > 0) optim::clip_grad_norm(plain.params(), clip);
        opt_a.step(plain.params());

        feed_tokens(fused, std::uint64_t(step));
        // train_step zeroes the gradients itself; plant the same foreign gradient after that, through
        // a program-less route: the fused step reads it when it updates the foreign slot at the end.
        struct planting {
            decltype(opt_b)& o;
            void begin_step(parameter_store<Scalar>& ps) {
                ps.grad(ps.slot("extra"))[1] = Scalar(0.25);
                o.begin_step(ps);
            }
            void update(parameter_store<Scalar>& ps, std::size_t s) { o.update(ps, s); }
            // (ranges: a repeat's stacked parameters layer by layer, inside backward)
            void update(parameter_store<Scalar>& ps, std::size_t s, std::size_t first, std::size_t count) {
                o.update(ps, s, first, count);
            }
            void step(parameter_store<Scalar>& ps) { o.step(ps); }
            void set_lr(double lr) { o.set_lr(lr); }
            double lr() const { return o.lr(); }
        } opt_planting{opt_b};
        const Scalar lb = train_step(fused, opt_planting, clip);
        CHECK(std::memcmp(&la, &lb, sizeof la) == 0);
        REQUIRE(same_bits(plain.params(), fused.params()));
    }
    // and the weights moved (the comparison is not between two untouched stores)
    auto fresh = compile<Scalar>(loss);
    fresh.params().add("extra", rshape{2, {3, 5}});
    fresh.params().init(7);
    CHECK_FALSE(same_bits(fresh.params(), fused.params()));
}

}  // namespace

TEMPLATE_TEST_CASE("the generated step equals the hand-written loop bit for bit", "[train]", float, double) {
    using S = TestType;
    auto sgd = [] { return optim::sgd<S>({.lr = 0.05, .momentum = 0.9, .weight_decay = 0.01}); };
    auto nesterov = [] { return optim::sgd<S>({.lr = 0.05, .momentum = 0.9, .nesterov = true}); };
    auto adam = [] { return optim::adam<S>({.lr = 0.01, .weight_decay = 0.001}); };
    auto adamw = [] { return optim::adamw<S>({.lr = 0.01, .weight_decay = 0.05}); };
    SECTION("GRU (scan), SGD with momentum") { compare_fused<S>(gru_loss(), sgd); }
    SECTION("GRU (scan), Nesterov") { compare_fused<S>(gru_loss(), nesterov); }
    SECTION("GRU (scan), Adam") { compare_fused<S>(gru_loss(), adam); }
    SECTION("GRU (scan), AdamW") { compare_fused<S>(gru_loss(), adamw); }
    SECTION("GPT (repeat, dropout), SGD with momentum") { compare_fused<S>(gpt_loss(), sgd); }
    SECTION("GPT (repeat, dropout), Adam") { compare_fused<S>(gpt_loss(), adam); }
    SECTION("GPT (repeat, dropout), AdamW") { compare_fused<S>(gpt_loss(), adamw); }
    SECTION("GPT, AdamW with clipping (the plain order)") { compare_fused<S>(gpt_loss(), adamw, 0.5); }
    SECTION("a tied embedding and a weight read twice, SGD with momentum") { compare_fused<S>(tied_loss(), sgd); }
    SECTION("a tied embedding and a weight read twice, AdamW") { compare_fused<S>(tied_loss(), adamw); }
}

TEST_CASE("the update of a parameter runs inside backward, once its gradient is final", "[train]") {
    auto prog = compile<double>(gru_loss());
    prog.params().add("extra", rshape{1, {2}});
    prog.params().init(1);
    feed_tokens(prog, 1);
    prog.forward();
    std::vector<std::string> order;
    prog.backward_with([&](std::size_t slot) { order.push_back(prog.params().at(slot).name); });
    // Each parameter exactly once, the program's in the order backward completes them: the head
    // (read by the last nodes) first, the embedding (read first in forward) after the GRU's scan,
    // the store's other parameter after the pass.
    REQUIRE(order.size() == prog.params().size());
    CHECK(std::set<std::string>(order.begin(), order.end()).size() == order.size());
    auto at = [&](const std::string& n) { return std::find(order.begin(), order.end(), n) - order.begin(); };
    CHECK(at("out") < at("gru_W_h"));
    CHECK(at("out_b") < at("gru_W_h"));
    CHECK(at("gru_W_i") < at("E"));
    CHECK(order.back() == "extra");
    // The parameters were added to the store in forward order (E first): the hook's order is not
    // the store's.
    CHECK(prog.params().at(0).name == "E");
}

// ---------------------------------------------------------------------------------------- trainer
namespace {
constexpr int In = 3, Out = 2;
auto regression_loss() {
    return mse_loss(input<"x", B, In>{} * param<"W", In, Out>{} + param<"b", Out>{}, input<"y", B, Out>{});
}
// y = x A + c with a fixed A, c: a linear model can fit it exactly.
dataset<double> regression_data(std::size_t n, unsigned seed) {
    std::mt19937_64 rng(seed);
    std::normal_distribution<double> g;
    xt::xtensor<double, 2> x({n, std::size_t(In)}), y({n, std::size_t(Out)});
    for (std::size_t i = 0; i < n; ++i) {
        for (int j = 0; j < In; ++j) x(i, j) = g(rng);
        y(i, 0) = 0.5 * x(i, 0) - x(i, 1) + 0.25;
        y(i, 1) = 2.0 * x(i, 2) - 0.5;
    }
    return dataset<double>{{"x", x}, {"y", y}};
}
// Records which samples each step fed.
struct recording {
    dataset<double> d;
    std::vector<std::vector<std::size_t>> batches;
    std::size_t size() const { return d.size(); }
    template <class P>
    void feed(P& p, const std::size_t* rows, std::size_t n) {
        batches.emplace_back(rows, rows + n);
        d.feed(p, rows, n);
    }
};
}  // namespace

TEST_CASE("trainer: every sample once per epoch with the last partial batch", "[train]") {
    auto prog = compile<double>(regression_loss());
    prog.params().init(1);
    optim::sgd<double> opt({.lr = 0.05});
    recording data{regression_data(10, 1), {}};
    trainer training(prog, opt, {.batch = 4, .epochs = 3, .seed = 5, .log = nullptr});
    const train_report r = training.fit(data);
    CHECK(r.step == 9);
    CHECK(r.epoch == 3);
    REQUIRE(data.batches.size() == 9);
    for (int e = 0; e < 3; ++e) {
        std::vector<std::size_t> seen;
        for (int b = 0; b < 3; ++b) {
            const auto& batch = data.batches[std::size_t(e * 3 + b)];
            CHECK(batch.size() == (b < 2 ? 4u : 2u));
            seen.insert(seen.end(), batch.begin(), batch.end());
        }
        std::sort(seen.begin(), seen.end());
        for (std::size_t i = 0; i < 10; ++i) CHECK(seen[i] == i);
    }
    CHECK(data.batches[0] != data.batches[3]);  // shuffled anew each epoch

    // drop_last: two batches of 4 an epoch; max_steps stops within an epoch
    recording again{regression_data(10, 1), {}};
    trainer fit2(prog, opt, {.batch = 4, .epochs = 3, .max_steps = 5, .drop_last = true, .log = nullptr});
    CHECK(fit2.fit(again).step == 5);
    for (const auto& b : again.batches) CHECK(b.size() == 4);
}

TEST_CASE("trainer: learns and evaluates and follows the schedule and writes curves and checkpoints", "[train]") {
    const auto dir = std::filesystem::temp_directory_path() / ("ctg_trainer_" + std::to_string(::getpid()));
    std::filesystem::remove_all(dir);
    auto prog = compile<double>(regression_loss());
    prog.params().init(2);
    auto opt = optim::adam<double>({.lr = 0.05});
    auto train = regression_data(200, 3), val = regression_data(50, 4);
    const double before = mean_output(prog, val, 16);
    const optim::step_lr schedule{0.05, 0.5, 40};
    trainer training(prog, opt,
                {.batch = 16, .epochs = 8, .eval_every = 20, .checkpoint_every = 50, .out_dir = dir.string(),
                 .name = "reg", .log = nullptr},
                schedule);
    std::vector<long> eval_steps;
    const train_report r = training.fit(train, val, mean_loss{}, [&](const train_report& e) { eval_steps.push_back(e.step); });
    CHECK(r.step == 8 * 13);
    INFO("validation loss before " << before << ", after " << r.metric);
    CHECK(r.metric < 0.01 * before);
    CHECK(r.metric == Approx(mean_output(training.evaluator(), val, 7)).epsilon(1e-12));  // the evaluator shares the weights
    // evaluations every 20 steps and at the end
    CHECK(eval_steps == std::vector<long>{20, 40, 60, 80, 100, 104});
    // the learning rate the steps used: 0.05 for steps 0..39, then halved every 40
    const auto& h = training.history();
    REQUIRE(h.size() == 6);
    CHECK(h[0].lr == Approx(0.05));
    CHECK(h[2].lr == Approx(0.025));  // step 60 ran with schedule(59)
    CHECK(h[5].lr == Approx(0.0125));
    // files: the CSV has a header and one row per evaluation; the checkpoint holds the final weights
    std::ifstream csv(dir / "reg_loss.csv");
    std::string line;
    std::vector<std::string> lines;
    while (std::getline(csv, line)) lines.push_back(line);
    REQUIRE(lines.size() == 7);
    CHECK(lines[0] == "step,epoch,train_loss,val,lr,seconds");
    CHECK(lines[6].rfind("104,8,", 0) == 0);
    CHECK(std::filesystem::file_size(dir / "reg_loss.png") > 1000);
    parameter_store<double> loaded;
    loaded.add("W", rshape{2, {In, Out}});
    loaded.add("b", rshape{1, {Out}});
    checkpoint::load_weights((dir / "reg.npz").string(), loaded);  // the checkpoint's weights
    for (std::size_t s = 0; s < 2; ++s) {
        const auto& e = prog.params().at(prog.params().slot(loaded.at(s).name));
        CHECK(std::memcmp(loaded.value(s), prog.params().values().data() + e.offset, e.shape.size() * sizeof(double)) == 0);
    }
    std::filesystem::remove_all(dir);
}

TEST_CASE("trainer: early stop on a validation metric", "[train]") {
    auto prog = compile<double>(regression_loss());
    prog.params().init(2);
    optim::sgd<double> opt({.lr = 0.01});
    auto train = regression_data(40, 3), val = regression_data(10, 4);
    // A scripted metric (higher is better): best at the 2nd evaluation, then two without improvement.
    const std::vector<double> script{0.5, 0.8, 0.79, 0.8};
    std::size_t calls = 0;
    auto metric = [&](auto&, auto&, std::size_t) { return script.at(calls++); };
    trainer training(prog, opt, {.batch = 8, .epochs = 20, .eval_every = 3, .patience = 2, .higher_is_better = true, .log = nullptr});
    const train_report r = training.fit(train, val, metric);
    CHECK(r.stopped_early);
    CHECK(calls == 4);
    CHECK(r.step == 12);
    CHECK(r.best_step == 6);
    CHECK(r.best_metric == 0.8);
    // a hook returning true stops too
    calls = 0;
    trainer fit2(prog, opt, {.batch = 8, .epochs = 20, .eval_every = 3, .log = nullptr});
    const auto r2 = fit2.fit(train, val, mean_loss{}, [](const train_report& e) { return e.step >= 9; });
    CHECK(r2.step == 9);
}

TEST_CASE("trainer and data: bad configurations and data are errors", "[train][errors]") {
    auto prog = compile<double>(regression_loss());
    optim::sgd<double> opt({.lr = 0.01});
    CHECK_THROWS_WITH((trainer{prog, opt, {.batch = 0}}), Catch::Contains("batch size"));
    CHECK_THROWS_WITH((trainer{prog, opt, {.epochs = 0}}), Catch::Contains("set epochs or max_steps"));
    CHECK_THROWS_WITH((trainer{prog, opt, {.checkpoint_every = 5}}), Catch::Contains("needs out_dir"));
    auto data = regression_data(5, 1);
    trainer no_val(prog, opt, {.batch = 2, .patience = 1, .log = nullptr});
    CHECK_THROWS_WITH(no_val.fit(data), Catch::Contains("needs validation data"));
    trainer big(prog, opt, {.batch = 8, .drop_last = true, .log = nullptr});
    CHECK_THROWS_WITH(big.fit(data), Catch::Contains("leaves no batch"));
    // columns of different lengths, a column the program does not have
    xt::xtensor<double, 2> x = xt::zeros<double>({4, 3}), y = xt::zeros<double>({5, 2});
    CHECK_THROWS_WITH((dataset<double>{{"x", x}, {"y", y}}), Catch::Contains("column 'y' has 5 samples but column 'x' has 4"));
    xt::xtensor<double, 2> y4 = xt::zeros<double>({4, 2});
    dataset<double> wrong{{"x", x}, {"why", y4}};
    trainer t(prog, opt, {.batch = 2, .log = nullptr});
    CHECK_THROWS_WITH(t.fit(wrong), Catch::Contains("no input named 'why'"));
    // a column whose row shape disagrees with the input
    xt::xtensor<double, 2> x4 = xt::zeros<double>({4, 4});
    dataset<double> wide{{"x", x4}, {"y", y4}};
    CHECK_THROWS_WITH(t.fit(wide), Catch::Contains("'x' is declared (B,3) but was given (2,4)"));
}

TEST_CASE("token_windows: next-token windows of a stream", "[train]") {
    std::vector<index_t> ids(20);
    std::iota(ids.begin(), ids.end(), 0);
    token_windows every(ids, 5), disjoint(ids, 5, 5);
    CHECK(every.size() == 15);    // starts 0..14: each needs 5 tokens and one target after
    CHECK(disjoint.size() == 3);  // starts 0, 5, 10 (15 + 5 would need token 20)
    auto prog = compile<double>(sum(embedding(param<"E", 20, 1>{}, index_input<"tokens", B, T>{})) +
                                sum(embedding(param<"F", 20, 1>{}, index_input<"targets", B, T>{})));
    auto& E = prog.params();
    for (std::size_t i = 0; i < 20; ++i) E.value(E.slot("E"))[i] = double(i), E.value(E.slot("F"))[i] = 100.0 * double(i);
    const std::size_t rows[] = {14, 2};
    every.feed(prog, rows, 2);
    // tokens 14..18 and 2..6; targets 15..19 and 3..7
    CHECK(prog.forward() == Approx(80 + 20 + 100 * (85 + 25)));
    CHECK_THROWS_WITH(token_windows(std::vector<index_t>(5), 5), Catch::Contains("too few"));
    const std::size_t bad[] = {15};
    CHECK_THROWS_AS(every.feed(prog, bad, 1), index_error);
}
