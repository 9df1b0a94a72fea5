// Date normalisation with Bahdanau attention: "3 March 2021", "03/03/21", "the 3rd of March, 2021",
// "Wednesday, 3 March 2021" ... -> "2021-03-03". A bidirectional GRU encoder reads the characters
// (with lengths), a GRU decoder attends to its states with additive attention at every step
// (nn::attention_decoder), teacher forcing in training, greedy and top-k decoding through nn::decode.
// Data are generated with a fixed seed; 1,000 held-out dates are never seen in training.
// Writes the attention alignment of three inputs as PNG heat maps.
//
//   date_normalize [steps] [required exact match] [png prefix] [held-out dates] [weights.npz]
//
// With a fifth argument, writes the trained weights there (npz::save; what
// onnx_export dates reads). The model is in date_model.hpp.
// Exits non-zero when the held-out exact match ends below the required fraction (default 0.99).
#include <algorithm>
#include <array>
#include <chrono>
#include <cstdio>
#include <random>
#include <set>
#include <string>
#include <vector>

#include <xtensor/xview.hpp>

#include <ctgraph/ctgraph.hpp>

#include "date_model.hpp"
#include "dates.hpp"
#include <ctgraph/plot.hpp>

using namespace ctg;
using namespace dates;
using namespace date_model;

int main(int argc, char** argv) try {
    const int steps = argc > 1 ? std::stoi(argv[1]) : 800;
    const double required = argc > 2 ? std::stod(argv[2]) : 0.99;
    const std::string png_prefix = argc > 3 ? argv[3] : "date_attention";
    const std::size_t held_out = argc > 4 ? std::stoul(argv[4]) : 1000;
    const std::string weights_path = argc > 5 ? argv[5] : "";
    constexpr std::size_t batch = 64;

    // Held-out dates: 1,000 distinct days, never used in training (each with a random format).
    dates::task data(held_out);
    const std::vector<example>& test = data.test;
    dates::task::describe();

    models m;
    m.train.params().init(7);
    optim::adam<float> opt({.lr = 3e-3});
    const optim::warmup_cosine_lr schedule{3e-3, 100, steps, 1e-4};
    auto match = [&] { return dates::exact_match(test, [&](const std::vector<example>& part) { return m.decode(encode(part)); }); };
    const auto feed = [&](const std::vector<example>& ex) {
        const batch_data b = encode(ex);
        m.feed_source(b, m.train);
        m.train.feed("tgt_in", b.tgt_in.data(), rshape{2, {std::size_t(T), b.n}});
        m.train.feed("tgt_out", b.tgt_out.data(), rshape{2, {std::size_t(T), b.n}});
    };
    const double acc = dates::train(data, steps, batch, m.train, opt, schedule, feed, match);
    if (!weights_path.empty()) npz::save(m.train.params(), weights_path), std::printf("weights: %s\n", weights_path.c_str());

    // Sampling instead of the argmax: top-3 at temperature 1.5 (a confident model still agrees).
    const std::vector<example> few(test.begin(), test.begin() + 4);
    const auto greedy = m.decode(encode(few)), sampled = m.decode(encode(few), {3, 1.5}, 5);
    for (std::size_t k = 0; k < few.size(); ++k)
        std::printf("  %-26s -> greedy %s  top-3 sample %s\n", few[k].in.c_str(), greedy[k].c_str(), sampled[k].c_str());

    // Three inputs, their outputs, and where the decoder looked for each output character.
    const std::array<std::string, 3> shown = {"the 3rd of March, 2021", "Wednesday, 14 July 1999", "07/11/48"};
    for (std::size_t k = 0; k < shown.size(); ++k) {
        const auto [out, w] = m.align(shown[k]);
        std::printf("  %-26s -> %s\n", shown[k].c_str(), out.c_str());
        plot::heatmap h{.title = "'" + shown[k] + "' -> '" + out + "'", .x_label = "input", .y_label = "output"};
        for (char ch : shown[k]) h.col_labels.push_back(std::string(1, ch));
        for (char ch : out) h.row_labels.push_back(std::string(1, ch));
        h.values = w;
        const std::string path = png_prefix + "_" + std::to_string(k + 1) + ".png";
        if (!out.empty()) plot::write_png(h, path), std::printf("     alignment: %s\n", path.c_str());
    }
    return acc >= required ? 0 : 1;
} catch (const ctg::error& e) {
    std::fprintf(stderr, "error: %s\n", e.what());
    return 2;
}
