// ctg-bench: the reference workloads (shared/WORKLOADS.md), timed or checked against PyTorch.
//
//   ctg-bench --workload NAME [--threads K] [--steps N] [--warmup W] [--json] [--step plain|fused]
//             [--precision f32|bf16]
//   ctg-bench --workload NAME --check DIR [--dtype float32|float64] [--precision f32|bf16]
//   ctg-bench --rates [--threads K]      the machine's 2048^3 product rates, float and bf16 (JSON)
//
// --precision bf16 compiles the workload with options{.precision = precision::bf16} (matrix
// products on bf16 operands, float accumulation); its check reads the float64 dump with
// --dtype float64 (else float32's) and holds every tensor to 3e-2 (see `tolerance`).
//
// Timing: W warm-up steps (default 3), then N measured steps (default 20), each a whole training
// step (forward, loss, backward, optimizer update) timed with steady_clock; the median is reported,
// with the heap allocations over those N steps and over N more (zero in steady state). The gpt
// workloads (gpt-s ... gpt2-124m-lora, gpt-m-frozen-embed) also run one step with forward, backward
// and the optimizer timed apart and the products of forward and backward counted in kernels::gemm,
// printed beside what the program's summary predicts (and the parameters frozen).
// --step fused times ctg::train_step instead (each parameter's update inside backward).
// Check: loads DIR/<workload>[-f64]/{weights,batch}.npz written by
// `shared/bench/torch_ref.py --dump-npz DIR`, runs one step, and compares the loss, every gradient
// (of the parameters that train: a frozen one has none here and none in the dump, and the two sets
// must be the same) and the weights after the update with the dump: per tensor max|a - b| / max|b|
// <= 1e-4 (float32) or 1e-9 (float64); an all-zero reference (max|b| at most 1e-6, 1e-12 in
// float64: round-off around a zero) needs max|a| <= 1e-6 (1e-12). A weight after the update that misses the limit passes if
// the update applied to PyTorch's gradients meets it: see run_training_check. Exit status 1 on
// failure.
#include <sys/resource.h>

#include <algorithm>
#include <chrono>
#include <numeric>
#include <cmath>
#include <cstdio>
#include <exception>
#include <cstdlib>
#include <filesystem>
#include <map>
#include <random>
#include <string>
#include <vector>

#include <atomic>
#include <new>

#include <boost/hana/for_each.hpp>

#include "bandwidth.hpp"
#include "workloads.hpp"

// Heap allocations, counted for the report (a steady-state step must make none): every operator new
// of this program, plus every buffer ctgraph allocates (ctg::allocation_count).
// Allocations made inside oneDNN's calls (its execute allocates per call: kernels/onednn.hpp) are
// counted apart.
namespace {
std::atomic<long> operator_news{0}, onednn_news{0};
long heap_allocations() { return operator_news.load() + ctg::allocation_count().load(); }
}  // namespace
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic ignored "-Wmismatched-new-delete"  // the pair below is malloc/free by design
#endif
void* operator new(std::size_t n) {
    (ctg::kernels::inside_onednn() ? onednn_news : operator_news).fetch_add(1, std::memory_order_relaxed);
    if (void* p = std::malloc(n ? n : 1)) return p;
    throw std::bad_alloc();
}
void operator delete(void* p) noexcept { std::free(p); }
void operator delete(void* p, std::size_t) noexcept { std::free(p); }

using namespace ctg;

