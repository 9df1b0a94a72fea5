// ctgraph/memory.hpp: 64-byte aligned storage (one AVX-512 register, one cache line).
#pragma once
#include <atomic>
#include <cstddef>
#include <cstdlib>
#include <new>
#include <vector>

namespace ctg {

/// How many buffers ctgraph has allocated (arena, inputs, parameters, optimizer state) since the
/// program started: lets a test or a user check that a steady-state step allocates nothing.
inline std::atomic<long>& allocation_count() {
    static std::atomic<long> n{0};
    return n;
}

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
        void* p = std::aligned_alloc(Align, bytes ? bytes : Align);
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

}  // namespace ctg
