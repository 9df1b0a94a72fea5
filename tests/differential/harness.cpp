// tests/differential/harness.cpp: runs the checks of the differential tests on every generated
// program linked into the binary (tests/differential/README.md).
//
//   differential_runner DATA_DIR OUT_DIR [NAME...]
//
// For each program NAME, in that order (all registered ones when none is given), it reads DATA_DIR/NAME.npz (the
// parameters "param/<name>", floating-point inputs "input/<name>", index inputs "index/<name>", and
// "meta/..." settings written by the generator) and writes
//   OUT_DIR/NAME.npz   the loss, every parameter's and input's gradient, the dropout nodes' values
//                      (PyTorch reads the masks from them), the loss and extra outputs in eval mode;
//   OUT_DIR/NAME.json  what was checked here: finite differences on a sample of elements, the
//                      inference program's outputs against the training program's (bit for bit),
//                      1 against 2 threads, ctg::train_step against the plain step (bit for bit),
//                      and the program's node table (for the coverage report).
// PyTorch's side (difftest.py) compares the .npz with the same program written in PyTorch.
#include "harness.hpp"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <exception>
#include <fstream>
#include <map>
#include <random>
#include <sstream>

namespace ctgdiff {

namespace {
struct entry {
    std::string name;
    factory make;
};
std::vector<entry>& registry() {
    static std::vector<entry> r;
    return r;
}
}  // namespace

registration::registration(const char* name, factory f) { registry().push_back({name, f}); }

namespace detail {
std::string node_line(std::size_t i, std::string_view kind, std::string_view label, bool needs_grad, const int* operands,
                      std::size_t arity) {
    std::string s = std::to_string(i) + " " + std::string(kind) + " " + std::string(label) + " " + (needs_grad ? "1" : "0");
    for (std::size_t k = 0; k < arity; ++k) s += " " + std::to_string(operands[k]);
    return s + "\n";
}
}  // namespace detail

namespace {

std::string json_string(std::string_view s) {
    std::string r = "\"";
    for (char c : s) {
        if (c == '"' || c == '\\') r += '\\', r += c;
        else if (c == '\n') r += "\\n";
        else if ((unsigned char)c < 0x20) r += ' ';
        else r += c;
    }
    return r + "\"";
}
std::string num(double v) {
    if (!std::isfinite(v)) return std::isnan(v) ? "\"nan\"" : v > 0 ? "\"inf\"" : "\"-inf\"";
    char b[32];
    std::snprintf(b, sizeof b, "%.17g", v);
    return b;
}

struct inputs {
    std::map<std::string, std::pair<ctg::rshape, std::vector<double>>> floats;
    std::map<std::string, std::pair<ctg::rshape, std::vector<ctg::index_t>>> indices;
    std::map<std::string, std::pair<ctg::rshape, std::vector<double>>> params;
    std::map<std::string, double> meta;
};

ctg::rshape shape_of(const ctg::npz::array& a) {
    ctg::rshape s;
    s.rank = a.shape.size();
    if (s.rank > ctg::max_rank) throw ctg::error("array '" + a.name + "' has rank over 4");
    for (std::size_t k = 0; k < s.rank; ++k) s.d[k] = a.shape[k];
    return s;
}

inputs read_inputs(const std::string& path) {
    inputs in;
    for (const auto& [key, a] : ctg::npz::read(path)) {
        const auto slash = key.find('/');
        const std::string kind = key.substr(0, slash), name = key.substr(slash + 1);
        if (kind == "param") in.params[name] = {shape_of(a), ctg::npz::to_vector<double>(a)};
        else if (kind == "input") in.floats[name] = {shape_of(a), ctg::npz::to_vector<double>(a)};
        else if (kind == "index") in.indices[name] = {shape_of(a), ctg::npz::to_vector<ctg::index_t>(a)};
        else if (kind == "meta") in.meta[name] = ctg::npz::to_vector<double>(a).at(0);
        else throw ctg::error("unknown array '" + key + "' in " + path);
    }
    return in;
}

// Everything one pass of the checks computes at a given thread count.
struct pass_result {
    double loss = 0, eval_loss = 0;
    std::vector<tensor> grads, input_grads, dropouts, extras, inference;
    std::vector<std::string> failures;  // this pass's own checks (inference bits, fused step bits)
};

bool same_bits(const std::vector<double>& a, const std::vector<double>& b) {
    return a.size() == b.size() && (a.empty() || std::memcmp(a.data(), b.data(), a.size() * sizeof(double)) == 0);
}
std::size_t first_difference(const std::vector<double>& a, const std::vector<double>& b) {
    for (std::size_t i = 0; i < std::min(a.size(), b.size()); ++i)
        if (std::memcmp(&a[i], &b[i], sizeof(double)) != 0) return i;
    return std::min(a.size(), b.size());
}

std::vector<tensor> param_grads(ctg::parameter_store<double>& ps) {
    std::vector<tensor> r;
    for (std::size_t s = 0; s < ps.size(); ++s) {
        const auto& e = ps.at(s);
        const double* g = ps.grad(s);
        r.push_back({e.name, e.shape, std::vector<double>(g, g + e.shape.size())});
    }
    return r;
}
std::vector<double> param_values(ctg::parameter_store<double>& ps) {
    const auto& v = std::as_const(ps).values();
    return {v.begin(), v.end()};
}
void set_param_values(ctg::parameter_store<double>& ps, const std::vector<double>& v) {
    std::copy(v.begin(), v.end(), ps.values().begin());
}

void feed_all(model& m, const inputs& in) {
    for (const auto& [name, a] : in.floats) {
        m.feed(name, a.second.data(), a.first);
        m.inference_feed(name, a.second.data(), a.first);
    }
    for (const auto& [name, a] : in.indices) {
        m.feed(name, a.second.data(), a.first);
        m.inference_feed(name, a.second.data(), a.first);
    }
}

pass_result run_pass(model& m, const inputs& in, std::uint64_t seed) {
    pass_result r;
    auto& ps = m.params();
    const std::vector<double> start = param_values(ps);
    // training mode: loss, gradients, masks
    m.training(true);
    m.dropout_seed(seed);
    ps.zero_grad();
    r.loss = m.forward();
    m.backward();
    r.grads = param_grads(ps);
    r.input_grads = m.input_grads();
    r.dropouts = m.dropout_values();
    // eval mode, and the inference program over the same weights: the same bits
    m.training(false);
    r.eval_loss = m.forward();
    r.extras = m.extra_values();
    r.inference = m.inference_outputs();
    if (!same_bits({r.eval_loss}, r.inference.at(0).data))
        r.failures.push_back("inference: loss " + num(r.inference[0].data[0]) + " differs from the training program's " +
                             num(r.eval_loss) + " in eval mode");
    for (std::size_t k = 0; k < r.extras.size(); ++k)
        if (!same_bits(r.extras[k].data, r.inference.at(k + 1).data)) {
            const std::size_t i = first_difference(r.extras[k].data, r.inference[k + 1].data);
            r.failures.push_back("inference: extra output " + std::to_string(k) + " differs from the training program's at element " +
                                 std::to_string(i) + " (" +
                                 (i < r.inference[k + 1].data.size() ? num(r.inference[k + 1].data[i]) : "none") + " against " +
                                 (i < r.extras[k].data.size() ? num(r.extras[k].data[i]) : "none") + ")");
        }
    // the fused step (update inside backward) against the plain loop
    m.training(true);
    m.dropout_seed(seed);
    ps.zero_grad();
    m.forward();
    m.backward();
    ctg::optim::sgd<double> opt({.lr = 0.1, .momentum = 0.9});
    opt.step(ps);
    const std::vector<double> plain = param_values(ps);
    set_param_values(ps, start);
    m.dropout_seed(seed);
    m.fused_sgd_step(0.1, 0.9);
    const std::vector<double> fused = param_values(ps);
    if (!same_bits(plain, fused)) {
        const std::size_t i = first_difference(plain, fused);
        std::string which = "?";
        for (std::size_t s = 0; s < ps.size(); ++s)
            if (ps.at(s).offset <= i && i < ps.at(s).offset + ps.at(s).shape.size())
                which = ps.at(s).name + "[" + std::to_string(i - ps.at(s).offset) + "]";
        r.failures.push_back("train_step: the weights after the fused step differ from the plain step's at " + which + " (" +
                             num(fused[i]) + " against " + num(plain[i]) + ")");
    }
    set_param_values(ps, start);
    return r;
}

// Compares two passes (1 and 2 threads): bit for bit, or within 1e-12 where a product or a scan
// is large enough to be split between threads (their last bits may differ: README, Threads).
void compare_passes(const pass_result& a, const pass_result& b, bool exact, std::vector<std::string>& failures) {
    auto cmp = [&](const std::string& what, const std::vector<double>& x, const std::vector<double>& y) {
        if (x.size() != y.size()) {
            failures.push_back("threads: " + what + " has " + std::to_string(x.size()) + " elements at 1 thread, " +
                               std::to_string(y.size()) + " at 2");
            return;
        }
        for (std::size_t i = 0; i < x.size(); ++i) {
            const bool ok = exact ? std::memcmp(&x[i], &y[i], sizeof(double)) == 0
                                  : std::abs(x[i] - y[i]) <= 1e-12 * std::max(1.0, std::abs(x[i]));
            if (!ok) {
                failures.push_back("threads: " + what + "[" + std::to_string(i) + "] is " + num(x[i]) + " at 1 thread, " +
                                   num(y[i]) + " at 2" + (exact ? " (bit for bit expected)" : ""));
                return;
            }
        }
    };
    cmp("loss", {a.loss}, {b.loss});
    cmp("eval loss", {a.eval_loss}, {b.eval_loss});
    auto cmp_all = [&](const char* kind, const std::vector<tensor>& x, const std::vector<tensor>& y) {
        for (std::size_t k = 0; k < std::min(x.size(), y.size()); ++k) cmp(std::string(kind) + " " + x[k].name, x[k].data, y[k].data);
    };
    cmp_all("gradient of", a.grads, b.grads);
    cmp_all("input gradient of", a.input_grads, b.input_grads);
    cmp_all("value of", a.dropouts, b.dropouts);
    cmp_all("value of", a.extras, b.extras);
    cmp_all("inference output", a.inference, b.inference);
}

struct fd_record {
    std::string what;
    double analytic, numeric;
    bool ok;
};

// Central differences on a sample of parameter and input elements, in training mode with the same
// dropout masks (the seed is reset before every forward pass).
std::vector<fd_record> finite_differences(model& m, inputs in, const pass_result& base, std::uint64_t seed, std::size_t samples) {
    auto& ps = m.params();
    m.training(true);
    struct target {
        bool param;
        std::string name;
        std::size_t size;
        const std::vector<double>* grad;
    };
    std::vector<target> targets;
    for (const auto& g : base.grads)
        if (!g.data.empty()) targets.push_back({true, g.name, g.data.size(), &g.data});
    for (const auto& g : base.input_grads)
        if (!g.data.empty()) targets.push_back({false, g.name, g.data.size(), &g.data});
    std::vector<fd_record> out;
    if (targets.empty()) return out;
    std::mt19937_64 rng(seed * 7919 + 17);
    auto loss_at = [&](const target& t, std::size_t e, double v) {
        if (t.param) {
            ps.value(ps.slot(t.name))[e] = v;
        } else {
            auto& a = in.floats.at(t.name);
            a.second[e] = v;
            m.feed(t.name, a.second.data(), a.first);
        }
        m.dropout_seed(seed);
        return m.forward();
    };
    for (std::size_t s = 0; s < samples; ++s) {
        const target& t = targets[rng() % targets.size()];
        const std::size_t e = rng() % t.size;
        const double x0 = t.param ? ps.value(ps.slot(t.name))[e] : in.floats.at(t.name).second[e];
        const double analytic = (*t.grad)[e];
        fd_record rec{std::string(t.param ? "param " : "input ") + t.name + "[" + std::to_string(e) + "]", analytic, 0, false};
        // a step across a kink (relu, a mask's edge) can mislead one step size: try three
        for (double h : {1e-5, 1e-4, 1e-6}) {
            const double lp = loss_at(t, e, x0 + h), lm = loss_at(t, e, x0 - h);
            const double numeric = (lp - lm) / (2 * h);
            loss_at(t, e, x0);
            if (s == 0 || !rec.ok) rec.numeric = numeric;
            if (std::abs(numeric - analytic) <= 1e-6 + 1e-5 * std::abs(analytic)) {
                rec.numeric = numeric;
                rec.ok = true;
                break;
            }
        }
        out.push_back(rec);
    }
    return out;
}

void write_outputs(const std::string& path, const pass_result& r) {
    std::vector<ctg::npz::array> arrays;
    auto add = [&](const std::string& name, const ctg::rshape& s, const std::vector<double>& v) {
        arrays.push_back(ctg::npz::from_data(name, v.data(), s.to_vector()));
    };
    add("loss", {}, {r.loss});
    add("eval/loss", {}, {r.eval_loss});
    for (const auto& t : r.grads) add("grad/" + t.name, t.shape, t.data);
    for (const auto& t : r.input_grads) add("igrad/" + t.name, t.shape, t.data);
    for (const auto& t : r.dropouts) add("drop/" + t.name, t.shape, t.data);
    for (const auto& t : r.extras) add("eval/" + t.name, t.shape, t.data);
    ctg::npz::write(path, arrays);
}

// Runs every check of one program; returns whether all passed (the JSON report says what failed).
bool check(const entry& e, const std::string& data_dir, const std::string& out_dir) {
    std::ostringstream js;
    js << "{\"name\": " << json_string(e.name);
    bool ok = true;
    try {
        const inputs in = read_inputs(data_dir + "/" + e.name + ".npz");
        const std::uint64_t seed = std::uint64_t(in.meta.count("dropout_seed") ? in.meta.at("dropout_seed") : 1);
        const bool exact = !in.meta.count("threads_exact") || in.meta.at("threads_exact") != 0;
        const std::size_t samples = std::size_t(in.meta.count("fd_samples") ? in.meta.at("fd_samples") : 12);
        std::unique_ptr<model> m = e.make();
        auto& ps = m->params();
        for (std::size_t s = 0; s < ps.size(); ++s) {
            const auto it = in.params.find(ps.at(s).name);
            if (it == in.params.end()) throw ctg::error("no values for parameter '" + ps.at(s).name + "'");
            if (!(it->second.first == ps.at(s).shape))
                throw ctg::error("parameter '" + ps.at(s).name + "' is " + ctg::to_string(ps.at(s).shape) + " in the program, " +
                                 ctg::to_string(it->second.first) + " in the data");
            std::copy(it->second.second.begin(), it->second.second.end(), ps.value(s));
        }
        if (in.params.size() != ps.size()) throw ctg::error("the data holds parameters the program does not have");
        feed_all(*m, in);
        std::vector<std::string> failures;
        const int before = ctg::num_threads();
        ctg::set_num_threads(1);
        const pass_result one = run_pass(*m, in, seed);
        ctg::set_num_threads(2);
        const pass_result two = run_pass(*m, in, seed);
        ctg::set_num_threads(1);
        failures.insert(failures.end(), one.failures.begin(), one.failures.end());
        for (const auto& f : two.failures) failures.push_back(f + " (at 2 threads)");
        compare_passes(one, two, exact, failures);
        const auto fd = finite_differences(*m, in, one, seed, samples);
        ctg::set_num_threads(before);
        write_outputs(out_dir + "/" + e.name + ".npz", one);
        js << ", \"fd\": [";
        for (std::size_t k = 0; k < fd.size(); ++k) {
            js << (k ? ", " : "") << "{\"what\": " << json_string(fd[k].what) << ", \"analytic\": " << num(fd[k].analytic)
               << ", \"numeric\": " << num(fd[k].numeric) << ", \"ok\": " << (fd[k].ok ? "true" : "false") << "}";
            if (!fd[k].ok) ok = false;
        }
        js << "], \"failures\": [";
        for (std::size_t k = 0; k < failures.size(); ++k) js << (k ? ", " : "") << json_string(failures[k]);
        js << "], \"nodes\": " << json_string(m->node_table());
        ok = ok && failures.empty();
    } catch (const std::exception& ex) {
        js << ", \"error\": " << json_string(ex.what());
        ok = false;
    }
    js << "}\n";
    std::ofstream(out_dir + "/" + e.name + ".json") << js.str();
    return ok;
}

}  // namespace
}  // namespace ctgdiff

int main(int argc, char** argv) {
    if (argc < 3) {
        std::fprintf(stderr, "usage: %s DATA_DIR OUT_DIR [NAME...]\n", argv[0]);
        return 2;
    }
    const std::string data = argv[1], out = argv[2];
    std::vector<std::string> names(argv + 3, argv + argc);
    if (names.empty())
        for (const auto& e : ctgdiff::registry()) names.push_back(e.name);
    int failed = 0, run = 0;
    for (const auto& name : names) {  // in the order given: a crash is the first program without a report
        const auto& r = ctgdiff::registry();
        const auto e = std::find_if(r.begin(), r.end(), [&](const auto& x) { return x.name == name; });
        if (e == r.end()) continue;
        ++run;
        if (!ctgdiff::check(*e, data, out)) ++failed;
    }
    std::printf("differential_runner: %d programs, %d with a failed check here\n", run, failed);
    return 0;  // the verdict is difftest.py's, which reads the reports
}
