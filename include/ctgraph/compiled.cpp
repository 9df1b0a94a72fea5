// The library's code that does not depend on a program's graph, compiled once for a program whose
// other translation units define CTG_SEPARATE_COMPILATION: the matrix products (kernels/gemm.hpp),
// the .npz and safetensors readers and writers, the PNG charts. CMake: the ctgraph::compiled
// library. Compile it with the same flags (-march, sanitizers) as the rest of the program.
#include <ctgraph/kernels/gemm.hpp>
#include <ctgraph/npz.hpp>
#include <ctgraph/plot.hpp>
#include <ctgraph/safetensors.hpp>

namespace ctg::kernels {
CTG_KERNEL_INSTANCES(template)
}  // namespace ctg::kernels
namespace ctg::npz {
CTG_NPZ_INSTANCES(template)
}  // namespace ctg::npz
namespace ctg::safetensors {
CTG_SAFETENSORS_INSTANCES(template)
}  // namespace ctg::safetensors
namespace ctg::plot {
CTG_PLOT_INSTANCES(template)
}  // namespace ctg::plot
