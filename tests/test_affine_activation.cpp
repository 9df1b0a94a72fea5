// affine_gelu / affine_gelu_erf / affine_relu (ops/affine_activation.hpp), a linear layer and its
// activation in one node: finite differences, and the bits of the composed act(affine(x, W, b)) in
// float64, float32 and bf16 programs (every engine this host runs, one and two threads, every
// way a bf16 program keeps its values, outside and inside a repeat, recomputing), and where the
// engine puts its forward-only memory.
#include <catch2/catch.hpp>

#include <bit>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <exception>
#include <random>
#include <stdexcept>
#include <thread>
#include <vector>

#include <ctgraph/ctgraph.hpp>
#include <ctgraph/xtensor.hpp>
#include <ctgraph/train.hpp>

#include "gradcheck.hpp"
#include "pool_threads.hpp"

using namespace ctg;
using ctg::testing::check_gradients;

namespace {
inline constexpr dim B = dyn('B');
inline constexpr dim T = dyn('T');

template <class T>
std::vector<T> randoms(std::size_t n, unsigned seed) {
    std::mt19937 rng(seed);
    std::normal_distribution<double> d;
    std::vector<T> v(n);
    for (auto& x : v) x = T(d(rng));
    return v;
}

/// One forward and backward: the loss, then dL/dx, then every parameter's gradient.
template <class Prog, class T>
std::vector<T> loss_and_gradients(Prog& prog, const std::vector<T>& x, const std::vector<T>& g, std::size_t rows,
                                  std::size_t in, std::size_t out) {
    prog.feed("x", x.data(), rshape{2, {rows, in}});
    prog.feed("g", g.data(), rshape{2, {rows, out}});
    prog.zero_grad();
    std::vector<T> r{prog.forward()};
    prog.backward();
    auto gx = prog.template input_grad<"x">();
    r.insert(r.end(), gx.begin(), gx.end());
    for (std::size_t s = 0; s < prog.params().size(); ++s) {
        const T* p = prog.params().grad(s);
        r.insert(r.end(), p, p + prog.params().at(s).shape.size());
    }
    return r;
}

/// sum(act(x W + b) * g) + sum(tanh(x)) (x's adjoint has two writers), fused and composed, over
/// one parameter store: the same bits where `out` is a multiple of the SIMD width, else within
/// the last bits of the activation's scalar form (the file comment of affine_activation.hpp).
template <class T, int In, int Out, class Fused, class Composed>
void check_same_as_composed(Fused fused_loss, Composed) {
    constexpr options opt{.input_grads = true};
    auto fused = compile<T, opt>(fused_loss);
    program_for<T, opt, Composed> composed(fused.shared_params());
    fused.params().init(3);
    fused.poison_arena(true);
    composed.poison_arena(true);
    const bool simd_rows = Out % kernels::batch<T>::size == 0;
    for (const int threads : {1, 2}) {
        testing::pool_threads pool(threads);
        // 600 rows x 64: the element-wise passes and the bias sums are split over two threads
        for (const std::size_t rows : {std::size_t(1), std::size_t(7), std::size_t(600)}) {
            INFO(threads << " threads, " << rows << " rows");
            const auto x = randoms<T>(rows * In, 11), g = randoms<T>(rows * Out, 12);
            const auto a = loss_and_gradients(fused, x, g, rows, In, Out);
            const auto b = loss_and_gradients(composed, x, g, rows, In, Out);
            REQUIRE(a.size() == b.size());
            REQUIRE(a.size() > rows * In + std::size_t(In * Out));
            for (std::size_t i = 0; i < a.size(); ++i) {
                INFO(i);
                if (simd_rows) REQUIRE(std::bit_cast<std::conditional_t<sizeof(T) == 8, std::uint64_t, std::uint32_t>>(a[i]) ==
                                       std::bit_cast<std::conditional_t<sizeof(T) == 8, std::uint64_t, std::uint32_t>>(b[i]));
                else REQUIRE(a[i] == Approx(b[i]).epsilon(sizeof(T) == 8 ? 1e-13 : 2e-5).margin(sizeof(T) == 8 ? 1e-13 : 2e-5));
            }
        }
    }
}

template <class T, int In, int Out>
void check_all_activations() {
    using X = input<"x", B, In>;
    using G = input<"g", B, Out>;
    using W = param<"W", In, Out>;
    using Bias = param<"b", Out>;
    check_same_as_composed<T, In, Out>(sum(mul(affine_gelu(X{}, W{}, Bias{}), G{})) + sum(tanh(X{})),
                                       sum(mul(gelu(affine(X{}, W{}, Bias{})), G{})) + sum(tanh(X{})));
    check_same_as_composed<T, In, Out>(sum(mul(affine_gelu_erf(X{}, W{}, Bias{}), G{})) + sum(tanh(X{})),
                                       sum(mul(gelu_erf(affine(X{}, W{}, Bias{})), G{})) + sum(tanh(X{})));
    check_same_as_composed<T, In, Out>(sum(mul(affine_relu(X{}, W{}, Bias{}), G{})) + sum(tanh(X{})),
                                       sum(mul(relu(affine(X{}, W{}, Bias{})), G{})) + sum(tanh(X{})));
}
}  // namespace

