// The engine: node identity, topological order, printing, memory planning, parameter sharing.
#include <catch2/catch.hpp>

#include <array>
#include <cmath>
#include <string>
#include <vector>

#include <ctgraph/ctgraph.hpp>
#include <ctgraph/xtensor.hpp>
#include <xtensor/xmanipulation.hpp>
#include <xtensor/xview.hpp>

using namespace ctg;

namespace {
inline constexpr dim B = dyn('B');
using X = input<"x", B, 3>;
using W = param<"W", 3, 3>;
}  // namespace

TEST_CASE("structurally identical subexpressions are one node", "[engine]") {
    auto h1 = tanh(X{} * W{});
    auto h2 = tanh(X{} * W{});  // spelled again: the same type, hence the same node
    STATIC_REQUIRE(std::is_same_v<decltype(h1), decltype(h2)>);
    auto prog = compile<double>(sum(mul(h1, h2) + h1));
    // x, W, matmul, tanh, mul, add, sum: 7 nodes, not 10.
    STATIC_REQUIRE(decltype(prog)::N == 7);
    using G = decltype(prog)::graph_type;
    // tanh (node 3) is read by mul twice and by add once.
    STATIC_REQUIRE(G::consumers[3] == 3);
    STATIC_REQUIRE(G::last_use[3] == 5);
}

namespace {
// The same expression written in another function: node identity does not depend on where (or
// in which order) a node is made.
auto gate_elsewhere(auto x) { return sigmoid(x * W{} + param<"b", 3>{}); }
}  // namespace

TEST_CASE("node identity: the op, its attributes and the operands in order, nothing else", "[engine]") {
    using A = input<"a", B, 3>;
    using C = input<"c", B, 3>;
    // Same structure, built twice and in another function: one type.
    STATIC_REQUIRE(std::is_same_v<decltype(sigmoid(X{} * W{} + param<"b", 3>{})), decltype(gate_elsewhere(X{}))>);
    // Different op, operand order, attributes, operands, or one more level: different types.
    STATIC_REQUIRE(!std::is_same_v<decltype(A{} - C{}), decltype(C{} - A{})>);
    STATIC_REQUIRE(!std::is_same_v<decltype(A{} + C{}), decltype(A{} - C{})>);
    STATIC_REQUIRE(!std::is_same_v<decltype(tanh(A{})), decltype(sigmoid(A{}))>);
    STATIC_REQUIRE(!std::is_same_v<decltype(scale<0.5>(A{})), decltype(scale<0.25>(A{}))>);
    STATIC_REQUIRE(!std::is_same_v<decltype(sum<0>(A{})), decltype(sum<1>(A{}))>);
    STATIC_REQUIRE(!std::is_same_v<decltype(tanh(A{})), decltype(tanh(C{}))>);
    STATIC_REQUIRE(!std::is_same_v<decltype(tanh(A{})), decltype(tanh(tanh(A{})))>);
    // Leaves whose names differ only after 10 characters (clang abbreviates them in type names).
    STATIC_REQUIRE(!std::is_same_v<decltype(A{} * param<"dec.cross.q.weight", 3, 3>{}),
                                   decltype(A{} * param<"dec.cross.k.weight", 3, 3>{})>);
    // What a node knows about itself travels with its type.
    using N = decltype(A{} * W{});
    STATIC_REQUIRE(std::is_same_v<N::op, ops::matmul_op>);
    STATIC_REQUIRE(std::is_same_v<N::args, tlist<A, W>>);
    STATIC_REQUIRE(std::is_same_v<N::shape, shape<B, 3>>);
}

TEST_CASE("a deep DAG-shaped graph stays one node per distinct subexpression", "[engine]") {
    // Each level names the previous one twice (a residual), which a type spelling its operands
    // would repeat 2^depth times.
    auto x0 = X{};
    auto x1 = x0 + tanh(x0 * W{});
    auto x2 = x1 + tanh(x1 * W{});
    auto x3 = x2 + tanh(x2 * W{});
    auto x4 = x3 + tanh(x3 * W{});
    auto x5 = x4 + tanh(x4 * W{});
    auto x6 = x5 + tanh(x5 * W{});
    auto x7 = x6 + tanh(x6 * W{});
    auto x8 = x7 + tanh(x7 * W{});
    auto prog = compile<double>(sum(x8));
    STATIC_REQUIRE(decltype(prog)::N == 2 + 8 * 3 + 1);  // x, W, 3 nodes per level, sum
    prog.params().init(3);
    prog.feed<"x">(xt::xtensor<double, 2>{{0.1, -0.2, 0.3}});
    const double y = prog.forward();
    CHECK(std::isfinite(y));
}

