// The installed ctgraph::onnx: a small program exported to an ONNX file, its bytes checked.
#include <cstdio>
#include <filesystem>

#include <ctgraph/onnx.hpp>

int main() {
    using namespace ctg;
    auto prog = compile<float, options{.inference = true}>(
        softmax(affine(input<"x", dyn('B'), 4>{}, param<"w", 4, 3>{}, param<"b", 3>{})));
    prog.params().init(1);
    onnx::save(prog, "consumer.onnx", {.output_names = {"probs"}});
    const auto bytes = std::filesystem::file_size("consumer.onnx");
    std::printf("consumer_onnx: wrote %ju bytes\n", std::uintmax_t(bytes));
    return bytes > 4 * 12 ? 0 : 1;
}