TEST_CASE("affine_gelu, affine_gelu_erf and affine_relu pass finite differences", "[gradcheck][fused]") {
    using X4 = input<"x", B, 4>;
    CHECK(check_gradients(affine_gelu(X4{}, param<"W", 4, 3>{}, param<"b", 3>{})) > 0);
    CHECK(check_gradients(affine_gelu_erf(input<"x3", B, T, 4>{}, param<"W", 4, 3>{}, param<"b", 3>{})) > 0);
    CHECK(check_gradients(affine_relu(X4{}, param<"W", 4, 3>{}, param<"b", 3>{})) > 0);
    CHECK(check_gradients(affine_gelu(X4{}, param<"W", 4, 3>{}, param<"b", 3>{}), {.dims = {{'B', 1}}}) > 0);  // one row
    // x read twice: its adjoint's first writer assigns, the second adds.
    CHECK(check_gradients(affine_gelu(X4{}, param<"W", 4, 4>{}, param<"b", 4>{}) + tanh(X4{})) > 0);
    // In a scan's step and a repeat's layer: dz in the step's adjoint block, beside live adjoints
    // (op.hpp, backward_scratch_size).
    const auto cell = [](auto h, auto x) {
        return tanh(affine(affine_gelu(x, param<"W", 4, 8>{}, param<"b", 8>{}), param<"V", 8, 3>{}, param<"c", 3>{}) + h);
    };
    CHECK(check_gradients(scan<3>(cell, input<"xs", T, B, 4>{}), {.dims = {{'T', 4}, {'B', 2}}}) > 0);
    CHECK(check_gradients(repeat<2, "blocks.">([](auto h) { return h + affine(affine_gelu(h, param<"W", 4, 8>{}, param<"b", 8>{}),
                                                                             param<"V", 8, 4>{}, param<"c", 4>{}); },
                                               X4{}), {.dims = {{'B', 3}}}) > 0);
}

TEST_CASE("affine_gelu, affine_gelu_erf and affine_relu equal the composed graph, value and every gradient", "[fused]") {
    check_all_activations<double, 24, 64>();  // the same bits
    check_all_activations<float, 24, 64>();
    check_all_activations<double, 5, 37>();  // row ends on the scalar form: the last bits may differ
    check_all_activations<float, 5, 37>();
}

