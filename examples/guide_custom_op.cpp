// A primitive op written in user code, following the contract of ctgraph/op.hpp: a row-wise dot
// product, rowdot(a, b) = sum over the last axis of a * b, from two (..., N) tensors to (...).
// The program checks the op three ways and exits non-zero if any check fails:
//   1. its forward against the same sum computed by hand;
//   2. its vector-Jacobian product against central finite differences (float64), for a parameter
//      and an input that reach it through other ops;
//   3. it trains: a small model built on it fits a teacher's outputs in float32;
//   4. where ctgraph::onnx is built: exported to ONNX with its own lowering, ONNX Runtime's output
//      equals ctgraph's (skipped with a message where Node lacks onnxruntime-node).
// docs/guide/custom-op.md walks through it.
#include <cmath>
#include <cstdio>
#include <random>

#include <ctgraph/ctgraph.hpp>
#include <ctgraph/xtensor.hpp>
#if defined(CTG_HAVE_ONNX)  // where CMake built ctgraph::onnx (check 4 below)
#include <ctgraph/onnx.hpp>
#include <ctgraph/onnx/onnxruntime.hpp>
#endif

using namespace ctg;

// [op]
struct rowdot_op {
    static constexpr std::string_view name = "rowdot";  // printed by to_text() and in errors

    // Shape rule: both operands have the same shape, of rank 1 or more.
    template <class A, class B>
    static consteval bool check() {
        if constexpr (A::rank == 0 || A::rank != B::rank) {
            return false;
        } else {
            for (std::size_t i = 0; i < A::rank; ++i)
                if (!(A::dims[i] == B::dims[i])) return false;
            return true;
        }
    }
    // The result's dimensions: the operands' without the last.
    template <class A, class B>
    static consteval auto dims() {
        std::array<dim, A::rank - 1> d{};
        for (std::size_t i = 0; i + 1 < A::rank; ++i) d[i] = A::dims[i];
        return d;
    }

    // Forward: writes every element of y.
    template <class T>
    static void forward(op_io<T, 2>& c) {
        const std::size_t rows = c.x[0].shape.rows(), n = c.x[0].shape.cols();
        const T *a = c.x_data(0), *b = c.x_data(1);
        T* y = c.y_data();
        for (std::size_t r = 0; r < rows; ++r) {
            T s = 0;
            for (std::size_t i = 0; i < n; ++i) s += a[r * n + i] * b[r * n + i];
            y[r] = s;
        }
    }
    // VJP: ADDS dL/da = gy b and dL/db = gy a into the adjoints that are wanted (non-null).
    template <class T>
    static void backward(op_io<T, 2>& c) {
        const std::size_t rows = c.x[0].shape.rows(), n = c.x[0].shape.cols();
        const T *a = c.x_data(0), *b = c.x_data(1), *gy = c.gy_data();
        if (T* ga = c.gx_data(0))
            for (std::size_t r = 0; r < rows; ++r)
                for (std::size_t i = 0; i < n; ++i) ga[r * n + i] += gy[r] * b[r * n + i];
        if (T* gb = c.gx_data(1))
            for (std::size_t r = 0; r < rows; ++r)
                for (std::size_t i = 0; i < n; ++i) gb[r * n + i] += gy[r] * a[r * n + i];
    }
    // Optional: its ONNX lowering, for ctg::onnx::save (docs/guide/onnx-export.md). B is
    // ctg::onnx::op_lowering, known only where a program is exported.
    template <class B>
    static void onnx(B& b) {
        b.emit_y("ReduceSum", {b.emit("Mul", {b.x(0), b.x(1)}), b.ints({-1})}, {{"keepdims", 0}});
    }
};

/// Row-wise dot product of two tensors of the same shape (..., N) -> (...).
template <expr A, expr B>
constexpr auto rowdot(A a, B b) {
    static_assert(with_shapes<any_poison<A, B> || rowdot_op::check<typename A::shape, typename B::shape>(),
                              typename A::shape::pretty, typename B::shape::pretty>::value,
                  "rowdot: the operands must have the same shape, of rank 1 or more");
    return make_float_node<rowdot_op>(a, b);
}
// [op]

inline constexpr dim B = dyn('B');
constexpr int X = 4, H = 3;

// [model]
// The op inside a model: a learned projection of x, compared row by row with y.
constexpr auto similarity() { return rowdot(tanh(input<"x", B, X>{} * param<"W", X, H>{}), input<"y", B, H>{}); }
constexpr auto loss() { return mse_loss(similarity(), input<"target", B>{}); }
// [model]

template <class T>
xt::xtensor<T, 2> random_matrix(std::size_t r, std::size_t c, std::mt19937_64& rng) {
    std::uniform_real_distribution<double> u(-1, 1);
    xt::xtensor<T, 2> m = xt::zeros<T>({r, c});
    for (auto& v : m) v = T(u(rng));
    return m;
}

