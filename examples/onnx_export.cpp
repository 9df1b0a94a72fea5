// Exporting trained models to ONNX and running them in ONNX Runtime, beside ctgraph.
//
//   onnx_export char_gpt CHECKPOINT OUT_DIR ["prompt"] [--tokens N]
//       loads char_gpt's checkpoint (char_gpt train), exports its two decoding programs, the
//       prefill of a prompt and one cached step (the KV caches are inputs and outputs of the ONNX
//       models), continues the prompt greedily in ctgraph (nn::gpt_generator) and in ONNX Runtime
//       (the caches carried from one run to the next), and prints both.
//   onnx_export dates WEIGHTS OUT_DIR
//       loads date_normalize's weights (its fifth argument), exports the encoder program (a
//       bidirectional GRU over characters with lengths: two ONNX Scan loops) and the decoding step
//       (GRU cell, additive attention under the source's padding), decodes held-out dates greedily
//       in both, and prints both.
//
// ONNX Runtime runs through Node (onnxruntime-node from npm, installed by scripts/setup.sh); where
// it is missing, the files are still written and the comparison is skipped with a message.
// Exits non-zero when ONNX Runtime's output differs from ctgraph's. docs/guide/onnx-export.md
// walks through it.
#include <algorithm>
#include <cstdio>
#include <string>
#include <vector>

#include <ctgraph/ctgraph.hpp>
#include <ctgraph/onnx.hpp>
#include <ctgraph/onnx/onnxruntime.hpp>

#include "char_gpt_model.hpp"
#include "chars.hpp"
#include "date_model.hpp"

using namespace ctg;

