// ctgraph/ops/dropout.hpp: inverted dropout.
//   dropout<P>(x): in training, each element is zeroed with probability P and the others scaled by
//   1 / (1 - P); in inference programs (options{.inference = true}) and in evaluation mode
//   (prog.training(false)) it is the identity. P is a compile-time rate in [0, 1).
// The mask is not stored: element i keeps when u_i >= P, u_i a uniform number computed from
// (dropout seed, the pass's stream for this node, i) by a counter-based generator (splitmix64), so
// backward recomputes forward's mask. prog.dropout_seed(s) makes the masks reproducible; every
// forward() draws new ones, as does every step of a scan and every layer of a repeat.
// VJP: gx += mask * gy / (1 - P).
#pragma once
#include <cstdint>
#include <string>
#include <string_view>

#include "ctgraph/graph/exec.hpp"
#include "ctgraph/kernels/simd.hpp"
#include "ctgraph/graph/node.hpp"
#include "ctgraph/op.hpp"

namespace ctg {
namespace ops {
template <cval P>
struct dropout_op {
    static constexpr std::string_view name = "dropout";
    static constexpr bool assigns_adjoints = true;
    static constexpr double rate = P.value();
    static std::string describe() { return std::to_string(rate); }
    template <class A>
    static consteval bool check() { return true; }
    template <class A>
    static consteval auto dims() { return A::dims; }

    /// Whether element i of this pass keeps its value.
    static bool keeps(const run_info& run, std::size_t i) {
        const std::uint64_t bits = detail::sub_stream(run.seed ^ run.stream, i);
        return double(bits >> 11) * 0x1.0p-53 >= rate;  // uniform in [0, 1) from the top 53 bits
    }
    // ONNX: Identity. Only inference programs are exported, and there forward copies x (run.training
    // is false): no mask, no scaling.
    template <class B>
    static void onnx(B& b) { b.emit_y("Identity", {b.x(0)}); }
    template <class T>
    static void forward(op_io<T, 1>& c) {
        const std::size_t n = c.y.size();
        const T *x = c.x_data(0);
        T* y = c.y_data();
        if (!c.run.training || rate == 0.0) {
            std::copy(x, x + n, y);
            return;
        }
        const T scale = T(1.0 / (1.0 - rate));
        for (std::size_t i = 0; i < n; ++i) y[i] = keeps(c.run, i) ? x[i] * scale : T(0);
    }
    template <class T>
    static void backward(op_io<T, 1>& c) {
        T* gx = c.gx_data(0);
        if (!gx) return;
        const std::size_t n = c.y.size();
        const T* gy = c.gy_data();
        if (!c.run.training || rate == 0.0) {
            kernels::put(c.fresh(0), n, gy, gx);
            return;
        }
        const T scale = T(1.0 / (1.0 - rate));
        if (c.fresh(0))
            for (std::size_t i = 0; i < n; ++i) gx[i] = keeps(c.run, i) ? gy[i] * scale : T(0);
        else
            for (std::size_t i = 0; i < n; ++i)
                if (keeps(c.run, i)) gx[i] += gy[i] * scale;
    }
};
}  // namespace ops

/// Inverted dropout with rate P (see the file comment). dropout<0.0>(x) is x itself (no node).
template <cval P, expr A>
constexpr auto dropout(A a) {
    static_assert(P.value() >= 0.0 && P.value() < 1.0, "ctg::dropout: the rate must be in [0, 1)");
    if constexpr (P.value() == 0.0) return a;
    else return make_float_node<ops::dropout_op<P>>(a);
}
}  // namespace ctg
