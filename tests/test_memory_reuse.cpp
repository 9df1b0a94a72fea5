// Inference programs place their values by lifetime (options::keep_values, program.hpp), and scan
// and repeat keep one step's or layer's values in a forward-only pass (run_info::forward_only):
// the outputs equal those of programs that keep everything, in less memory, and reading a value
// whose memory was reused is an error that says so. A reshape that is its operand's only reader
// shares that operand's adjoint (detail::adjoint_roots), in programs and in repeat blocks, and so
// does a sum (add, sub's first operand) for an operand of its own shape: a residual branch.
#include <catch2/catch.hpp>

#include <cmath>
#include <random>
#include <string>
#include <vector>

#include <ctgraph/ctgraph.hpp>
#include <ctgraph/xtensor.hpp>

#include "transformer_fixture.hpp"

using namespace ctg;

namespace {
constexpr dim B = dyn('B'), T = dyn('T');
constexpr options reuse{.inference = true}, keep{.inference = true, .keep_values = true};

std::vector<double> random_values(std::size_t count, unsigned seed) {
    return testing::tfm::random_values(count, seed, -1.5, 1.5);  // the shared fixture's generator
}

// How many adjoints live in another node's memory (detail::adjoint_roots).
template <std::size_t N>
constexpr std::size_t shared_adjoints(const std::array<std::size_t, N>& root) {
    std::size_t n = 0;
    for (std::size_t i = 0; i < N; ++i) n += root[i] != i;
    return n;
}

template <class P>
std::vector<double> output_copy(P& p) {
    auto y = p.template output<0>();
    return {y.begin(), y.end()};
}

// One step of p from zeroed gradients, with input `x_name` (batch x x_cols) and "g" (g_shape) fed:
// the gradients of `params`, each `elements` long.
template <class P>
std::vector<double> step_gradients(P& p, const char* x_name, const std::vector<double>& x, std::size_t batch, std::size_t x_cols,
                                   const std::vector<double>& g, rshape g_shape, std::initializer_list<const char*> params,
                                   std::size_t elements) {
    p.params().zero_grad();
    p.feed(x_name, x.data(), rshape{2, {batch, x_cols}});
    p.feed("g", g.data(), g_shape);
    p.forward();
    p.backward();
    std::vector<double> r;
    for (const char* n : params) {
        const std::size_t s = p.params().slot(n);
        r.insert(r.end(), p.params().grad(s), p.params().grad(s) + elements);
    }
    return r;
}

// A chain of layers, with a reshape (a node that reads its operand's memory) in the middle.
using X = input<"x", B, 8>;
constexpr auto h1() { return tanh(X{} * param<"W1", 8, 16>{}); }
constexpr auto h2() { return relu(h1() * param<"W2", 16, 16>{} + param<"b2", 16>{}); }
constexpr auto h2r() { return reshape<B, 4, 4>(h2()); }
constexpr auto chain() {
    // After h2's last direct reader, several values live at once: they take every free block,
    // h2's included if its lifetime ended there.
    auto h3 = sigmoid(reshape<B, 16>(h2r()) * param<"W3", 16, 16>{});  // h2r is computed early
    auto a = h3 * param<"W4", 16, 16>{};
    auto b = tanh(a) * param<"W5", 16, 16>{};
    auto c = relu(b) * param<"W6", 16, 16>{};
    auto h4 = tanh(c) + a + b + h3;
    return sum(reshape<B, 4, 4>(h4) * param<"W7", 4, 4>{} + h2r());  // h2's memory is read late, through h2r
}
}  // namespace