TEST_CASE("the order is topological and leaves without parameters need no adjoint", "[engine]") {
    auto prog = compile<float>(mean(relu(X{} * W{} + param<"b", 3>{})));
    using G = decltype(prog)::graph_type;
    for (std::size_t i = 0; i < G::size; ++i)
        for (std::size_t k = 0; k < G::arity[i]; ++k) CHECK(G::operands[i][k] < int(i));
    STATIC_REQUIRE(!G::needs_grad[0]);  // the input x
    STATIC_REQUIRE(G::needs_grad[1]);   // W
    STATIC_REQUIRE(G::num_params == 2);
    STATIC_REQUIRE(G::num_inputs == 1);
}

TEST_CASE("a program prints as text and as Graphviz DOT", "[engine]") {
    auto prog = compile<float>(mean(tanh(X{} * W{})));
    const std::string text = prog.to_text();
    CHECK(text.find("%0 = input \"x\" : (B,3)") != std::string::npos);
    CHECK(text.find("%1 = param \"W\" : (3,3)  [adjoint]") != std::string::npos);
    CHECK(text.find("%2 = matmul(%0, %1) : (B,3)") != std::string::npos);
    CHECK(text.find("%4 = mean[all](%3) : ()") != std::string::npos);
    const std::string dot = prog.to_dot();
    CHECK(dot.rfind("digraph ctgraph {", 0) == 0);
    CHECK(dot.find("n0 -> n2;") != std::string::npos);
    CHECK(dot.find("n1 -> n2;") != std::string::npos);
    // After a forward pass, dynamic dimensions print with their values.
    prog.params().init(3);
    prog.feed<"x">(xt::xtensor<float, 2>(xt::ones<float>({5, 3})));
    prog.forward();
    CHECK(prog.to_text().find("(B,3)=(5,3)") != std::string::npos);
}

TEST_CASE("forward and backward match a hand computation", "[engine]") {
    // L = mean((x W + b)^2 - y)... kept tiny so the expected numbers are exact.
    auto prog = compile<double>(mse_loss(X{} * W{} + param<"b", 3>{}, input<"y", B, 3>{}));
    prog.param<"W">() = xt::eye<double>(3);
    prog.param<"b">() = xt::xtensor<double, 1>{1, 0, 0};
    prog.feed<"x">(xt::xtensor<double, 2>{{1, 2, 3}});
    prog.feed<"y">(xt::xtensor<double, 2>{{0, 0, 0}});
    // prediction (2, 2, 3): L = (4 + 4 + 9) / 3
    CHECK(prog.forward() == Approx(17.0 / 3));
    prog.backward();
    // dL/db = 2 p / 3 = (4/3, 4/3, 2); dL/dW = x^T (2p/3)
    auto gb = prog.grad<"b">();
    CHECK(gb(0) == Approx(4.0 / 3));
    CHECK(gb(2) == Approx(2.0));
    CHECK(prog.grad<"W">()(2, 2) == Approx(6.0));
    // backward adds: a second backward doubles the gradient; zero_grad clears it.
    prog.backward();
    CHECK(prog.grad<"b">()(2) == Approx(4.0));
    prog.zero_grad();
    CHECK(prog.grad<"b">()(2) == 0.0);
}

TEST_CASE("constants hold their values, in training and inference programs and in a reshape's operand", "[engine]") {
    // A gradient check cannot see a constant's value where it only scales (x * c: forward and
    // backward would agree on a wrong c), so the values are checked here.
    auto y = mul(X{}, constant<2.5>{}) + mul(constant<-1>{}, reshape<B, 3>(X{} - constant<0.5>{}));
    const xt::xtensor<double, 2> x{{1, 2, 3}, {-4, 0.25, 8}};
    const xt::xtensor<double, 2> expected = 2.5 * x - (x - 0.5);
    auto train = compile<double>(y);
    train.feed<"x">(x);
    train.forward();
    CHECK(xt::allclose(train.output(), expected, 0.0, 1e-15));
    auto infer = compile<float, options{.inference = true}>(y);
    infer.feed<"x">(x);
    infer.forward();
    CHECK(xt::allclose(infer.output(), xt::cast<float>(expected), 0.0f, 1e-6f));
}

