// ctgraph/ops/positions.hpp: positional encodings added to a sequence of feature vectors.
//
//   sinusoidal_positions<MaxLen>(x)   x (..., T, D) -> x + PE[:T], the fixed table of the reference
//                                     article: PE[p, 2i] = sin(p / 10000^(2i/D)),
//                                     PE[p, 2i+1] = cos(p / 10000^(2i/D)) (computed in double, then
//                                     rounded to the program's type)
//   sinusoidal_positions<MaxLen, float>(x)   the table rounded to float first, whatever the
//                                     program's type: what a PyTorch model holds in a float32 buffer
//                                     (.double() converts the rounded values), so float64 runs of
//                                     such a model agree with it
//   learned_positions(x, table)       table (MaxLen, D), a parameter: x + table[:T]; its gradient
//                                     sums over the leading axes
//   learned_positions(x, table, start)  sequence o from row start[o] (decoding with a KV cache:
//                                     each sequence at its own position); its gradient adds each
//                                     sequence's rows into the table's rows it read
//
// T may be dynamic; a sequence longer than the table (T > MaxLen) throws ctg::index_error naming
// the operand, before anything is written: never a read past the table's end.
#pragma once
#include <cmath>
#include <string>
#include <string_view>
#include <tuple>
#include <type_traits>
#include <vector>

#include "ctgraph/graph/node.hpp"
#include "ctgraph/kernels/simd.hpp"
#include "ctgraph/op.hpp"

namespace ctg {
namespace ops {

/// The sinusoidal table (len, d) in double. Out of line, with runtime sizes: inlined with constant
/// sizes, g++ -O3 evaluates the sin/cos/pow calls at compile time (gpt-m's 256 x 384 table added
/// 3 s to its training program's compile time).
[[gnu::noinline]] inline std::vector<double> sinusoidal_values(std::size_t len, std::size_t d) {
    std::vector<double> t(len * d);
    for (std::size_t p = 0; p < len; ++p)
        for (std::size_t i = 0; i < d; i += 2) {
            const double angle = double(p) / std::pow(10000.0, double(i) / double(d));
            t[p * d + i] = std::sin(angle);
            if (i + 1 < d) t[p * d + i + 1] = std::cos(angle);
        }
    return t;
}

/// The sinusoidal table (MaxLen, D) in scalar type T, built once per (T, MaxLen, D, Round); each
/// value is rounded to Round first (void: no extra rounding).
template <class T, int MaxLen, int D, class Round = void>
const std::vector<T>& sinusoidal_table() {
    static const std::vector<T> table = [] {
        const std::vector<double> t = sinusoidal_values(std::size_t(MaxLen), std::size_t(D));
        // Rounded in a loop of its own: g++ 12 at -O3 drops a float conversion applied straight to
        // sin/cos once it merges them into sincos (measured: cos values came back unrounded).
        std::vector<T> r(t.size());
        for (std::size_t k = 0; k < t.size(); ++k) {
            if constexpr (std::is_void_v<Round>) r[k] = T(t[k]);
            else r[k] = T(static_cast<Round>(t[k]));
        }
        return r;
    }();
    return table;
}

/// Learned = false: one operand (x), the table is the sinusoidal one of width D (values rounded to
/// Round first, unless void); true: (x, table). Offset: a last operand `start`, an index tensor with
/// one entry per sequence: sequence o starts at table row start[o] (decoding with a KV cache).
template <int MaxLen, int D, bool Learned, class Round = void, bool Offset = false>
struct positions_op {
    static constexpr std::string_view name = Learned ? "learned_positions" : "sinusoidal_positions";
    static std::string describe() { return "max " + std::to_string(MaxLen); }
    // ONNX: x + rows of the table (the sinusoidal one as a float32 constant, or operand 1): rows
    // 0 .. T-1 (a Slice), or start[o] + t per sequence (a Gather of Range + start).
    template <class B>
    static void onnx(B& b) {
        std::string table;
        if constexpr (Learned) {
            table = b.x(1);
        } else {
            const std::vector<float>& t = sinusoidal_table<float, MaxLen, D, Round>();
            table = b.tensor("sinusoidal_table", {MaxLen, D}, std::vector<float>(t.begin(), t.end()));
        }
        const std::string len = b.extent(0, -2);  // T, (1)
        std::string rows;
        if constexpr (Offset) {
            const std::string t = b.emit("Range", {b.int_scalar(0), b.emit("Squeeze", {len}), b.int_scalar(1)});
            const std::string start = b.emit("Unsqueeze", {b.x(b.arity() - 1), b.ints({-1})});
            rows = b.emit("Gather", {table, b.emit("Add", {start, t})}, {{"axis", 0}});  // (..., T, D)
        } else {
            rows = b.emit("Slice", {table, b.ints({0}), len, b.ints({0})});  // (T, D)
        }
        b.emit_y("Add", {b.x(0), rows});
    }

