// ctg-ggml-gpt2: GPT-2 small (nn::gpt2, Hugging Face's architecture) decoded by ctgraph with float32,
// int8 and 4-bit weights, and the same weights written for ggml's gpt-2 example, so that the two
// can be timed side by side (scripts/ggml_compare.sh builds ggml from a source tree and runs both).
//
//   ctg-ggml-gpt2 write FILE        the weights (seeded, GPT-2's initialisation scale) in ggml's
//                                   gpt-2 file format, float32 (ggml's gpt-2-quantize makes q8_0 and
//                                   q4_0 from it); the vocabulary: token 0 is "0", token i "<i>"
//   ctg-ggml-gpt2 time [--tokens N] [--reps R]
//                                   greedy decoding after the prompt [0] with each format, one
//                                   thread: ms per token (median of R generations), the first
//                                   tokens, to compare with ggml's output on the same weights, and
//                                   the time of a 64-token prefill
#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <fstream>
#include <random>
#include <string>
#include <vector>

#include <ctgraph/ctgraph.hpp>
#include <ctgraph/quantize.hpp>

using namespace ctg;

namespace {
using model = nn::gpt2<50257, 1024, 768, 12, 12>;
constexpr int V = 50257, Ctx = 1024, D = 768, Heads = 12, L = 12;

std::shared_ptr<parameter_store<float>> weights() {
    auto store = std::make_shared<parameter_store<float>>();
    nn::gpt_generator<model> probe(store, 1, 1);  // registers the parameters
    store->init(1);
    // GPT-2's initialisation scale: N(0, 0.02) for every matrix and table, biases and gains moved
    // off 0 and 1 so that every parameter matters.
    std::mt19937_64 rng(7);
    std::normal_distribution<float> n(0.0f, 0.02f);
    for (std::size_t s = 0; s < store->size(); ++s) {
        float* v = store->value(s);
        const bool matrix = store->at(s).shape.rank - store->at(s).layer_axes >= 2;
        for (std::size_t i = 0; i < store->at(s).shape.size(); ++i) v[i] = matrix ? n(rng) : v[i] + 0.5f * n(rng);
    }
    return store;
}

void put_i32(std::ofstream& f, std::int32_t v) { f.write(reinterpret_cast<const char*>(&v), 4); }

// One tensor: dims in ggml's order (fastest first), name, float32 data.
void put_tensor(std::ofstream& f, const std::string& name, std::vector<std::int32_t> ne, const std::vector<float>& data) {
    put_i32(f, std::int32_t(ne.size()));
    put_i32(f, std::int32_t(name.size()));
    put_i32(f, 0);  // float32
    for (auto d : ne) put_i32(f, d);
    f.write(name.data(), std::streamsize(name.size()));
    f.write(reinterpret_cast<const char*>(data.data()), std::streamsize(data.size() * 4));
}

// Layer l's matrix of a stacked weight (L, in, out), transposed: (out, in) row-major, ggml's (in, out) ne.
std::vector<float> transposed(const parameter_store<float>& s, const std::string& name, int l, int in, int out) {
    const float* w = s.value(s.slot(name)) + std::size_t(l) * in * out;
    std::vector<float> t(std::size_t(in) * out);
    for (int i = 0; i < in; ++i)
        for (int o = 0; o < out; ++o) t[std::size_t(o) * in + i] = w[std::size_t(i) * out + o];
    return t;
}
std::vector<float> row(const parameter_store<float>& s, const std::string& name, int l, int n) {
    const float* v = s.value(s.slot(name)) + std::size_t(l) * n;
    return {v, v + n};
}

int write(const std::string& path) {
    auto store = weights();
    const auto& s = *store;
    std::ofstream f(path, std::ios::binary);
    if (!f) throw io_error("ctg-ggml-gpt2: cannot write " + path);
    for (std::int32_t v : {0x67676d6c, V, Ctx, D, Heads, L, 0}) put_i32(f, v);  // magic, hparams, ftype f32
    put_i32(f, V);
    for (int i = 0; i < V; ++i) {
        const std::string t = i == 0 ? "0" : "<" + std::to_string(i) + ">";
        put_i32(f, std::int32_t(t.size()));
        f.write(t.data(), std::streamsize(t.size()));
    }
    put_tensor(f, "model/ln_f/g", {D}, row(s, "ln_f.weight", 0, D));
    put_tensor(f, "model/ln_f/b", {D}, row(s, "ln_f.bias", 0, D));
    put_tensor(f, "model/wte", {D, V}, row(s, "tok_embed", 0, V * D));
    put_tensor(f, "model/wpe", {D, Ctx}, row(s, "pos_embed", 0, Ctx * D));
    for (int l = 0; l < L; ++l) {
        const std::string p = "model/h" + std::to_string(l) + "/";
        put_tensor(f, p + "ln_1/g", {D}, row(s, "blocks.ln1.weight", l, D));
        put_tensor(f, p + "ln_1/b", {D}, row(s, "blocks.ln1.bias", l, D));
        std::vector<float> qkv, qkv_b;
        for (const char* w : {"q", "k", "v"}) {
            const auto t = transposed(s, std::string("blocks.") + w + ".weight", l, D, D);
            qkv.insert(qkv.end(), t.begin(), t.end());
            const auto b = row(s, std::string("blocks.") + w + ".bias", l, D);
            qkv_b.insert(qkv_b.end(), b.begin(), b.end());
        }
        put_tensor(f, p + "attn/c_attn/w", {D, 3 * D}, qkv);
        put_tensor(f, p + "attn/c_attn/b", {3 * D}, qkv_b);
        put_tensor(f, p + "attn/c_proj/w", {D, D}, transposed(s, "blocks.proj.weight", l, D, D));
        put_tensor(f, p + "attn/c_proj/b", {D}, row(s, "blocks.proj.bias", l, D));
        put_tensor(f, p + "ln_2/g", {D}, row(s, "blocks.ln2.weight", l, D));
        put_tensor(f, p + "ln_2/b", {D}, row(s, "blocks.ln2.bias", l, D));
        put_tensor(f, p + "mlp/c_fc/w", {D, 4 * D}, transposed(s, "blocks.fc1.weight", l, D, 4 * D));
        put_tensor(f, p + "mlp/c_fc/b", {4 * D}, row(s, "blocks.fc1.bias", l, 4 * D));
        put_tensor(f, p + "mlp/c_proj/w", {4 * D, D}, transposed(s, "blocks.fc2.weight", l, 4 * D, D));
        put_tensor(f, p + "mlp/c_proj/b", {D}, row(s, "blocks.fc2.bias", l, D));
    }
    if (!f) throw io_error("ctg-ggml-gpt2: writing " + path + " failed");
    std::printf("wrote %s\n", path.c_str());
    return 0;
}

template <weight_format W>
void time_format(const char* name, const std::shared_ptr<parameter_store<float>>& store, std::size_t tokens, int reps) {
    nn::gpt_generator<model, float, precision::f32, precision::f32, W> gen(store, 1, std::max<std::size_t>(tokens + 1, 64));
    std::vector<std::vector<int>> out;
    gen.generate_into(out, {{0}}, tokens);  // warm-up
    std::vector<double> ms;
    for (int r = 0; r < reps; ++r) {
        const auto t0 = std::chrono::steady_clock::now();
        gen.generate_into(out, {{0}}, tokens);
        ms.push_back(std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count() / double(tokens));
    }
    std::sort(ms.begin(), ms.end());
    // A prefill of 64 tokens (the products by 64 rows: dequantised blocks and the float engine).
    std::vector<int> prompt(64);
    for (std::size_t i = 0; i < prompt.size(); ++i) prompt[i] = int(i * 797 % V);
    std::vector<std::vector<int>> first;
    gen.generate_into(first, {prompt}, 1);
    std::vector<double> pre;
    for (int r = 0; r < reps; ++r) {
        const auto t0 = std::chrono::steady_clock::now();
        gen.generate_into(first, {prompt}, 1);
        pre.push_back(std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count());
    }
    std::sort(pre.begin(), pre.end());
    std::printf("%-5s %8.3f ms per token  (%zu tokens after [0]; min %.3f, max %.3f); prefill of 64 tokens %.1f ms; first tokens:",
                name, ms[ms.size() / 2], tokens, ms.front(), ms.back(), pre[pre.size() / 2]);
    for (std::size_t i = 0; i < std::min<std::size_t>(8, out[0].size()); ++i) std::printf(" %d", out[0][i]);
    std::printf("\n");
}

int time(std::size_t tokens, int reps) {
    set_num_threads(1);
    auto store = weights();
    time_format<weight_format::f32>("f32", store, tokens, reps);
    time_format<weight_format::int8>("int8", store, tokens, reps);
    time_format<weight_format::q4>("q4", store, tokens, reps);
    return 0;
}
}  // namespace

int main(int argc, char** argv) try {
    const std::string cmd = argc > 1 ? argv[1] : "";
    if (cmd == "write" && argc == 3) return write(argv[2]);
    if (cmd == "time") {
        std::size_t tokens = 128;
        int reps = 3;
        for (int i = 2; i + 1 < argc; i += 2) {
            const std::string a = argv[i];
            if (a == "--tokens") tokens = std::stoul(argv[i + 1]);
            else if (a == "--reps") reps = std::stoi(argv[i + 1]);
            else throw error("ctg-ggml-gpt2: unknown option " + a);
        }
        return time(tokens, reps);
    }
    std::fprintf(stderr, "usage: ctg-ggml-gpt2 write FILE | ctg-ggml-gpt2 time [--tokens N] [--reps R]\n");
    return 2;
} catch (const std::exception& e) {
    std::fprintf(stderr, "ctg-ggml-gpt2: %s\n", e.what());
    return 2;
}
