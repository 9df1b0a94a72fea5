// Exporting a program with a user's op that declares no ONNX lowering: one error naming the op.
// EXPECT: ctg::onnx::save: this program has an op with no ONNX lowering
// EXPECT: op_has_onnx_lowering<false, twice_op
#include <ctgraph/onnx.hpp>
using namespace ctg;
struct twice_op {
    static constexpr std::string_view name = "twice";
    template <class A>
    static consteval bool check() { return true; }
    template <class A>
    static consteval auto dims() { return A::dims; }
    template <class T>
    static void forward(op_io<T, 1>& c) {
        for (std::size_t i = 0; i < c.y.size(); ++i) c.y_data()[i] = 2 * c.x_data(0)[i];
    }
    template <class T>
    static void backward(op_io<T, 1>&) {}
};
int main() {
    auto y = relu(make_float_node<twice_op>(input<"x", dyn('B'), 4>{}));
    auto prog = compile<float, options{.inference = true}>(y);
    onnx::save(prog, "never.onnx");
}
