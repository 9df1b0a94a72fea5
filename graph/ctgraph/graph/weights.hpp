// ctgraph/graph/weights.hpp: which parameters a program's products read as weights, for weight-only
// quantisation (options::weights): a table evaluated at compile time, only by programs that ask.
#pragma once
#include <array>
#include <cstddef>
#include <cstdint>
#include <type_traits>
#include <utility>

#include "ctgraph/graph/analysis.hpp"

namespace ctg::detail {

/// The operands an op reads as its product's weight W, and of those the ones read as W^T (op.hpp,
/// weight_operands, transposed_weight_operands): none unless it says.
template <class Op>
inline constexpr std::uint32_t weight_operands_of = [] {
    if constexpr (requires { Op::weight_operands; }) return std::uint32_t(Op::weight_operands); else return std::uint32_t(0);
}();
template <class Op>
inline constexpr std::uint32_t transposed_weight_operands_of = [] {
    if constexpr (requires { Op::transposed_weight_operands; }) return std::uint32_t(Op::transposed_weight_operands); else return std::uint32_t(0);
}();

/// A scan or a repeat: an op running a cell graph whose leaves stand for its operands (the hoisted
/// invariants; a repeat's stacked parameters too).
template <class Op>
concept runs_cell = requires { typename Op::info::G; Op::first_hoisted; };

inline constexpr std::uint8_t read_as_weight = 1, read_as_transposed_weight = 2;

/// Whether the quantised copies (graph/ctgraph/quant_store.hpp) are declared in this unit: that
/// header specialises it true. A program with options::weights needs them.
template <class T>
struct quantized_copies_declared : std::false_type {};

template <class G>
constexpr std::array<std::uint8_t, G::size> weight_reads();

// Node I's reads of its operands as weights, into r (bits read_as_weight, read_as_transposed_weight);
// a cell's reads go to the operands its leaves stand for.
template <class G, std::size_t I>
constexpr void add_weight_reads(std::array<std::uint8_t, G::size>& r) {
    using Op = op_of_t<typename G::template node_t<I>>;
    if constexpr (runs_cell<Op>) {
        using info = typename Op::info;
        constexpr auto inner = weight_reads<typename info::G>();
        for (std::size_t j = 0; j < info::num_hoisted; ++j)
            r[std::size_t(G::operands[I][Op::first_hoisted + j])] |= inner[info::hoisted[j]];
        if constexpr (requires { Op::first_param; Op::P; })
            for (std::size_t p = 0; p < Op::P; ++p) r[std::size_t(G::operands[I][Op::first_param + p])] |= inner[info::step_params[p]];
    } else {
        for (std::size_t k = 0; k < G::arity[I] && k < 32; ++k)
            if ((weight_operands_of<Op> >> k) & 1)
                r[std::size_t(G::operands[I][k])] |= ((transposed_weight_operands_of<Op> >> k) & 1) ? read_as_transposed_weight : read_as_weight;
    }
}

/// For every node of graph G, how products read it as a weight (bits read_as_weight,
/// read_as_transposed_weight; 0: not as a weight).
template <class G>
constexpr std::array<std::uint8_t, G::size> weight_reads() {
    std::array<std::uint8_t, G::size> r{};
    [&]<std::size_t... I>(std::index_sequence<I...>) { (add_weight_reads<G, I>(r), ...); }(std::make_index_sequence<G::size>{});
    return r;
}

}  // namespace ctg::detail