TEST_CASE("zero_grad is lazy: the next backward assigns, and nothing stale is ever seen", "[engine]") {
    // W is used twice (its second writer adds to what the first assigned); V belongs to another
    // program of the same store, which this program's backward must zero.
    using Y = input<"y", B, 3>;
    auto loss = mse_loss(tanh(X{} * W{}) * W{} + param<"b", 3>{}, Y{});
    const xt::xtensor<double, 2> x{{1, -2, 0.5}, {0.3, 0.7, -1}}, y{{0.1, 0.2, 0.3}, {-0.5, 0, 1}};
    auto run = [&](auto& p) {
        p.template feed<"x">(x);
        p.template feed<"y">(y);
        p.forward();
        p.backward();
    };
    auto ref = compile<double>(loss);
    ref.params().init(3);
    run(ref);
    const auto gw = xt::eval(ref.grad<"W">()), gb = xt::eval(ref.grad<"b">());

    auto prog = compile<double>(loss);
    prog.params().values() = ref.params().values();
    auto other = program_for<double, options{}, decltype(mean(tanh(X{} * param<"V", 3, 3>{})))>(prog.shared_params());
    other.params().init("V", [](auto&, std::size_t i) { return 0.1 * double(i); });
    for (int k = 0; k < 3; ++k) run(prog);  // stale sums in W and b
    other.feed<"x">(x);
    other.forward();
    other.backward();  // and in V
    const auto v_slot = prog.params().slot("V");
    CHECK(prog.params().grad(v_slot)[1] != 0.0);

    prog.zero_grad();
    CHECK(prog.params().zero_pending());
    run(prog);
    CHECK_FALSE(prog.params().zero_pending());
    CHECK(xt::allclose(prog.grad<"W">(), gw, 1e-15, 0));
    CHECK(xt::allclose(prog.grad<"b">(), gb, 1e-15, 0));
    for (std::size_t i = 0; i < 9; ++i) CHECK(prog.params().grad(v_slot)[i] == 0.0);  // the other program's

    run(prog);  // no zero_grad in between: backward adds
    CHECK(xt::allclose(prog.grad<"W">(), 2.0 * gw, 1e-15, 0));

    // Read before any backward: the pending zero is carried out on access.
    prog.zero_grad();
    for (double g : prog.params().grads()) CHECK(g == 0.0);
    CHECK_FALSE(prog.params().zero_pending());
    run(prog);
    CHECK(xt::allclose(prog.grad<"b">(), gb, 1e-15, 0));
}

TEST_CASE("the arena is planned once per size and reused", "[engine]") {
    auto prog = compile<float>(mean(tanh(X{} * W{})));
    prog.params().init(1);
    xt::xtensor<float, 2> x = xt::ones<float>({8, 3});
    prog.feed<"x">(x);
    prog.forward();
    prog.backward();
    const std::size_t arena = prog.arena_elements();
    const float* where = prog.value_view(2).as<float>();
    for (int step = 0; step < 3; ++step) {
        prog.feed<"x">(x);
        prog.forward();
        prog.backward();
    }
    CHECK(prog.arena_elements() == arena);
    CHECK(prog.value_view(2).as<float>() == where);
    // A smaller batch reuses the same memory; the dimension letter follows the input.
    prog.feed<"x">(xt::xtensor<float, 2>(xt::ones<float>({2, 3})));
    prog.forward();
    CHECK(prog.dim_value('B') == 2);
    CHECK(prog.arena_elements() == arena);
}

TEST_CASE("two programs share one parameter store by name", "[engine]") {
    auto train = compile<float>(mean(tanh(X{} * W{})));
    train.params().init(5);
    auto infer = program_for<float, options{}, decltype(tanh(X{} * W{}))>(train.shared_params());
    CHECK((infer.param<"W">() == train.param<"W">()));
    train.param<"W">()(0, 0) = 42.0f;
    CHECK(infer.param<"W">()(0, 0) == 42.0f);
    infer.feed<"x">(xt::xtensor<float, 2>{{1, 0, 0}});
    infer.forward();
    CHECK(infer.output()(0, 0) == Approx(std::tanh(42.0f)));
}

