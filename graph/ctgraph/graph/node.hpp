// ctgraph/graph/node.hpp: symbolic values. A node's type records its op, operands and static shape;
// the model's type is its graph. Leaves are named: param (trainable), input (data), index_input
// (integer data such as token ids) and constant (a scalar known at compile time).
#pragma once
#include <cstddef>
#include <type_traits>

#include "ctgraph/dim.hpp"
#include "ctgraph/error.hpp"

namespace ctg {

template <class... Ts>
struct tlist {
    static constexpr std::size_t size = sizeof...(Ts);
};

enum class leaf_kind { none, param, input, index_input, constant, placeholder };

/// Base of every symbolic value.
struct expr_base {
    static constexpr bool is_ctg_expr = true;
    static constexpr bool is_poison = false;
    static constexpr bool is_index = false;  // integer-valued (index_input)
};

/// Anything ctgraph ops accept.
template <class E>
concept expr = std::is_base_of_v<expr_base, E>;

/// A trainable tensor, identified by its name. `param<"W", 784, 256>`.
template <fixed_string Name, dim... D>
struct param : expr_base {
    static_assert((D.is_static() && ...), "ctg::param: every dimension of a parameter must be static");
    using shape = ctg::shape<D...>;
    using args = tlist<>;
    static constexpr leaf_kind kind = leaf_kind::param;
    static constexpr auto name = Name;
};

/// A floating-point data tensor supplied at each step. `input<"x", B, 784>`.
template <fixed_string Name, dim... D>
struct input : expr_base {
    using shape = ctg::shape<D...>;
    using args = tlist<>;
    static constexpr leaf_kind kind = leaf_kind::input;
    static constexpr auto name = Name;
};

/// An integer data tensor (token ids, class targets) supplied at each step. `index_input<"tok", B, T>`.
template <fixed_string Name, dim... D>
struct index_input : expr_base {
    using shape = ctg::shape<D...>;
    using args = tlist<>;
    static constexpr leaf_kind kind = leaf_kind::index_input;
    static constexpr bool is_index = true;
    static constexpr auto name = Name;
};

/// A scalar constant. `constant<1>` or `constant<0.5>`; broadcast by the element-wise ops.
template <cval V>
struct constant : expr_base {
    using shape = ctg::shape<>;
    using args = tlist<>;
    static constexpr leaf_kind kind = leaf_kind::constant;
    static constexpr double value = V.value();
};

/// Stands for a per-step value inside a scan cell (the carried state, the step's input). Only
/// scan creates these; they never reach an outer program.
template <int Role, bool Index, dim... D>
struct placeholder : expr_base {
    using shape = ctg::shape<D...>;
    using args = tlist<>;
    static constexpr leaf_kind kind = leaf_kind::placeholder;
    static constexpr bool is_index = Index;
    static constexpr int role = Role;  // 0: carried state, 1: step input
    static constexpr fixed_string<11> name = Role == 0 ? fixed_string<11>("scan.state") : fixed_string<11>("scan.input");
};

namespace detail {
template <class Op, class... A>
struct dims_of {
    static constexpr auto value = Op::template dims<typename A::shape...>();
};
}  // namespace detail

/// An op applied to operands. Two structurally identical nodes are the same type, hence one node.
template <class Op, class... A>
struct node : expr_base {
    using op = Op;
    using args = tlist<A...>;
    using shape = shape_from<detail::dims_of<Op, A...>>;
    static constexpr leaf_kind kind = leaf_kind::none;
};

/// What an op returns after a failed static check: accepted by every op, so that one mistake gives
/// one error instead of a cascade.
struct poison : expr_base {
    static constexpr bool is_poison = true;
    using shape = ctg::shape<>;
    using args = tlist<>;
    static constexpr leaf_kind kind = leaf_kind::none;
};

/// True when some operand is already the result of a failed check (its error was reported).
template <class... A>
inline constexpr bool any_poison = (A::is_poison || ...);

/// Builds node<Op, A...> after the op's shape check; poison in, poison out.
template <class Op, expr... A>
constexpr auto make_node(A...) {
    if constexpr ((A::is_poison || ...)) {
        return poison{};
    } else {
        constexpr bool ok = Op::template check<typename A::shape...>();
        if constexpr (ok) return node<Op, A...>{};
        else return poison{};
    }
}

/// The same, for ops whose operands must not be index tensors (all but embedding and the losses).
template <class Op, expr... A>
constexpr auto make_float_node(A... a) {
    if constexpr ((A::is_poison || ...)) {
        return poison{};
    } else {
        constexpr bool no_index = !(A::is_index || ...);
        // The op is named in the asserted expression (with_shapes<false, the_op, shapes...>).
        static_assert(with_shapes<no_index, Op, typename A::shape::pretty...>::value,
                      "ctg: an op that takes floating-point operands was given an index_input");
        if constexpr (no_index) return make_node<Op>(a...);
        else return poison{};
    }
}

}  // namespace ctg
