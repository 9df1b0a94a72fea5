// ctgraph/memory.hpp: 64-byte aligned storage (one AVX-512 register, one cache line).
#pragma once
#include <array>
#include <algorithm>
#include <atomic>
#include <cstddef>
#include <cstdlib>
#include <new>
#include <utility>
#include <vector>

namespace ctg {

/// How many buffers ctgraph has allocated (arena, inputs, parameters, optimizer state) since the
/// program started: lets a test or a user check that a steady-state step allocates nothing.
inline std::atomic<long>& allocation_count() {
    static std::atomic<long> n{0};
    return n;
}

/// Arrays from this size up are placed on 2 MiB boundaries and advised to use huge pages.
inline constexpr std::size_t huge_page_min_bytes = std::size_t(4) << 20;

namespace detail {
/// `bytes` (a multiple of align) aligned to `align`, counted by allocation_count(); throws
/// std::bad_alloc. Arrays of huge_page_min_bytes and more go on transparent huge pages (see
/// memory_impl.hpp, which defines it: in the library where programs link it, so that no unit
/// parses the system's memory-mapping header for it).
template <class = void>
void* allocate_aligned(std::size_t bytes, std::size_t align);
#if defined(CTG_SEPARATE_COMPILATION)
extern template void* allocate_aligned<void>(std::size_t, std::size_t);
#endif
}  // namespace detail

template <class T, std::size_t Align = 64>
struct aligned_allocator {
    using value_type = T;
    template <class U>
    struct rebind {
        using other = aligned_allocator<U, Align>;
    };
    aligned_allocator() = default;
    template <class U>
    aligned_allocator(const aligned_allocator<U, Align>&) {}
    T* allocate(std::size_t n) {
        return static_cast<T*>(detail::allocate_aligned<>((n * sizeof(T) + Align - 1) / Align * Align, Align));
    }
    void deallocate(T* p, std::size_t) { std::free(p); }
    template <class U>
    bool operator==(const aligned_allocator<U, Align>&) const { return true; }
};

template <class T>
using aligned_vector = std::vector<T, aligned_allocator<T>>;

/// Rounds an element count up so the next buffer starts on a 64-byte boundary.
template <class T>
constexpr std::size_t round_up_elems(std::size_t n) {
    constexpr std::size_t per = 64 / sizeof(T);
    return (n + per - 1) / per * per;
}

/// Rounds an element count up so the next buffer starts on a 64-byte boundary whatever the element
/// type (16 floats, 128 bytes of doubles): for layouts planned before T is known (scan's and repeat's
/// frames). Rounding to 8 elements put half of a float frame's rows off the cache line, and a
/// kernel's loads then split across two lines (a few-row A B^T ran at half its rate).
constexpr std::size_t round_up_lines(std::size_t n) { return round_up_elems<float>(n); }

namespace detail {

/// A buffer needed from step `first` to step `last` (both included) of a pass, `size` elements.
struct lifetime {
    std::size_t first, last, size;
};

/// Places buffers so that two whose lifetimes intersect never share memory: first fit, in the order
/// given (callers list them in the order they become live). Writes offset[k] (elements) and returns
/// the extent. `taken` is caller scratch of n entries: a scan's cell places its buffers at every
/// call, so this must not allocate.
inline std::size_t place_by_lifetime(std::size_t n, const lifetime* blocks, std::size_t* offset,
                                     std::pair<std::size_t, std::size_t>* taken) {
    std::size_t extent = 0;
    for (std::size_t a = 0; a < n; ++a) {
        std::size_t m = 0;  // [offset, end) of the placed buffers live at the same time as this one
        for (std::size_t b = 0; b < a; ++b)
            if (blocks[b].size && blocks[b].first <= blocks[a].last && blocks[a].first <= blocks[b].last)
                taken[m++] = {offset[b], offset[b] + blocks[b].size};
        std::sort(taken, taken + m);
        std::size_t off = 0;
        for (std::size_t t = 0; t < m && taken[t].first < off + blocks[a].size; ++t) off = std::max(off, taken[t].second);
        offset[a] = off;
        extent = std::max(extent, off + blocks[a].size);
    }
    return extent;
}

/// The memory of a forward-only pass over N nodes (an inference program, a scan/repeat step that
/// keeps no frame for backward), first fit by lifetime: node i's value, when `placed(i)`, is live
/// from its forward to until[i] and takes value_elems(i) elements; its op scratch (scratch_elems(i),
/// possibly 0) is live during its forward only. Writes val_off and scr_off (elements from 0) and
/// returns the extent. Sizes come already rounded (each caller's element type decides how).
template <std::size_t N, class Placed, class ValueElems, class ScratchElems>
inline std::size_t place_forward_frame(const std::array<std::size_t, N>& until, Placed&& placed, ValueElems&& value_elems,
                                       ScratchElems&& scratch_elems, std::array<std::size_t, N>& val_off,
                                       std::array<std::size_t, N>& scr_off) {
    std::array<lifetime, 2 * N> blocks{};
    std::array<std::size_t, 2 * N> owner{}, offset{};  // owner: i for node i's value, N + i for its scratch
    std::array<std::pair<std::size_t, std::size_t>, 2 * N> taken{};
    std::size_t n = 0;
    for (std::size_t i = 0; i < N; ++i) {
        if (placed(i)) {
            blocks[n] = {i, until[i], value_elems(i)};
            owner[n++] = i;
        }
        scr_off[i] = 0;
        if (const std::size_t s = scratch_elems(i)) {
            blocks[n] = {i, i, s};
            owner[n++] = N + i;
        }
    }
    const std::size_t extent = place_by_lifetime(n, blocks.data(), offset.data(), taken.data());
    for (std::size_t a = 0; a < n; ++a) (owner[a] < N ? val_off[owner[a]] : scr_off[owner[a] - N]) = offset[a];
    return extent;
}

}  // namespace detail

}  // namespace ctg

#if !defined(CTG_SEPARATE_COMPILATION)
#include "ctgraph/memory_impl.hpp"
#endif
