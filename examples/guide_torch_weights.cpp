// Loading PyTorch weights, checked. The PyTorch side would be:
//
// [python]
//   class Net(torch.nn.Module):
//       def __init__(self):
//           super().__init__()
//           self.emb = torch.nn.Embedding(11, 8)
//           self.lin = torch.nn.Linear(8, 3)
//       def forward(self, ids):
//           return self.lin(self.emb(ids))
//
//   safetensors.torch.save_file(Net().state_dict(), "net.safetensors")
// [python]
//
// To run without Python, this program writes such a file itself (PyTorch's names, shapes and
// orientation: lin.weight is (out, in) = (3, 8)), then loads it into the ctgraph model of the same
// layout and exits non-zero unless (1) the model's outputs equal PyTorch's formula
// lin(emb(ids)) = E[ids] W^T + b computed from the file's arrays, (2) a file in the wrong
// orientation is refused with the store unchanged, and (3) saving back gives the original tensors.
//
//   guide_torch_weights [directory]      (default: the current directory)
//
// docs/guide/pytorch-weights.md walks through it.
#include <cmath>
#include <cstdio>
#include <memory>
#include <string>
#include <vector>

#include <ctgraph/ctgraph.hpp>
#include <ctgraph/xtensor.hpp>
#include <ctgraph/nn/torch_layout.hpp>
#include <ctgraph/safetensors.hpp>

using namespace ctg;

inline constexpr dim B = dyn('B');

// [model]
using embed = param<"emb", 11, 8>;
using lin = nn::linear<"lin.", 8, 3>;
// The PyTorch module Net: its submodules emb and lin, each at its prefix in the state_dict.
using net = nn::torch_model<nn::torch_at<"emb.", embed>, nn::torch_at<"lin.", lin>>;
constexpr auto logits() { return lin{}(embedding(embed{}, index_input<"ids", B>{})); }
// [model]

/// A state_dict as PyTorch would save it, with deterministic values.
std::vector<safetensors::tensor> torch_state_dict(std::vector<float>& E, std::vector<float>& W, std::vector<float>& b,
                                                  bool transposed_weight) {
    E.resize(11 * 8);
    W.resize(3 * 8);
    b.resize(3);
    for (std::size_t i = 0; i < E.size(); ++i) E[i] = float(std::sin(0.7 * double(i)));
    for (std::size_t i = 0; i < W.size(); ++i) W[i] = float(std::cos(1.3 * double(i)));
    for (std::size_t i = 0; i < b.size(); ++i) b[i] = 0.1f * float(i);
    const std::vector<std::size_t> w_shape = transposed_weight ? std::vector<std::size_t>{8, 3} : std::vector<std::size_t>{3, 8};
    return {safetensors::from_data("emb.weight", E.data(), {11, 8}), safetensors::from_data("lin.weight", W.data(), w_shape),
            safetensors::from_data("lin.bias", b.data(), {3})};
}

int main(int argc, char** argv) try {
    const std::string dir = argc > 1 ? std::string(argv[1]) + "/" : "";
    std::vector<float> E, W, b;
    safetensors::write(dir + "net.safetensors", torch_state_dict(E, W, b, false), {{"format", "pt"}});
    int failures = 0;

    // [load]
    auto store = std::make_shared<parameter_store<float>>();
    nn::load_torch<net>(*store, dir + "net.safetensors");  // adds emb, lin.weight, lin.bias to the store
    auto predict = program_for<float, options{.inference = true}, decltype(logits())>(store);
    predict.feed<"ids">(xt::xtensor<index_t, 1>{0, 3, 10});
    predict.forward();
    // [load]

    // 1. PyTorch's lin(emb(ids)) = E[id] W^T + b, from the file's arrays in PyTorch's layout.
    const std::vector<int> ids = {0, 3, 10};
    double worst = 0;
    for (std::size_t r = 0; r < ids.size(); ++r)
        for (std::size_t o = 0; o < 3; ++o) {
            double y = b[o];
            for (std::size_t i = 0; i < 8; ++i) y += double(E[std::size_t(ids[r]) * 8 + i]) * W[o * 8 + i];
            worst = std::max(worst, std::abs(predict.output()(r, o) - y));
        }
    std::printf("outputs against PyTorch's formula: largest difference %.1e\n", worst);
    failures += !(worst < 1e-5);

    // 2. A file whose lin.weight is (in, out), as ctgraph stores it: refused, and nothing changes.
    // [refuse]
    std::vector<float> E2, W2, b2;
    safetensors::write(dir + "wrong.safetensors", torch_state_dict(E2, W2, b2, true));
    const xt::xtensor<float, 2> before = predict.param<"lin.weight">();
    try {
        nn::load_torch<net>(*store, dir + "wrong.safetensors");
        std::printf("the wrong file was accepted\n");
        ++failures;
    } catch (const io_error& e) {
        std::printf("refused: %s\n", e.what());
    }
    failures += !(before == predict.param<"lin.weight">());  // the store is as it was
    // [refuse]

    // 3. Saved back in PyTorch's layout: the same tensors, byte for byte.
    // [save]
    nn::save_torch<net>(*store, dir + "saved.safetensors");
    const auto original = safetensors::read(dir + "net.safetensors"), saved = safetensors::read(dir + "saved.safetensors");
    // [save]
    bool same = original.size() == saved.size();
    for (const auto& [name, t] : original)
        same = same && saved.count(name) && saved.at(name).shape == t.shape && saved.at(name).bytes == t.bytes;
    std::printf("saved back: %zu tensors, %s\n", saved.size(), same ? "identical to the original" : "DIFFERENT");
    failures += !same;
    std::printf("%s\n", failures ? "FAILED" : "all checks passed");
    return failures ? 1 : 0;
} catch (const std::exception& e) {
    std::fprintf(stderr, "error: %s\n", e.what());
    return 2;
}