int main() try {
    std::mt19937_64 rng(5);
    int failures = 0;
    const std::size_t batch = 5;
    const auto x = random_matrix<double>(batch, X, rng), y = random_matrix<double>(batch, H, rng);
    xt::xtensor<double, 1> target = xt::zeros<double>({batch});
    for (auto& v : target) v = std::uniform_real_distribution<double>(-1, 1)(rng);

    // 1. Forward: the program's second output against the definition, summed by hand.
    auto prog = compile<double, options{.input_grads = true}>(loss(), similarity());
    prog.params().init(1);
    prog.feed<"x">(x);
    prog.feed<"y">(y);
    prog.feed<"target">(target);
    prog.forward();
    const auto W = prog.param<"W">();
    double forward_error = 0;
    for (std::size_t r = 0; r < batch; ++r) {
        double s = 0;
        for (std::size_t j = 0; j < H; ++j) {
            double z = 0;
            for (std::size_t i = 0; i < X; ++i) z += x(r, i) * W(i, j);
            s += std::tanh(z) * y(r, j);
        }
        forward_error = std::max(forward_error, std::abs(prog.output<1>()(r) - s));
    }
    std::printf("forward: largest difference from the definition %.2e\n", forward_error);
    failures += !(forward_error < 1e-12);

    // 2. VJP against central differences: dL/dW (through tanh and the product) and dL/dy.
    // [gradcheck]
    prog.zero_grad();
    prog.forward();
    prog.backward();
    const xt::xtensor<double, 2> dW = prog.grad<"W">(), dy = prog.input_grad<"y">();
    const double eps = 1e-6;
    double grad_error = 0;
    auto compare = [&](double analytic, double& value, auto refeed) {
        const double saved = value;
        value = saved + eps;
        refeed();
        const double up = prog.forward();
        value = saved - eps;
        refeed();
        const double down = prog.forward();
        value = saved;
        refeed();
        const double numeric = (up - down) / (2 * eps);
        grad_error = std::max(grad_error, std::abs(analytic - numeric) / std::max(1.0, std::abs(numeric)));
    };
    auto Wv = prog.param<"W">();  // a view of the weights in the store: writes go to the model
    for (std::size_t i = 0; i < X; ++i)
        for (std::size_t j = 0; j < H; ++j) compare(dW(i, j), Wv(i, j), [] {});
    auto yv = y;  // an input is copied in by feed: perturb a copy and feed it again
    for (std::size_t r = 0; r < batch; ++r)
        for (std::size_t j = 0; j < H; ++j) compare(dy(r, j), yv(r, j), [&] { prog.feed<"y">(yv); });
    std::printf("VJP: largest relative difference from central differences %.2e (%zu elements)\n", grad_error,
                dW.size() + dy.size());
    failures += !(grad_error < 1e-7);
    // [gradcheck]

    // 3. Training in float32: W learns a teacher's projection from its similarities alone.
    // [train]
    auto train = compile<float>(loss());
    train.params().init(2);
    auto teacher = compile<float, options{.inference = true}>(similarity());
    teacher.params().init(3);
    optim::adam<float> opt({.lr = 0.02});
    float first = 0, last = 0;
    for (int step = 0; step < 300; ++step) {
        const auto xb = random_matrix<float>(32, X, rng), yb = random_matrix<float>(32, H, rng);
        teacher.feed<"x">(xb);
        teacher.feed<"y">(yb);
        teacher.forward();
        train.feed<"x">(xb);
        train.feed<"y">(yb);
        train.feed<"target">(xt::xtensor<float, 1>(teacher.output()));
        train.zero_grad();
        last = train.forward();
        train.backward();
        opt.step(train.params());
        if (step == 0) first = last;
    }
    std::printf("training: loss %.5f at the first step, %.6f after 300\n", first, last);
    failures += !(last < 0.01f * first);
    // [train]

#if defined(CTG_HAVE_ONNX)
    // 4. Exported to ONNX with its own lowering, run in ONNX Runtime (where Node has it).
    // [onnx]
    onnx::save(teacher, "guide_custom_op.onnx", {.output_names = {"similarity"}});
    if (auto why = onnx::onnxruntime_missing()) {
        std::printf("%s\n", why->c_str());
    } else {
        const auto xb = random_matrix<float>(7, X, rng), yb = random_matrix<float>(7, H, rng);
        teacher.feed<"x">(xb);
        teacher.feed<"y">(yb);
        teacher.forward();
        const auto r = onnx::run_onnxruntime("guide_custom_op.onnx", {onnx::feed_tensor::floats("x", {7, X}, xb.begin(), xb.end()),
                                                                      onnx::feed_tensor::floats("y", {7, H}, yb.begin(), yb.end())});
        double onnx_error = 0;
        for (std::size_t r0 = 0; r0 < 7; ++r0)
            onnx_error = std::max(onnx_error, double(std::abs(r.outputs[0].values[r0] - teacher.output()(r0))));
        std::printf("ONNX Runtime: largest difference from ctgraph %.2e\n", onnx_error);
        failures += !(onnx_error < 1e-5);
    }
    // [onnx]
#endif

    std::printf("%s", train.to_text().c_str());
    std::printf("%s\n", failures ? "FAILED" : "all checks passed");
    return failures ? 1 : 0;
} catch (const ctg::error& e) {
    std::fprintf(stderr, "error: %s\n", e.what());
    return 2;
}
