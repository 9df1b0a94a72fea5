// tests/onnx_check.hpp: export a program, run the file in ONNX Runtime, compare with ctgraph.
//
// check_export(prog, feeds, "name") feeds the program, runs its forward, writes name.onnx in the
// working directory, runs it in ONNX Runtime (onnxruntime-node through Node) on the same inputs
// and requires every output to agree: max |ort - ctgraph| <= tol * max(1, max |ctgraph|) (float32:
// 1e-5 of the output's scale, as the issue asks; a float32 sum of a few hundred terms rounds at
// 1e-6 of it). Where Node or the package is missing it prints one line starting "ONNX Runtime check
// skipped" (ctest's SKIP_REGULAR_EXPRESSION) and asserts nothing more.
#pragma once
#include <catch2/catch.hpp>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <string>
#include <vector>

#include "ctgraph/onnx.hpp"
#include "ctgraph/onnx/onnxruntime.hpp"
#include "ctgraph/xtensor.hpp"

namespace ctg::testing {

/// One input: its name, shape, and values (ids for an index input).
struct onnx_feed {
    std::string name;
    rshape shape;
    std::vector<double> values;
    bool index = false;
};

/// Whether ONNX Runtime can run here; prints the skip line once per call when not.
inline bool onnxruntime_here() {
    if (auto why = onnx::onnxruntime_missing()) {
        std::printf("%s\n", why->c_str());
        return false;
    }
    return true;
}

/// Adds a small deterministic wave to every parameter: initialisation leaves biases, gains and
/// vectors such as an additive score's w at 0 or 1, where a wrong lowering could agree by chance.
template <class T>
void perturb(parameter_store<T>& store) {
    for (std::size_t s = 0; s < store.size(); ++s) {
        T* v = store.value(s);
        for (std::size_t k = 0; k < store.at(s).shape.size(); ++k) v[k] += T(0.1 * std::sin(0.7 * double(k) + 1.3 * double(s) + 0.2));
    }
}

/// Feeds and runs prog (its parameters perturbed first, see perturb), exports it, runs the export
/// in ONNX Runtime, compares every output. Returns ONNX Runtime's outputs (empty when skipped).
template <class Prog>
std::vector<onnx::fetched_tensor> check_export(Prog& prog, const std::vector<onnx_feed>& feeds, const std::string& name,
                                               double tol = 1e-5, const onnx::export_options& opt = {}) {
    using T = typename Prog::scalar;
    perturb(prog.params());
    std::vector<onnx::feed_tensor> ort_in;
    for (const onnx_feed& f : feeds) {
        std::vector<long long> dims(f.shape.d.begin(), f.shape.d.begin() + f.shape.rank);
        if (f.index) {
            std::vector<index_t> ids(f.values.begin(), f.values.end());
            prog.feed(f.name, ids.data(), f.shape);
            ort_in.push_back(onnx::feed_tensor::index_ids(f.name, dims, f.values.begin(), f.values.end()));
        } else {
            std::vector<T> v(f.values.begin(), f.values.end());
            prog.feed(f.name, v.data(), f.shape);
            ort_in.push_back(onnx::feed_tensor::floats(f.name, dims, v.begin(), v.end()));
        }
    }
    prog.forward();
    const std::string path = name + ".onnx";
    onnx::save(prog, path, opt);
    if (!onnxruntime_here()) return {};
    auto r = onnx::run_onnxruntime(path, ort_in);
    REQUIRE(r.outputs.size() == Prog::num_outputs);
    [&]<std::size_t... K>(std::index_sequence<K...>) {
        (
            [&] {
                auto ref = prog.template output<K>();
                const onnx::fetched_tensor& got = r.outputs[K];
                INFO(name << ": output " << K << " (" << got.name << ")");
                REQUIRE(got.values.size() == ref.size());
                std::size_t d = 0;
                for (long long e : got.dims) REQUIRE(std::size_t(e) == ref.shape()[d++]);
                double scale = 1, worst = 0;
                for (std::size_t k = 0; k < ref.size(); ++k) scale = std::max(scale, std::abs(double(ref.data()[k])));
                for (std::size_t k = 0; k < ref.size(); ++k) {
                    REQUIRE(std::isfinite(got.values[k]));
                    worst = std::max(worst, std::abs(double(got.values[k]) - double(ref.data()[k])));
                }
                INFO("max |difference| " << worst << " at scale " << scale);
                CHECK(worst <= tol * scale);
            }(),
            ...);
    }(std::make_index_sequence<Prog::num_outputs>{});
    return r.outputs;
}

/// n values in [-a, a), deterministic.
inline std::vector<double> wave(std::size_t n, double a = 1.0, unsigned seed = 1) {
    std::vector<double> v(n);
    for (std::size_t k = 0; k < n; ++k) v[k] = a * std::sin(0.37 * double(k) * (1 + seed % 7) + 0.11 * seed);
    return v;
}
/// n ids in [0, vocab), deterministic.
inline std::vector<double> ids(std::size_t n, std::size_t vocab, unsigned seed = 1) {
    std::vector<double> v(n);
    for (std::size_t k = 0; k < n; ++k) v[k] = double((k * 7919 + seed * 104729 + k * k * 31) % vocab);
    return v;
}

/// What the ONNX tests share: dynamic batch and time, and the inference option.
namespace onnx_test {
inline constexpr dim B = dyn('B');
inline constexpr dim T = dyn('T');
inline constexpr options infer{.inference = true};
using ctg::testing::check_export;
using ctg::testing::ids;
using ctg::testing::onnx_feed;
using ctg::testing::wave;
}  // namespace onnx_test

}  // namespace ctg::testing