TEST_CASE("parameters are initialised Xavier-uniform (matrices) and zero (vectors)", "[engine]") {
    auto prog = compile<double>(mean(X{} * param<"W", 3, 300>{} + param<"b", 300>{}));
    prog.params().init(11);
    auto w = prog.param<"W">();
    const double a = std::sqrt(6.0 / (3 + 300));
    CHECK(xt::amax(xt::abs(w))() <= a);
    CHECK(xt::amax(xt::abs(w))() > 0.9 * a);
    CHECK(std::abs(xt::mean(w)()) < 0.1 * a);
    CHECK(xt::amax(xt::abs(prog.param<"b">()))() == 0.0);
    // Deterministic per seed.
    auto again = compile<double>(mean(X{} * param<"W", 3, 300>{} + param<"b", 300>{}));
    again.params().init(11);
    CHECK((again.param<"W">() == prog.param<"W">()));
}

TEST_CASE("a two-layer network learns XOR", "[engine]") {
    using In = input<"x", B, 2>;
    using Tg = index_input<"y", B>;
    auto logits = tanh(In{} * param<"W1", 2, 8>{} + param<"b1", 8>{}) * param<"W2", 8, 2>{} + param<"b2", 2>{};
    auto prog = compile<float>(softmax_cross_entropy(logits, Tg{}));
    prog.params().init(2);
    prog.feed<"x">(xt::xtensor<float, 2>{{0, 0}, {0, 1}, {1, 0}, {1, 1}});
    prog.feed<"y">(xt::xtensor<int, 1>{0, 1, 1, 0});
    float first = prog.forward(), last = first;
    for (int step = 0; step < 500; ++step) {
        prog.zero_grad();
        last = prog.forward();
        prog.backward();
        auto& ps = prog.params();
        for (std::size_t i = 0; i < ps.values().size(); ++i) ps.values()[i] -= 0.5f * ps.grads()[i];
    }
    CHECK(first > 0.5f);
    CHECK(last < 0.05f);
}

TEST_CASE("a program moves (its views stay valid) and does not copy", "[engine]") {
    STATIC_REQUIRE(!std::is_copy_constructible_v<decltype(compile<float>(mean(tanh(X{} * W{}))))>);
    auto a = compile<float>(mean(tanh(X{} * W{})));
    a.params().init(4);
    a.feed<"x">(xt::xtensor<float, 2>{{1, 2, 3}});
    const float before = a.forward();
    auto b = std::move(a);
    b.feed<"x">(xt::xtensor<float, 2>{{1, 2, 3}});
    CHECK(b.forward() == before);
    b.backward();
    CHECK(std::isfinite(b.grad<"W">()(0, 0)));
}

TEST_CASE("an inference program computes the same outputs with no adjoint memory", "[engine]") {
    auto model = [] { return softmax(tanh(X{} * W{}) * param<"V", 3, 5>{}); };
    auto train = compile<float>(model());
    auto infer = program_for<float, options{.inference = true}, decltype(model())>(train.shared_params());
    STATIC_REQUIRE(!decltype(infer)::graph_type::needs_grad[1]);
    train.params().init(6);
    xt::xtensor<float, 2> x = {{1, 2, 3}, {0, -1, 0.5}};
    train.feed<"x">(x);
    infer.feed<"x">(x);
    train.forward();
    infer.forward();
    CHECK((train.output() == infer.output()));
    CHECK(infer.arena_elements() < train.arena_elements());
}

namespace {
// A tensor of the user's own (no xtensor): shape() and row-major begin()/end() are all feed needs.
template <class V, std::size_t R>
struct plain_tensor {
    std::array<std::size_t, R> dims;
    std::vector<V> elems;
    const std::array<std::size_t, R>& shape() const { return dims; }
    auto begin() const { return elems.begin(); }
    auto end() const { return elems.end(); }
};
}  // namespace

