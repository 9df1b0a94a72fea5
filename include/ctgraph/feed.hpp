// ctgraph/feed.hpp: feeding a program's input from an array read from a file.
//
//   auto arrays = ctg::npz::read("batch.npz");
//   ctg::feed(prog, "x", arrays.at("x"));            // float input: values converted to the program's type
//   ctg::feed(prog, "tokens", arrays.at("tokens"));  // index input: integer ids, checked to fit int32
//
// Works for ctg::npz::array and ctg::safetensors::tensor (anything with a `shape` and a to_vector<T>
// of its namespace): the array's shape becomes the input's (rank and static dimensions checked by
// the program, dynamic ones bound), its elements are converted to the program's scalar type (float
// input) or to int32 ids (index input; an element that is not an integer that fits int32 is an
// io_error naming the array). Nothing is fed when a check fails.
#pragma once
#include <cstdint>
#include <string>
#include <string_view>

#include "ctgraph/error.hpp"
#include "ctgraph/tensor.hpp"

namespace ctg {

/// Feeds input `name` of `prog` from an array read from a file (see the file comment): its shape
/// becomes the input's shape and its elements are converted to the input's type. Throws
/// ctg::io_error when the array cannot be converted (its dtype, a rank above max_rank, an id out
/// of int32 range) and the program's feed errors when the name or the shape does not fit.
template <class Program, class Array>
void feed(Program& prog, std::string_view name, const Array& a) {
    if (a.shape.size() > max_rank)
        throw io_error("ctg::feed: array '" + a.name + "' has " + std::to_string(a.shape.size()) +
                       " axes; an input has at most " + std::to_string(max_rank));
    rshape s;
    s.rank = a.shape.size();
    for (std::size_t k = 0; k < s.rank; ++k) s.d[k] = a.shape[k];
    if (prog.is_index_input(name)) {
        const auto ids = to_vector<index_t>(a);  // integers only, each representable as int32
        prog.feed(name, ids.data(), s);
    } else {
        const auto values = to_vector<typename Program::scalar>(a);
        prog.feed(name, values.data(), s);
    }
}

}  // namespace ctg
