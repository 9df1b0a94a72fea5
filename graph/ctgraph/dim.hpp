// ctgraph/dim.hpp: static and dynamic dimensions, static shapes, compile-time names.
//
// One vocabulary for both kinds of dimension (as CuTe does with Int<N> and int):
//   * a static dimension is an integer known to the compiler: `784`;
//   * a dynamic dimension is a one-letter symbol bound at run time: `inline constexpr dim B = dyn('B');`
// Feature sizes are static; batch and sequence lengths are dynamic. Two dynamic dimensions with the
// same letter are the same size; the program checks that once, at the entry of a step.
#pragma once
#include <array>
#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>
#include <bit>

namespace ctg {

/// A dimension: static (sym == 0, n = extent) or dynamic (sym = its letter, n unused).
struct dim {
    long long n = 0;  ///< the extent of a static dimension
    char sym = 0;  ///< the letter of a dynamic dimension, 0 for a static one
    constexpr dim() = default;
    constexpr dim(long long v) : n(v), sym(0) {}  ///< implicit: `784` is a static dimension
    constexpr dim(long long v, char s) : n(v), sym(s) {}  ///< extent and letter (dyn() makes dynamic ones)
    constexpr bool is_static() const { return sym == 0; }  ///< true for a static dimension
    friend constexpr bool operator==(dim, dim) = default;
};

/// A dynamic dimension named by one letter: `inline constexpr dim B = dyn('B');`
consteval dim dyn(char letter) { return dim{0, letter}; }

/// Compile-time string usable as a template argument (`param<"W", 3, 4>`).
template <std::size_t N>
struct fixed_string {
    char data[N]{};  ///< the characters and the terminating zero
    /// From a string literal: `param<"W", 3, 4>` converts "W".
    constexpr fixed_string(const char (&s)[N]) {
        for (std::size_t i = 0; i < N; ++i) data[i] = s[i];
    }
    constexpr std::string_view view() const { return {data, N - 1}; }  ///< the string without its terminating zero
    constexpr std::size_t size() const { return N - 1; }  ///< the number of characters
    /// Equal when the characters are equal (any lengths).
    template <std::size_t M>
    constexpr bool operator==(const fixed_string<M>& o) const { return view() == o.view(); }
};

/// "ab" from "a" and "b" at compile time (parameter name prefixes: P + fixed_string("_W")).
template <std::size_t N, std::size_t M>
consteval fixed_string<N + M - 1> operator+(const fixed_string<N>& a, const fixed_string<M>& b) {
    char buf[N + M - 1]{};
    for (std::size_t i = 0; i + 1 < N; ++i) buf[i] = a.data[i];
    for (std::size_t i = 0; i < M; ++i) buf[N - 1 + i] = b.data[i];
    return fixed_string<N + M - 1>(buf);
}

/// A floating constant as a template argument. It stores the bits, because clang 14 has no
/// floating-point non-type template parameters.
struct cval {
    unsigned long long bits = 0;  ///< the double's bits
    constexpr cval(double d) : bits(std::bit_cast<unsigned long long>(d)) {}  ///< from a double: `constant<0.5>`
    constexpr cval(int i) : cval(static_cast<double>(i)) {}  ///< from an int: `constant<1>`
    constexpr double value() const { return std::bit_cast<double>(bits); }  ///< the constant as a double
    friend constexpr bool operator==(cval, cval) = default;
};

namespace detail {
// How a dimension prints inside a compiler diagnostic: 784 or 'B'.
// (int, not long long: clang would print 784LL)
template <dim d>
constexpr auto pretty_dim() {
    if constexpr (d.sym != 0) return d.sym; else return int(d.n);
}
}  // namespace detail

/// What a shape looks like in a compile error: shape_is<'B', 784>.
template <auto... D>
struct shape_is {};

/// A static shape: the rank and each dimension (static or dynamic) known to the compiler.
template <dim... D>
struct shape {
    static constexpr std::size_t rank = sizeof...(D);  ///< the number of axes
    static constexpr std::array<dim, sizeof...(D)> dims{D...};  ///< the dimensions, static or dynamic
    /// true when every dimension is static.
    static constexpr bool all_static = (D.is_static() && ...);
    /// the product of the static dimensions (dynamic ones count as 1).
    static constexpr long long static_size = (1LL * ... * (D.is_static() ? D.n : 1));
    using pretty = shape_is<detail::pretty_dim<D>()...>;  ///< the shape as compile errors print it
};

namespace detail {
template <class S, std::size_t... I>
constexpr auto shape_from_array_impl(std::index_sequence<I...>) -> shape<S::value[I]...>;
}
/// Turns a constexpr std::array<dim, R> (held as `S::value`) into shape<...>.
template <class S>
using shape_from = decltype(detail::shape_from_array_impl<S>(std::make_index_sequence<S::value.size()>{}));

/// Prints a static shape: (B,784). Static dimensions print as numbers, dynamic ones as letters.
template <std::size_t R>
inline std::string to_string(const std::array<dim, R>& d) {
    std::string s = "(";
    for (std::size_t i = 0; i < R; ++i) {
        if (i) s += ',';
        if (d[i].sym) s += d[i].sym; else s += std::to_string(d[i].n);
    }
    return s + ")";
}

}  // namespace ctg