    template <class X, class... Rest>
    static consteval bool check() {
        if constexpr (X::rank < 2 || !X::dims[X::rank - 1].is_static()) {
            return false;
        } else {
            constexpr dim t = X::dims[X::rank - 2];
            bool ok = (!t.is_static() || t.n <= MaxLen) && X::dims[X::rank - 1] == dim(D);
            if constexpr (Learned) {
                using Table = std::tuple_element_t<0, std::tuple<Rest...>>;
                ok = ok && Table::rank == 2 && Table::dims[0] == dim(MaxLen) && Table::dims[1] == dim(D);
            }
            if constexpr (Offset) {  // one start per sequence: start has x's leading axes
                using Start = std::tuple_element_t<sizeof...(Rest) - 1, std::tuple<Rest...>>;
                ok = ok && Start::rank + 2 == X::rank;
                for (std::size_t a = 0; a < Start::rank && ok; ++a) ok = Start::dims[a] == X::dims[a];
            }
            return ok;
        }
    }
    template <class X, class... Rest>
    static consteval auto dims() { return X::dims; }

    template <class T, std::size_t K>
    static void forward(op_io<T, K>& c) {
        const rshape& s = c.x[0].shape;
        const std::size_t len = s[-2], outer = len ? s.size() / (len * D) : 0;
        if (len > std::size_t(MaxLen))
            throw index_error("ctg::" + std::string(name) + ": a sequence of " + std::to_string(len) + " positions in '" +
                              std::string(c.x_name[0]) + "' is longer than the positional table (" +
                              std::to_string(MaxLen) + " positions)");
        if constexpr (Offset)  // every start checked before anything is written
            for (std::size_t o = 0; o < outer; ++o) {
                const index_t st = start_of(c, o);
                if (st < 0 || std::size_t(st) + len > std::size_t(MaxLen))
                    throw index_error("ctg::" + std::string(name) + ": sequence " + std::to_string(o) + " of '" +
                                      std::string(c.x_name[0]) + "' would take positions " + std::to_string(st) + " to " +
                                      std::to_string(st + index_t(len) - 1) + " (start from '" +
                                      std::string(c.x_name[K - 1]) + "'), outside the positional table (" +
                                      std::to_string(MaxLen) + " positions)");
            }
        const T* table;
        if constexpr (Learned) table = c.x_data(1);
        else table = sinusoidal_table<T, MaxLen, D, Round>().data();
        for (std::size_t o = 0; o < outer; ++o)
            kernels::map(len * D, c.y_data() + o * len * D, [](auto a, auto b) { return a + b; },
                         c.x_data(0) + o * len * D, table + row_of(c, o) * D);
    }
    template <class T, std::size_t K>
    static index_t start_of(const op_io<T, K>& c, std::size_t o) {
        if constexpr (Offset) return c.x[K - 1].template as<index_t>()[o]; else return 0;
    }
    template <class T, std::size_t K>
    static std::size_t row_of(const op_io<T, K>& c, std::size_t o) { return std::size_t(start_of(c, o)); }
    // Fresh adjoints are assigned, not zeroed by the engine first (a GPT's embedding adjoint: 3 MiB
    // in gpt-m): x's is gy; a fresh table's rows that no sequence reads are zeroed, the rest
    // assigned by the first sequence that reads them (without starts, the first sequence reads
    // every row the others do; with starts, the table is zeroed and each sequence adds).
    static constexpr bool assigns_adjoints = true;
    // x's adjoint is gy: where this op is x's only reader, the planners give it gy's memory (op.hpp),
    // and there is nothing to copy (a GPT's token embedding: 3 MiB in gpt-m).
    static constexpr std::uint32_t identity_vjp_operands = 0b1;
    template <class T, std::size_t K>
    static void backward(op_io<T, K>& c) {
        const rshape& s = c.x[0].shape;
        const std::size_t len = s[-2], outer = len ? s.size() / (len * D) : 0;
        if (T* g = c.gx_to_write(0)) kernels::put(c.fresh(0), outer * len * D, c.gy_data(), g);
        if constexpr (Learned)
            if (T* table = c.gx_data(1)) {
                bool first_assigns = false;
                if (c.fresh(1)) {
                    if (Offset || outer == 0) std::fill(table, table + std::size_t(MaxLen) * D, T(0));
                    else std::fill(table + len * D, table + std::size_t(MaxLen) * D, T(0)), first_assigns = true;
                }
                for (std::size_t o = 0; o < outer; ++o)
                    kernels::put(first_assigns && o == 0, len * D, c.gy_data() + o * len * D, table + row_of(c, o) * D);
            }
    }
};

}  // namespace ops

/// x (..., T, D) plus the fixed sinusoidal encoding of positions 0 .. T-1 (T <= MaxLen); the
/// table's values rounded to Round first when given (float: as PyTorch's float32 buffers hold it).
template <int MaxLen, class Round = void, expr X>
constexpr auto sinusoidal_positions(X x) {
    using S = typename X::shape;
    static_assert(with_shapes<any_poison<X> || (S::rank >= 2 && S::dims[S::rank - 1].is_static() &&
                                                S::dims[S::rank - 1].n % 2 == 0),
                              typename S::pretty>::value,
                  "ctg::sinusoidal_positions: the operand must be (..., T, D) with a static, even D");
    if constexpr (any_poison<X> || !(S::rank >= 2 && S::dims[S::rank - 1].is_static())) {
        return poison{};
    } else {
        using Op = ops::positions_op<MaxLen, int(S::dims[S::rank - 1].n), false, Round>;
        static_assert(with_shapes<Op::template check<S>(), typename S::pretty, shape_is<MaxLen>>::value,
                      "ctg::sinusoidal_positions: the sequence is longer than the table (MaxLen positions)");
        return make_float_node<Op>(x);
    }
}

/// The same from table row start[o] for sequence o: x (B, T, D), start an index tensor (B); what
/// decoding with a KV cache uses (each sequence at its own position). start[o] + T > MaxLen throws.
template <int MaxLen, class Round = void, expr X, expr Start>
constexpr auto sinusoidal_positions(X x, Start start) {
    using S = typename X::shape;
    static_assert(with_shapes<any_poison<X, Start> || (S::rank >= 2 && S::dims[S::rank - 1].is_static() && Start::is_index),
                              typename S::pretty, typename Start::shape::pretty>::value,
                  "ctg::sinusoidal_positions: the operand must be (..., T, D) with a static D, the start an index_input");
    if constexpr (any_poison<X, Start> || !(S::rank >= 2 && S::dims[S::rank - 1].is_static())) {
        return poison{};
    } else {
        using Op = ops::positions_op<MaxLen, int(S::dims[S::rank - 1].n), false, Round, true>;
        static_assert(with_shapes<Op::template check<S, typename Start::shape>(), typename S::pretty,
                                  typename Start::shape::pretty>::value,
                      "ctg::sinusoidal_positions: the start needs one entry per sequence (x's leading axes)");
        return make_node<Op>(x, start);
    }
}

/// x (..., T, D) plus rows 0 .. T-1 of a learned table (MaxLen, D), usually a param.
template <expr X, expr Table>
constexpr auto learned_positions(X x, Table table) {
    using S = typename X::shape;
    using P = typename Table::shape;
    if constexpr (any_poison<X, Table>) {
        return poison{};
    } else {
        static_assert(with_shapes<P::rank == 2 && P::dims[0].is_static() && P::dims[1].is_static(),
                                  typename P::pretty>::value,
                      "ctg::learned_positions: the table must be a static (MaxLen, D) matrix");
        if constexpr (!(P::rank == 2 && P::dims[0].is_static() && P::dims[1].is_static())) {
            return poison{};
        } else {
            using Op = ops::positions_op<int(P::dims[0].n), int(P::dims[1].n), true>;
            static_assert(with_shapes<Op::template check<S, P>(), typename S::pretty, typename P::pretty>::value,
                          "ctg::learned_positions: the operand must be (..., T, D) with T <= MaxLen and D the "
                          "table's width");
            return make_float_node<Op>(x, table);
        }
    }
}

/// The same from table row start[o] for sequence o: x (B, T, D), start an index tensor (B); what
/// decoding with a KV cache uses (GPT-2's learned positions, each sequence at its own position).
/// start[o] < 0 or start[o] + T > MaxLen throws ctg::index_error before anything is written.
template <expr X, expr Table, expr Start>
constexpr auto learned_positions(X x, Table table, Start start) {
    using S = typename X::shape;
    using P = typename Table::shape;
    if constexpr (any_poison<X, Table, Start>) {
        return poison{};
    } else {
        static_assert(with_shapes<P::rank == 2 && P::dims[0].is_static() && P::dims[1].is_static() && Start::is_index,
                                  typename P::pretty, typename Start::shape::pretty>::value,
                      "ctg::learned_positions: the table must be a static (MaxLen, D) matrix, the start an index_input");
        if constexpr (!(P::rank == 2 && P::dims[0].is_static() && P::dims[1].is_static() && Start::is_index)) {
            return poison{};
        } else {
            using Op = ops::positions_op<int(P::dims[0].n), int(P::dims[1].n), true, void, true>;
            static_assert(with_shapes<Op::template check<S, P, typename Start::shape>(), typename S::pretty,
                                      typename P::pretty, typename Start::shape::pretty>::value,
                          "ctg::learned_positions: the operand must be (..., T, D) with D the table's width, and the "
                          "start one entry per sequence (x's leading axes)");
            return make_node<Op>(x, table, start);
        }
    }
}
}  // namespace ctg
