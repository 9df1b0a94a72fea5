// Heap allocations of the test executable that includes this (once: it replaces the global
// operator new): every operator new, plus every buffer ctgraph allocates (arena, inputs,
// parameters, optimizer state all go through ctg::aligned_allocator, which counts). Interposing
// malloc itself proved unreliable: calls from inlined allocator code bound to glibc through the PLT.
#pragma once
#include <atomic>
#include <cstdlib>
#include <new>

#include <ctgraph/ctgraph.hpp>

// Allocations inside oneDNN's calls (a bf16 product's dnnl_primitive_execute allocates its argument
// map: kernels/onednn.hpp) are counted apart: what is checked here is ctgraph's own.
namespace {
std::atomic<long> news{0}, onednn_news{0};
long allocations() { return news.load() + ctg::allocation_count().load(); }
}  // namespace
// Under AddressSanitizer: memory the sanitizer's runtime allocated with its own operator new before
// this replacement took over comes back through the free() below; that is not a bug of ours.
extern "C" const char* __asan_default_options() { return "alloc_dealloc_mismatch=0"; }

// g++ sees the pair inline and warns that free() gets operator new's pointer: by design here.
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic ignored "-Wmismatched-new-delete"
#endif
void* operator new(std::size_t n) {
    ++(ctg::kernels::inside_onednn() ? onednn_news : news);
    if (void* p = std::malloc(n ? n : 1)) return p;
    throw std::bad_alloc();
}
void operator delete(void* p) noexcept { std::free(p); }
void operator delete(void* p, std::size_t) noexcept { std::free(p); }

namespace {
/// Allocations over five calls of `step` after two warm-up calls (the first plans the arena and
/// sizes optimizer state).
template <class Step>
long allocations_during(Step step) {
    step();
    step();
    const long before = allocations();
    for (int i = 0; i < 5; ++i) step();
    return allocations() - before;
}
}  // namespace