TEST_CASE("an inference program reuses value memory by lifetime and computes the same outputs", "[memory]") {
    auto kept = compile<double, keep>(chain());
    auto reused = compile<double, reuse>(chain());
    decltype(compile<double, reuse>(chain())) shared(kept.shared_params());
    kept.params().init(3);
    for (std::size_t s = 0; s < kept.params().size(); ++s)
        std::copy(kept.params().value(s), kept.params().value(s) + kept.params().at(s).shape.size(),
                  reused.params().value(reused.params().slot(kept.params().at(s).name)));
    for (std::size_t batch : {5u, 1u, 9u}) {  // new sizes re-plan the arena
        const auto x = random_values(batch * 8, unsigned(batch));
        kept.feed("x", x.data(), rshape{2, {batch, 8}});
        kept.forward();
        reused.poison_arena(true);  // an element read before it is written would show as NaN
        reused.feed("x", x.data(), rshape{2, {batch, 8}});
        reused.forward();
        shared.feed("x", x.data(), rshape{2, {batch, 8}});
        shared.forward();
        INFO("batch " << batch);
        CHECK(output_copy(reused) == output_copy(kept));  // the same kernels on the same values: bit for bit
        CHECK(output_copy(shared) == output_copy(kept));
        CHECK(reused.arena_elements() < kept.arena_elements());
    }
    // Intermediate values: readable where they are kept, an error naming the node where reused.
    CHECK_NOTHROW(kept.value_of(h2()));
    CHECK_NOTHROW(reused.value_of(chain()));  // the output
    CHECK_THROWS_WITH(reused.value_of(h1()), Catch::Contains("inference program is not an output") &&
                                                 Catch::Contains("keep_values = true"));
}

TEST_CASE("a store read only by inference programs holds no gradients, a training program allocates them", "[memory]") {
    auto infer = compile<double, reuse>(chain());
    infer.params().init(5);
    const auto x = random_values(4 * 8, 1);
    infer.feed("x", x.data(), rshape{2, {4, 8}});
    infer.forward();
    CHECK_FALSE(infer.params().gradients_allocated());
    // A training program over the same store: its gradients appear, zeroed, and backward fills them.
    auto loss_of = [] { return sum(chain()); };
    decltype(compile<double>(loss_of())) train(infer.shared_params());
    train.feed("x", x.data(), rshape{2, {4, 8}});
    train.forward();
    CHECK(train.params().gradients_allocated());
    train.backward();
    const std::size_t w1 = train.params().slot("W1");
    double norm = 0;
    for (std::size_t i = 0; i < 8 * 16; ++i) norm += std::abs(train.params().grad(w1)[i]);
    CHECK(norm > 0);
    CHECK(train.params().grads().size() == train.params().values().size());
}

namespace {
constexpr int D = 6;
using Xs = input<"x", B, T, D>;
constexpr auto block = [](auto h) { return h + tanh(h * param<"W", D, D>{} + param<"b", D>{}); };
template <int L>
constexpr auto stacked() { return repeat<L, "blocks.">(block, Xs{}); }
}  // namespace

TEST_CASE("repeat in an inference program keeps one layer: memory independent of depth", "[memory]") {
    auto train3 = compile<double>(stacked<3>());
    auto train6 = compile<double>(stacked<6>());
    decltype(compile<double, reuse>(stacked<3>())) infer3(train3.shared_params());  // the same weights
    decltype(compile<double, reuse>(stacked<6>())) infer6(train6.shared_params());
    train3.params().init(1);
    train6.params().init(1);
    const std::size_t batch = 3, len = 7;
    const auto x = random_values(batch * len * D, 4);
    auto run = [&](auto& p) {
        p.feed("x", x.data(), rshape{3, {batch, len, D}});
        p.forward();
        return output_copy(p);
    };
    CHECK(run(infer3) == run(train3));
    CHECK(run(infer6) == run(train6));
    // Training keeps every layer's values for backward; a forward-only pass one frame and two
    // alternating layer outputs, whatever the depth.
    CHECK(infer6.arena_elements() == infer3.arena_elements());
    CHECK(train6.arena_elements() > train3.arena_elements());
    CHECK(infer3.arena_elements() < train3.arena_elements());
}

