// Exporting a training program: one error saying to export an inference program.
// EXPECT: ctg::onnx::save: export an inference program
#include <ctgraph/onnx.hpp>
using namespace ctg;
int main() {
    auto prog = compile<float>(sum(relu(input<"x", dyn('B'), 4>{} * param<"w", 4, 4>{})));
    onnx::save(prog, "never.onnx");
}