namespace {
/// Three AdamW steps of the fused and the composed program side by side (options Opt): every loss
/// and every parameter after them must have the same bits.
template <options Opt, class Fused, class Composed, class Feed>
void require_same_training(Fused fused_loss, Composed composed_loss, Feed feed) {
    auto f = compile<float, Opt>(fused_loss);
    auto c = compile<float, Opt>(composed_loss);
    f.params().init(5);
    c.params().init(5);
    REQUIRE(f.params().size() == c.params().size());
    auto of = optim::adamw<float>({.lr = 1e-2, .weight_decay = 0.1}), oc = optim::adamw<float>({.lr = 1e-2, .weight_decay = 0.1});
    for (int step = 0; step < 3; ++step) {
        feed(f), feed(c);
        const float lf = train_step(f, of), lc = train_step(c, oc);
        INFO("step " << step);
        REQUIRE(std::isfinite(lf));
        REQUIRE(std::bit_cast<std::uint32_t>(lf) == std::bit_cast<std::uint32_t>(lc));
    }
    for (std::size_t s = 0; s < f.params().size(); ++s) {
        REQUIRE(f.params().at(s).name == c.params().at(s).name);
        for (std::size_t k = 0; k < f.params().at(s).shape.size(); ++k) {
            INFO(f.params().at(s).name << "[" << k << "]");
            REQUIRE(std::bit_cast<std::uint32_t>(f.params().value(s)[k]) == std::bit_cast<std::uint32_t>(c.params().value(s)[k]));
        }
    }
}

template <options Opt, class... Pairs>
void require_same_training_all(const auto& feed, const Pairs&... pairs) {
    (require_same_training<Opt>(pairs.first, pairs.second, feed), ...);
}
}  // namespace

