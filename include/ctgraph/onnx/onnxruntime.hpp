// ctgraph/onnx/onnxruntime.hpp: run an exported model in ONNX Runtime, to check an export against
// ctgraph's own outputs (the tests, the examples) and to time it beside ctgraph (bench/).
//
// ONNX Runtime comes from npm (onnxruntime-node: its CPU binaries ship in the package), driven by
// scripts/onnx/run_model.js through Node: one process per call, CPU, one thread, all graph
// optimisations. scripts/setup.sh installs it into scripts/onnx/node_modules.
//
//   if (auto why = ctg::onnx::onnxruntime_missing()) { std::puts(why->c_str()); return; }
//   auto r = ctg::onnx::run_onnxruntime("model.onnx", {ctg::onnx::feed_tensor::index("tokens", {1, 8}, ids)});
//   r.outputs[0].values   // float32, r.outputs[0].dims
#pragma once
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "ctgraph/error.hpp"

#ifndef CTG_ONNX_RUNNER
#define CTG_ONNX_RUNNER "scripts/onnx/run_model.js"  // CMake gives the source tree's path
#endif

namespace ctg::onnx {

/// A tensor given to ONNX Runtime: float32 values or int64 ids.
struct feed_tensor {
    std::string name;                ///< the graph input's name
    std::vector<long long> dims;     ///< its shape
    std::vector<float> values;       ///< float32 elements (a float input)
    std::vector<long long> ids;      ///< int64 elements (an index input)
    bool index = false;              ///< which of the two
    /// A float input from any range of numbers.
    template <class It>
    static feed_tensor floats(std::string name, std::vector<long long> dims, It first, It last) {
        return {std::move(name), std::move(dims), std::vector<float>(first, last), {}, false};
    }
    /// An index input (token ids) from any range of integers.
    template <class It>
    static feed_tensor index_ids(std::string name, std::vector<long long> dims, It first, It last) {
        return {std::move(name), std::move(dims), {}, std::vector<long long>(first, last), true};
    }
};

/// An output of ONNX Runtime.
struct fetched_tensor {
    std::string name;             ///< the graph output's name
    std::vector<long long> dims;  ///< its shape
    std::vector<float> values;    ///< its float32 elements
};

/// What run_onnxruntime returns: the outputs, and with bench_reps each run's milliseconds.
struct onnxruntime_result {
    std::vector<fetched_tensor> outputs;  ///< in the model's output order
    std::vector<double> ms;               ///< each timed run (bench_reps > 0)
};

namespace detail {
inline std::string runner_path() {
    if (const char* p = std::getenv("CTG_ONNX_RUNNER")) return p;
    return CTG_ONNX_RUNNER;
}
inline std::string shell_quote(const std::string& s) {
    std::string r = "'";
    for (char c : s) r += c == '\'' ? std::string("'\\''") : std::string(1, c);
    return r + "'";
}
}  // namespace detail

/// Why ONNX Runtime cannot run here (no node, or no onnxruntime-node beside the runner), or
/// nothing when it can. One line, for a test to print when it skips.
inline std::optional<std::string> onnxruntime_missing() {
    const std::string runner = detail::runner_path();
    if (!std::filesystem::exists(runner)) return "ONNX Runtime check skipped: no runner script at " + runner;
    if (std::system("node --version > /dev/null 2>&1") != 0) return std::string("ONNX Runtime check skipped: Node.js (node) is not installed");
    const auto dir = std::filesystem::path(runner).parent_path() / "node_modules" / "onnxruntime-node";
    if (!std::filesystem::exists(dir))
        return "ONNX Runtime check skipped: onnxruntime-node is not installed in " + dir.parent_path().string() +
               " (scripts/setup.sh, or npm install --ignore-scripts there)";
    return std::nullopt;
}

/// Runs `model` in ONNX Runtime (one thread) on `inputs`; with bench_reps > 0 also times that many
/// runs after two warm-up runs. Throws ctg::error with ONNX Runtime's message when it fails.
inline onnxruntime_result run_onnxruntime(const std::string& model, const std::vector<feed_tensor>& inputs, int bench_reps = 0) {
    namespace fs = std::filesystem;
    std::string tmpl = (fs::temp_directory_path() / "ctg_ort_XXXXXX").string();
    if (!::mkdtemp(tmpl.data())) throw io_error("ctg::onnx::run_onnxruntime: cannot make a temporary directory");
    const fs::path dir(tmpl);
    struct cleanup {
        fs::path d;
        ~cleanup() { std::error_code ec; fs::remove_all(d, ec); }
    } guard{dir};
    nlohmann::json spec = nlohmann::json::array();
    for (std::size_t k = 0; k < inputs.size(); ++k) {
        const feed_tensor& t = inputs[k];
        const std::string file = "input" + std::to_string(k) + ".bin";
        std::ofstream o(dir / file, std::ios::binary);
        if (t.index) o.write(reinterpret_cast<const char*>(t.ids.data()), std::streamsize(t.ids.size() * sizeof(long long)));
        else o.write(reinterpret_cast<const char*>(t.values.data()), std::streamsize(t.values.size() * sizeof(float)));
        if (!o) throw io_error("ctg::onnx::run_onnxruntime: cannot write " + (dir / file).string());
        spec.push_back({{"name", t.name}, {"type", t.index ? "int64" : "float32"}, {"dims", t.dims}, {"file", file}});
    }
    std::ofstream(dir / "inputs.json") << spec.dump();
    const std::string log = (dir / "log.txt").string();
    std::string cmd = "node " + detail::shell_quote(detail::runner_path()) + " " + detail::shell_quote(fs::absolute(model).string()) +
                      " " + detail::shell_quote(dir.string());
    if (bench_reps > 0) cmd += " --bench " + std::to_string(bench_reps);
    cmd += " > " + detail::shell_quote(log) + " 2>&1";
    if (std::system(cmd.c_str()) != 0) {
        std::ifstream in(log);
        const std::string msg((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
        throw error("ctg::onnx::run_onnxruntime: ONNX Runtime failed on " + model + ":\n" + msg);
    }
    nlohmann::json rep;
    std::ifstream(dir / "outputs.json") >> rep;
    onnxruntime_result r;
    for (const auto& o : rep["outputs"]) {
        fetched_tensor t{o["name"].get<std::string>(), o["dims"].get<std::vector<long long>>(), {}};
        std::ifstream in(dir / o["file"].get<std::string>(), std::ios::binary);
        const std::string bytes((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
        t.values.resize(bytes.size() / sizeof(float));
        std::memcpy(t.values.data(), bytes.data(), t.values.size() * sizeof(float));
        r.outputs.push_back(std::move(t));
    }
    if (rep.contains("ms")) r.ms = rep["ms"].get<std::vector<double>>();
    return r;
}

}  // namespace ctg::onnx
