// ctgraph/error.hpp: how ctgraph reports misuse.
//
// Static misuse (a shape that cannot work, a wrong rank, a name declared twice with different
// shapes) stops compilation at the public entry point with one static_assert sentence that names
// the op; the shapes involved are spelled in the asserted expression, which both g++ and clang
// print on the same diagnostic:
//     static assertion failed: ctg::matmul: the inner dimensions of the operands differ
//     note: 'ctg::with_shapes<false, ctg::shape_is<'B', 784>, ctg::shape_is<128, 10> >::value' evaluates to false
// Runtime misuse (sizes that disagree, token ids out of range, bad files, non-finite losses)
// throws one of the exceptions below; the message says what and where.
#pragma once
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

}  // namespace ctg

namespace ctg {
/// Carries a leaf name into the compiler's diagnostic of a failed lookup.
template <bool Ok, auto Name>
struct with_name {
    static constexpr bool value = Ok;  ///< the lookup's result
};
}  // namespace ctg