TEST_CASE("affine_gelu in bf16 programs: the bits of gelu(affine), every engine and way of keeping values, 1 and 2 threads",
          "[bf16][fused]") {
    const kernels::bf16_engine saved_engine = kernels::get_bf16_engine();
    using H = input<"h", B, T, 16>;
    using Tg = input<"t", B, T, 16>;
    using W1 = param<"W1", 16, 64>;
    using B1 = param<"b1", 64>;
    using W2 = param<"W2", 64, 16>;
    using B2 = param<"b2", 16>;
    // The activation read by a product alone (bf16 only, no float), as in a Transformer's FFN.
    const auto fused = mse_loss(affine(affine_gelu(H{}, W1{}, B1{}), W2{}, B2{}), Tg{});
    const auto composed = mse_loss(affine(gelu(affine(H{}, W1{}, B1{})), W2{}, B2{}), Tg{});
    // In a repeat's layers: the pre-activation in the layer frames, its float in the adjoint block.
    const auto fused_r = mse_loss(repeat<2, "blocks.">([](auto h) { return h + affine(affine_gelu(h, W1{}, B1{}), W2{}, B2{}); }, H{}), Tg{});
    const auto composed_r =
        mse_loss(repeat<2, "blocks.">([](auto h) { return h + affine(gelu(affine(h, W1{}, B1{})), W2{}, B2{}); }, H{}), Tg{});
    // The activation read in forward by a sum too (add's VJP reads no operand): its float then
    // lives only while forward reads it, beside the pre-activation's float in the same memory.
    const auto fused_m = mse_loss(affine(affine_gelu(H{}, W1{}, B1{}), W2{}, B2{}), Tg{}) +
                         mean(affine_gelu(H{}, W1{}, B1{}) + affine_gelu(H{}, W1{}, B1{}));
    const auto composed_m = mse_loss(affine(gelu(affine(H{}, W1{}, B1{})), W2{}, B2{}), Tg{}) +
                            mean(gelu(affine(H{}, W1{}, B1{})) + gelu(affine(H{}, W1{}, B1{})));
    const auto fused_rm = mse_loss(repeat<2, "blocks.">([](auto h) {
                                       auto a = affine_gelu(h, W1{}, B1{});
                                       return h + affine(a, W2{}, B2{}) + reshape<B, T, 1>(mean<2, true>(a + a));
                                   }, H{}), Tg{});
    const auto composed_rm = mse_loss(repeat<2, "blocks.">([](auto h) {
                                          auto a = gelu(affine(h, W1{}, B1{}));
                                          return h + affine(a, W2{}, B2{}) + reshape<B, T, 1>(mean<2, true>(a + a));
                                      }, H{}), Tg{});
    // Two products reading the activation in a repeat's layers: its shadow, made again before the
    // later one's VJP, must live until the earlier one's, past tanh's VJP between them, whose
    // operand's adjoint (as large as the shadow) becomes live there: planned to live only during
    // the later product's VJP, the shadow is overwritten by it and this pair's bits differ.
    using W3 = param<"W3", 64, 32>;
    using B3 = param<"b3", 32>;
    using W4 = param<"W4", 64, 32>;
    using B4 = param<"b4", 32>;
    using W5 = param<"W5", 32, 16>;
    const auto two_readers = [](auto a, auto h) {
        return h + matmul(mul(tanh(affine(a, W4{}, B4{})), affine(a, W3{}, B3{})), W5{});
    };
    const auto fused_block2 = [&](auto h) { return two_readers(affine_gelu(h, W1{}, B1{}), h); };
    const auto composed_block2 = [&](auto h) { return two_readers(gelu(affine(h, W1{}, B1{})), h); };
    const auto fused_r2 = mse_loss(repeat<2, "blocks.">(fused_block2, H{}), Tg{});
    const auto composed_r2 = mse_loss(repeat<2, "blocks.">(composed_block2, H{}), Tg{});
    {  // (the case it is: affine_gelu's shadow is made again in the fused block, at levels 2 and 3)
        using blk = detail::cell_info<decltype(fused_block2(H{})), true>;
        std::size_t hi = 0;
        while (blk::G::kind[hi] != leaf_kind::input) ++hi;
        const typename detail::cell_frame<blk>::binding known{hi, rshape{3, {8, 64, 16}}, 0};
        for (const int level : {2, 3}) {
            detail::cell_frame<blk> frame;
            frame.plan(&known, 1, false, level);
            std::size_t remade = 0;
            for (std::size_t i = 0; i < blk::N; ++i)
                if (frame.remade[i]) {
                    ++remade;
                    CHECK(blk::G::label[i] == "affine_gelu");
                }
            CHECK(remade == 1);
        }
    }
    {  // (the case it is: a float kept while forward reads it, beside the op's forward scratch)
        using PM = decltype(compile<float, options{.precision = precision::bf16}>(fused_m));
        constexpr std::size_t a = std::size_t(PM::graph_type::template index_of<decltype(affine_gelu(H{}, W1{}, B1{}))>);
        static_assert(PM::bf16_only_nodes[a] && !PM::bf16_no_float_nodes[a]);
    }
    // 8 x 64 rows of 64: 32,768 elements, split over two threads.
    const auto h = randoms<float>(8 * 64 * 16, 41), t = randoms<float>(8 * 64 * 16, 42);
    auto feed = [&](auto& p) {
        p.feed("h", h.data(), rshape{3, {8, 64, 16}});
        p.feed("t", t.data(), rshape{3, {8, 64, 16}});
    };
    std::vector<kernels::bf16_engine> engines{kernels::bf16_engine::emulated};
    if (kernels::bf16_engine_available(kernels::bf16_engine::onednn)) engines.push_back(kernels::bf16_engine::onednn);
    for (const kernels::bf16_engine engine : engines) {
        kernels::set_bf16_engine(engine);
        for (const int threads : {1, 2}) {
            INFO(kernels::bf16_engine_name(engine) << ", " << threads << " threads");
            testing::pool_threads pool(threads);
            const auto one = std::pair{fused, composed};
            const auto layered = std::pair{fused_r, composed_r};
            const auto read_twice = std::pair{fused_m, composed_m};
            const auto layered_read_twice = std::pair{fused_rm, composed_rm};
            const auto layered_two_readers = std::pair{fused_r2, composed_r2};
            // the default (the pre-activation kept for backward in bf16), values in bf16 only,
            // bf16 shadows only, no shadows (products convert), recomputing a repeat's layers
            require_same_training_all<options{.precision = precision::bf16}>(feed, one, layered, read_twice, layered_read_twice,
                                                                            layered_two_readers);
            require_same_training_all<options{.precision = precision::bf16, .bf16_saved = false}>(feed, one, layered,
                                                                                                 layered_two_readers);
            require_same_training_all<options{.precision = precision::bf16, .bf16_only = false}>(feed, one, layered);
            require_same_training_all<options{.precision = precision::bf16, .bf16_shadows = false}>(feed, one, layered);
            require_same_training_all<options{.precision = precision::bf16, .recompute = true}>(feed, layered, layered_two_readers);
        }
    }
    kernels::set_bf16_engine(saved_engine);
}

