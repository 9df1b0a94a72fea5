// A steady-state training step allocates nothing: feed, forward, backward and the optimizer step,
// once the sizes have been seen (counted by allocation_counter.hpp). Mixed precision's: test_bf16.
#include <catch2/catch.hpp>

#include <atomic>
#include <cstdio>
#include <cstdlib>
#include <new>

#include <ctgraph/ctgraph.hpp>
#include <ctgraph/xtensor.hpp>
#include <ctgraph/train.hpp>

#include "allocation_counter.hpp"

using namespace ctg;

namespace {
inline constexpr dim B = dyn('B'), T = dyn('T');
}  // namespace

TEST_CASE("an MLP training step allocates nothing in steady state", "[allocation]") {
    using X = input<"x", B, 8>;
    using Y = index_input<"y", B>;
    auto prog = compile<float>(softmax_cross_entropy(relu(X{} * param<"W1", 8, 16>{} + param<"b1", 16>{}) *
                                                         param<"W2", 16, 4>{},
                                                     Y{}));
    prog.params().init(1);
    optim::adam<float> opt({.lr = 1e-3});
    xt::xtensor<float, 2> x = xt::ones<float>({32, 8});
    xt::xtensor<int, 1> y = xt::zeros<int>({32});
    CHECK(allocations_during([&] {
              prog.feed<"x">(x);
              prog.feed<"y">(y);
              prog.zero_grad();
              prog.forward();
              prog.backward();
              optim::clip_grad_norm(prog.params(), 1.0);
              opt.step(prog.params());
          }) == 0);
    // the generated step (update fused into backward), and a dataset feeding shuffled rows
    CHECK(allocations_during([&] {
              prog.feed<"x">(x);
              prog.feed<"y">(y);
              train_step(prog, opt);
          }) == 0);
    dataset<float> data{{"x", xt::xtensor<float, 2>(xt::ones<float>({100, 8}))}, {"y", xt::xtensor<int, 1>(xt::zeros<int>({100}))}};
    std::vector<std::size_t> rows(32);
    for (std::size_t i = 0; i < rows.size(); ++i) rows[i] = (i * 37) % 100;
    data.feed(prog, rows.data(), 32);
    CHECK(allocations_during([&] {
              data.feed(prog, rows.data(), 32);
              train_step(prog, opt);
          }) == 0);
}

TEST_CASE("a recurrent (scan) training step allocates nothing in steady state", "[allocation]") {
    using Tok = index_input<"tok", T, B>;
    auto hs = nn::gru<"gru", 8, 16>::run(embedding(param<"E", 10, 8>{}, Tok{}));
    auto prog = compile<float>(softmax_cross_entropy(hs * param<"out", 16, 10>{}, index_input<"tgt", T, B>{}));
    prog.params().init(2);
    optim::sgd<float> opt({.lr = 0.1, .momentum = 0.9});
    xt::xtensor<int, 2> tok = xt::ones<int>({12, 4});
    CHECK(allocations_during([&] {
              prog.feed<"tok">(tok);
              prog.feed<"tgt">(tok);
              prog.zero_grad();
              prog.forward();
              prog.backward();
              opt.step(prog.params());
          }) == 0);
}

TEST_CASE("the allocation counter counts", "[allocation]") {
    // (a direct call: a new-expression whose result is unused may be elided by the compiler)
    CHECK(allocations_during([] { ::operator delete(::operator new(16)); }) == 5);
    // and what a program allocates when the sizes change (the arena grows) is seen too
    auto prog = compile<float>(sum(tanh(input<"x", B, 4>{})));
    std::size_t rows = 1;
    CHECK(allocations_during([&] {
              rows *= 2;
              prog.feed<"x">(xt::xtensor<float, 2>(xt::ones<float>({rows, std::size_t(4)})));
              prog.forward();
          }) > 0);
}

TEST_CASE("a generation step with a KV cache allocates nothing per token", "[allocation][generate]") {
    using model = nn::gpt<13, 64, 16, 2, 2>;
    auto store = std::make_shared<parameter_store<float>>();
    nn::gpt_generator<model> gen(store, 2, 48);
    store->init(3);
    std::mt19937_64 rng(1);
    const std::vector<std::vector<int>> prompts = {{1, 2, 3}, {4}};
    const nn::sampling how{.top_k = 5, .temperature = 0.9, .top_p = 0.9};
    gen.generate(prompts, 8, how, rng);  // plans both programs
    auto count = [&](std::size_t tokens) {
        const long before = allocations();
        gen.generate(prompts, tokens, how, rng);
        return allocations() - before;
    };
    const long n = count(10), twice = count(20);
    INFO("allocations for 10 tokens: " << n << ", for 20: " << twice);
    CHECK(twice == n);  // the per-call ones (the result vectors) only
}

TEST_CASE("generate_into a kept result allocates nothing per request", "[allocation][generate]") {
    using model = nn::gpt<13, 64, 16, 2, 2>;
    auto store = std::make_shared<parameter_store<float>>();
    nn::gpt_generator<model> gen(store, 2, 48);
    store->init(3);
    std::mt19937_64 rng(1), rng2(1);
    const std::vector<std::vector<int>> prompts = {{1, 2, 3}, {4}};
    const nn::sampling how{.top_k = 5, .temperature = 0.9};
    std::vector<std::vector<int>> out;
    gen.generate_into(out, prompts, 20, how, rng);  // plans both programs, grows `out`
    const auto first = out;
    CHECK(first == gen.generate(prompts, 20, how, rng2));  // the same tokens as generate()
    const long before = allocations();
    for (int r = 0; r < 3; ++r) gen.generate_into(out, prompts, 20, how, rng);
    CHECK(allocations() - before == 0);
    CHECK(out[0].size() == 20);
    CHECK(out[1].size() == 20);
}

