// ctgraph/error.hpp: how ctgraph reports misuse.
//
// Static misuse (a shape that cannot work, a wrong rank, a name declared twice with different
// shapes) stops compilation at the public entry point with one static_assert sentence that names
// the op; the shapes involved are spelled in the asserted expression, which both g++ and clang
// print on the same diagnostic:
//     static assertion failed: ctg::matmul: the inner dimensions of the operands differ
//     note: 'ctg::with_shapes<false, ctg::shape_is<'B', 784>, ctg::shape_is<128, 10> >::value' evaluates to false
// Runtime misuse (sizes that disagree, token ids out of range, bad files, non-finite losses)
// throws one of the exceptions below; the message says what and where. A message that shows a
// refused number writes it with detail::shortest_text, so that two numbers that differ differ on the
// page.
#pragma once
#include <charconv>
#include <stdexcept>
#include <string>

namespace ctg {

/// Carries the operand shapes of a failed static check into the compiler's diagnostic.
template <bool Ok, class... PrettyShapes>
struct with_shapes {
    static constexpr bool value = Ok;  ///< the check's result
};

/// Base class of every runtime error ctgraph throws.
struct error : std::runtime_error {
    using std::runtime_error::runtime_error;
};
/// A runtime size that disagrees with the graph or with another input.
struct shape_error : error {
    using error::error;
};
/// A token id or class index outside its range.
struct index_error : error {
    using error::error;
};
/// A non-finite loss or value where a finite one is required.
struct numeric_error : error {
    using error::error;
};
/// A missing, truncated or malformed file.
struct io_error : error {
    using error::error;
};

namespace detail {
/// The shortest text that reads back (std::strtod, std::from_chars) as exactly `v`: "0.1",
/// "1e-07", "-3.5e+38"; "inf", "-nan" and the like for a non-finite value. Two different values
/// never print the same, where "%.9g" or std::to_string can.
inline std::string shortest_text(double v) {
    char buf[32];  // the longest: "-2.2250738585072014e-308", 24 characters
    return std::string(buf, std::to_chars(buf, buf + sizeof buf, v).ptr);
}
/// The shortest text that reads back (std::strtof) as exactly the float `v`: a float's digits, not
/// those of the double it converts to (0.1f: "0.1", not "0.10000000149011612"), so that floats one
/// ulp apart print differently and no longer than they need. For a value stored as a float (or F16,
/// BF16), formatted as the float it is.
inline std::string shortest_text(float v) {
    char buf[32];
    return std::string(buf, std::to_chars(buf, buf + sizeof buf, v).ptr);
}
}  // namespace detail

}  // namespace ctg

namespace ctg {
/// Carries a leaf name into the compiler's diagnostic of a failed lookup.
template <bool Ok, auto Name>
struct with_name {
    static constexpr bool value = Ok;  ///< the lookup's result
};
}  // namespace ctg
