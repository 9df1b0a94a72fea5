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

#if defined(__linux__)
#include <sys/mman.h>
#endif

namespace ctg {

/// How many buffers ctgraph has allocated (arena, inputs, parameters, optimizer state) since the
/// program started: lets a test or a user check that a steady-state step allocates nothing.
inline std::atomic<long>& allocation_count() {
    static std::atomic<long> n{0};
    return n;
}

/// Arrays from this size up are placed on 2 MiB boundaries and advised to use huge pages.
inline constexpr std::size_t huge_page_min_bytes = std::size_t(4) << 20;

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
        std::size_t bytes = (n * sizeof(T) + Align - 1) / Align * Align;
        void* p = nullptr;
#if defined(__linux__)
        // A large array (weights, their copies, an arena) on transparent huge pages where the
        // kernel grants them on request (THP "madvise", Debian's default): a stream through it
        // then misses the TLB once per 2 MiB instead of once per 4 KiB, which a decoding step,
        // reading every weight once, pays in bandwidth (measured: docs/benchmarks.md).
        if (bytes >= huge_page_min_bytes) {
            const std::size_t huge = std::size_t(2) << 20, rounded = (bytes + huge - 1) / huge * huge;
            p = std::aligned_alloc(huge, rounded);
            if (p) ::madvise(p, rounded, MADV_HUGEPAGE);  // (advice: refused or ignored is harmless)
        }
#endif
        if (!p) p = std::aligned_alloc(Align, bytes ? bytes : Align);
        if (!p) throw std::bad_alloc();
        allocation_count().fetch_add(1, std::memory_order_relaxed);
        return static_cast<T*>(p);
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
