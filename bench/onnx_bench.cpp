// ctg-onnx-bench: ctgraph's inference beside ONNX Runtime's on the same model, exported by
// ctg::onnx::save, in one run.
//
//   ctg-onnx-bench [--workloads mlp gpt-s ...] [--reps 20] [--rounds 3] [--dir /tmp]
//
// Every workload is an inference program (float32, one thread) of a reference workload's forward
// (bench/workloads.hpp: the logits of mlp, rnn, s2s, gpt-s, gpt-m and gpt2-124m; the output of the
// five attention workloads) or one unit of its decoding: decode-cache and decode-gpt2-cache time
// one cached step at position 128 (64 for GPT-2) of the generator's step program, the KV caches
// explicit inputs and outputs of the ONNX model; decode-nocache one full forward of a 128-token
// prefix (what each of its tokens costs); gpt2-124m-prefill the generator's prefill of a 64-token
// prompt. Parameters are random (init, plus N(0, 0.02^2) on every element), inputs random and fixed.
//
// Each round times `reps` forward passes of ctgraph (after two warm-up passes), then the exported
// model in ONNX Runtime (onnxruntime-node through Node, scripts/onnx/run_model.js: one thread,
// intra_op_num_threads = 1, every graph optimisation, two warm-up runs, then `reps` timed
// session.run calls on the same inputs); a side's figure is the median over the rounds of its
// round medians. ratio = ONNX Runtime / ctgraph (above 1: ctgraph is faster). "max diff" is the
// largest |ONNX Runtime - ctgraph| of the first output over its largest magnitude (the exports'
// check, as tests/test_onnx*.cpp do it). The last line is the table as JSON (bench/compare.py --onnx).
#include <algorithm>
#include <chrono>
#include <functional>
#include <cstdio>
#include <cstring>
#include <map>
#include <random>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "ctgraph/onnx.hpp"
#include "ctgraph/onnx/onnxruntime.hpp"
#include "ctgraph/xtensor.hpp"
#include "workloads.hpp"

using namespace ctg;

namespace {

struct input_spec {
    std::string name;
    std::vector<std::size_t> shape;
    std::size_t vocab = 0;  // ids below this; 0: floats N(0, 1)
};

struct result {
    std::string workload;
    double ctg_ms = 0, ort_ms = 0, max_diff = 0;
};

double median(std::vector<double> v) {
    std::sort(v.begin(), v.end());
    return v.empty() ? 0 : v.size() % 2 ? v[v.size() / 2] : 0.5 * (v[v.size() / 2 - 1] + v[v.size() / 2]);
}

struct settings {
    int reps = 20, rounds = 3;
    std::string dir = "/tmp";
};

/// Feeds `prog`, exports it, times both sides (see the file comment).
template <class Prog>
result measure(const std::string& name, Prog& prog, const std::vector<input_spec>& feeds, const settings& s) {
    std::mt19937_64 rng(42);
    std::normal_distribution<float> n01;
    // Parameters as init() made them, plus a small random part: biases and gains are not 0 and 1.
    auto& store = prog.params();
    for (std::size_t slot = 0; slot < store.size(); ++slot)
        for (std::size_t k = 0; k < store.at(slot).shape.size(); ++k) store.value(slot)[k] += 0.02f * n01(rng);
    std::vector<onnx::feed_tensor> ort_in;
    for (const input_spec& f : feeds) {
        rshape shape{f.shape.size(), {}};
        std::vector<long long> dims;
        std::size_t n = 1;
        for (std::size_t a = 0; a < f.shape.size(); ++a) shape.d[a] = f.shape[a], dims.push_back((long long)f.shape[a]), n *= f.shape[a];
        if (f.vocab) {
            std::uniform_int_distribution<int> tok(0, int(f.vocab) - 1);
            std::vector<index_t> ids(n);
            for (auto& v : ids) v = tok(rng);
            prog.feed(f.name, ids.data(), shape);
            ort_in.push_back(onnx::feed_tensor::index_ids(f.name, dims, ids.begin(), ids.end()));
        } else {
            std::vector<float> v(n);
            for (auto& x : v) x = n01(rng);
            prog.feed(f.name, v.data(), shape);
            ort_in.push_back(onnx::feed_tensor::floats(f.name, dims, v.begin(), v.end()));
        }
    }
    const std::string path = s.dir + "/ctg_onnx_bench_" + name + ".onnx";
    onnx::save(prog, path);
    prog.forward();
    prog.forward();
    auto out = prog.template output<0>();
    const std::vector<float> ours(out.begin(), out.end());
    std::vector<double> ctg_rounds, ort_rounds;
    double max_diff = 0;
    for (int r = 0; r < s.rounds; ++r) {
        std::vector<double> ms;
        for (int k = 0; k < s.reps; ++k) {
            const auto t0 = std::chrono::steady_clock::now();
            prog.forward();
            ms.push_back(std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count());
        }
        ctg_rounds.push_back(median(ms));
        const auto ort = onnx::run_onnxruntime(path, ort_in, s.reps);
        ort_rounds.push_back(median(ort.ms));
        const auto& got = ort.outputs.at(0).values;
        if (got.size() != ours.size()) throw error(name + ": ONNX Runtime's first output has another size");
        double scale = 1e-30, worst = 0;
        for (std::size_t k = 0; k < ours.size(); ++k) {
            scale = std::max(scale, double(std::abs(ours[k])));
            worst = std::max(worst, double(std::abs(got[k] - ours[k])));
        }
        max_diff = std::max(max_diff, worst / scale);
    }
    std::remove(path.c_str());
    return {name, median(ctg_rounds), median(ort_rounds), max_diff};
}

constexpr options infer{.inference = true};

template <template <class> class W>
result forward_workload(const std::string& name, const std::vector<input_spec>& feeds, const settings& s) {
    auto prog = compile<float, infer>(W<float>::forward());
    prog.params().init(1);
    return measure(name, prog, feeds, s);
}

/// One cached step (at position pos) or the prefill (a prompt of pos tokens) of a decode workload's generator.
template <template <class> class W, bool Prefill>
result onnx_decode_workload(const std::string& name, std::size_t pos, const settings& s) {
    using D = W<float>;
    using gen = typename D::generator;
    constexpr std::size_t L = D::L, d = D::d, C = D::new_tokens + 1;
    auto store = std::make_shared<parameter_store<float>>();
    const std::vector<input_spec> caches{{"cache_k", {L, 1, d, C}}, {"cache_v", {L, 1, C, d}}};
    if constexpr (Prefill) {
        typename gen::prefill_program prog(store);
        store->init(1);
        std::vector<input_spec> f{{"prompt", {1, pos}, D::V}};
        f.insert(f.end(), caches.begin(), caches.end());
        return measure(name, prog, f, s);
    } else {
        typename gen::step_program prog(store);
        store->init(1);
        std::vector<input_spec> f{{"token", {1, 1}, D::V}, {"pos", {1}, pos + 1}};  // a position below pos + 1: fixed by the seed
        f.insert(f.end(), caches.begin(), caches.end());
        return measure(name, prog, f, s);
    }
}

}  // namespace

