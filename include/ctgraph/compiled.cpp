// The library's code that does not depend on a program's graph, compiled once: the matrix products
// (kernels/gemm.hpp) and the oneDNN wrapper (kernels/onednn_impl.hpp), the executors of the ops whose type names no model, for float and double
// (ops/instances.hpp), the parameter store, the optimizers, the programs' checks and bindings over
// their tables (graph/program_tables.hpp), token choice, the .npz and safetensors readers and
// writers, the PNG charts, the file-system helpers (paths.hpp). Every other
// unit of the program defines CTG_SEPARATE_COMPILATION and so declares these `extern template`.
// CMake: the ctgraph::ctgraph library compiles this file in three parts, side by side
// (CTG_COMPILED_PART 1, 2, 3); by hand, compile it whole with the program's flags (-march,
// sanitizers).
#if !defined(CTG_COMPILED_PART) || CTG_COMPILED_PART == 1
#define CTG_ONEDNN_DEFINITIONS  // the oneDNN wrapper's functions (kernels/onednn_impl.hpp), here once
#endif
#include <ctgraph/ctgraph.hpp>
#include <ctgraph/npz.hpp>
#include <ctgraph/kernels/quant_product_impl.hpp>
#include <ctgraph/memory_impl.hpp>
#include <ctgraph/paths_impl.hpp>
#include <ctgraph/plot.hpp>
#include <ctgraph/safetensors.hpp>

#if !defined(CTG_COMPILED_PART) || CTG_COMPILED_PART == 1  // kernels and files
namespace ctg::detail {
template void* allocate_aligned<void>(std::size_t, std::size_t);
}  // namespace ctg::detail
namespace ctg::kernels {
CTG_KERNEL_INSTANCES(template)
CTG_QUANT_INSTANCES(template)
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
namespace ctg::paths {
CTG_PATHS_INSTANCES(template)
}  // namespace ctg::paths
namespace ctg::detail {
CTG_TABLES_INSTANCES(template)
}  // namespace ctg::detail
namespace ctg::nn {
CTG_DECODE_INSTANCES(template)
}  // namespace ctg::nn
namespace ctg {
template class parameter_store<float>;
template class parameter_store<double>;
}  // namespace ctg
namespace ctg::optim {
CTG_OPTIM_INSTANCES(template, float)
CTG_OPTIM_INSTANCES(template, double)
}  // namespace ctg::optim
#endif

#if !defined(CTG_COMPILED_PART) || CTG_COMPILED_PART == 2  // the ops in float
namespace ctg::detail {
#define CTG_OP_DEFINE(Op, K) CTG_OP_EXECUTORS_FLOAT(template, Op, K)
CTG_OP_INSTANCE_LIST(CTG_OP_DEFINE)
#undef CTG_OP_DEFINE
}  // namespace ctg::detail
namespace ctg::ops {
CTG_ATTENTION_VALUES_INSTANCES(template, float)
CTG_SCALED_DOT_WEIGHTS_INSTANCES(template, float)
CTG_KV_CACHE_INSTANCES_FLOAT(template)
}  // namespace ctg::ops
#endif

#if !defined(CTG_COMPILED_PART) || CTG_COMPILED_PART == 3  // the ops in double
namespace ctg::detail {
#define CTG_OP_DEFINE(Op, K) CTG_OP_EXECUTORS_DOUBLE(template, Op, K)
CTG_OP_INSTANCE_LIST(CTG_OP_DEFINE)
#undef CTG_OP_DEFINE
}  // namespace ctg::detail
namespace ctg::ops {
CTG_ATTENTION_VALUES_INSTANCES(template, double)
CTG_SCALED_DOT_WEIGHTS_INSTANCES(template, double)
CTG_KV_CACHE_INSTANCES_DOUBLE(template)
}  // namespace ctg::ops
#endif
