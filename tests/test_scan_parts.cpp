// scan in batch parts (graph/scan.hpp): a cell whose ops treat rows independently runs its batch in
// parts, one per pool thread, each part through every step; a weight read by one product x W gets
// its adjoint after the loop as one product over all steps. Checked by finite differences at two
// threads (the arena poisoned with NaN: a part that reads what nobody wrote fails), against one
// thread, across a pool resized between planning and running, and for the cells that must run whole.
#include <utility>
#include <vector>

#include "pool_threads.hpp"
#include "recurrent_fixture.hpp"

using namespace ctg;
using namespace ctg::testing::recurrent;
using ctg::testing::check_gradients;
using ctg::testing::pool_threads;

namespace {
long parts_runs() { return detail::scan_parts_runs().load(); }

// 16 sequences: two parts of 8 at two threads.
const testing::check_config sixteen{.dims = {{'T', 4}, {'B', 16}}};

// Finite differences at two threads, requiring that the scan ran in parts.
template <expr Out>
void check_in_parts(Out out, testing::check_config cfg = sixteen) {
    pool_threads pool(2);
    const long before = parts_runs();
    CHECK(check_gradients(out, cfg) > 0);
    CHECK(parts_runs() > before);
}

// Finite differences at two threads, requiring that the scan ran whole.
template <expr Out>
void check_whole(Out out, testing::check_config cfg = sixteen) {
    pool_threads pool(2);
    const long before = parts_runs();
    CHECK(check_gradients(out, cfg) > 0);
    CHECK(parts_runs() == before);
}

std::vector<double> values(std::size_t n, unsigned seed) {
    std::mt19937 gen(seed);
    std::uniform_real_distribution<double> u(-1, 1);
    std::vector<double> v(n);
    for (auto& x : v) x = u(gen);
    return v;
}
}  // namespace

TEST_CASE("scan parts: an Elman cell, by finite differences at two threads", "[scan][threads]") {
    check_in_parts(scan<H>(elman, Xs{}));
}

TEST_CASE("scan parts: a learnable one-row h0 and variable lengths", "[scan][threads]") {
    using Len = index_input<"lengths", B>;
    testing::check_config cfg = sixteen;
    cfg.index_bound = {{"lengths", 5}};
    cfg.index_low = {{"lengths", 1}};
    check_in_parts(scan<H>(elman, Xs{}, param<"h0", H>{}, Len{}), cfg);
}

TEST_CASE("scan parts: a full initial state and a per-sequence context (invariants with the batch axis)", "[scan][threads]") {
    using H0 = input<"h0", B, H>;
    using Ctx = input<"ctx", B, H>;  // each part reads its rows of it, and writes its rows of its adjoint
    auto cell = [](auto h, auto x) { return tanh(mul(h, Ctx{}) + x * param<"W_x", X, H>{}); };
    check_in_parts(scan<H>(cell, Xs{}, H0{}));
}

TEST_CASE("scan parts: GRU and LSTM cells", "[scan][threads]") {
    check_in_parts(nn::gru<"g", X, H>::run(Xs{}));
    check_in_parts(nn::lstm<"l", X, H>::run(Xs{}));
}

TEST_CASE("scan parts: a weight read by two products keeps its per-step adjoint", "[scan][threads]") {
    // W_h is read twice: not summed after the loop (the other weights are).
    auto cell = [](auto h, auto x) {
        return tanh(h * param<"W_h", H, H>{} + (x * param<"W_x", X, H>{}) * param<"W_h", H, H>{});
    };
    CHECK(check_gradients(scan<H>(cell, Xs{}), {.dims = {{'T', 4}, {'B', 2}}}) > 0);
    check_in_parts(scan<H>(cell, Xs{}));
}

TEST_CASE("scan parts: a cell that reads across rows runs whole, and so does a batch too small to cut", "[scan][threads]") {
    // reverse_time reverses the first axis: inside a cell, the batch.
    auto mixing = [](auto h, auto x) { return tanh(reverse_time(h) * param<"W_h", H, H>{} + x * param<"W_x", X, H>{}); };
    check_whole(scan<H>(mixing, Xs{}));
    check_whole(scan<H>(elman, Xs{}), {.dims = {{'T', 3}, {'B', 12}}});  // parts of 6 rows: fewer than 8
}

TEST_CASE("scan parts: a cell with dropout runs whole (its masks number the batch's elements)", "[scan][threads]") {
    auto dropped = [](auto h, auto x) { return tanh(dropout<0.25>(h) * param<"W_h", H, H>{} + x * param<"W_x", X, H>{}); };
    auto prog = compile<double>(sum(scan<H>(dropped, Xs{})));
    prog.params().init(3);
    const auto xs = values(4 * 16 * X, 1);
    prog.feed("xs", xs.data(), rshape{3, {4, 16, std::size_t(X)}});
    pool_threads pool(2);
    const long before = parts_runs();
    CHECK(std::isfinite(prog.forward()));
    prog.backward();
    CHECK(parts_runs() == before);
}