TEST_CASE("scan in an inference program keeps one step's values", "[memory]") {
    constexpr int X = 3, H = 5;
    using Seq = input<"xs", T, B, X>;
    using Len = index_input<"lengths", B>;
    auto cell = [](auto h, auto x) {
        auto z = sigmoid(h * param<"U", H, H>{} + x * param<"Wz", X, H>{});
        return mul(z, h) + mul(constant<1.0>{} - z, tanh(x * param<"Wx", X, H>{} + h * param<"Uh", H, H>{}));
    };
    auto states = [&] { return scan<H>(cell, Seq{}, zero_state{}, Len{}); };
    auto train = compile<double>(states());
    decltype(compile<double, reuse>(states())) infer(train.shared_params());
    train.params().init(2);
    const std::size_t batch = 3;
    const auto x = random_values(12 * batch * X, 5);
    auto run = [&](auto& p, std::size_t steps) {
        const std::vector<index_t> lengths = {index_t(steps), 4, index_t(steps - 3)};
        p.feed("xs", x.data(), rshape{3, {steps, batch, X}});
        p.feed("lengths", lengths.data(), rshape{1, {batch}});
        p.forward();
        return output_copy(p);
    };
    // Alternating programs, passes (training and forward-only) and lengths: each call's cell layout
    // is the one of its own shapes and pass (scan remembers the last plan per thread).
    for (std::size_t steps : {12u, 5u, 12u}) CHECK(run(infer, steps) == run(train, steps));
    // The states (steps x batch x H, the output) stay; the per-step frames collapse to one.
    CHECK(infer.arena_elements() < train.arena_elements());
}

TEST_CASE("a reshape that is its operand's only reader shares its adjoint: one buffer, the same gradients", "[memory]") {
    // In a program and in a repeat's block: x W1 is read only by the reshape (shared), tanh(x W2)
    // by the reshape and a sum (not shared). The gradients equal those of the same sums written
    // without reshapes, bit for bit (the same kernels on the same elements).
    using G4 = input<"g", B, 4, 4>;
    using G16 = input<"g", B, 16>;
    using P1 = param<"W1", 8, 16>;
    using P2 = param<"W2", 8, 16>;
    constexpr auto only_reader = [] { return reshape<B, 4, 4>(X{} * P1{}); };
    constexpr auto two_readers = [] { return tanh(X{} * P2{}); };
    constexpr auto reshaped = [=] {
        return sum(mul(only_reader(), G4{})) + sum(mul(reshape<B, 4, 4>(two_readers()), G4{})) + sum(two_readers());
    };
    constexpr auto flat = [] {
        return sum(mul(X{} * P1{}, G16{})) + sum(mul(tanh(X{} * P2{}), G16{})) + sum(tanh(X{} * P2{}));
    };
    auto a = compile<double>(reshaped());
    decltype(compile<double>(flat())) b(a.shared_params());
    using GA = typename decltype(a)::G;
    constexpr int r1 = GA::template index_of<decltype(only_reader())>, x1 = GA::template index_of<decltype(X{} * P1{})>;
    constexpr int r2 = GA::template index_of<decltype(reshape<B, 4, 4>(two_readers()))>,
                  x2 = GA::template index_of<decltype(two_readers())>;
    static_assert(r1 >= 0 && x1 >= 0 && r2 >= 0 && x2 >= 0);
    static_assert(decltype(a)::adjoint_root[x1] == std::size_t(r1) && decltype(a)::adjoint_root[x2] == std::size_t(x2) &&
                  decltype(a)::adjoint_root[r2] == std::size_t(r2));
    a.params().init(4);
    const std::size_t batch = 3;
    const auto x = random_values(batch * 8, 1), g = random_values(batch * 16, 2);
    auto grads = [&](auto& p, rshape gs) { return step_gradients(p, "x", x, batch, 8, g, gs, {"W1", "W2"}, 8 * 16); };
    const auto want = grads(b, rshape{2, {batch, 16}});
    a.poison_arena(true);  // an adjoint read before it is written would show as NaN
    CHECK(grads(a, rshape{3, {batch, 4, 4}}) == want);
    CHECK(a.adjoint_view(std::size_t(x1)).ptr == a.adjoint_view(std::size_t(r1)).ptr);
    CHECK(a.adjoint_view(std::size_t(x2)).ptr != a.adjoint_view(std::size_t(r2)).ptr);
    CHECK(a.arena_elements() * sizeof(double) == a.summary({{'B', batch}}).arena_bytes);

    // In a repeat: a block whose product is read only by a reshape and back, against the block
    // without them.
    using W = param<"W", 16, 16>;
    constexpr auto with_reshapes = [](auto h) { return tanh(reshape<B, 16>(reshape<B, 4, 4>(h * W{}))) + h; };
    constexpr auto without = [](auto h) { return tanh(h * W{}) + h; };
    using H = input<"h", B, 16>;
    using block = detail::cell_info<decltype(with_reshapes(H{})), true>;  // as repeat sees the block
    static_assert(shared_adjoints(block::adj_root) == 3,
                  "the product's and the inner reshape's adjoints are the outer reshape's; tanh's is the layer's output adjoint");
    auto ra = compile<double>(sum(mul(repeat<3, "r.">(with_reshapes, H{}), G16{})));
    decltype(compile<double>(sum(mul(repeat<3, "r.">(without, H{}), G16{})))) rb(ra.shared_params());
    ra.params().init(5);
    const auto h = random_values(batch * 16, 3);
    auto layer_grads = [&](auto& p) {
        return step_gradients(p, "h", h, batch, 16, g, rshape{2, {batch, 16}}, {"r.W"}, 3 * 16 * 16);
    };
    const auto want_layers = layer_grads(rb);
    ra.poison_arena(true);
    CHECK(layer_grads(ra) == want_layers);
    // Without zero_grad, a second backward adds to the stacked gradients (after zero_grad the
    // block's first writers assign them): twice the first, exactly.
    ra.backward();
    const double* twice = ra.params().grad(ra.params().slot("r.W"));
    std::size_t wrong = 0;
    for (std::size_t i = 0; i < want_layers.size(); ++i) wrong += twice[i] != 2 * want_layers[i];
    CHECK(wrong == 0);
}

