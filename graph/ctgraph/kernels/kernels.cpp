// The matrix products' code, compiled once for a program whose other translation units define
// CTG_COMPILED_KERNELS (see CTG_KERNEL_INSTANCES in gemm.hpp). CMake: the ctgraph::kernels library.
// Compile it with the same flags (-march, sanitizers) as the rest of the program.
#include <ctgraph/kernels/gemm.hpp>

namespace ctg::kernels {
CTG_KERNEL_INSTANCES(template)
}  // namespace ctg::kernels