TEST_CASE("affine_gelu keeps its pre-activation in bf16 where the composed program keeps GELU's input so, and its float "
          "while forward runs where the engine places it",
          "[bf16][fused]") {
    using H = input<"h", B, 16>;
    using W1 = param<"W1", 16, 64>;
    using B1 = param<"b1", 64>;
    using Ws = ops::affine_activation_op<ops::gelu_fn>;
    const std::array<rshape, 3> x{rshape{2, {10, 16}}, rshape{2, {16, 64}}, rshape{1, {64}}};
    const rshape y{2, {10, 64}};
    // For backward: in bf16 (two per float) only with the values that VJPs read kept rounded (level 3);
    // in a forward-only pass, as float, for forward alone.
    CHECK(Ws::scratch_size(y, x, false, false, 3) == 320);
    for (const int level : {0, 1, 2}) CHECK(Ws::scratch_size(y, x, false, false, level) == 640);
    CHECK(Ws::scratch_size(y, x, true, false, 0) == 640);
    CHECK(Ws::forward_scratch_size(y, x, 3) == 640);
    CHECK(Ws::forward_scratch_size(y, x, 2) == 0);
    // ReLU's derivative is not taken from a rounded input: its pre-activation stays float.
    CHECK(ops::affine_activation_op<ops::relu_fn>::scratch_size(y, x, false, false, 3) == 640);
    CHECK(ops::affine_activation_op<ops::relu_fn>::forward_scratch_size(y, x, 3) == 0);
    // A program's memory: the fused node's float pre-activation shares the transients' memory (as the
    // composed program's GELU input does), and there is no adjoint of it: a smaller arena.
    const auto loss = mse_loss(affine(affine_gelu(H{}, W1{}, B1{}), param<"W2", 64, 16>{}, param<"b2", 16>{}), input<"t", B, 16>{});
    const auto composed = mse_loss(affine(gelu(affine(H{}, W1{}, B1{})), param<"W2", 64, 16>{}, param<"b2", 16>{}), input<"t", B, 16>{});
    auto f = compile<float, options{.precision = precision::bf16}>(loss);
    auto c = compile<float, options{.precision = precision::bf16}>(composed);
    const auto h = randoms<float>(300 * 16, 1), t = randoms<float>(300 * 16, 2);
    f.feed("h", h.data(), rshape{2, {300, 16}});
    f.feed("t", t.data(), rshape{2, {300, 16}});
    c.feed("h", h.data(), rshape{2, {300, 16}});
    c.feed("t", t.data(), rshape{2, {300, 16}});
    f.forward();
    c.forward();
    INFO("fused " << f.arena_elements() << " elements, composed " << c.arena_elements());
    CHECK(f.arena_elements() + 300 * 64 <= c.arena_elements());
    // and the summary counts the forward scratch as the planner places it
    CHECK(f.summary({{'B', 300}}).arena_bytes == f.arena_elements() * sizeof(float));
    CHECK(c.summary({{'B', 300}}).arena_bytes == c.arena_elements() * sizeof(float));
    // A float program: z kept as T, dz in backward scratch (one region, one VJP at a time), which
    // the summary counts as the planner places it.
    auto d = compile<double>(loss);
    const auto hd = randoms<double>(300 * 16, 1), td = randoms<double>(300 * 16, 2);
    d.feed("h", hd.data(), rshape{2, {300, 16}});
    d.feed("t", td.data(), rshape{2, {300, 16}});
    d.forward();
    CHECK(Ws::backward_scratch_size(y, x, 0) == 640);
    CHECK(Ws::backward_scratch_size(y, x, 1) == 320);  // bf16 products: dz rounded
    CHECK(d.summary({{'B', 300}}).arena_bytes == d.arena_elements() * sizeof(double));
    CHECK(d.summary({{'B', 300}}).scratch_bytes >= 300 * 64 * 2 * sizeof(double));  // z kept, and dz
}

