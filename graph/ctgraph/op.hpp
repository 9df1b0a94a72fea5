// ctgraph/op.hpp: the contract of a primitive op (what a new primitive must provide).
//
// A primitive is one struct, in one header under ops/, holding its shape rule, its forward and its
// vector-Jacobian product side by side:
//
//   struct my_op {
//     static constexpr std::string_view name = "my_op";        // printed in graphs and errors
//
//     // Shape rule. check<S...>() receives the static shapes (ctg::shape<...>) of the operands and
//     // returns whether they are acceptable (silently). The op's public entry function (my_op(a, b),
//     // same header) static_asserts one sentence naming the op, with
//     // ctg::with_shapes<ok, S::pretty...>::value as the asserted expression so the shapes print,
//     // then returns ctg::make_node<my_op>(a, b), which yields ctg::poison instead of a node when the
//     // check failed, so one mistake gives one error.
//     template <class... S> static consteval bool check();
//     // dims<S...>() returns the result's dimensions as std::array<ctg::dim, R>.
//     template <class... S> static consteval auto dims();
//
//     // forward: writes every element of c.y from c.x[0..K). Must not read c.y first.
//     template <class T> static void forward(ctg::op_io<T, K>& c);
//     // backward: ADDS dL/dx_k = (dL/dy) dy/dx_k into c.gx[k] for every k whose c.gx[k] is non-null
//     // (several consumers add into one adjoint). c.y, c.x and c.scratch hold what forward left there.
//     template <class T> static void backward(ctg::op_io<T, K>& c);
//     // optional, a speed-up: the op's backward honours c.fresh(k): when true, c.gx[k] holds garbage
//     // (this node is the first to write it) and backward must WRITE every element of it (=), not add.
//     // Without it the engine zeroes such an adjoint before calling backward. Each adjoint is then
//     // written once instead of zeroed and added to (gpt-s: memset was 7 % of a training step).
//     static constexpr bool assigns_adjoints = true;
//     // optional: the value is operand 0's elements in the same order (reshape): the engine points
//     // c.y at c.x[0]'s memory and forward must only copy when the two differ (a cell's result).
//     // Its VJP is the identity, so where the op is its operand's only reader the planners (a
//     // program's, a cell's) give c.gx[0] c.gy's memory too (c.fresh(0) is then true): backward
//     // must copy nothing when they are the same (c.gx_to_write(0) is then null).
//     static constexpr bool aliases_operand = true;
//     // optional: bit k set where operand k's VJP is the identity, gx_k = gy, whenever operand k
//     // has the result's shape (add: 0b11, sub: 0b01). Where the op is such an operand's only
//     // reader, the planners give c.gx[k] c.gy's memory (c.fresh(k) is then true): backward must
//     // write nothing to an adjoint that is c.gy itself (c.gx_to_write(k) is then null), and must
//     // not write c.gy.
//     static constexpr std::uint32_t identity_vjp_operands = 0b11;
//     // optional: the op passes no adjoint to its operand (ctg::stop_gradient): the engine gives
//     // its node no adjoint and runs no VJP for it (and none that would lead only there).
//     static constexpr bool stops_gradient = true;
//
//     // optional: whether row r of the result (its first axis) comes from row r of every operand
//     // whose first axis is the batch and from the whole of the others, given the operand shapes (as
//     // check). A scan whose cell's ops all say so runs its batch in parts on the pool's threads, each
//     // part through every time step (see graph/scan.hpp); an op without it keeps its scan whole.
//     // Element-wise ops, products by a weight, gates and last-axis norms (rank >= 2) say true; an op
//     // that reads across rows (reverse_time, a reduction over the batch) or numbers its elements
//     // (dropout's masks) must not.
//     template <class... S> static consteval bool rows_independent();
//     // optional: operand 1 is a weight (K, N) whose adjoint this op adds as x^T dy, with x = operand
//     // 0 as (rows, K) and dy = the result's adjoint as (rows, N) (matmul, affine). When a scan's
//     // step reads a weight only through such an op, the scan sums the weight's adjoint over all
//     // steps as one product after the loop (inner dimension steps x rows) instead of one small
//     // product per step, calling the op's backward with that adjoint null.
//     static constexpr bool weight_adjoint_is_xt_dy = true;
//     // optional: elements of op-private memory kept from forward to backward (saved statistics).
//     static std::size_t scratch_size(const ctg::rshape& y, const std::array<ctg::rshape, K>& x);
//     // or, where backward needs more than forward, with a third argument, true in a forward-only
//     // (inference) pass, which never runs backward:
//     static std::size_t scratch_size(const ctg::rshape& y, const std::array<ctg::rshape, K>& x, bool forward_only);
//     // (repeat takes a fourth, options::recompute in a training program: it then keeps one layer's
//     // frame; the engine passes it to an op that declares it, graph/repeat.hpp.)
//     // (a fifth, the bf16 level of the memory it lives in, the program's or its repeat frame's:
//     // bf16_frame_level below; an affine_activation keeps its pre-activation in bf16 at 3.)
//     // optional: elements of T that forward needs only while it runs (affine_activation's float
//     // pre-activation, which backward keeps rounded to bf16), at that bf16 level. Where values
//     // are kept in bf16 only, the engine places it with the floats that live only while forward
//     // reads them (in a repeat's layers, memory that backward uses for adjoints) and forward gets it
//     // as c.transient; elsewhere c.transient is null and the op takes its own (kernels::scratch).
//     static std::size_t forward_scratch_size(const ctg::rshape& y, const std::array<ctg::rshape, K>& x, int bf16);
//     // optional: elements of T that backward needs only while it runs (affine_activation's dZ).
//     // A training program places it with the adjoints that are live during the node's VJP (in a
//     // scan's or repeat's step, by lifetime in the adjoint block; in a program, where forward's
//     // transients were) and backward gets it as c.transient; where it gets none, or a smaller one
//     // than it needs, the op takes its own (kernels::scratch).
//     static std::size_t backward_scratch_size(const ctg::rshape& y, const std::array<ctg::rshape, K>& x, int bf16);
//     // optional: the values backward reads, as a mask: bit k for operand k's, ctg::reads_result for
//     // c.y and c.scratch (absent: all of them). A repeat under options::recompute does not rerun a
//     // layer's nodes whose values no VJP reads (a GPT block's second FFN product and the sum after it).
//     static constexpr std::uint32_t backward_reads = 0b011;  // affine: x and W, not the bias nor y
//     // optional: the operands this op reads as operands of matrix products (kernels::gemm), as a
//     // mask (bit k: operand k). In a mixed-precision training program (options::precision = bf16)
//     // such an operand's value may have a bf16 shadow, c.xb[k]: the same elements rounded to
//     // bf16, laid out as c.x[k], which the op passes to gemm as A16 / B16 (the float value is
//     // there as always, for anything else the op reads).
//     static constexpr std::uint32_t bf16_operands = 0b011;  // affine: x and W
//     // optional: of those, the operands this op reads nowhere else, forward and VJP, and only
//     // through kernels::gemm with their shadow passed as A16 / B16. The engine may then keep such a
//     // value in bf16 only (graph/exec.hpp, bf16_only_values) and hand the op c.x[k] with a null
//     // pointer (its shape as always) and the shadow in c.xb[k]: the op must do no arithmetic on
//     // the null pointer and pass it to gemm as it is (gemm reads A16 / B16 where A / B is null).
//     static constexpr std::uint32_t bf16_operands_only = 0b011;  // affine
//     // optional: the operands this op reads as the right operand of its forward product, y = x W
//     // (bit k: operand k). Where such an operand is a parameter, a program compiled with
//     // options::weights quantises it in the store (ctg::quantize), and forward must
//     // call kernels::quantized_product(c.run.weights, ...) first, running its float product only
//     // when that returns false. transposed_weight_operands: of those, the ones read as W^T (a tied
//     // head's x E^T), whose output columns are the stored rows.
//     static constexpr std::uint32_t weight_operands = 0b010;  // affine: W
//     static constexpr std::uint32_t transposed_weight_operands = 0b10;  // matmul_transposed
//     // optional: whether backward reads the op's own result c.y (absent: as backward_reads says,
//     // else yes). A value whose producer's VJP does not read it, and which nothing but products
//     // read, may be kept in bf16 only (layer norm's and GELU's VJPs read their input; softmax's
//     // reads its output).
//     static constexpr bool vjp_reads_result = false;  // layer norm: x and its saved statistics
//     // optional: forward writes the bf16 shadow of its own result itself, c.yb when not null (the
//     // float result rounded as kernels::pack_bf16 rounds it, laid out as c.y), a row or a piece at
//     // a time while it is in cache; the engine then does not convert c.y after forward. Where
//     // nothing reads the float (graph/exec.hpp, bf16_only_plan::no_float), c.y comes with a null
//     // pointer (its shape as always): forward then writes c.yb alone.
//     static constexpr bool writes_bf16_result = true;  // layer norm, GELU, permute
//     // optional: the values this op's VJP can read from their bf16 shadow, rounded, instead of the
//     // float (bit k: operand k; ctg::reads_result: its result), in a program that keeps values for
//     // backward in bf16 (options::bf16_saved; graph/exec.hpp, bf16_only_values). Backward then gets
//     // c.x[k] null and the shadow in c.xb[k] (c.y null and c.yb), and must read the shadow; so
//     // does forward for such an operand (the value and its derivative then come from one input;
//     // forward still gets its own result's float). Only where a rounded value is as good for the
//     // VJP as the products' rounded operands: GELU's input, the attention weights (softmax's VJP).
//     static constexpr std::uint32_t vjp_reads_bf16 = 0b1;  // GELU: its input
//     // optional: the op can make its result's bf16 shadow again from what its VJP reads (its
//     // operands and scratch, as backward gets them), with the bits forward wrote:
//     // remake_bf16_result writes c.yb (c.y null). A repeat's layers then keep no shadow of such a
//     // value where they keep it in bf16 only and nothing reads its float: the engine calls this
//     // before the VJP of the value's reader of highest index (graph/cell.hpp, cell_frame::remade).
//     static constexpr bool remakes_bf16_result = true;  // affine_gelu: GELU of its kept pre-activation
//     template <class T> static void remake_bf16_result(ctg::op_io<T, K>& c);
//     // optional: how a model summary counts its FLOPs (program::summary; absent: one per element
//     // of the largest of its result and operands, forward and per adjoint, as element-wise ops).
//     static constexpr ctg::flop_rule flops = ctg::flop_rule::matmul;  // matmul, attention_values
//     // optional: extra text for printing (an axis, a constant).
//     static std::string describe();
//     // optional: its ONNX lowering, for ctg::onnx::save (include/ctgraph/onnx.hpp). B is
//     // ctg::onnx::op_lowering (include/ctgraph/onnx/ir.hpp): the operands' value names b.x(k)
//     // and static shapes b.xshape(k), the result's name b.y(); b.emit(...) adds ONNX nodes,
//     // b.emit_y(...) the one that writes the result, b.set_state(k, v) says the op writes
//     // operand k in place (a KV cache). A member template: instantiated only where a program
//     // is exported. Exporting a program with an op that lacks it is a compile error naming it.
//     template <class B> static void onnx(B& b);
//   };
//
// Elements of index operands (token ids) are ctg::index_t; everything else is the program's T.
// An op's result is always of the program's T (no op makes index tensors).
#pragma once
#include <array>
#include <cassert>
#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