namespace {

struct args {
    std::string workload, check_dir, dtype = "float32";
    int threads = 1, steps = 20, warmup = 3;
    bool json = false;
    std::string step = "plain";  // plain: zero_grad, forward, backward, opt.step; fused: ctg::train_step
    bool rates = false;  // --rates: the machine's product rates (run_rates) instead of a workload
    std::string precision = "f32";  // bf16: the program's products in bf16 (options{.precision = precision::bf16})
    std::string weights = "f32";  // int8, q4: a decode workload's weights quantised (options{.weights = ...})
};

template <class Template>
using workload_in = typename Template::template apply<float>::type;

std::string workload_names() {
    std::string names;
    boost::hana::for_each(bench::registry, [&](auto t) {
        names += std::string(names.empty() ? "" : " ") + workload_in<decltype(t)>::name;
    });
    return names;
}

[[noreturn]] void usage(const std::string& why) {
    std::fprintf(stderr,
                 "ctg-bench: %s\nusage: ctg-bench --workload NAME [--threads K] [--steps N] [--warmup W] [--json] [--step plain|fused]\n"
                 "                 [--precision f32|bf16] [--weights f32|int8|q4 (decode workloads)]\n"
                 "       ctg-bench --workload NAME --check DIR [--dtype float32|float64] [--precision f32|bf16]\n"
                 "       ctg-bench --rates [--threads K]\nworkloads: %s\n",
                 why.c_str(), workload_names().c_str());
    std::exit(2);
}

args parse(int argc, char** argv) {
    args a;
    for (int i = 1; i < argc; ++i) {
        std::string k = argv[i];
        auto value = [&]() -> std::string {
            if (i + 1 >= argc) usage("missing value after " + k);
            return argv[++i];
        };
        auto number = [&]() {
            const std::string v = value();
            try {
                std::size_t used = 0;
                const int n = std::stoi(v, &used);
                if (used != v.size() || n < 0) throw std::invalid_argument(v);
                return n;
            } catch (const std::exception&) {
                usage(k + " needs a non-negative integer, got '" + v + "'");
            }
        };
        if (k == "--workload") a.workload = value();
        else if (k == "--threads") a.threads = number();
        else if (k == "--steps") a.steps = number();
        else if (k == "--warmup") a.warmup = number();
        else if (k == "--check") a.check_dir = value();
        else if (k == "--dtype") a.dtype = value();
        else if (k == "--json") a.json = true;
        else if (k == "--step") a.step = value();
        else if (k == "--precision") a.precision = value();
        else if (k == "--rates") a.rates = true;
        else if (k == "--weights") a.weights = value();
        else usage("unknown option " + k);
    }
    if (a.workload.empty() && !a.rates) usage("--workload is required");
    if (a.dtype != "float32" && a.dtype != "float64") usage("--dtype is float32 or float64");
    if (a.threads < 1) usage("--threads must be at least 1");
    if (a.step != "plain" && a.step != "fused") usage("--step is plain or fused");
    if (a.precision != "f32" && a.precision != "bf16") usage("--precision is f32 or bf16");
    if (a.steps < 1) usage("--steps must be at least 1");
    if (a.weights != "f32" && a.weights != "int8" && a.weights != "q4") usage("--weights is f32, int8 or q4");
    if (a.weights != "f32" && a.precision != "f32") usage("--weights int8|q4 runs float products (--precision f32)");
    if (a.weights != "f32" && !a.check_dir.empty()) usage("--check compares float programs with PyTorch's; quantised weights are checked by the tests");
    return a;
}

double peak_rss_mib() {
    rusage u{};
    getrusage(RUSAGE_SELF, &u);
    return double(u.ru_maxrss) / 1024.0;
}

// ---------------------------------------------------------------- timing
template <class W>
int run_timing(const args& a) {
    set_num_threads(a.threads);
    W w;
    w.params().init(1234);
    w.random_batch(1235);
    if constexpr (requires { w.fused; }) w.fused = a.step == "fused";
    const double rss_before = peak_rss_mib();
    double first = 0, last = 0;
    for (int i = 0; i < a.warmup; ++i) {
        const double l = w.step();
        if (i == 0) first = l;
    }
    // The matrix-product work one step really runs (counted by kernels::gemm).
    kernels::gemm_flop_counter() = 0;
    last = w.step();
    const double gemm_flops = double(kernels::gemm_flop_counter().load());
    // The gpt workloads (those with a summary): one more step, forward, backward and the optimizer
    // timed apart and their products counted, against what the program's summary predicts
    // (model_summary: flops.forward_products, backward_products).
    std::string products_json, products_text;
    if constexpr (requires { w.summary(); }) {
        using clock = std::chrono::steady_clock;
        auto ms_since = [](clock::time_point t) { return std::chrono::duration<double, std::milli>(clock::now() - t).count(); };
        kernels::gemm_flop_counter() = 0;
        auto t = clock::now();
        w.prog.zero_grad();
        last = w.prog.forward();
        const double fwd_ms = ms_since(t);
        const double fwd = double(kernels::gemm_flop_counter().load());
        t = clock::now();
        w.prog.backward();
        const double bwd_ms = ms_since(t);
        const double bwd = double(kernels::gemm_flop_counter().load()) - fwd;
        t = clock::now();
        w.opt.step(w.params());
        const double opt_ms = ms_since(t);
        const model_summary sum = w.summary();
        const double pf = double(sum.flops.forward_products), pb = double(sum.flops.backward_products);
        char buf[1024];
        std::snprintf(buf, sizeof buf,
                      ", \"gemm_forward_flops\": %.0f, \"gemm_backward_flops\": %.0f, \"summary_forward_products\": %.0f, "
                      "\"summary_backward_products\": %.0f, \"summary_frozen_saved_backward_products\": %.0f, "
                      "\"summary_frozen_saved_backward\": %.0f, \"params\": %llu, \"frozen_params\": %llu, "
                      "\"phase_forward_ms\": %.3f, \"phase_backward_ms\": %.3f, \"phase_optimizer_ms\": %.3f",
                      fwd, bwd, pf, pb, double(sum.frozen_saved_backward_products), double(sum.frozen_saved_backward),
                      static_cast<unsigned long long>(sum.params), static_cast<unsigned long long>(sum.frozen_params), fwd_ms, bwd_ms,
                      opt_ms);
        products_json = buf;
        std::snprintf(buf, sizeof buf,
                      "%-16s parameters %llu, of which %llu frozen (%llu train)\n"
                      "%-16s products counted in kernels::gemm: forward %.3f GFLOP, backward %.3f GFLOP\n"
                      "%-16s the summary predicts:             forward %.3f GFLOP, backward %.3f GFLOP (counted/predicted %.4f, %.4f);\n"
                      "%-16s freezing saves %.3f GFLOP of backward products (%.3f of all backward FLOPs)\n"
                      "%-16s that step: forward %.1f ms (%.1f GFLOP/s of products), backward %.1f ms (%.1f), optimizer %.1f ms\n",
                      W::name, static_cast<unsigned long long>(sum.params), static_cast<unsigned long long>(sum.frozen_params),
                      static_cast<unsigned long long>(sum.params - sum.frozen_params), "", fwd / 1e9, bwd / 1e9, "", pf / 1e9, pb / 1e9,
                      pf > 0 ? fwd / pf : 0.0, pb > 0 ? bwd / pb : 0.0, "", double(sum.frozen_saved_backward_products) / 1e9,
                      double(sum.frozen_saved_backward) / 1e9, "", fwd_ms, fwd / fwd_ms / 1e6, bwd_ms, bwd / bwd_ms / 1e6, opt_ms);
        products_text = buf;
    }
    std::vector<double> ms;
    ms.reserve(std::size_t(a.steps));
    // Allocations over the N timed steps, then over N more (2N in all): both zero in steady state.
    const long allocs_before = heap_allocations(), onednn_before = onednn_news.load();
    for (int i = 0; i < a.steps; ++i) {
        const auto t0 = std::chrono::steady_clock::now();
        last = w.step();
        ms.push_back(std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count());
    }
    const long allocs_n = heap_allocations() - allocs_before;
    for (int i = 0; i < a.steps; ++i) last = w.step();
    const long allocs_2n = heap_allocations() - allocs_before, onednn_allocs_2n = onednn_news.load() - onednn_before;
    std::vector<double> sorted = ms;
    std::sort(sorted.begin(), sorted.end());
    const std::size_t n = sorted.size();
    const double median = n % 2 ? sorted[n / 2] : 0.5 * (sorted[n / 2 - 1] + sorted[n / 2]);
    const double gflops = W::flops() / (median * 1e-3) / 1e9;
    std::string tokens;  // the decode workloads: one step is one generation of new_tokens tokens
    if constexpr (requires { W::new_tokens; })
        tokens = ", \"tokens_per_s\": " + std::to_string(double(W::new_tokens) / (median * 1e-3)) +
                 ", \"ms_per_token\": " + std::to_string(median / double(W::new_tokens)) +
                 ", \"bytes_per_token\": " + std::to_string(w.bytes_per_token());
    if (a.json) {
        std::printf("{\"workload\": \"%s\", \"precision\": \"%s\", \"weights\": \"%s\", \"bf16_engine\": \"%s\", \"onednn_isa\": \"%s\", \"step\": \"%s\", \"threads\": %d, \"steps\": %d, \"warmup\": %d, \"median_ms\": %.6f, "
                    "\"min_ms\": %.6f, \"max_ms\": %.6f, \"gflops\": %.4f, \"flops_per_step\": %.0f, "
                    "\"gemm_flops_per_step\": %.0f, \"peak_rss_mib\": %.2f, \"rss_before_loop_mib\": %.2f, "
                    "\"loss_first\": %.6f, \"loss_last\": %.6f, \"allocations_n\": %ld, \"allocations_2n\": %ld, "
                    "\"onednn_allocations_2n\": %ld%s%s}\n",
                    W::name, a.precision.c_str(), a.weights.c_str(), kernels::bf16_engine_name(kernels::get_bf16_engine()),
                    kernels::onednn_isa_name().c_str(), a.step.c_str(), a.threads, a.steps, a.warmup, median, sorted.front(), sorted.back(), gflops, W::flops(),
                    gemm_flops, peak_rss_mib(), rss_before, first, last, allocs_n, allocs_2n, onednn_allocs_2n, tokens.c_str(),
                    products_json.c_str());
    } else {
        if constexpr (requires { W::new_tokens; })
            std::printf("%-16s %.1f tokens/s, %.1f MB read per token\n", W::name, double(W::new_tokens) / (median * 1e-3),
                        w.bytes_per_token() / 1e6);
        if (a.precision == "bf16")
            std::printf("%-16s bf16 products: %s (oneDNN ISA %s)\n", W::name,
                        kernels::get_bf16_engine() == kernels::bf16_engine::onednn ? "oneDNN" : "emulated",
                        kernels::onednn_isa_name().c_str());
        std::printf("%-16s threads %d  median %.3f ms  (min %.3f, max %.3f)  %.2f GFLOP/s\n", W::name, a.threads,
                    median, sorted.front(), sorted.back(), gflops);
        std::printf("%-16s peak RSS %.1f MiB  loss %.6f -> %.6f\n", "", peak_rss_mib(), first, last);
        std::printf("%s", products_text.c_str());
        std::printf("%-16s heap allocations: %ld in %d steps, %ld in %d", "", allocs_n, a.steps, allocs_2n, 2 * a.steps);
        if (onednn_allocs_2n) std::printf(" (and %ld inside oneDNN's calls)", onednn_allocs_2n);
        std::printf("\n");
    }
    return 0;
}

// ---------------------------------------------------------------- parity check
struct comparison {
    double err = 0;
    bool ok = true;
};

// The limits of a check: max|a - b| / max|b| per tensor, and max|a| where the reference is zero.
// bf16: operands carry 8 significant bits (relative rounding 2^-9 = 2e-3 per operand), and a
// gradient goes through several products in a row (the gpt blocks' backward: four), so a tensor's
// worst element can differ by about 1e-2 of the tensor's scale; the limit is 3e-2.
struct tolerance {
    double rel, zero;
    const char* name;
};
inline constexpr tolerance tolerance_f64{1e-9, 1e-12, "float64"}, tolerance_f32{1e-4, 1e-6, "float32"},
    tolerance_bf16{3e-2, 1e-4, "bf16 products (against float64)"};
template <class W>
constexpr tolerance tolerance_of() {
    if constexpr (W::products == precision::bf16) return tolerance_bf16;
    else if constexpr (std::is_same_v<typename W::T, double>) return tolerance_f64;
    else return tolerance_f32;
}
// The dump a check reads: float64's for float64 and bf16 programs (the issue's --dtype float64),
// float32's otherwise.
template <class W>
std::string dump_dir(const args& a) {
    const bool f64_dump = std::is_same_v<typename W::T, double> || (W::products == precision::bf16 && a.dtype == "float64");
    return a.check_dir + "/" + W::name + (f64_dump ? "-f64" : "");
}

comparison compare(const std::vector<double>& ours, const std::vector<double>& ref, const tolerance& tol) {
    double diff = 0, scale = 0, mag = 0;
    for (std::size_t i = 0; i < ref.size(); ++i) {
        diff = std::max(diff, std::abs(ours[i] - ref[i]));
        scale = std::max(scale, std::abs(ref[i]));
        mag = std::max(mag, std::abs(ours[i]));
    }
    comparison c;
    // A reference that is zero, or round-off around a gradient that is zero mathematically (a key
    // bias: softmax ignores a shift shared by a row's scores; PyTorch's dump holds ~3e-12 there, and
    // its own float32 differs from its float64 by 6e8 times that), is held to the all-zero rule.
    const double zero_limit = tol.zero;
    if (scale <= zero_limit) {
        c.err = mag;
        c.ok = mag <= zero_limit;
    } else {
        c.err = diff / scale;
        c.ok = std::isfinite(c.err) && c.err <= tol.rel;
    }
    return c;
}

// Where a ctgraph parameter lives in the dump: one array, or one per layer for a stacked parameter
// of ctg::repeat ("blocks.q.weight" (L, in, out) is PyTorch's "blocks.0.q.weight", "blocks.1.q.weight",
// ...). Weights PyTorch stores [out, in] are transposed per piece.
struct torch_piece {
    std::string name;
    std::size_t offset = 0, rows = 0, cols = 0;  // into ctgraph's values; the piece's last two dims
    bool transposed = false;
};
template <class W, class T>
std::vector<torch_piece> torch_pieces(const parameter_store<T>& ps, std::size_t slot) {
    const auto& e = ps.at(slot);
    const std::size_t layers = e.layer_axes ? e.shape.d[0] : 1, per = e.shape.size() / layers;
    const bool transposed = W::transposed().count(e.name) > 0;
    std::vector<torch_piece> pieces;
    for (std::size_t l = 0; l < layers; ++l) {
        std::string name = e.name;
        if (e.layer_axes) {
            const std::size_t dot = name.find('.');
            name = name.substr(0, dot) + "." + std::to_string(l) + name.substr(dot);
        }
        const std::size_t cols = e.shape.cols(), rows = per / cols;
        pieces.push_back({name, l * per, transposed ? rows : 1, transposed ? cols : per, transposed});
    }
    return pieces;
}

// The dump's layout of parameter `slot`: ctgraph's values, transposed back for [out, in] weights,
// layers in order.
template <class W, class T>
std::vector<double> in_torch_layout(const parameter_store<T>& ps, std::size_t slot, const T* data) {
    std::vector<double> v(ps.at(slot).shape.size());
    for (const torch_piece& p : torch_pieces<W>(ps, slot))
        for (std::size_t i = 0; i < p.rows; ++i)
            for (std::size_t j = 0; j < p.cols; ++j)
                v[p.offset + (p.transposed ? j * p.rows + i : i * p.cols + j)] = double(data[p.offset + i * p.cols + j]);
    return v;
}

/// The reference arrays of parameter `slot` (its pieces, concatenated) from one of the dump's files.
template <class W, class T>
std::vector<double> torch_arrays(const parameter_store<T>& ps, std::size_t slot,
                                 const std::map<std::string, npz::array>& file, const std::string& file_name) {
    std::vector<double> v;
    for (const torch_piece& p : torch_pieces<W>(ps, slot)) {
        auto it = file.find(p.name);
        if (it == file.end()) throw io_error(file_name + " has no array '" + p.name + "'");
        const auto src = npz::to_vector<double>(it->second);
        if (src.size() != p.rows * p.cols)
            throw io_error(file_name + ": '" + p.name + "' has " + std::to_string(src.size()) + " elements, ctgraph's " +
                           to_string(ps.at(slot).shape) + " needs " + std::to_string(p.rows * p.cols) + " for it");
        if (p.transposed && it->second.shape != std::vector<std::size_t>{p.cols, p.rows})
            throw io_error(file_name + ": '" + p.name + "' is not stored [out, in] = [" + std::to_string(p.cols) + ", " +
                           std::to_string(p.rows) + "]");
        v.insert(v.end(), src.begin(), src.end());
    }
    return v;
}

/// Whether one of the dump's files holds parameter `slot` (its first piece): PyTorch's grads.npz
/// has no gradient of a frozen parameter (requires_grad False: p.grad is None).
template <class W, class T>
bool dump_holds(const parameter_store<T>& ps, std::size_t slot, const std::map<std::string, npz::array>& file) {
    return file.count(torch_pieces<W>(ps, slot).front().name) > 0;
}

/// Parameter `slot`'s arrays from one of the dump's files, written to dst in ctgraph's layout.
template <class W, class T>
void from_torch_layout(const parameter_store<T>& ps, std::size_t slot, const std::map<std::string, npz::array>& file,
                       const std::string& file_name, T* dst) {
    const auto src = torch_arrays<W>(ps, slot, file, file_name);
    for (const torch_piece& p : torch_pieces<W>(ps, slot))
        for (std::size_t i = 0; i < p.rows; ++i)
            for (std::size_t j = 0; j < p.cols; ++j)
                dst[p.offset + i * p.cols + j] = T(src[p.offset + (p.transposed ? j * p.rows + i : i * p.cols + j)]);
}

template <class W, class T>
void load_torch_weights(parameter_store<T>& ps, const std::map<std::string, npz::array>& weights) {
    for (std::size_t s = 0; s < ps.size(); ++s) from_torch_layout<W>(ps, s, weights, "weights.npz", ps.value(s));
}

/// The decode workloads: the tokens equal the dump's, and so do the logits of every step (per
/// step, max|a - b| / max|b| within the training workloads' limits).
template <class W>
int run_decode_check(const args& a) {
    constexpr tolerance tol = tolerance_of<W>();
    const std::string dir = dump_dir<W>(a);
    const auto weights = npz::read(dir + "/weights.npz");
    const auto result = npz::read(dir + "/result.npz");
    W w;
    load_torch_weights<W>(w.params(), weights);
    w.feed_dump(npz::read(dir + "/batch.npz"));
    w.keep_logits = true;
    w.step();
    const auto want_tokens = npz::to_vector<index_t>(result.at("tokens"));
    const auto want_logits = npz::to_vector<double>(result.at("logits"));
    const std::size_t n = W::new_tokens, V = W::V;
    if (want_tokens.size() != n || want_logits.size() != n * V)
        throw io_error(dir + "/result.npz: expected " + std::to_string(n) + " tokens and logits of " + std::to_string(V));
    std::size_t same = 0, first_diff = n;
    for (std::size_t t = 0; t < n; ++t) {
        same += w.tokens[t] == want_tokens[t];
        if (w.tokens[t] != want_tokens[t] && first_diff == n) first_diff = t;
    }
    // bf16 weights: a near-tie may pick another token, and then the prefixes differ: logits are
    // compared up to the first token that differs (measured on decode-cache against float64: 4.9e-3
    // at worst there; 255 of 256 tokens equal), and 95 % of the tokens must agree.
    const bool mixed = W::products == precision::bf16;
    const tolerance t_logits = tol;
    comparison worst;
    for (std::size_t t = 0; t < (mixed ? std::min(n, first_diff + 1) : n); ++t) {
        const std::vector<double> ours(w.logits[0].begin() + long(t * V), w.logits[0].begin() + long((t + 1) * V));
        const std::vector<double> ref(want_logits.begin() + long(t * V), want_logits.begin() + long((t + 1) * V));
        const comparison c = compare(ours, ref, t_logits);
        if (!c.ok || c.err > worst.err) worst = c;
    }
    const bool ok = (mixed ? same * 100 >= n * 95 : same == n) && worst.ok;
    std::printf("%s (%s): %zu of %zu tokens equal; logits worst max|a - b| / max|b| per step %.3e (limit %g)\nparity: %s\n",
                W::name, tol.name, same, n, worst.err, t_logits.rel, ok ? "PASS" : "FAIL");
    return ok ? 0 : 1;
}

template <class W>
int run_training_check(const args& a);
template <class W>
int run_check(const args& a) {
    if constexpr (requires { W::new_tokens; }) return run_decode_check<W>(a);
    else return run_training_check<W>(a);
}

template <class W>
int run_training_check(const args& a) {
    constexpr tolerance tol = tolerance_of<W>();
    const std::string dir = dump_dir<W>(a);
    // Each of the dump's files is read where it is used and let go after: at GPT-2's widths in
    // float64 each of weights, grads and weights_after_step1 is 733 MB, and memory a process touches
    // for the first time is slow on some virtual machines (about 10 s a GB on the CI's).
    const auto result = npz::read(dir + "/result.npz");

    // bf16: PyTorch's own mixed precision against the same float64 reference, where its dump is
    // there (DIR/autocast/<workload>: torch_ref.py --autocast bf16 --dtype float32): a tensor also
    // passes within 1.5 times PyTorch's error on it. Mixed precision cannot beat the rounding of its
    // operands: a sum with cancellation, as a ReLU layer's bias gradient, is off by 10-20 % in both.
    const std::string autocast_dir = a.check_dir + "/autocast/" + W::name;
    const bool calibrated = W::products == precision::bf16 && std::filesystem::exists(autocast_dir + "/grads.npz");
    std::map<std::string, npz::array> ac_result, ac_grads, ac_after;
    if (calibrated) {
        ac_result = npz::read(autocast_dir + "/result.npz");
        ac_grads = npz::read(autocast_dir + "/grads.npz");
        ac_after = npz::read(autocast_dir + "/weights_after_step1.npz");
    }

    W w;
    auto& ps = w.prog.params();
    load_torch_weights<W>(ps, npz::read(dir + "/weights.npz"));
    w.feed_dump(npz::read(dir + "/batch.npz"));
    const double loss = w.step(false);
    bool all_ok = true;
    // ours and the reference, and PyTorch autocast's array where calibrated
    auto check = [&](const std::string& what, const std::vector<double>& ours, const std::vector<double>& ref,
                     const std::vector<double>* torch_bf16) {
        tolerance t = tol;
        double torch_err = -1;
        if (torch_bf16) {
            torch_err = compare(*torch_bf16, ref, tol).err;
            t.rel = std::max(tol.rel, 1.5 * torch_err);
        }
        const comparison c = compare(ours, ref, t);
        if (torch_bf16) std::printf("  %-34s %.3e  %s  (PyTorch autocast %.3e)\n", what.c_str(), c.err, c.ok ? "ok" : "FAIL", torch_err);
        else std::printf("  %-34s %.3e  %s\n", what.c_str(), c.err, c.ok ? "ok" : "FAIL");
        all_ok = all_ok && c.ok;
    };
    std::printf("%s (%s): max|a - b| / max|b| per tensor, limit %g%s\n", W::name, tol.name, tol.rel,
                calibrated ? " or 1.5 x PyTorch autocast's own error" : "");
    {
        const std::vector<double> ac = calibrated ? npz::to_vector<double>(ac_result.at("loss")) : std::vector<double>{};
        check("loss", {loss}, npz::to_vector<double>(result.at("loss")), calibrated ? &ac : nullptr);
    }
    {
        const auto grads = npz::read(dir + "/grads.npz");
        // Frozen parameters (options::frozen, options::trainable) have no gradient here and none in
        // the dump: the two sets must be the same, and only the others are compared.
        std::size_t frozen = 0, frozen_elements = 0;
        for (std::size_t s = 0; s < ps.size(); ++s) {
            const bool in_dump = dump_holds<W>(ps, s, grads);
            if (ps.frozen(s) || !in_dump) {
                if (ps.frozen(s) && !in_dump) {
                    ++frozen, frozen_elements += ps.at(s).shape.size();
                    continue;
                }
                std::printf("  %-34s %s  FAIL\n", ("grad " + ps.at(s).name).c_str(),
                            ps.frozen(s) ? "frozen here, trains in PyTorch's dump" : "trains here, frozen in PyTorch's dump (no gradient)");
                all_ok = false;
                continue;
            }
            const auto ac = calibrated ? torch_arrays<W>(ps, s, ac_grads, "autocast grads.npz") : std::vector<double>{};
            check("grad " + ps.at(s).name, in_torch_layout<W>(ps, s, ps.grad(s)), torch_arrays<W>(ps, s, grads, "grads.npz"),
                  calibrated ? &ac : nullptr);
        }
        if (frozen)
            std::printf("  frozen: %zu parameters (%zu elements), no gradient here nor in PyTorch's dump: the same set\n", frozen,
                        frozen_elements);
        if constexpr (requires { W::input_grads(); }) {  // the attention workloads: dL/dQ, dL/dK, dL/dV too
            for (const std::string& k : W::input_grads()) {
                if (!grads.count(k)) throw io_error("grads.npz has no array '" + k + "'");
                const auto ac = calibrated ? npz::to_vector<double>(ac_grads.at(k)) : std::vector<double>{};
                check("grad " + k, w.input_grad(k), npz::to_vector<double>(grads.at(k)), calibrated ? &ac : nullptr);
            }
        }
    }
    // The weights after the update. The first Adam step moves a weight by lr g / (|g| + eps): where
    // |g| is below eps, a gradient's rounding error reaches the weight multiplied by up to lr / eps
    // (3e4 for the gpt workloads' AdamW), so at GPT-2's sizes both PyTorch's float32 and ours miss
    // the limit on a few weights of gradient ~1e-9 (and PyTorch's float32 misses it against its own
    // float64 by as much: docs/benchmarks.md). A weight that misses it is checked as the two factors
    // of the step, each to the limit: its gradient (above), and the update applied to PyTorch's
    // gradients from the initial weights (a fresh copy of the optimizer: its first step again).
    const auto fresh_opt = w.opt;
    w.opt.step(ps);
    std::vector<std::size_t> missed;
    std::vector<std::vector<double>> missed_after;
    {
        const auto after = npz::read(dir + "/weights_after_step1.npz");
        for (std::size_t s = 0; s < ps.size(); ++s) {
            const auto ac = calibrated ? torch_arrays<W>(ps, s, ac_after, "autocast weights_after_step1.npz") : std::vector<double>{};
            const auto ours = in_torch_layout<W>(ps, s, ps.value(s));
            auto ref = torch_arrays<W>(ps, s, after, "weights_after_step1.npz");
            if (!calibrated && !compare(ours, ref, tol).ok) {
                std::printf("  %-34s %.3e  (from our gradients; see below)\n", ("after step " + ps.at(s).name).c_str(),
                            compare(ours, ref, tol).err);
                missed.push_back(s);
                missed_after.push_back(std::move(ref));
                continue;
            }
            check("after step " + ps.at(s).name, ours, ref, calibrated ? &ac : nullptr);
        }
    }
    if (!missed.empty()) {
        auto opt = fresh_opt;
        load_torch_weights<W>(ps, npz::read(dir + "/weights.npz"));
        const auto grads = npz::read(dir + "/grads.npz");
        for (std::size_t s = 0; s < ps.size(); ++s)
            if (!ps.frozen(s)) from_torch_layout<W>(ps, s, grads, "grads.npz", ps.grad(s));
        opt.step(ps);
        std::printf("  the update from PyTorch's gradients:\n");
        for (std::size_t i = 0; i < missed.size(); ++i)
            check("after step " + ps.at(missed[i]).name, in_torch_layout<W>(ps, missed[i], ps.value(missed[i])), missed_after[i],
                  nullptr);
    }
    std::printf("%s\n", all_ok ? "parity: PASS" : "parity: FAIL");
    return all_ok ? 0 : 1;
}

// ---------------------------------------------------------------- product rates
// The machine's matrix-product rates at a.threads threads, for the bounds of a report: a 2048^3
// product through kernels::gemm in float and in bf16 (packing included), and at one thread the
// same product through oneDNN directly (float and bf16 operands, packed beforehand), median of 5
// after one warm-up; and the memory read bandwidth (the bound of a cached decoding step).
int run_rates(const args& a) {
    set_num_threads(a.threads);
    // Memory read bandwidth (bench/bandwidth.hpp), the bound of a cached decoding step: first,
    // while the process's memory is unfragmented and its gigabyte gets huge pages.
    const double read_gbps = bench::read_bandwidth_gbps(a.threads);
    constexpr std::size_t n = 2048;
    std::vector<float> A(n * n), B(n * n), C(n * n);
    std::mt19937 rng(1);
    std::normal_distribution<float> d;
    for (auto& x : A) x = d(rng);
    for (auto& x : B) x = d(rng);
    auto rate = [&](auto&& product) {
        product();
        std::vector<double> s;
        for (int r = 0; r < 5; ++r) {
            const auto t0 = std::chrono::steady_clock::now();
            product();
            s.push_back(std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count());
        }
        std::sort(s.begin(), s.end());
        return 2.0 * double(n) * n * n / s[2] / 1e9;
    };
    const double f32 = rate([&] { kernels::gemm<float>(false, false, n, n, n, 1.0f, A.data(), n, B.data(), n, 0.0f, C.data(), n); });
    const double bf16 =
        rate([&] { kernels::gemm<float>(false, false, n, n, n, 1.0f, A.data(), n, B.data(), n, 0.0f, C.data(), n, nullptr, true); });
    double onednn_f32 = 0, onednn_bf16 = 0;
#if defined(CTG_WITH_ONEDNN)
    {
        auto& m = kernels::detail::onednn_matmuls::here();
        onednn_f32 = rate([&] { m.run(false, false, n, n, n, 1.0f, A.data(), n, B.data(), n, 0.0f, C.data(), n, nullptr); });
        if (kernels::onednn_has_bf16()) {
            std::vector<kernels::bf16_bits> a(n * n), b(n * n);
            kernels::pack_bf16(false, n, n, A.data(), n, a.data());
            kernels::pack_bf16(false, n, n, B.data(), n, b.data());
            onednn_bf16 = rate([&] { m.run(false, false, n, n, n, 1.0f, a.data(), n, b.data(), n, 0.0f, C.data(), n, nullptr); });
        }
    }
#endif
    std::printf("{\"threads\": %d, \"gemm_f32_gflops\": %.2f, \"gemm_bf16_gflops\": %.2f, \"bf16_engine\": \"%s\", "
                "\"onednn_isa\": \"%s\", \"onednn_f32_1thread_gflops\": %.2f, \"onednn_bf16_1thread_gflops\": %.2f, "
                "\"f32_policy\": \"%s\", \"read_gbps\": %.2f}\n",
                a.threads, f32, bf16, kernels::bf16_engine_name(kernels::get_bf16_engine()), kernels::onednn_isa_name().c_str(),
                onednn_f32, onednn_bf16, kernels::register_gemm_policy_name(kernels::get_register_gemm_policy()), read_gbps);
    return 0;
}

// Runs the registered workload named a.workload; -1 when there is none.
int dispatch(const args& a) {
    int rc = -1;
    boost::hana::for_each(bench::registry, [&](auto t) {
        using Template = decltype(t);
        if (rc != -1 || a.workload != workload_in<Template>::name) return;
        using W32 = typename Template::template apply<float>::type;
        using W64 = typename Template::template apply<double>::type;
        using WB = typename Template::template apply<bench::bf16_mixed>::type;
        if (!a.check_dir.empty()) {
            if (a.precision == "bf16") {
                std::printf("bf16 products: %s\n", kernels::bf16_engine_name(kernels::get_bf16_engine()));
                rc = run_check<WB>(a);
            }
            else rc = a.dtype == "float64" ? run_check<W64>(a) : run_check<W32>(a);
        } else if (a.weights != "f32") {
            if constexpr (requires { W32::new_tokens; }) {
                using WQ8 = typename Template::template apply<bench::quantised<weight_format::int8>>::type;
                using WQ4 = typename Template::template apply<bench::quantised<weight_format::q4>>::type;
                rc = a.weights == "int8" ? run_timing<WQ8>(a) : run_timing<WQ4>(a);
            } else {
                usage("--weights int8|q4 is for the decode workloads (inference programs); " + a.workload + " trains");
            }
        } else {
            rc = a.precision == "bf16" ? run_timing<WB>(a) : run_timing<W32>(a);
        }
    });
    return rc;
}

}  // namespace

int main(int argc, char** argv) try {
    const args a = parse(argc, argv);
    if (a.rates) return run_rates(a);
    const int rc = dispatch(a);
    if (rc < 0) usage("unknown workload '" + a.workload + "'");
    return rc;
} catch (const std::exception& e) {  // ctg::error, and a bad environment (CTG_BF16_ENGINE) or option value
    std::fprintf(stderr, "ctg-bench: %s\n", e.what());
    return 2;
}