TEST_CASE("feed takes xtensor containers, strided views and expressions, and a user's own tensor type alike", "[engine]") {
    auto logits = X{} * W{};
    auto prog = compile<double>(softmax_cross_entropy(logits, index_input<"y", B>{}));
    prog.params().init(3);
    const std::vector<double> x = {1, -2, 3, 0.5, 0.25, -4};
    const std::vector<index_t> y = {2, 0};
    prog.feed("x", x.data(), rshape{2, {2, 3}});
    prog.feed("y", y.data(), rshape{1, {2}});
    const double reference = prog.forward();

    SECTION("an xt::xtensor (one contiguous block) and integer labels in an xt::xtensor<long>") {
        prog.feed<"x">(xt::xtensor<double, 2>{{1, -2, 3}, {0.5, 0.25, -4}});
        prog.feed<"y">(xt::xtensor<long, 1>{2, 0});
    }
    SECTION("a transposed view (strided: read by its iterators) and a lazy expression") {
        xt::xtensor<double, 2> xt_t = {{1, 0.5}, {-2, 0.25}, {3, -4}};
        prog.feed<"x">(xt::transpose(xt_t));
        prog.feed<"y">(xt::xtensor<int, 1>{1, -1} + 1);  // {2, 0}
    }
    SECTION("a view that is a contiguous row block of a larger tensor (data_offset != 0)") {
        xt::xtensor<double, 2> big = {{9, 9, 9}, {1, -2, 3}, {0.5, 0.25, -4}};
        prog.feed<"x">(xt::view(big, xt::range(1, 3), xt::all()));
        prog.feed<"y">(xt::xtensor<int, 1>{2, 0});
    }
    SECTION("the user's own tensor type, float elements into a double program") {
        prog.feed<"x">(plain_tensor<float, 2>{{2, 3}, {1, -2, 3, 0.5f, 0.25f, -4}});
        prog.feed<"y">(plain_tensor<short, 1>{{2}, {2, 0}});
    }
    CHECK(prog.forward() == reference);
    CHECK(*prog.output_data() == reference);  // the raw read of the (scalar) output
    CHECK(prog.output_shape().rank == 0);
}

TEST_CASE("options::input_grads_for: only the named inputs get adjoints, equal to input_grads = true's", "[engine]") {
    using H = input<"h", B, 3>;
    using U = input<"u", B, 3>;
    constexpr auto loss = sum(mul(tanh(X{} * W{} + H{} * W{}), U{}));  // operator* is the matrix product
    auto all = compile<double, options{.input_grads = true}>(loss);
    auto only_x = compile<double, options{.input_grads_for = "x"}>(loss);
    auto x_and_u = compile<double, options{.input_grads_for = "x, u"}>(loss);
    using Gx = decltype(only_x)::graph_type;
    STATIC_REQUIRE(Gx::needs_grad[Gx::index_of<X>]);
    STATIC_REQUIRE_FALSE(Gx::needs_grad[Gx::index_of<H>]);  // h's product for dL/dh is not run
    STATIC_REQUIRE_FALSE(Gx::needs_grad[Gx::index_of<U>]);
    using Gxu = decltype(x_and_u)::graph_type;
    STATIC_REQUIRE(Gxu::needs_grad[Gxu::index_of<U>]);
    STATIC_REQUIRE_FALSE(Gxu::needs_grad[Gxu::index_of<H>]);
    const double x[] = {0.5, -1, 2, 0.25, 1.5, -0.5}, h[] = {1, 0.5, -0.25, 2, -1, 0}, u[] = {0.3, -0.2, 0.1, 1, 2, -3};
    auto run = [&](auto& p) {
        p.params().init(4);
        p.feed("x", x, rshape{2, {2, 3}});
        p.feed("h", h, rshape{2, {2, 3}});
        p.feed("u", u, rshape{2, {2, 3}});
        p.zero_grad();
        const double l = p.forward();
        p.backward();
        return l;
    };
    const double l = run(all);
    CHECK(run(only_x) == l);
    CHECK(run(x_and_u) == l);
    const auto gx = all.input_grad<"x">(), gu = all.input_grad<"u">();
    const auto gx1 = only_x.input_grad<"x">(), gx2 = x_and_u.input_grad<"x">(), gu2 = x_and_u.input_grad<"u">();
    for (std::size_t k = 0; k < 6; ++k) {
        CHECK(gx1.data()[k] == gx.data()[k]);
        CHECK(gx2.data()[k] == gx.data()[k]);
        CHECK(gu2.data()[k] == gu.data()[k]);
    }
    for (std::size_t k = 0; k < 9; ++k) CHECK(only_x.params().grad(0)[k] == all.params().grad(0)[k]);
}