TEST_CASE("a sum that is its operand's only reader shares its adjoint: no copy for a residual branch, the same gradients",
          "[memory]") {
    // The same sums, once as they are (each branch read by the sum alone: its adjoint is the sum's)
    // and once with every branch read a second time by a term that adds zero (the adjoints then
    // their own, added to): the gradients are equal bit for bit, since gy + 0 is gy.
    using G16 = input<"g", B, 16>;
    using P1 = param<"W1", 8, 16>;
    using P2 = param<"W2", 8, 16>;
    using Z = constant<0.0>;
    constexpr auto t = [] { return tanh(X{} * P1{}); };
    constexpr auto u = [] { return X{} * P2{}; };
    // t and u read by two sums each: their adjoints are their own (each is added to twice).
    using two_readers = decltype(compile<double>(sum(mul(t() + u(), G16{})) + sum(mul(t() - u(), G16{}))));
    using GT = typename two_readers::G;
    constexpr int ti = GT::template index_of<decltype(t())>, ui = GT::template index_of<decltype(u())>;
    static_assert(ti >= 0 && ui >= 0 && two_readers::adjoint_root[ti] == std::size_t(ti) &&
                  two_readers::adjoint_root[ui] == std::size_t(ui));

    // One reader each: a + b shares both, a - b its first only (b's adjoint is -gy).
    using P3 = param<"W3", 8, 16>;
    constexpr auto a1e = [] { return tanh(X{} * P1{}); };
    constexpr auto b1e = [] { return X{} * P2{}; };
    constexpr auto a2e = [] { return relu(X{} * P1{}); };
    constexpr auto b2e = [] { return tanh(X{} * P3{}); };
    constexpr auto branches = [=] { return sum(mul(a1e() + b1e(), G16{})) + sum(mul(a2e() - b2e(), G16{})); };
    constexpr auto branches_read_twice = [=] {
        return branches() + mul(Z{}, sum(a1e()) + sum(b1e()) + sum(a2e()) + sum(b2e()));
    };
    auto c = compile<double>(branches());
    decltype(compile<double>(branches_read_twice())) d(c.shared_params());
    using GC = typename decltype(c)::G;
    constexpr int s1 = GC::template index_of<decltype(a1e() + b1e())>, a1 = GC::template index_of<decltype(a1e())>,
                  b1 = GC::template index_of<decltype(b1e())>, s2 = GC::template index_of<decltype(a2e() - b2e())>,
                  a2 = GC::template index_of<decltype(a2e())>, b2 = GC::template index_of<decltype(b2e())>;
    static_assert(s1 >= 0 && a1 >= 0 && b1 >= 0 && s2 >= 0 && a2 >= 0 && b2 >= 0);
    constexpr auto& root = decltype(c)::adjoint_root;
    static_assert(root[a1] == std::size_t(s1) && root[b1] == std::size_t(s1) && root[a2] == std::size_t(s2) &&
                  root[b2] == std::size_t(b2));
    using GD = typename decltype(d)::G;
    constexpr int d_s1 = GD::template index_of<decltype(a1e() + b1e())>, d_a1 = GD::template index_of<decltype(a1e())>;
    static_assert(d_s1 >= 0 && d_a1 >= 0 && decltype(d)::adjoint_root[d_a1] == std::size_t(d_a1));

    c.params().init(6);
    const std::size_t batch = 3;
    const auto x = random_values(batch * 8, 7), g = random_values(batch * 16, 8);
    auto grads = [&](auto& p) {
        return step_gradients(p, "x", x, batch, 8, g, rshape{2, {batch, 16}}, {"W1", "W2", "W3"}, 8 * 16);
    };
    d.poison_arena(true);
    const auto want = grads(d);
    c.poison_arena(true);  // an adjoint read before it is written would show as NaN
    CHECK(grads(c) == want);
    CHECK(c.adjoint_view(std::size_t(a1)).ptr == c.adjoint_view(std::size_t(s1)).ptr);
    CHECK(c.adjoint_view(std::size_t(b1)).ptr == c.adjoint_view(std::size_t(s1)).ptr);
    CHECK(c.adjoint_view(std::size_t(b2)).ptr != c.adjoint_view(std::size_t(s2)).ptr);
    CHECK(c.arena_elements() < d.arena_elements());
    CHECK(c.arena_elements() * sizeof(double) == c.summary({{'B', batch}}).arena_bytes);

    // In a repeat whose block ends in a residual sum: the branch's adjoint is the layer's output
    // adjoint (the block's result, outside the block's memory), in every layer.
    using W = param<"W", 16, 16>;
    using H = input<"h", B, 16>;
    constexpr auto residual = [](auto h) { return tanh(h * W{}) + h; };
    constexpr auto read_twice = [](auto h) { return tanh(h * W{}) + h + mul(Z{}, sum(tanh(h * W{}))); };
    using block = detail::cell_info<decltype(residual(H{})), true>;
    using block2 = detail::cell_info<decltype(read_twice(H{})), true>;
    static_assert(shared_adjoints(block::adj_root) == 1 && block::adjoint_shares_result(block::out - 1));
    static_assert(shared_adjoints(block2::adj_root) == 1, "only the outer sum's first operand, the inner sum, shares");
    constexpr options with_dh{.input_grads = true};
    auto ra = compile<double, with_dh>(sum(mul(repeat<3, "r.">(residual, H{}), G16{})));
    decltype(compile<double, with_dh>(sum(mul(repeat<3, "r.">(read_twice, H{}), G16{})))) rb(ra.shared_params());
    ra.params().init(9);
    const auto h = random_values(batch * 16, 10);
    auto layer_grads = [&](auto& p) {
        auto r = step_gradients(p, "h", h, batch, 16, g, rshape{2, {batch, 16}}, {"r.W"}, 3 * 16 * 16);
        const auto dh = p.template input_grad<"h">();  // what the first layer sends down
        r.insert(r.end(), dh.begin(), dh.end());
        return r;
    };
    rb.poison_arena(true);
    const auto want_layers = layer_grads(rb);
    ra.poison_arena(true);
    CHECK(layer_grads(ra) == want_layers);
    CHECK(ra.arena_elements() < rb.arena_elements());
}
