// tests/differential/harness.hpp: what a generated program gives the differential checks
// (tests/differential/harness.cpp), behind one small interface so that the checks are compiled once
// and each generated program instantiates only its two program types and a few short functions.
//
// A generated translation unit holds many programs, each a function building its model and
// registering it:
//
//   namespace g_42 {
//   using namespace ctg;
//   inline constexpr dim B = dyn('B');
//   std::unique_ptr<ctgdiff::model> build() {
//       auto n0 = input<"x0", B, 4>{};
//       auto n1 = tanh(n0 * param<"w1", 4, 4>{});
//       auto n2 = dropout<0.25>(n1);
//       auto loss = mean(mul(n2, input<"g2", B, 4>{}));
//       return ctgdiff::make(loss, std::tuple{n1}, std::tuple{n2});  // loss, extra outputs, dropouts
//   }
//   const ctgdiff::registration reg("g_42", build);
//   }
#pragma once
#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <tuple>
#include <vector>

#include <ctgraph/ctgraph.hpp>
#include <ctgraph/xtensor.hpp>
#include <ctgraph/train.hpp>

namespace ctgdiff {

/// A named tensor handed back to the checks (a copy).
struct tensor {
    std::string name;
    ctg::rshape shape;
    std::vector<double> data;
};

/// One generated model: a float64 training program with input gradients, and an inference program
/// (loss and extra outputs) over the same parameter store.
struct model {
    virtual ~model() = default;
    virtual ctg::parameter_store<double>& params() = 0;
    virtual void feed(std::string_view name, const double* x, const ctg::rshape& s) = 0;
    virtual void feed(std::string_view name, const ctg::index_t* x, const ctg::rshape& s) = 0;
    virtual double forward() = 0;
    virtual void backward() = 0;
    virtual void training(bool on) = 0;
    virtual void dropout_seed(std::uint64_t seed) = 0;
    /// ctg::train_step with SGD (momentum): the update fused into backward.
    virtual double fused_sgd_step(double lr, double momentum) = 0;
    /// dL/dx of every floating-point input, after backward().
    virtual std::vector<tensor> input_grads() = 0;
    /// The dropout nodes' values (in the order given to make), after forward().
    virtual std::vector<tensor> dropout_values() = 0;
    /// The extra outputs' values in the training program, after forward().
    virtual std::vector<tensor> extra_values() = 0;
    /// The training program's graph, one line per node: index, op or leaf kind, name, needs_grad,
    /// operands (what the coverage report counts).
    virtual std::string node_table() = 0;
    /// The inference program: feeds, runs forward, returns the loss and the extra outputs.
    virtual void inference_feed(std::string_view name, const double* x, const ctg::rshape& s) = 0;
    virtual void inference_feed(std::string_view name, const ctg::index_t* x, const ctg::rshape& s) = 0;
    virtual std::vector<tensor> inference_outputs() = 0;
};

using factory = std::unique_ptr<model> (*)();

/// A visibility predicate for ctg::visible_if: key j is visible from query position i when
/// (i + 2 j) mod K != R.
template <int K, int R>
struct pred {
    static constexpr bool visible(std::size_t i, std::size_t j) { return (i + 2 * j) % K != std::size_t(R); }
};

/// Adds a generated program to the list the checks run (one static object per program).
struct registration {
    registration(const char* name, factory f);
};

namespace detail {

template <class Prog, class E>
tensor value_tensor(Prog& p, E e, std::string name) {
    auto v = p.value_of(e);
    tensor t{std::move(name), {}, std::vector<double>(v.begin(), v.end())};
    t.shape.rank = v.dimension();
    for (std::size_t a = 0; a < t.shape.rank; ++a) t.shape.d[a] = v.shape()[a];
    return t;
}

std::string node_line(std::size_t i, std::string_view kind, std::string_view label, bool needs_grad,
                      const int* operands, std::size_t arity);

template <class Loss, class Extras, class Drops>
class model_of;

template <class Loss, class... E, class... D>
class model_of<Loss, std::tuple<E...>, std::tuple<D...>> final : public model {
    using train_t = ctg::program_for<double, ctg::options{.input_grads = true}, Loss>;
    using infer_t = ctg::program_for<double, ctg::options{.inference = true}, Loss, E...>;
    using G = typename train_t::graph_type;
    train_t train_;
    infer_t infer_{train_.shared_params()};

public:
    ctg::parameter_store<double>& params() override { return train_.params(); }
    void feed(std::string_view n, const double* x, const ctg::rshape& s) override { train_.feed(n, x, s); }
    void feed(std::string_view n, const ctg::index_t* x, const ctg::rshape& s) override { train_.feed(n, x, s); }
    double forward() override { return train_.forward(); }
    void backward() override { train_.backward(); }
    void training(bool on) override { train_.training(on); }
    void dropout_seed(std::uint64_t seed) override { train_.dropout_seed(seed); }
    double fused_sgd_step(double lr, double momentum) override {
        ctg::optim::sgd<double> opt({.lr = lr, .momentum = momentum});
        return ctg::train_step(train_, opt);
    }
    std::vector<tensor> input_grads() override {
        std::vector<tensor> r;
        for (std::size_t i : G::input_nodes)
            if (G::kind[i] == ctg::leaf_kind::input && G::needs_grad[i]) {
                const ctg::view& v = train_.adjoint_view(i);
                const double* p = v.template as<double>();
                r.push_back({std::string(G::label[i]), v.shape, std::vector<double>(p, p + v.size())});
            }
        return r;
    }
    std::vector<tensor> dropout_values() override {
        std::vector<tensor> r;
        std::size_t k = 0;
        (r.push_back(value_tensor(train_, D{}, "dropout" + std::to_string(k++))), ...);
        return r;
    }
    std::vector<tensor> extra_values() override {
        std::vector<tensor> r;
        std::size_t k = 0;
        (r.push_back(value_tensor(train_, E{}, "extra" + std::to_string(k++))), ...);
        return r;
    }
    std::string node_table() override {
        std::string s;
        for (std::size_t i = 0; i < G::size; ++i) {
            std::string_view kind = G::kind[i] == ctg::leaf_kind::param         ? "param"
                                    : G::kind[i] == ctg::leaf_kind::input       ? "input"
                                    : G::kind[i] == ctg::leaf_kind::index_input ? "index_input"
                                    : G::kind[i] == ctg::leaf_kind::constant    ? "constant"
                                                                                : "op";
            s += node_line(i, kind, G::label[i], G::needs_grad[i], &G::operands[i][0], G::arity[i]);
        }
        return s;
    }
    void inference_feed(std::string_view n, const double* x, const ctg::rshape& s) override { infer_.feed(n, x, s); }
    void inference_feed(std::string_view n, const ctg::index_t* x, const ctg::rshape& s) override { infer_.feed(n, x, s); }
    std::vector<tensor> inference_outputs() override {
        std::vector<tensor> r;
        const double loss = infer_.forward();
        r.push_back({"loss", {}, {loss}});
        out_tensors(r, std::index_sequence_for<E...>{});
        return r;
    }

private:
    template <std::size_t... K>
    void out_tensors(std::vector<tensor>& r, std::index_sequence<K...>) {
        (out_tensor<K + 1>(r), ...);
    }
    template <std::size_t K>
    void out_tensor(std::vector<tensor>& r) {
        auto v = infer_.template output<K>();
        tensor t{"extra" + std::to_string(K - 1), {}, std::vector<double>(v.begin(), v.end())};
        t.shape.rank = v.dimension();
        for (std::size_t a = 0; a < t.shape.rank; ++a) t.shape.d[a] = v.shape()[a];
        r.push_back(std::move(t));
    }
};

}  // namespace detail

/// The model of a loss, extra outputs (checked in the inference program) and dropout nodes (whose
/// masks PyTorch applies), as the generated code builds it.
template <class Loss, class... E, class... D>
std::unique_ptr<model> make(Loss, std::tuple<E...>, std::tuple<D...>) {
    return std::make_unique<detail::model_of<Loss, std::tuple<E...>, std::tuple<D...>>>();
}

}  // namespace ctgdiff