#include "ctgraph/error.hpp"
#include "ctgraph/tensor.hpp"

namespace ctg {

/// Called by a layered op's backward (repeat) after each layer's VJPs: layer `l`'s rows of the
/// operands it names final (layered_operand, below) will not be written again. Type-erased so that
/// no op is templated on the program that listens.
struct layer_hook {
    void (*fn)(const void* ctx, std::size_t layer);
    const void* ctx;
    void operator()(std::size_t layer) const { fn(ctx, layer); }
};

namespace detail {
/// p + off, or null for a missing operand or shadow: where batch or matrix `off` of an operand or
/// of its bf16 shadow starts (an operand kept in bf16 only comes as null, see above).
template <class P>
P* offset_or_null(P* p, std::size_t off) { return p ? p + off : nullptr; }
}  // namespace detail

/// How a model summary counts an op's FLOPs (op::flops, above; graph/summary.hpp): elements, one per
/// element (the default); matmul, a product x (..., m, k) times (k, n) or (..., k, n), its two
/// VJPs products of the same size; matmul_transposed, x (m, k) times y (n, k)^T; affine, a product
/// by a weight (in, out) plus a bias; affine_activation, that and an element-wise activation;
/// scaled_dot, attention's scores Q K^T and their (masked) softmax; nested, a scan's or repeat's
/// cell, counted node by node.
enum class flop_rule : unsigned char { elements, matmul, matmul_transposed, affine, affine_activation, scaled_dot, head_values, nested };

/// The bit of op::backward_reads that stands for the op's own result and scratch (see above).
inline constexpr std::uint32_t reads_result = 1u << 31;

/// How an inference program's product weights are read (options::weights): float, or weight-only
/// quantised copies (kernels/quant.hpp): int8 with a scale per output column, or 4-bit in groups of
/// 32 with a float16 scale per group (ggml's Q4_0 layout).
enum class weight_format : unsigned char {
    f32,   ///< the parameters' own values
    int8,  ///< int8, symmetric, one scale per output column
    q4,    ///< 4-bit, one float16 scale per group of 32 inputs
};

/// How a pass runs, for the ops whose result depends on it (dropout): training or inference, and
/// where its random numbers come from. Counter-based: an op draws element i's number from
/// (seed, stream, i), so backward sees forward's numbers again without storing them; stream differs
/// per forward() call, per node, and per step of a scan or layer of a repeat.
struct run_info {
    bool training = true;     // false in options{.inference = true} programs and in eval mode
    std::uint64_t seed = 0;   // program::dropout_seed
    std::uint64_t stream = 0;
    // An inference program's pass (options::inference): no backward will read this pass's values, so
    // scan and repeat keep one step's or layer's values instead of all of them (their scratch is
    // sized the same way: the third argument of scratch_size).
    bool forward_only = false;
    // Matrix products take bf16 operands and accumulate in float (options::precision): ops pass it
    // to kernels::gemm as its `bf16` argument.
    bool bf16 = false;
    // options::recompute in a training program: repeat keeps one frame and reruns each layer's
    // forward before its VJP (its scratch is sized the same way: the fourth argument of
    // scratch_size). Cleared inside a cell: ops nested in a scan or repeat plan without it.
    bool recompute = false;
    // Set by program::backward_with for a node whose op declares layered operands (an op may say
    // `static constexpr int layers` and `static constexpr bool layered_operand(k)`: its backward
    // writes row l of operand k's adjoint only while running layer l, from the last layer down, and
    // calls after_layer(l) once that layer is done). Null otherwise, and inside a cell.
    const layer_hook* after_layer = nullptr;
    // A mixed-precision training program: values that products read keep a bf16 shadow (see
    // graph/exec.hpp, bf16_shadowed), in the program's arena and in a repeat's layer frames (its
    // scratch is sized the same way: the fifth argument of scratch_size). Cleared inside a cell:
    // ops nested in a scan or repeat plan without it.
    bool bf16_shadows = false;
    // With bf16_shadows: values that backward reads only through their shadow, or not at all, keep
    // no float of their own (options::bf16_only; graph/exec.hpp, bf16_only_values), in the
    // program's arena and in a repeat's layer frames (its scratch_size's fifth argument is then 2).
    // Cleared inside a cell.
    bool bf16_only = false;
    // With bf16_only: values that VJPs read may be kept in bf16 only too, where the op reading them
    // says so (options::bf16_saved; op.hpp, vjp_reads_bf16). Cleared inside a cell.
    bool bf16_saved = false;
    // Products by a weight read its quantised copy (options::weights; kernels::quantized_product):
    // ops pass it to kernels::quantized_product before their float product.
    weight_format weights = weight_format::f32;
};

/// What a repeat's layer frames keep (its scratch_size's fifth argument, cell_frame::plan's bf16):
/// 0 floats only, 1 bf16 shadows too, 2 values in bf16 only, 3 those that VJPs read rounded too.
constexpr int bf16_frame_level(bool shadows, bool only, bool saved) { return shadows ? (only ? (saved ? 3 : 2) : 1) : 0; }

/// What the engine hands an op: views of its output, operands, their adjoints and its scratch.
template <class T, std::size_t K>
struct op_io {
    view y, gy;                              // output value; its adjoint (backward only)
    std::array<view, K> x{}, gx{};           // operand values; their adjoints (null: not needed)
    view scratch{};                          // op-private memory (scratch_size elements of T)
    view transient{};                        // memory for this call alone: forward_scratch_size or backward_scratch_size elements of T, or null
    std::array<std::string_view, K> x_name{};  // operand names for error messages
    std::string_view node_name{};            // this node, e.g. "%7 embedding"
    run_info run{};                          // training or not; random stream of this node
    std::array<bool, K> assign{};            // see fresh()
    // The operands' bf16 shadows (op::bf16_operands): operand k's value rounded to bf16, laid out
    // as c.x[k], kept by the engine for a mixed-precision program's products; null where none.
    std::array<const std::uint16_t*, K> xb{};
    // The result's bf16 shadow, for an op that writes it itself (writes_bf16_result); null where
    // the value keeps none (and always for other ops: the engine converts c.y after forward). With
    // it, c.y may be null: nothing reads the float, the shadow is the value.
    std::uint16_t* yb = nullptr;

    /// Whether gx[k] is fresh: an op declaring assigns_adjoints must then write all of it with =.
    bool fresh(std::size_t k) const { return assign[k]; }

    T* y_data() const { return y.template as<T>(); }
    T* gy_data() const { return gy.template as<T>(); }
    const T* x_data(std::size_t k) const { return x[k].template as<T>(); }
    T* gx_data(std::size_t k) const { return gx[k].template as<T>(); }
    /// Operand k's adjoint for backward to write: gx_data(k), or null where none is needed or where
    /// it is gy's own memory (aliases_operand, identity_vjp_operands: the planners shared it, so it
    /// holds its value already and must not be written again).
    T* gx_to_write(std::size_t k) const {
        T* g = gx_data(k);
        if (g && g == gy_data()) {
            assert(fresh(k) && "an adjoint shared with the result's must be that one's first writer");
            return nullptr;
        }
        return g;
    }
};

}  // namespace ctg
