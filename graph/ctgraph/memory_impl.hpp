// ctgraph/memory_impl.hpp: the definition of detail::allocate_aligned (memory.hpp). Included by
// memory.hpp in header-only builds and by the library's compiled part (include/ctgraph/compiled.cpp)
// where programs link it: <sys/mman.h> alone costs a unit about 9 MB of compiler memory.
#pragma once
#include <cstddef>
#include <cstdlib>
#include <new>

#if defined(__linux__)
#include <sys/mman.h>
#endif

#include "ctgraph/memory.hpp"

namespace ctg::detail {

template <class>
void* allocate_aligned(std::size_t bytes, std::size_t align) {
    void* p = nullptr;
#if defined(__linux__)
    // A large array (weights, their copies, an arena) on transparent huge pages where the kernel
    // grants them on request (THP "madvise", Debian's default): a stream through it then misses the
    // TLB once per 2 MiB instead of once per 4 KiB, which a decoding step, reading every weight
    // once, pays in bandwidth (docs/benchmarks.md).
    if (bytes >= huge_page_min_bytes) {
        const std::size_t huge = std::size_t(2) << 20, rounded = (bytes + huge - 1) / huge * huge;
        p = std::aligned_alloc(huge, rounded);
        if (p) ::madvise(p, rounded, MADV_HUGEPAGE);  // (advice: refused or ignored is harmless)
    }
#endif
    if (!p) p = std::aligned_alloc(align, bytes ? bytes : align);
    if (!p) throw std::bad_alloc();
    allocation_count().fetch_add(1, std::memory_order_relaxed);
    return p;
}

}  // namespace ctg::detail