namespace {
/// The kernels' scratch (kernels::scratch_stack) that a new thread holds after running `run`: the
/// most its kernels and ops took at once beyond the memory the engine planned for them.
template <class F>
std::size_t kernel_scratch_after(F&& run) {
    std::size_t bytes = 0;
    std::exception_ptr failed;
    std::thread thread([&] {
        try {
            run();
            bytes = kernels::scratch_stack::here().capacity();
        } catch (...) {
            failed = std::current_exception();
        }
    });
    thread.join();
    if (failed) std::rethrow_exception(failed);
    return bytes;
}

/// Two training steps of `loss` (options Opt) over 2048 rows on the calling thread.
template <options Opt, class Loss>
void train_two_steps(Loss loss, const std::vector<float>& h, const std::vector<float>& t) {
    auto p = compile<float, Opt>(loss);
    p.params().init(7);
    auto opt = optim::adamw<float>({.lr = 1e-3});
    for (int step = 0; step < 2; ++step) {
        p.feed("h", h.data(), rshape{2, {2048, 16}});
        p.feed("t", t.data(), rshape{2, {2048, 16}});
        if (!std::isfinite(train_step(p, opt))) throw std::runtime_error("the loss is not finite");
    }
}
}  // namespace

TEST_CASE("affine_gelu's pre-activation and its adjoint live in memory the engine plans, not in the kernels' scratch",
          "[bf16][fused]") {
    const kernels::bf16_engine saved_engine = kernels::get_bf16_engine();
    testing::pool_threads pool(1);  // every kernel on the calling thread: its scratch is all there is
    using H = input<"h", B, 16>;
    using W1 = param<"W1", 16, 1024>;
    using B1 = param<"b1", 1024>;
    using W2 = param<"W2", 1024, 16>;
    using B2 = param<"b2", 16>;
    const auto one = mse_loss(affine(affine_gelu(H{}, W1{}, B1{}), W2{}, B2{}), input<"t", B, 16>{});
    const auto layered =
        mse_loss(repeat<2, "blocks.">([](auto h) { return h + affine(affine_gelu(h, W1{}, B1{}), W2{}, B2{}); }, H{}), input<"t", B, 16>{});
    const auto h = randoms<float>(2048 * 16, 51), t = randoms<float>(2048 * 16, 52);
    // 2048 x 1024: z in float is 8 MiB, dz in bf16 4 MiB. The products take about 1 MiB (the
    // emulation's blocks), the reserve is 1 MiB: an op taking z or dz from the kernels would show.
    const std::size_t limit = 2048 * 1024 * 2;
    INFO("kernel scratch reserve " << kernels::scratch_stack::scratch_reserve_bytes);
    // float: z is kept (the op's scratch), dz is backward scratch, placed with the adjoints
    CHECK(kernel_scratch_after([&] { train_two_steps<options{}>(one, h, t); }) < limit);
    CHECK(kernel_scratch_after([&] { train_two_steps<options{}>(layered, h, t); }) < limit);
    // bf16: z kept rounded, its float forward scratch (placed with the transients), dz in bf16
    std::vector<kernels::bf16_engine> engines{kernels::bf16_engine::emulated};
    if (kernels::bf16_engine_available(kernels::bf16_engine::onednn)) engines.push_back(kernels::bf16_engine::onednn);
    for (const kernels::bf16_engine engine : engines) {
        kernels::set_bf16_engine(engine);
        INFO(kernels::bf16_engine_name(engine));
        CHECK(kernel_scratch_after([&] { train_two_steps<options{.precision = precision::bf16}>(one, h, t); }) < limit);
        CHECK(kernel_scratch_after([&] { train_two_steps<options{.precision = precision::bf16}>(layered, h, t); }) < limit);
    }
    kernels::set_bf16_engine(saved_engine);
}

