// ctgraph/ops/concat.hpp: concatenation along the last (feature) axis of K operands with equal
// leading dimensions: (..., n_1), ..., (..., n_K) -> (..., n_1 + ... + n_K). The VJP hands each
// operand its columns of the adjoint.
#pragma once
#include <string>
#include <string_view>
#include <vector>

#include "ctgraph/graph/node.hpp"
#include "ctgraph/kernels/simd.hpp"
#include "ctgraph/op.hpp"

namespace ctg {
namespace ops {
struct concat_op {
    static constexpr std::string_view name = "concat";
    template <class A, class... R>
    static consteval bool rows_independent() { return A::rank >= 2; }  // along the last axis (see op.hpp)
    static constexpr bool assigns_adjoints = true;
    template <class A, class... R>
    static consteval bool check() {
        if constexpr (A::rank == 0) {
            return false;
        } else {
            if (!((R::rank == A::rank) && ...)) return false;
            if (!(A::dims[A::rank - 1].is_static() && (R::dims[R::rank - 1].is_static() && ...))) return false;
            for (std::size_t i = 0; i + 1 < A::rank; ++i)
                if (!((R::dims[i] == A::dims[i]) && ...)) return false;
            return true;
        }
    }
    template <class A, class... R>
    static consteval auto dims() {
        auto r = A::dims;
        r[A::rank - 1] = dim(A::dims[A::rank - 1].n + (R::dims[R::rank - 1].n + ... + 0));
        return r;
    }
    // ONNX: Concat of the operands along the last axis.
    template <class B>
    static void onnx(B& b) {
        std::vector<std::string> xs;
        for (std::size_t k = 0; k < b.arity(); ++k) xs.push_back(b.x(k));
        b.emit_y("Concat", xs, {{"axis", -1}});
    }
    template <class T, std::size_t K>
    static void forward(op_io<T, K>& c) {
        const std::size_t rows = c.y.shape.rows(), n = c.y.shape.cols();
        std::size_t off = 0;
        for (std::size_t k = 0; k < K; ++k) {
            const std::size_t nk = c.x[k].shape.cols();
            const T* x = c.x_data(k);
            T* y = c.y_data();
            for (std::size_t r = 0; r < rows; ++r) std::copy(x + r * nk, x + (r + 1) * nk, y + r * n + off);
            off += nk;
        }
    }
    template <class T, std::size_t K>
    static void backward(op_io<T, K>& c) {
        const std::size_t rows = c.y.shape.rows(), n = c.y.shape.cols();
        std::size_t off = 0;
        for (std::size_t k = 0; k < K; ++k) {
            const std::size_t nk = c.x[k].shape.cols();
            if (T* g = c.gx_data(k))
                for (std::size_t r = 0; r < rows; ++r) kernels::put(c.fresh(k), nk, c.gy_data() + r * n + off, g + r * nk);
            off += nk;
        }
    }
};
}  // namespace ops

/// Concatenates along the last axis.
template <expr A, expr... R>
constexpr auto concat(A a, R... r) {
    static_assert(with_shapes<any_poison<A, R...> || ops::concat_op::check<typename A::shape, typename R::shape...>(),
                              typename A::shape::pretty, typename R::shape::pretty...>::value,
                  "ctg::concat: the operands need equal rank, equal leading dimensions and static last dimensions");
    return make_float_node<ops::concat_op>(a, r...);
}
}  // namespace ctg