namespace {

const onnx::fetched_tensor& output(const onnx::onnxruntime_result& r, const std::string& name) {
    for (const auto& t : r.outputs)
        if (t.name == name) return t;
    throw error("onnx_export: ONNX Runtime returned no output '" + name + "'");
}
int argmax(const float* z, std::size_t n) { return int(std::max_element(z, z + n) - z); }

// [char_gpt]
int export_char_gpt(const std::string& checkpoint_path, const std::string& dir, const std::string& prompt, std::size_t tokens) {
    using namespace char_gpt_model;
    using generator = nn::gpt_generator<model>;
    auto store = std::make_shared<parameter_store<float>>();
    generator gen(store, 1, Context);  // registers the model's parameters
    checkpoint::load_weights(checkpoint_path, *store);

    // The generator's two inference programs, over the same weights, exported as they are.
    generator::prefill_program prefill(store);
    generator::step_program step(store);
    onnx::save(prefill, dir + "/char_gpt_prefill.onnx", {.output_names = {"logits"}});
    onnx::save(step, dir + "/char_gpt_step.onnx", {.output_names = {"logits"}});
    std::printf("wrote %s/char_gpt_prefill.onnx and %s/char_gpt_step.onnx\n", dir.c_str(), dir.c_str());

    std::vector<int> ids;
    for (char c : prompt) ids.push_back(chars::encode(static_cast<unsigned char>(c)));
    if (ids.empty() || ids.size() + tokens > std::size_t(Context)) throw error("onnx_export: the prompt and the tokens must fit the context");
    const std::vector<int> ours = gen.generate({ids}, tokens)[0];  // greedy
    std::string ours_text, theirs_text;
    for (int id : ours) ours_text += chars::decode(id);
    std::printf("ctgraph:      %s|%s\n", prompt.c_str(), ours_text.c_str());
    if (auto why = onnx::onnxruntime_missing()) {
        std::printf("%s\n", why->c_str());
        return 0;
    }

    // ONNX Runtime: the prefill, then one step per token, the caches carried from run to run.
    const std::size_t L = Layers, d = D, C = Context;
    std::vector<float> keys(L * d * C, 0.0f), values(L * C * d, 0.0f);
    auto caches = [&] {
        return std::vector<onnx::feed_tensor>{
            onnx::feed_tensor::floats("cache_k", {(long long)L, 1, (long long)d, (long long)C}, keys.begin(), keys.end()),
            onnx::feed_tensor::floats("cache_v", {(long long)L, 1, (long long)C, (long long)d}, values.begin(), values.end())};
    };
    auto in = caches();
    in.push_back(onnx::feed_tensor::index_ids("prompt", {1, (long long)ids.size()}, ids.begin(), ids.end()));
    auto r = onnx::run_onnxruntime(dir + "/char_gpt_prefill.onnx", in);
    int next = argmax(output(r, "logits").values.data() + (ids.size() - 1) * V, V);
    std::vector<int> theirs{next};
    for (std::size_t t = 1; t < tokens; ++t) {
        keys = output(r, "cache_k_out").values;
        values = output(r, "cache_v_out").values;
        const long long token = next, pos = (long long)(ids.size() + t - 1);
        in = caches();
        in.push_back(onnx::feed_tensor::index_ids("token", {1, 1}, &token, &token + 1));
        in.push_back(onnx::feed_tensor::index_ids("pos", {1}, &pos, &pos + 1));
        r = onnx::run_onnxruntime(dir + "/char_gpt_step.onnx", in);
        next = argmax(output(r, "logits").values.data(), V);
        theirs.push_back(next);
    }
    for (int id : theirs) theirs_text += chars::decode(id);
    std::printf("ONNX Runtime: %s|%s\n", prompt.c_str(), theirs_text.c_str());
    std::printf("%s\n", theirs == ours ? "same tokens" : "DIFFERENT tokens");
    return theirs == ours ? 0 : 1;
}
// [char_gpt]

// [dates]
int export_dates(const std::string& weights_path, const std::string& dir) {
    using namespace date_model;
    models m;
    npz::load(m.train.params(), weights_path, false);  // every parameter, shapes checked
    onnx::save(m.enc, dir + "/date_encoder.onnx", {.output_names = {"memory", "h0"}});
    onnx::save(m.step, dir + "/date_step.onnx", {.output_names = {"state_out", "logits", "weights"}});
    std::printf("wrote %s/date_encoder.onnx and %s/date_step.onnx\n", dir.c_str(), dir.c_str());

    const dates::task data(8);
    const std::vector<example>& few = data.test;
    const batch_data b = encode(few);
    const std::vector<std::string> ours = m.decode(b);
    const bool ort = !onnx::onnxruntime_missing();
    if (!ort) std::printf("%s\n", onnx::onnxruntime_missing()->c_str());
    std::vector<std::string> theirs(b.n);
    if (ort) {
        // The encoder once, then greedy steps: the carried state [h; context] starts as [h0; 0].
        const long long n = (long long)b.n;
        const std::vector<onnx::feed_tensor> source{
            onnx::feed_tensor::index_ids("src", {S, n}, b.src.begin(), b.src.end()),
            onnx::feed_tensor::index_ids("src_len", {n}, b.len.begin(), b.len.end())};
        const auto enc = onnx::run_onnxruntime(dir + "/date_encoder.onnx", source);
        const auto& memory = output(enc, "memory");
        const auto& h0 = output(enc, "h0").values;
        std::vector<float> state(b.n * (H + M), 0.0f);
        for (std::size_t i = 0; i < b.n; ++i) std::copy_n(h0.begin() + long(i * H), H, state.begin() + long(i * (H + M)));
        std::vector<long long> token(b.n, sos);
        std::vector<bool> done(b.n, false);
        for (int t = 0; t < T + 2; ++t) {
            std::vector<onnx::feed_tensor> in{
                onnx::feed_tensor::floats("memory", memory.dims, memory.values.begin(), memory.values.end()),
                onnx::feed_tensor::floats("state", {n, H + M}, state.begin(), state.end()),
                onnx::feed_tensor::index_ids("token", {n}, token.begin(), token.end()), source[1]};
            const auto r = onnx::run_onnxruntime(dir + "/date_step.onnx", in);
            const auto& logits = output(r, "logits").values;
            state = output(r, "state_out").values;
            for (std::size_t i = 0; i < b.n; ++i) {
                token[i] = argmax(logits.data() + i * Vt, Vt);
                if (token[i] == eos) done[i] = true;
                if (!done[i]) theirs[i] += tgt_char(int(token[i]));
            }
            if (std::all_of(done.begin(), done.end(), [](bool x) { return x; })) break;
        }
    }
    for (std::size_t i = 0; i < b.n; ++i)
        std::printf("  %-26s -> ctgraph %s%s%s\n", few[i].in.c_str(), ours[i].c_str(), ort ? "   ONNX Runtime " : "",
                    ort ? theirs[i].c_str() : "");
    if (!ort) return 0;
    std::printf("%s\n", theirs == ours ? "same outputs" : "DIFFERENT outputs");
    return theirs == ours ? 0 : 1;
}
// [dates]

}  // namespace

int main(int argc, char** argv) try {
    const std::string cmd = argc > 1 ? argv[1] : "";
    if (cmd == "char_gpt" && argc >= 4) {
        std::string prompt = "The licensee ";
        std::size_t tokens = 60;
        for (int i = 4; i < argc; ++i) {
            const std::string a = argv[i];
            if (a == "--tokens" && i + 1 < argc) tokens = std::stoul(argv[++i]);
            else prompt = a;
        }
        return export_char_gpt(argv[2], argv[3], prompt, tokens);
    }
    if (cmd == "dates" && argc == 4) return export_dates(argv[2], argv[3]);
    std::fprintf(stderr, "usage: onnx_export char_gpt CHECKPOINT OUT_DIR [\"prompt\"] [--tokens N]\n"
                         "       onnx_export dates WEIGHTS OUT_DIR\n");
    return 2;
} catch (const ctg::error& e) {
    std::fprintf(stderr, "error: %s\n", e.what());
    return 2;
}
