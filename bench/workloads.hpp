// bench/workloads.hpp: the reference workloads of shared/WORKLOADS.md written with ctgraph, and
// what ctg-bench needs of each: initialise, feed a batch, run a training step, and map between
// ctgraph's parameters and the PyTorch dump (names are PyTorch's; weights stored [out, in] there
// are stored transposed [in, out] here, because ctgraph writes x W, not W x).
#pragma once
#include <cstddef>
#include <random>
#include <set>
#include <string>
#include <vector>

#include <boost/hana/type.hpp>
#include <boost/hana/tuple.hpp>

#include <ctgraph/ctgraph.hpp>
#include <ctgraph/npz.hpp>

namespace ctg::bench {

inline constexpr dim B = dyn('B');

/// One training step (forward, loss, backward, optimizer update), the same for every workload.
template <class W>
struct workload_base {
    auto step(bool update = true) {
        W& w = static_cast<W&>(*this);
        w.prog.zero_grad();
        const auto l = w.prog.forward();
        w.prog.backward();
        if (update) w.opt.step(w.prog.params());
        return l;
    }
};

/// The `mlp` workload: 784 -> 256 -> 10, ReLU, softmax cross-entropy (mean), SGD lr 0.1, batch 64.
template <class T>
struct mlp : workload_base<mlp<T>> {
    static constexpr const char* name = "mlp";
    static constexpr std::size_t batch = 64;
    using X = input<"x", B, 784>;
    using Y = index_input<"y", B>;
    static constexpr auto loss() {
        auto h = relu(X{} * param<"fc1_weight", 784, 256>{} + param<"fc1_bias", 256>{});
        return softmax_cross_entropy(h * param<"fc2_weight", 256, 10>{} + param<"fc2_bias", 10>{}, Y{});
    }
    decltype(compile<T>(loss())) prog = compile<T>(loss());
    optim::sgd<T> opt{{.lr = 0.1}};

    /// PyTorch weights stored [out, in] (transposed here).
    static std::set<std::string> transposed() { return {"fc1_weight", "fc2_weight"}; }
    /// Multiply-adds of the matrix products x2, forward + backward (3x forward), as torch_ref.py counts.
    static double flops() { return 3.0 * (2.0 * batch * 784 * 256 + 2.0 * batch * 256 * 10); }

    void random_batch(unsigned long long seed) {
        std::mt19937_64 rng(seed);
        std::normal_distribution<double> n01;
        std::uniform_int_distribution<int> cls(0, 9);
        xt::xtensor<T, 2> x = xt::xtensor<T, 2>::from_shape({batch, 784});
        for (auto& v : x) v = T(n01(rng));
        xt::xtensor<int, 1> y = xt::xtensor<int, 1>::from_shape({batch});
        for (auto& v : y) v = cls(rng);
        prog.template feed<"x">(x);
        prog.template feed<"y">(y);
    }
    void feed_dump(const std::map<std::string, npz::array>& b) {
        const auto& x = b.at("x");
        const auto& y = b.at("y");
        auto xv = npz::to_vector<T>(x);
        prog.feed("x", xv.data(), rshape{2, {x.shape[0], x.shape[1]}});
        auto yv = npz::to_vector<index_t>(y);
        prog.feed("y", yv.data(), rshape{1, {y.shape[0]}});
    }
};

/// The `rnn` workload: Elman RNN language model, vocab 65, embed 64, hidden 128, T 64, batch 16,
/// cross-entropy at every step (mean over T x B), full BPTT, Adam lr 1e-3. Time-major inside:
/// the dump's [B, T] token arrays are fed transposed as (T, B).
template <class T>
struct rnn : workload_base<rnn<T>> {
    static constexpr const char* name = "rnn";
    static constexpr std::size_t V = 65, E = 64, H = 128, steps = 64, batch = 16;
    static constexpr dim Tm = dyn('T');
    using X = index_input<"x", Tm, B>;
    using Y = index_input<"y", Tm, B>;
    static constexpr auto loss() {
        // x_t W_x + b for every t at once (one GEMM), then h_t = tanh(h_{t-1} W_h + that).
        auto xw = embedding(param<"embed", V, E>{}, X{}) * param<"W_x", E, H>{} + param<"b", H>{};
        auto hs = scan<H>([](auto h, auto p) { return tanh(h * param<"W_h", H, H>{} + p); }, xw);
        return softmax_cross_entropy(hs * param<"W_y", H, V>{} + param<"c", V>{}, Y{});
    }
    decltype(compile<T>(loss())) prog = compile<T>(loss());
    optim::adam<T> opt{{.lr = 1e-3}};

    static std::set<std::string> transposed() { return {"W_x", "W_h", "W_y"}; }
    static double flops() {
        return 3.0 * steps * (2.0 * batch * E * H + 2.0 * batch * H * H + 2.0 * batch * H * V);
    }
    void feed_tokens(const std::vector<index_t>& x_bt, const std::vector<index_t>& y_bt) {
        std::vector<index_t> x(steps * batch), y(steps * batch);
        for (std::size_t b = 0; b < batch; ++b)
            for (std::size_t t = 0; t < steps; ++t) {
                x[t * batch + b] = x_bt[b * steps + t];
                y[t * batch + b] = y_bt[b * steps + t];
            }
        prog.feed("x", x.data(), rshape{2, {steps, batch}});
        prog.feed("y", y.data(), rshape{2, {steps, batch}});
    }
    void random_batch(unsigned long long seed) {
        std::mt19937_64 rng(seed);
        std::uniform_int_distribution<int> tok(0, int(V) - 1);
        std::vector<index_t> seq(batch * (steps + 1)), x(batch * steps), y(batch * steps);
        for (auto& v : seq) v = tok(rng);
        for (std::size_t b = 0; b < batch; ++b)
            for (std::size_t t = 0; t < steps; ++t) {
                x[b * steps + t] = seq[b * (steps + 1) + t];
                y[b * steps + t] = seq[b * (steps + 1) + t + 1];
            }
        feed_tokens(x, y);
    }
    void feed_dump(const std::map<std::string, npz::array>& b) {
        const auto& x = b.at("x");
        if (x.shape != std::vector<std::size_t>{batch, steps})
            throw io_error("batch.npz: 'x' must be [16, 64] tokens for the rnn workload");
        feed_tokens(npz::to_vector<index_t>(x), npz::to_vector<index_t>(b.at("y")));
    }
};

/// Every workload ctg-bench knows, as one heterogeneous list of class templates (apply<T> gives the
/// workload in scalar type T): registering a workload is adding it here.
inline constexpr auto registry = boost::hana::make_tuple(boost::hana::template_<mlp>, boost::hana::template_<rnn>);

}  // namespace ctg::bench
