// ctgraph/tensor.hpp: runtime shapes and the untyped buffer views the engine hands to ops.
#pragma once
#include <array>
#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "ctgraph/dim.hpp"

namespace ctg {

/// Largest rank a ctgraph tensor may have.
inline constexpr std::size_t max_rank = 4;

/// A concrete (runtime) shape: the dynamic dimensions have been replaced by their values.
struct rshape {
    std::size_t rank = 0;  ///< the number of axes (at most max_rank)
    std::array<std::size_t, max_rank> d{};  ///< the extents, the first `rank` of them used

    /// The number of elements.
    constexpr std::size_t size() const {
        std::size_t s = 1;
        for (std::size_t i = 0; i < rank; ++i) s *= d[i];
        return s;
    }
    /// Extent of axis `a`; negative counts from the end (-1 is the last axis).
    constexpr std::size_t operator[](long a) const { return d[a < 0 ? rank + a : a]; }
    /// The last axis ("features"); 1 for a scalar.
    constexpr std::size_t cols() const { return rank ? d[rank - 1] : 1; }
    /// Everything before the last axis, flattened ("rows").
    constexpr std::size_t rows() const { return rank ? size() / d[rank - 1] : 1; }
    /// The extents as a vector (an xtensor shape).
    std::vector<std::size_t> to_vector() const { return {d.begin(), d.begin() + rank}; }
    friend constexpr bool operator==(const rshape& a, const rshape& b) {
        if (a.rank != b.rank) return false;
        for (std::size_t i = 0; i < a.rank; ++i)
            if (a.d[i] != b.d[i]) return false;
        return true;
    }
};

/// "(2,3)": a shape as messages print it.
inline std::string to_string(const rshape& s) {
    std::string r = "(";
    for (std::size_t i = 0; i < s.rank; ++i) {
        if (i) r += ',';
        r += std::to_string(s.d[i]);
    }
    return r + ")";
}

/// A view of one tensor in the arena: an untyped pointer and its runtime shape. The op that
/// receives it knows the element type (the program's scalar type, or int32 for index inputs).
struct view {
    void* ptr = nullptr;  ///< the first element
    rshape shape{};  ///< the runtime shape
    /// The data as U*.
    template <class U>
    U* as() const { return static_cast<U*>(ptr); }
    std::size_t size() const { return shape.size(); }  ///< the number of elements
    explicit operator bool() const { return ptr != nullptr; }  ///< whether the view points anywhere
};

/// Element type of index tensors (token ids, class targets).
using index_t = std::int32_t;

}  // namespace ctg
