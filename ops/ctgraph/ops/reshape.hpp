// ctgraph/ops/reshape.hpp: the same elements, row-major, under another shape.
//   reshape<B, 1, 64>(x)      (B, 64) -> (B, 1, 64)
//   reshape<B, T, 4, 32>(x)   (B, T, 128) -> (B, T, 4, 32)   (before permute: split heads)
//   unsqueeze<1>(x)           (B, 64) -> (B, 1, 64): a new axis of extent 1 (then broadcast by the
//                             element-wise ops against (B, T, 64)); squeeze<1>(y) removes it
// The static check: both shapes use the same dynamic letters, each as often, and their static
// dimensions have the same product, so the element counts agree whatever the letters' values.
// The VJP adds the adjoint back under the operand's shape; where the reshape is its operand's
// only reader, the two adjoints are one buffer (detail::adjoint_roots) and it copies nothing.
#pragma once
#include <algorithm>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "ctgraph/graph/node.hpp"
#include "ctgraph/kernels/simd.hpp"
#include "ctgraph/op.hpp"

namespace ctg {
namespace ops {
template <dim... D>
struct reshape_op {
    static constexpr std::string_view name = "reshape";
    template <class A>
    static consteval bool rows_independent() { return true; }  // with the batch first in both, rows stay rows (see op.hpp)
    static constexpr bool assigns_adjoints = true;
    static constexpr bool aliases_operand = true;  // the engine points y at x: no copy, no memory
    static constexpr std::uint32_t backward_reads = 0;  // the VJP copies the adjoint: no value (see op.hpp)
    static constexpr std::array<dim, sizeof...(D)> target{D...};

    template <class A>
    static consteval bool check() {
        if constexpr (sizeof...(D) == 0 || sizeof...(D) > max_rank) {
            return false;
        } else {
            // Static products, and the dynamic letters as sorted lists.
            long long pa = 1, pt = 1;
            std::array<char, max_rank> la{}, lt{};
            std::size_t na = 0, nt = 0;
            for (std::size_t i = 0; i < A::rank; ++i) {
                if (A::dims[i].is_static()) pa *= A::dims[i].n; else la[na++] = A::dims[i].sym;
            }
            for (const dim d : target) {
                if (d.is_static()) pt *= d.n; else lt[nt++] = d.sym;
            }
            std::sort(la.begin(), la.begin() + na);
            std::sort(lt.begin(), lt.begin() + nt);
            return pa == pt && na == nt && la == lt;
        }
    }
    template <class A>
    static consteval auto dims() { return target; }

    // ONNX: Reshape to D... (allowzero 1: every entry is an extent, as here): static extents as
    // constants, a dynamic letter's read at run time from the operand's axis of that letter (the
    // check above: the target's letters are the operand's).
    template <class B>
    static void onnx(B& b) {
        const auto& s = b.xshape(0);
        std::vector<std::pair<long long, long>> axes;
        for (const dim d : target) {
            if (d.is_static()) {
                axes.push_back({d.n, -1});
                continue;
            }
            std::size_t a = 0;
            while (a + 1 < s.rank && s.d[a].sym != d.sym) ++a;
            axes.push_back({-1, long(a)});
        }
        b.emit_y("Reshape", {b.x(0), b.shape_of(0, axes)}, {{"allowzero", 1}});
    }
    template <class T>
    static void forward(op_io<T, 1>& c) {
        if (c.y.ptr != c.x[0].ptr) std::copy(c.x_data(0), c.x_data(0) + c.y.size(), c.y_data());  // a cell's result
    }
    template <class T>
    static void backward(op_io<T, 1>& c) {
        // (null too where one buffer is both, written already: the planners share it, detail::adjoint_roots)
        if (T* g = c.gx_to_write(0)) kernels::put(c.fresh(0), c.y.size(), static_cast<const T*>(c.gy_data()), g);
    }
    static std::string describe() { return to_string(target); }
};
}  // namespace ops

/// The operand's elements under the shape D... (see the file comment for what is accepted).
template <dim... D, expr A>
constexpr auto reshape(A a) {
    static_assert(with_shapes<any_poison<A> || ops::reshape_op<D...>::template check<typename A::shape>(),
                              typename A::shape::pretty, shape_is<detail::pretty_dim<D>()...>>::value,
                  "ctg::reshape: the new shape must hold as many elements: the same dynamic dimensions and the "
                  "same product of static ones");
    return make_float_node<ops::reshape_op<D...>>(a);
}

namespace detail {
template <class S, int Axis>
consteval std::array<dim, S::rank + 1> unsqueezed_dims() {
    std::array<dim, S::rank + 1> d{};
    for (std::size_t i = 0, j = 0; i <= S::rank; ++i) d[i] = int(i) == Axis ? dim(1) : S::dims[j++];
    return d;
}
template <class S, int Axis>
consteval std::array<dim, S::rank - 1> squeezed_dims() {
    std::array<dim, S::rank - 1> d{};
    for (std::size_t i = 0, j = 0; i < S::rank; ++i)
        if (int(i) != Axis) d[j++] = S::dims[i];
    return d;
}
template <auto Dims, expr A, std::size_t... I>
constexpr auto reshape_to(A a, std::index_sequence<I...>) {
    return reshape<Dims[I]...>(a);
}
}  // namespace detail

/// The operand with a new axis of extent 1 at position Axis of the result (negative counts from the
/// result's end: -1 appends one): (B, 64) -> unsqueeze<1> -> (B, 1, 64). The same memory (a reshape).
template <int Axis, expr A>
constexpr auto unsqueeze(A a) {
    using S = typename A::shape;
    constexpr int rank = int(S::rank) + 1, axis = Axis < 0 ? rank + Axis : Axis;
    static_assert(with_shapes<any_poison<A> || (axis >= 0 && axis < rank && rank <= int(max_rank)), typename S::pretty>::value,
                  "ctg::unsqueeze: the new axis must lie within the result, of at most 4 axes");
    if constexpr (any_poison<A> || !(axis >= 0 && axis < rank && rank <= int(max_rank))) return poison{};
    else return detail::reshape_to<detail::unsqueezed_dims<S, axis>()>(a, std::make_index_sequence<std::size_t(rank)>{});
}
/// The operand without its axis Axis, which must be a static 1 (negative counts from the end).
template <int Axis, expr A>
constexpr auto squeeze(A a) {
    using S = typename A::shape;
    constexpr int axis = Axis < 0 ? int(S::rank) + Axis : Axis;
    constexpr bool ok = axis >= 0 && axis < int(S::rank) && S::rank >= 2 && S::dims[std::size_t(axis < 0 ? 0 : axis)] == dim(1);
    static_assert(with_shapes<any_poison<A> || ok, typename S::pretty>::value,
                  "ctg::squeeze: the axis must be one of the operand's, of extent 1 (and one axis must remain)");
    if constexpr (any_poison<A> || !ok) return poison{};
    else return detail::reshape_to<detail::squeezed_dims<S, axis>()>(a, std::make_index_sequence<S::rank - 1>{});
}
}  // namespace ctg
