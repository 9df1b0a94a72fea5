// tests/gradcheck.hpp: the one generic finite-difference checker (float64) every op and model uses.
//
// check_gradients(out, cfg) builds L = sum(out * G) for a fixed random G of out's shape (so every
// element of a non-scalar output is tested with its own weight), compiles it in float64 with input
// gradients on, and compares every gradient (parameters and float inputs) with central differences.
// What catches an element that backward never writes or that an op reads before writing:
//   * the arena is poisoned with NaN at planning, so an op that reads a value, adjoint or scratch
//     element nobody wrote gives NaN, which fails every comparison;
//   * parameter gradients are pre-filled with a random baseline B before backward, and the check
//     is on (grad - B): an op that overwrites instead of adding, or skips an element, fails.
#pragma once
#include <catch2/catch.hpp>

#include <cmath>
#include <map>
#include <random>
#include <string>
#include <vector>

#include <ctgraph/ctgraph.hpp>
#include <ctgraph/xtensor.hpp>

namespace ctg::testing {

/// Where the checker draws values.
struct domain {
    double lo = -1.5, hi = 1.5;
    double avoid = 0.0;  // keep |x| >= avoid (kinks and poles at 0)
};

struct check_config {
    domain values{};                            // inputs and parameters
    double tol = 1e-6;                          // max |analytic - numeric| / max(1, |numeric|)
    double h = 1e-6;                            // finite-difference step
    std::map<char, std::size_t> dims{};         // dynamic dimension values (default 3)
    std::map<std::string, int> index_bound{};   // index inputs: ids drawn from [low, bound)
    std::map<std::string, int> index_low{};     // (default low = 0)
    std::map<std::string, int> index_ignore{};  // index inputs: this value appears in some positions
    unsigned seed = 7;
    std::map<std::string, std::vector<index_t>> index_values{};  // index inputs fed these values (their size), not drawn
};

namespace detail {
template <fixed_string Name, class S>
struct input_like;
template <fixed_string Name, dim... D>
struct input_like<Name, shape<D...>> {
    using type = input<Name, D...>;
};
}  // namespace detail

/// A compiled float64 program as check_gradients' core sees it: its graph's tables and what it runs,
/// behind virtual calls, so the core is compiled once per test unit instead of once per model.
struct gradcheck_program {
    virtual ~gradcheck_program() = default;
    virtual double forward() = 0;
    virtual void backward() = 0;
    virtual void feed(const std::string& name, const double* data, const rshape& s) = 0;
    virtual void feed(const std::string& name, const index_t* data, const rshape& s) = 0;
    virtual parameter_store<double>& params() = 0;
    virtual double* value(std::size_t i) = 0;  // node i's value (an input's: what forward reads)
    virtual double* adjoint(std::size_t i) = 0;
    virtual std::size_t size(std::size_t i) = 0;  // node i's elements at the planned shapes
    ctg::detail::graph_tables g;
    const bool* needs_grad = nullptr;  // node -> has an adjoint
};

/// The checks of check_gradients on a compiled program (see the file comment).
inline std::size_t check_gradients_of(gradcheck_program& prog, const check_config& cfg) {
    const ctg::detail::graph_tables& g = prog.g;
    std::mt19937_64 rng(cfg.seed);
    auto draw = [&](const domain& d) {
        std::uniform_real_distribution<double> u(d.lo, d.hi);
        double v = u(rng);
        while (std::abs(v) < d.avoid) v = u(rng);
        return v;
    };
    auto concrete = [&](std::size_t i) {
        rshape s;
        s.rank = g.rank[i];
        for (std::size_t a = 0; a < s.rank; ++a) {
            const dim d = g.dims[i][a];
            s.d[a] = d.sym ? (cfg.dims.count(d.sym) ? cfg.dims.at(d.sym) : 3) : std::size_t(d.n);
        }
        return s;
    };

    // Values of every leaf.
    std::vector<std::vector<double>> input_values(g.num_nodes);
    for (std::size_t i = 0; i < g.num_nodes; ++i) {
        const rshape s = concrete(i);
        const std::string name(g.label[i]);
        if (g.kind[i] == leaf_kind::input) {
            auto& v = input_values[i];
            v.resize(s.size());
            for (auto& x : v) x = name == "gradcheck_weights" ? draw({-1, 1, 0.1}) : draw(cfg.values);
            prog.feed(name, v.data(), s);
        } else if (g.kind[i] == leaf_kind::index_input) {
            const int bound = cfg.index_bound.count(name) ? cfg.index_bound.at(name) : 2;
            std::vector<index_t> ids(s.size());
            const int low = cfg.index_low.count(name) ? cfg.index_low.at(name) : 0;
            std::uniform_int_distribution<int> u(low, bound - 1);
            for (auto& id : ids) id = u(rng);
            if (cfg.index_ignore.count(name) && ids.size() > 1) ids[1] = cfg.index_ignore.at(name);
            if (cfg.index_values.count(name)) {
                REQUIRE(cfg.index_values.at(name).size() == ids.size());
                ids = cfg.index_values.at(name);
            }
            prog.feed(name, ids.data(), s);
        }
    }
    auto& store = prog.params();
    for (std::size_t p = 0; p < store.size(); ++p)
        for (std::size_t k = 0; k < store.at(p).shape.size(); ++k) store.value(p)[k] = draw(cfg.values);

    // Analytic gradients, on top of a random baseline in the parameter gradients.
    prog.forward();
    std::vector<double> baseline(store.grads().size());  // (the parameters that train: options::frozen)
    for (auto& b : baseline) b = draw({-1, 1, 0});
    std::copy(baseline.begin(), baseline.end(), store.grads().begin());
    prog.backward();

    std::size_t checked = 0;
    auto compare = [&](const std::string& what, double* x, std::size_t k, double analytic) {
        const double saved = x[k];
        x[k] = saved + cfg.h;
        const double lp = prog.forward();
        x[k] = saved - cfg.h;
        const double lm = prog.forward();
        x[k] = saved;
        const double numeric = (lp - lm) / (2 * cfg.h);
        const double err = std::abs(analytic - numeric) / std::max(1.0, std::abs(numeric));
        if (!(err <= cfg.tol)) {
            INFO(what << "[" << k << "]: analytic " << analytic << ", numeric " << numeric << ", error " << err);
            CHECK(err <= cfg.tol);
        }
        ++checked;
    };
    for (std::size_t p = 0; p < store.size(); ++p) {
        if (store.frozen(p)) continue;  // (no gradient: options::frozen)
        const std::size_t off = store.at(p).grad_offset;
        for (std::size_t k = 0; k < store.at(p).shape.size(); ++k)
            compare("param " + store.at(p).name, store.value(p), k, store.grad(p)[k] - baseline[off + k]);
    }
    // Input gradients: perturb the program's own copy of the input (what forward reads).
    for (std::size_t i = 0; i < g.num_nodes; ++i) {
        if (g.kind[i] != leaf_kind::input || std::string(g.label[i]) == "gradcheck_weights") continue;
        const std::vector<double> grad(prog.adjoint(i), prog.adjoint(i) + prog.size(i));
        double* x = prog.value(i);
        for (std::size_t k = 0; k < grad.size(); ++k) compare("input " + std::string(g.label[i]), x, k, grad[k]);
    }
    // Every node that needs an adjoint must have a finite one (no NaN leaked from the poisoned arena).
    for (std::size_t i = 0; i < g.num_nodes; ++i) {
        if (!prog.needs_grad[i] || g.kind[i] == leaf_kind::param) continue;
        const double* a = prog.adjoint(i);
        for (std::size_t k = 0; k < prog.size(i); ++k) {
            INFO("adjoint of node %" << i << " (" << g.label[i] << ") element " << k);
            REQUIRE(std::isfinite(a[k]));
        }
    }
    REQUIRE(checked > 0);
    return checked;
}

/// Returns the number of gradient elements checked (> 0), failing the current Catch test on a mismatch.
/// Opt: further compile options (options::frozen: the frozen parameters are not checked, having
/// no gradient); input gradients are always on.
template <options Opt = options{}, expr Out>
std::size_t check_gradients(Out out, const check_config& cfg = {}) {
    using G = typename detail::input_like<"gradcheck_weights", typename Out::shape>::type;
    static constexpr options opt = [] {
        options o = Opt;
        o.input_grads = true;
        return o;
    }();
    using P = decltype(compile<double, opt>(sum(mul(out, G{}))));
    struct compiled final : gradcheck_program {
        P prog;
        double forward() override { return prog.forward(); }
        void backward() override { prog.backward(); }
        void feed(const std::string& name, const double* data, const rshape& s) override { prog.feed(name, data, s); }
        void feed(const std::string& name, const index_t* data, const rshape& s) override { prog.feed(name, data, s); }
        parameter_store<double>& params() override { return prog.params(); }
        double* value(std::size_t i) override { return prog.value_view(i).template as<double>(); }
        double* adjoint(std::size_t i) override { return prog.adjoint_view(i).template as<double>(); }
        std::size_t size(std::size_t i) override { return prog.node_shape(i).size(); }
    } c;
    c.g = ctg::detail::tables_of<typename P::graph_type>;
    c.needs_grad = P::graph_type::needs_grad.data();
    c.prog.poison_arena(true);
    return check_gradients_of(c, cfg);
}

}  // namespace ctg::testing
