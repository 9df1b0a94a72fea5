// ctgraph/graph/node.hpp: symbolic values. A node's type records its op, operands and static shape;
// the model's type is its graph. Leaves are named: param (trainable), input (data), index_input
// (integer data such as token ids), bf16_input (state kept in bfloat16, such as a KV cache) and
// constant (a scalar known at compile time).
#pragma once
#include <cstddef>
#include <cstdint>
#include <string_view>
#include <type_traits>

#include "ctgraph/dim.hpp"
#include "ctgraph/error.hpp"

namespace ctg {

template <class... Ts>
/// A list of types (a node's operands, a graph's nodes).
struct tlist {
    static constexpr std::size_t size = sizeof...(Ts);  ///< the number of types
};

/// What a node is: an op (`none`) or which kind of leaf.
enum class leaf_kind { none, param, input, index_input, constant, placeholder };

/// What a value's elements are: the program's scalar type T (every op's result), integer ids
/// (index_input), or bfloat16 bits (bf16_input: storage that only some ops read).
enum class element : unsigned char { real, index, bf16 };

/// Base of every symbolic value.
struct expr_base {
    static constexpr bool is_ctg_expr = true;  ///< marks the types that ops accept
    static constexpr bool is_poison = false;  ///< true only for ctg::poison, the result of a failed check
    static constexpr bool is_index = false;  ///< integer-valued (index_input)
    static constexpr bool is_bf16 = false;  ///< bfloat16 storage (bf16_input)
};

/// The element kind of a value type.
template <class E>
inline constexpr element element_of = E::is_index ? element::index : E::is_bf16 ? element::bf16 : element::real;

/// Anything ctgraph ops accept.
template <class E>
concept expr = std::is_base_of_v<expr_base, E>;

/// A trainable tensor, identified by its name. `param<"W", 784, 256>`.
template <fixed_string Name, dim... D>
struct param : expr_base {
    static_assert((D.is_static() && ...), "ctg::param: every dimension of a parameter must be static");
    using shape = ctg::shape<D...>;  ///< the static shape (D...)
    using args = tlist<>;  ///< a leaf has no operands
    static constexpr leaf_kind kind = leaf_kind::param;  ///< leaf_kind::param
    static constexpr auto name = Name;  ///< the name the parameter store knows it by
    static constexpr std::size_t layer_axes = 0;  ///< no stacked layer axis
};

/// A parameter holding one tensor per layer, stacked along a leading axis: ctg::repeat makes these
/// from the parameters of the block it repeats. Initialisation treats each layer's slice as the
/// parameter (fans, and the gain rule of params.hpp, use D...).
template <fixed_string Name, dim Layers, dim... D>
struct layered_param : expr_base {
    static_assert(Layers.is_static() && (D.is_static() && ...), "ctg::param: every dimension of a parameter must be static");
    using shape = ctg::shape<Layers, D...>;  ///< (Layers, D...)
    using args = tlist<>;  ///< a leaf has no operands
    static constexpr leaf_kind kind = leaf_kind::param;  ///< leaf_kind::param
    static constexpr auto name = Name;  ///< the name the parameter store knows it by
    static constexpr std::size_t layer_axes = 1;  ///< one leading layer axis
};

/// A floating-point data tensor supplied at each step. `input<"x", B, 784>`.
template <fixed_string Name, dim... D>
struct input : expr_base {
    using shape = ctg::shape<D...>;  ///< the shape; dynamic dimensions are bound from the fed tensor
    using args = tlist<>;  ///< a leaf has no operands
    static constexpr leaf_kind kind = leaf_kind::input;  ///< leaf_kind::input
    static constexpr auto name = Name;  ///< the name given to program::feed
};

/// An integer data tensor (token ids, class targets) supplied at each step. `index_input<"tok", B, T>`.
template <fixed_string Name, dim... D>
struct index_input : expr_base {
    using shape = ctg::shape<D...>;  ///< the shape; dynamic dimensions are bound from the fed tensor
    using args = tlist<>;  ///< a leaf has no operands
    static constexpr leaf_kind kind = leaf_kind::index_input;  ///< leaf_kind::index_input
    static constexpr bool is_index = true;  ///< integer-valued
    static constexpr auto name = Name;  ///< the name given to program::feed
};

/// A tensor of bfloat16 values that the program keeps as state in the caller's memory: a KV cache
/// in bf16, half the bytes of a float one. `bf16_input<"cache_k", L, B, D, C>`. Only ops that
/// declare it read one (ops::cached_attention_op, ops::cache_store_op, repeat's per-layer slices);
/// it has no gradient. Bound with program::bind(name, bf16_bits*, shape), or fed floats (rounded).
template <fixed_string Name, dim... D>
struct bf16_input : expr_base {
    using shape = ctg::shape<D...>;  ///< the shape; dynamic dimensions are bound from the bound tensor
    using args = tlist<>;  ///< a leaf has no operands
    static constexpr leaf_kind kind = leaf_kind::input;  ///< leaf_kind::input (its elements: element::bf16)
    static constexpr bool is_bf16 = true;  ///< bfloat16 storage
    static constexpr auto name = Name;  ///< the name given to program::bind / feed
};

/// A scalar constant. `constant<1>` or `constant<0.5>`; broadcast by the element-wise ops.
template <cval V>
struct constant : expr_base {
    using shape = ctg::shape<>;  ///< a scalar
    using args = tlist<>;  ///< a leaf has no operands
    static constexpr leaf_kind kind = leaf_kind::constant;  ///< leaf_kind::constant
    static constexpr double value = V.value();  ///< the constant's value
};

/// Stands for a per-step value inside a scan cell (the carried state, the step's input). Only
/// scan creates these; they never reach an outer program.
template <int Role, element Elem, dim... D>
struct placeholder : expr_base {
    using shape = ctg::shape<D...>;  ///< the per-step shape
    using args = tlist<>;  ///< a leaf has no operands
    static constexpr leaf_kind kind = leaf_kind::placeholder;  ///< leaf_kind::placeholder
    static constexpr bool is_index = Elem == element::index;  ///< integer-valued (an index step input)
    static constexpr bool is_bf16 = Elem == element::bf16;  ///< bfloat16 storage (a bf16_input's slice)
    static constexpr int role = Role;  ///< 0: carried state, 1: step input
    /// "scan.state" or "scan.input", as printed by to_text()
    static constexpr fixed_string<11> name = Role == 0 ? fixed_string<11>("scan.state") : fixed_string<11>("scan.input");
};

namespace detail {
template <class Op, class... A>
struct dims_of {
    static constexpr auto value = Op::template dims<typename A::shape...>();
};
}  // namespace detail

/// What every op node knows about itself: its op, its operands and its static shape.
template <class Op, class... A>
struct node_traits : expr_base {
    using op = Op;  ///< the op (its shape rule, forward and vector-Jacobian product)
    using args = tlist<A...>;  ///< the operands
    using shape = shape_from<detail::dims_of<Op, A...>>;  ///< the static shape given by the op's rule
    static constexpr leaf_kind kind = leaf_kind::none;  ///< not a leaf
};

// ---------------------------------------------------------------------------------------------
// Node identity. A node's type must be a function of (Op, operands) alone, so that two identical
// subexpressions are one type and hence one node. Spelling that identity structurally, as
// node<Op, node<...>, node<...>>, makes every cost that walks or prints a type exponential in the
// depth of a DAG-shaped graph (a residual x + f(x) names x twice), and compilers do walk and print
// them: clang's argument-dependent lookup, clang's IR struct names, both compilers' name mangling,
// and g++'s diagnostics and debug information (a shape error in a two-layer GPT printed 96 MB;
// g++ -g ran out of 24 GB). Measurements: docs/compile-time.md.
//
// So the type a user holds is node_id<H0, H1>: a 128-bit structural hash of the op's type and
// the operands' identities, computed from hashes of hashes, never by walking the graph. Its op,
// operands and shape come from a base class, node_traits<Op, A...>, which ADL does not walk and
// nothing prints. The base is found through a friend function that make_node defines the first
// time it makes that node (node_registrar below): "friend injection", supported by g++, clang and
// MSVC alike. Two different (Op, operands) with one hash would both define that friend: a
// compile error ("redefinition"), never a silent merge of two nodes.
// ---------------------------------------------------------------------------------------------
namespace detail {

template <std::uint64_t H0, std::uint64_t H1>
struct node_key {
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wnon-template-friend"
#endif
    // Declared here, defined by node_registrar<node_key, Traits> when the node is first made.
    friend consteval auto node_traits_of(node_key);
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic pop
#endif
};

template <class Key, class Traits>
struct node_registrar {
    friend consteval auto node_traits_of(Key) { return Traits{}; }
};

/// The compiler's spelling of a type, usable at compile time.
template <class T>
consteval std::string_view type_name() {
    return __PRETTY_FUNCTION__;
}

constexpr std::uint64_t fnv1a(std::string_view s, std::uint64_t h) {
    for (char c : s) {
        h ^= static_cast<unsigned char>(c);
        h *= 1099511628211ULL;
    }
    return h;
}
constexpr std::uint64_t mix(std::uint64_t h, std::uint64_t v) {  // order-sensitive combine
    h ^= v + 0x9e3779b97f4a7c15ULL + (h << 6) + (h >> 2);
    h ^= h >> 31;
    h *= 0xbf58476d1ce4e5b9ULL;
    return h ^ (h >> 29);
}

/// A type's spelling, hashed. clang prints a long array argument abbreviated ("{{100, 101, 99,
/// ...}}"), so a leaf's name spelled in its type is cut after 10 characters: a leaf's full name is
/// hashed as well.
template <class T>
consteval std::uint64_t spelling_hash(std::uint64_t seed) {
    std::uint64_t h = fnv1a(type_name<T>(), seed);
    if constexpr (requires { T::name.view(); }) h = fnv1a(T::name.view(), mix(h, 0x6e616d65));
    return h;
}

/// The identity of an operand or op type: leaves, ops and constants by their spelling (short:
/// their arguments are names, dimensions and numbers); nodes by their own hash.
template <class T>
struct identity_of {
    static constexpr std::uint64_t h0 = spelling_hash<T>(14695981039346656037ULL);
    static constexpr std::uint64_t h1 = spelling_hash<T>(0x84222325cbf29ce4ULL);
};

}  // namespace detail

/// The type of an op node: see "Node identity" above. Use node<Op, A...> to name one.
template <std::uint64_t H0, std::uint64_t H1>
struct node_id : decltype(node_traits_of(detail::node_key<H0, H1>{})) {};

namespace detail {
template <std::uint64_t H0, std::uint64_t H1>
struct identity_of<node_id<H0, H1>> {
    static constexpr std::uint64_t h0 = H0, h1 = H1;
};

template <class Op, class... A>
consteval auto make_node_type() {
    constexpr std::uint64_t h0 = [] {
        std::uint64_t h = identity_of<Op>::h0;
        ((h = mix(h, identity_of<A>::h0)), ...);
        return mix(h, sizeof...(A));
    }();
    constexpr std::uint64_t h1 = [] {
        std::uint64_t h = identity_of<Op>::h1;
        ((h = mix(h, identity_of<A>::h1)), ...);
        return mix(h, sizeof...(A) + 0x51);
    }();
    static_assert(sizeof(node_registrar<node_key<h0, h1>, node_traits<Op, A...>>) > 0);  // defines the friend
    return node_id<h0, h1>{};
}
}  // namespace detail

/// An op applied to operands. Two structurally identical nodes are the same type, hence one node.
template <class Op, class... A>
using node = decltype(detail::make_node_type<Op, A...>());

/// What an op returns after a failed static check: accepted by every op, so that one mistake gives
/// one error instead of a cascade.
struct poison : expr_base {
    static constexpr bool is_poison = true;  ///< what every op checks to pass it through
    using shape = ctg::shape<>;  ///< a scalar, never computed
    using args = tlist<>;  ///< no operands
    static constexpr leaf_kind kind = leaf_kind::none;  ///< not a leaf
};

/// True when some operand is already the result of a failed check (its error was reported).
template <class... A>
inline constexpr bool any_poison = (A::is_poison || ...);

namespace detail {
/// Whether an op reads bf16_input operands (declares `static constexpr bool reads_bf16_storage = true`).
template <class Op>
consteval bool reads_bf16_storage() {
    if constexpr (requires { Op::reads_bf16_storage; }) return Op::reads_bf16_storage;
    else return false;
}
}  // namespace detail

/// Builds node<Op, A...> after the op's shape check; poison in, poison out. A bf16_input operand
/// is refused unless the op declares it reads one (ops read their operands as T otherwise).
template <class Op, expr... A>
constexpr auto make_node(A...) {
    if constexpr ((A::is_poison || ...)) {
        return poison{};
    } else {
        constexpr bool storage_ok = !(A::is_bf16 || ...) || detail::reads_bf16_storage<Op>();
        static_assert(with_shapes<storage_ok, Op, typename A::shape::pretty...>::value,
                      "ctg: this op was given a bf16_input, which only the KV-cache ops read (cached_attention, "
                      "cache_store); compute on floats");
        constexpr bool ok = storage_ok && Op::template check<typename A::shape...>();
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