TEST_CASE("GELU's value from its input's bf16 shadow where its VJP reads it so, affine_gelu's from its rounded "
          "pre-activation, and its shadow made again from that in a repeat's backward: the same bits",
          "[bf16][fused]") {
    // The op alone. 10,001 elements: pieces of 4096 and a tail on the scalar form.
    const std::size_t n = 10'001;
    std::vector<float> x = randoms<float>(n, 61);
    for (float& v : x) v *= 4;
    std::vector<kernels::bf16_bits> xb(n), yb(n), want_b(n), z16(n), remade(n);
    std::vector<float> rounded(n), y(n), want(n);
    kernels::pack_bf16(false, 1, n, x.data(), n, xb.data());
    kernels::pack_bf16(false, 1, n, x.data(), n, rounded.data());
    using gelu_op = ops::unary_op<ops::gelu_fn>;
    gelu_op::apply(n, want.data(), want_b.data(), static_cast<const float*>(rounded.data()));  // GELU of the rounded floats
    op_io<float, 1> c;
    c.y = {y.data(), rshape{1, {n}}};
    c.x[0] = {nullptr, rshape{1, {n}}};  // kept in bf16 only: the engine hands its shadow alone
    c.xb[0] = xb.data();
    c.yb = yb.data();
    gelu_op::forward(c);
    CHECK(std::memcmp(y.data(), want.data(), n * sizeof(float)) == 0);
    CHECK(std::memcmp(yb.data(), want_b.data(), n * sizeof(kernels::bf16_bits)) == 0);
    bool differs = false;  // (and that is not GELU of the floats: the rule changes values)
    gelu_op::apply(n, y.data(), static_cast<kernels::bf16_bits*>(nullptr), static_cast<const float*>(x.data()));
    for (std::size_t k = 0; k < n; ++k) differs = differs || y[k] != want[k];
    CHECK(differs);
    // affine_gelu's forward from z's floats (rounding them into z16 on the way) and its shadow made
    // again from z16 alone: GELU of the rounded floats, as above.
    gelu_op::apply_rounded(n, y.data(), yb.data(), x.data(), nullptr, z16.data());
    CHECK(z16 == xb);
    CHECK(std::memcmp(y.data(), want.data(), n * sizeof(float)) == 0);
    CHECK(yb == want_b);
    using Ws = ops::affine_activation_op<ops::gelu_fn>;
    op_io<float, 3> a;
    a.y = {nullptr, rshape{2, {1, n}}};
    a.scratch = {z16.data(), rshape{1, {(n + 1) / 2}}};  // z in bf16: two per float
    a.yb = remade.data();
    Ws::remake_bf16_result(a);
    CHECK(remade == want_b);

    // In a repeat's layers (values in bf16 only, the default bf16 program), the FFN's activation
    // keeps no shadow in the frames: L of them less than the composed block, which keeps GELU's.
    using H = input<"h", B, 16>;
    using W1 = param<"W1", 16, 256>;
    using B1 = param<"b1", 256>;
    using W2 = param<"W2", 256, 16>;
    using B2 = param<"b2", 16>;
    const auto fused = mse_loss(repeat<3, "blocks.">([](auto h) { return h + affine(affine_gelu(h, W1{}, B1{}), W2{}, B2{}); }, H{}),
                                input<"t", B, 16>{});
    const auto composed = mse_loss(
        repeat<3, "blocks.">([](auto h) { return h + affine(gelu(affine(h, W1{}, B1{})), W2{}, B2{}); }, H{}), input<"t", B, 16>{});
    auto f = compile<float, options{.precision = precision::bf16}>(fused);
    auto g = compile<float, options{.precision = precision::bf16}>(composed);
    const auto h = randoms<float>(512 * 16, 62), t = randoms<float>(512 * 16, 63);
    const auto run = [&](auto& p) {
        p.feed("h", h.data(), rshape{2, {512, 16}});
        p.feed("t", t.data(), rshape{2, {512, 16}});
        p.forward();
    };
    run(f), run(g);
    const std::size_t shadow_floats = 512 * 256 / 2;
    INFO("fused " << f.arena_elements() << " elements, composed " << g.arena_elements());
    CHECK(f.arena_elements() + 3 * shadow_floats <= g.arena_elements());
    CHECK(f.summary({{'B', 512}}).arena_bytes == f.arena_elements() * sizeof(float));
}
