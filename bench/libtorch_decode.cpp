// libtorch-decode: the `decode-cache` workload (WORKLOADS.md: gpt-s, greedy, prompt of one token, 256
// new tokens, batch 1, KV cache) in LibTorch's C++ API, the same operations as
// ../shared/bench/torch_ref.py's GPT.logits_cached, to measure the LibTorch rate the performance
// target names on the machine at hand. Weights are N(0, 0.02^2) from a fixed seed: the rate does not
// depend on their values. Not part of the default build (it needs Debian's libtorch-dev, about 1 GB):
//
//   scripts/libtorch_decode.sh [THREADS]     installs libtorch-dev if missing, builds, runs
//
// Prints the median over 20 generations (3 warm-up) of 256 tokens, as tokens per second.
#include <torch/torch.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <vector>

namespace {

constexpr int64_t V = 65, d = 128, heads = 4, layers = 2, dh = d / heads, new_tokens = 256;

torch::Tensor normal(std::vector<int64_t> shape) { return torch::randn(shape) * 0.02; }

struct block {
    torch::Tensor ln1_w = torch::ones({d}), ln1_b = torch::zeros({d});
    torch::Tensor q_w = normal({d, d}), q_b = normal({d}), k_w = normal({d, d}), k_b = normal({d});
    torch::Tensor v_w = normal({d, d}), v_b = normal({d}), proj_w = normal({d, d}), proj_b = normal({d});
    torch::Tensor ln2_w = torch::ones({d}), ln2_b = torch::zeros({d});
    torch::Tensor fc1_w = normal({4 * d, d}), fc1_b = normal({4 * d}), fc2_w = normal({d, 4 * d}), fc2_b = normal({d});
    torch::Tensor k_cache = torch::empty({1, heads, new_tokens, dh}), v_cache = torch::empty({1, heads, new_tokens, dh});

    static torch::Tensor split_heads(const torch::Tensor& t) { return t.view({1, 1, heads, dh}).transpose(1, 2); }

    // torch_ref.py Block.forward_cached: x [1, 1, d]
    torch::Tensor step(const torch::Tensor& x_in, int64_t pos) {
        auto a = torch::layer_norm(x_in, {d}, ln1_w, ln1_b, 1e-5);
        auto q = split_heads(torch::linear(a, q_w, q_b));
        k_cache.slice(2, pos, pos + 1).copy_(split_heads(torch::linear(a, k_w, k_b)));
        v_cache.slice(2, pos, pos + 1).copy_(split_heads(torch::linear(a, v_w, v_b)));
        auto att = torch::matmul(q, k_cache.slice(2, 0, pos + 1).transpose(-2, -1)) / std::sqrt(double(dh));
        auto y = torch::matmul(torch::softmax(att, -1), v_cache.slice(2, 0, pos + 1));
        auto x = x_in + torch::linear(y.transpose(1, 2).reshape({1, 1, d}), proj_w, proj_b);
        auto f = torch::linear(torch::layer_norm(x, {d}, ln2_w, ln2_b, 1e-5), fc1_w, fc1_b);
        return x + torch::linear(torch::gelu(f, "tanh"), fc2_w, fc2_b);
    }
};

// PE[p, 2i] = sin(p / 10000^(2i/d)), PE[p, 2i+1] = cos(...), computed in float64 as torch_ref.py does.
torch::Tensor sinusoidal(int64_t n) {
    auto pos = torch::arange(n, torch::kFloat64).unsqueeze(1);
    auto div = torch::pow(10000.0, torch::arange(0, d, 2, torch::kFloat64) / double(d));
    auto pe = torch::zeros({n, d}, torch::kFloat64);
    pe.index_put_({torch::indexing::Slice(), torch::indexing::Slice(0, torch::indexing::None, 2)}, torch::sin(pos / div));
    pe.index_put_({torch::indexing::Slice(), torch::indexing::Slice(1, torch::indexing::None, 2)}, torch::cos(pos / div));
    return pe.to(torch::kFloat32);
}

}  // namespace

int main(int argc, char** argv) {
    const int threads = argc > 1 ? std::atoi(argv[1]) : 1;
    torch::set_num_threads(threads);
    torch::manual_seed(1234);
    torch::NoGradGuard no_grad;
    auto tok_embed = normal({V, d});
    std::vector<block> blocks(layers);
    auto ln_f_w = torch::ones({d}), ln_f_b = torch::zeros({d});
    auto head_w = normal({V, d}), head_b = normal({V});
    auto pos_enc = sinusoidal(new_tokens + 1);

    auto generate = [&] {
        auto tok = torch::zeros({1, 1}, torch::kLong);
        for (int64_t pos = 0; pos < new_tokens; ++pos) {
            auto x = torch::embedding(tok_embed, tok) + pos_enc.slice(0, pos, pos + 1);
            for (auto& b : blocks) x = b.step(x, pos);
            auto logits = torch::linear(torch::layer_norm(x, {d}, ln_f_w, ln_f_b, 1e-5).select(1, 0), head_w, head_b);
            tok = logits.argmax(-1, /*keepdim=*/true);  // stays a tensor, as in torch_ref.py
        }
        return tok.item<int64_t>();
    };
    std::vector<double> seconds;
    for (int run = 0; run < 23; ++run) {
        const auto t0 = std::chrono::steady_clock::now();
        const volatile int64_t last = generate();
        (void)last;
        if (run >= 3) seconds.push_back(std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count());
    }
    std::sort(seconds.begin(), seconds.end());
    const double median = seconds[seconds.size() / 2];
    std::printf("libtorch decode-cache  threads %d  median %.3f ms per %lld tokens  %.0f tokens/s  (min %.3f, max %.3f ms)\n",
                threads, median * 1e3, static_cast<long long>(new_tokens), double(new_tokens) / median,
                seconds.front() * 1e3, seconds.back() * 1e3);
}