TEST_CASE("scan parts: one and two threads agree, whichever pool size planned the arena", "[scan][threads]") {
    using H0 = input<"h0", B, H>;
    using Gw = input<"gw", T, B, H>;
    const std::size_t steps = 6, batch = 16;
    const auto xs = values(steps * batch * X, 2), h0 = values(batch * H, 3), gw = values(steps * batch * H, 4);
    auto run = [&](int plan_threads, int run_threads) {
        auto prog = compile<double, options{.input_grads = true}>(sum(mul(nn::gru<"g", X, H>::run(Xs{}, H0{}), Gw{})));
        prog.params().init(5);
        prog.feed("xs", xs.data(), rshape{3, {steps, batch, std::size_t(X)}});
        prog.feed("h0", h0.data(), rshape{2, {batch, std::size_t(H)}});
        prog.feed("gw", gw.data(), rshape{3, {steps, batch, std::size_t(H)}});
        {
            pool_threads pool(plan_threads);
            prog.forward();  // plans the arena
        }
        pool_threads pool(run_threads);
        const long before = parts_runs();
        std::vector<double> r{prog.forward()};
        CHECK(parts_runs() - before == (run_threads > 1 ? 1 : 0));
        prog.zero_grad();
        prog.backward();
        const auto& g = prog.params().grads();
        r.insert(r.end(), g.begin(), g.end());
        for (auto a : {prog.template input_grad<"xs">(), prog.template input_grad<"h0">()}) r.insert(r.end(), a.begin(), a.end());
        return r;
    };
    const auto one = run(1, 1);
    for (auto [plan, threads] : {std::pair{1, 2}, std::pair{2, 1}, std::pair{2, 2}}) {
        INFO("planned at " << plan << " threads, run at " << threads);
        const auto other = run(plan, threads);
        REQUIRE(other.size() == one.size());
        for (std::size_t i = 0; i < one.size(); ++i) CHECK(other[i] == Approx(one[i]).epsilon(1e-12).margin(1e-13));
    }
}

TEST_CASE("scan parts: an inference program keeps one frame per part", "[scan][threads]") {
    const std::size_t steps = 5, batch = 16;
    const auto xs = values(steps * batch * X, 6);
    std::vector<double> outs[2];
    for (int threads : {1, 2}) {
        auto prog = compile<double, options{.inference = true}>(nn::lstm<"l", X, H>::run(Xs{}));
        prog.params().init(8);
        prog.feed("xs", xs.data(), rshape{3, {steps, batch, std::size_t(X)}});
        pool_threads pool(threads);
        const long before = parts_runs();
        prog.forward();
        CHECK(parts_runs() - before == threads - 1);
        auto y = prog.template output<0>();
        outs[threads - 1].assign(y.begin(), y.end());
    }
    REQUIRE(outs[0].size() == outs[1].size());
    for (std::size_t i = 0; i < outs[0].size(); ++i) CHECK(outs[0][i] == outs[1][i]);  // rows computed alike, bit for bit
}

TEST_CASE("scan parts in float: gradients agree with float64 at one and two threads", "[scan][threads]") {
    // Wide enough for the register kernel (float products; its policy set to take them all), whose
    // A B^T keeps the weights' transposes through a backward pass (kernels::constant_operands):
    // float64 runs none of that, so this compares the two.
    constexpr int Xw = 16, Hw = 48;
    using Xs_ = input<"xs", T, B, Xw>;
    using Gw = input<"gw", T, B, Hw>;
    const std::size_t steps = 5, batch = 16;
    const auto xs = values(steps * batch * Xw, 7), gw = values(steps * batch * Hw, 8);
    const auto policy = kernels::get_register_gemm_policy();
    kernels::set_register_gemm_policy(kernels::register_gemm_policy::everywhere);
    auto grads = [&]<class F>(F, int threads) {
        auto prog = compile<F, options{.input_grads = true}>(sum(mul(nn::gru<"g", Xw, Hw>::run(Xs_{}), Gw{})));
        prog.params().init(5);
        const std::vector<F> x(xs.begin(), xs.end()), g(gw.begin(), gw.end());
        prog.feed("xs", x.data(), rshape{3, {steps, batch, std::size_t(Xw)}});
        prog.feed("gw", g.data(), rshape{3, {steps, batch, std::size_t(Hw)}});
        pool_threads pool(threads);
        std::vector<double> r{double(prog.forward())};
        prog.backward();
        for (auto v : prog.params().grads()) r.push_back(double(v));
        for (auto v : prog.template input_grad<"xs">()) r.push_back(double(v));
        return r;
    };
    const auto exact = grads(double{}, 1);
    for (int threads : {1, 2}) {
        INFO(threads << " threads");
        const auto single = grads(float{}, threads);
        REQUIRE(single.size() == exact.size());
        for (std::size_t i = 0; i < exact.size(); ++i) CHECK(single[i] == Approx(exact[i]).epsilon(1e-4).margin(1e-4));
    }
    kernels::set_register_gemm_policy(policy);
}