int main(int argc, char** argv) {
    settings s;
    std::vector<std::string> wanted;
    for (int i = 1; i < argc; ++i) {
        const std::string a = argv[i];
        if (a == "--reps" && i + 1 < argc) s.reps = std::stoi(argv[++i]);
        else if (a == "--rounds" && i + 1 < argc) s.rounds = std::stoi(argv[++i]);
        else if (a == "--dir" && i + 1 < argc) s.dir = argv[++i];
        else if (a == "--workloads") {
            while (i + 1 < argc && argv[i + 1][0] != '-') wanted.push_back(argv[++i]);
        } else {
            std::fprintf(stderr, "usage: ctg-onnx-bench [--workloads NAME...] [--reps N] [--rounds R] [--dir DIR]\n");
            return 2;
        }
    }
    if (auto why = onnx::onnxruntime_missing()) {
        std::fprintf(stderr, "%s\n", why->c_str());
        return 3;
    }
    set_num_threads(1);
    using namespace ctg::bench;
    const std::vector<input_spec> attn{{"Q", {8, 128, 64}}, {"K", {8, 128, 64}}, {"V", {8, 128, 64}}};
    const std::vector<std::pair<std::string, std::function<result()>>> all{
        {"mlp", [&] { return forward_workload<mlp>("mlp", {{"x", {64, 784}}}, s); }},
        {"rnn", [&] { return forward_workload<rnn>("rnn", {{"x", {64, 16}, 65}}, s); }},
        {"s2s", [&] { return forward_workload<s2s>("s2s", {{"src", {24, 32}, 40}, {"tgt_in", {24, 32}, 40}}, s); }},
        {"attn-sdp", [&] { return forward_workload<attn_sdp>("attn-sdp", attn, s); }},
        {"attn-sdp-causal", [&] { return forward_workload<attn_sdp_causal>("attn-sdp-causal", attn, s); }},
        {"attn-dot", [&] { return forward_workload<attn_dot>("attn-dot", attn, s); }},
        {"attn-bilinear", [&] { return forward_workload<attn_bilinear>("attn-bilinear", attn, s); }},
        {"attn-additive", [&] { return forward_workload<attn_additive>("attn-additive", attn, s); }},
        {"gpt-s", [&] { return forward_workload<gpt_s>("gpt-s", {{"x", {16, 64}, 65}}, s); }},
        {"gpt-m", [&] { return forward_workload<gpt_m>("gpt-m", {{"x", {8, 256}, 65}}, s); }},
        {"decode-cache", [&] { return onnx_decode_workload<decode_cache, false>("decode-cache", 128, s); }},
        {"decode-nocache", [&] { return forward_workload<decode_nocache>("decode-nocache", {{"x", {1, 128}, 65}}, s); }},
        {"gpt2-124m", [&] { return forward_workload<gpt2_124m>("gpt2-124m", {{"x", {4, 64}, 50257}}, s); }},
        {"gpt2-124m-prefill", [&] { return onnx_decode_workload<decode_gpt2_cache, true>("gpt2-124m-prefill", 64, s); }},
        {"decode-gpt2-cache", [&] { return onnx_decode_workload<decode_gpt2_cache, false>("decode-gpt2-cache", 64, s); }},
    };
    if (wanted.empty())
        for (const auto& w : all) wanted.push_back(w.first);
    std::vector<result> rows;
    std::printf("%-20s %12s %12s %8s %10s\n", "workload", "ctgraph ms", "ORT ms", "ratio", "max diff");
    for (const std::string& w : wanted) {
        const auto it = std::find_if(all.begin(), all.end(), [&](const auto& e) { return e.first == w; });
        if (it == all.end()) {
            std::fprintf(stderr, "ctg-onnx-bench: no workload '%s'\n", w.c_str());
            return 2;
        }
        const result r = it->second();
        std::printf("%-20s %12.3f %12.3f %8.2f %10.1e\n", r.workload.c_str(), r.ctg_ms, r.ort_ms, r.ort_ms / r.ctg_ms, r.max_diff);
        std::fflush(stdout);
        rows.push_back(r);
    }
    nlohmann::json j = nlohmann::json::array();
    for (const result& r : rows)
        j.push_back({{"workload", r.workload}, {"ctg_ms", r.ctg_ms}, {"ort_ms", r.ort_ms}, {"max_diff", r.max_diff}});
    std::printf("%s\n", j.dump().c_str());
}
