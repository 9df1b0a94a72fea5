// ctgraph/ops/kv_cache.hpp: the two ops of decoding with a cache of projected keys and values.
//
//   cache_store(k (B, T, D), cache (B, C, D))     -> k, and positions 0 .. T-1 of every sequence's
//   cache_store<true>(k (B, T, D), cache (B, D, C))  cache are set to k (the prefill: the prompt in
//                                                    one pass); <true>: the cache is feature-major
//   cached_attention<Heads>(q, k, v (B, 1, D), cache_k (B, D, C), cache_v (B, C, D), pos (B))
//                                              -> (B, 1, D): writes k, v at position pos[b] of
//                                                 sequence b's caches, then attends from q over
//                                                 positions 0 .. pos[b] (heads side by side in D, as
//                                                 split_heads has them; scores scaled by
//                                                 1/sqrt(D/Heads)): O(pos D) work
//
// The key cache is feature-major (D, C) so that a query's scores against every cached position
// are one kernels::combine_rows along the positions, in registers, with no horizontal sums
// (measured with the value sum done the same way: 30,000 -> 33,000 tokens/s on decode-cache).
//
// The caches are state: inputs the caller binds to its own memory (program::bind), written in
// place by these ops. Both are for inference programs (options{.inference = true}); their backward
// throws. Every position is checked against the cache's length before anything is written.
//
// A cache may be a bf16_input (in a float program): the keys and values are stored rounded to
// bfloat16 (nearest, ties to even: what a bf16 product reads) and read back exactly, half the bytes
// a decoded token reads from the cache. Scores and weighted sums still accumulate in float
// (kernels::combine_rows over bf16 rows); the query, the softmax and the output stay float.
#pragma once
#include <algorithm>
#include <cmath>
#include <limits>
#include <string>
#include <string_view>

#include "ctgraph/graph/node.hpp"
#include "ctgraph/kernels/bf16.hpp"
#include "ctgraph/kernels/gemm.hpp"
#include "ctgraph/kernels/simd.hpp"
#include "ctgraph/op.hpp"
#include "ctgraph/ops/masks.hpp"

namespace ctg {
namespace detail {
/// A cache's elements: T, or bfloat16 bits when the cache is a bf16_input.
template <class T, bool Bf16>
using cache_elem = std::conditional_t<Bf16, kernels::bf16_bits, T>;
template <class T, bool Bf16>
constexpr void check_cache_scalar() {
    static_assert(!Bf16 || std::is_same_v<T, float>, "ctg: a bf16 KV cache (bf16_input) is for float programs");
}
/// One value into a cache entry (rounded to bf16 for a bf16 cache).
template <class C, class T>
inline C to_cache(T v) {
    if constexpr (std::is_same_v<C, kernels::bf16_bits>) return kernels::to_bf16(v);
    else return v;
}
/// n contiguous values into a cache (rounded to bf16 for a bf16 cache, as to_cache).
template <class T, class C>
inline void store_cache_row(std::size_t n, const T* from, C* to) {
    if constexpr (std::is_same_v<C, kernels::bf16_bits>) kernels::pack_bf16(false, 1, n, from, n, to);
    else std::copy(from, from + n, to);
}
}  // namespace detail

namespace ops {

[[noreturn]] inline void inference_only(std::string_view op) {
    throw error("ctg::" + std::string(op) +
                ": a KV cache is for decoding programs; compile them with options{.inference = true}");
}

template <bool FeatureMajor = false, bool Bf16 = false>
struct cache_store_op {
    static constexpr std::string_view name = "cache_store";
    static constexpr bool reads_bf16_storage = Bf16;  ///< the cache may be a bf16_input
    template <class K, class Cache>
    static consteval bool check() {
        return K::rank == 3 && Cache::rank == 3 && K::dims[0] == Cache::dims[0] &&
               K::dims[2] == Cache::dims[FeatureMajor ? 1 : 2];
    }
    template <class K, class Cache>
    static consteval auto dims() { return K::dims; }
    template <class T>
    static void forward(op_io<T, 2>& c) {
        const rshape &k = c.x[0].shape, &cache = c.x[1].shape;
        const std::size_t B = k.d[0], len = k.d[1], D = k.d[2], C = cache.d[FeatureMajor ? 2 : 1];
        if (len > C)
            throw index_error("ctg::cache_store: " + std::to_string(len) + " positions of '" + std::string(c.x_name[0]) +
                              "' do not fit the cache '" + std::string(c.x_name[1]) + "' of " + std::to_string(C));
        detail::check_cache_scalar<T, Bf16>();
        using E = detail::cache_elem<T, Bf16>;
        const T* src = c.x_data(0);
        E* dst = c.x[1].template as<E>();
        for (std::size_t b = 0; b < B; ++b) {
            if constexpr (FeatureMajor) {
                for (std::size_t t = 0; t < len; ++t)
                    for (std::size_t d = 0; d < D; ++d) dst[(b * D + d) * C + t] = detail::to_cache<E>(src[(b * len + t) * D + d]);
            } else {
                detail::store_cache_row(len * D, src + b * len * D, dst + b * C * D);
            }
        }
        std::copy(src, src + B * len * D, c.y_data());
    }
    template <class T>
    static void backward(op_io<T, 2>&) { inference_only(name); }
    // ONNX: the cache is state, an input and an output of the exported graph (onnx.hpp, as
    // "decoder with past" models have it): its new value is k at positions 0 .. T-1 followed by
    // the old positions T ..; the result is k.
    template <class B>
    static void onnx(B& b) {
        constexpr long long axis = FeatureMajor ? 2 : 1;
        const std::string k = FeatureMajor ? b.emit("Transpose", {b.x(0)}, {{"perm", std::vector<long long>{0, 2, 1}}}) : b.x(0);
        const std::string rest = b.emit("Slice", {b.x(1), b.extent(0, 1), b.ints({std::numeric_limits<long long>::max()}), b.ints({axis})});
        b.set_state(1, b.emit("Concat", {k, rest}, {{"axis", axis}}));
        b.emit_y("Identity", {b.x(0)});
    }
};

// cached_attention_op's forward, templated on the scalar and the cache's element only (the head
// count is a runtime number): compiled once in the library (CTG_KV_CACHE_INSTANCES below). Not
// inline, so that an `extern template` is not instantiated anyway to be inlined.
template <class T, bool Bf16>
void cached_attention_forward(op_io<T, 6>& c, std::size_t heads) {
    const std::size_t B = c.x[0].shape.d[0], D = c.x[0].shape.d[2], C = c.x[4].shape.d[1], dh = D / heads;
    const index_t* pos = c.x[5].template as<index_t>();
    for (std::size_t b = 0; b < B; ++b)  // all positions checked before any cache entry is written
        if (pos[b] < 0 || std::size_t(pos[b]) >= C)
            throw index_error("ctg::cached_attention: position " + std::to_string(pos[b]) + " of sequence " +
                              std::to_string(b) + " (input '" + std::string(c.x_name[5]) +
                              "') is outside the cache of " + std::to_string(C) + " positions");
    detail::check_cache_scalar<T, Bf16>();
    using E = detail::cache_elem<T, Bf16>;
    E *kc = c.x[3].template as<E>(), *vc = c.x[4].template as<E>();
    T* y = c.y_data();
    T* scores = c.scratch.template as<T>();  // C scores, then dh scaled query features
    T* qs = scores + C;
    const T scale = T(1.0 / std::sqrt(double(dh)));
    for (std::size_t b = 0; b < B; ++b) {
        const std::size_t p = std::size_t(pos[b]), n = p + 1;
        E *kb = kc + b * D * C, *vb = vc + b * C * D;  // keys (D, C), values (C, D)
        const T *k = c.x_data(1) + b * D, *q = c.x_data(0) + b * D, *v = c.x_data(2) + b * D;
        for (std::size_t d = 0; d < D; ++d) kb[d * C + p] = detail::to_cache<E>(k[d]);
        detail::store_cache_row(D, v, vb + p * D);
        for (std::size_t h = 0; h < heads; ++h) {
            const std::size_t off = h * dh;
            // scores[j] = scale * sum_d q[d] k[d, j]: rows of the feature-major keys, combined.
            for (std::size_t d = 0; d < dh; ++d) qs[d] = scale * q[off + d];
            kernels::combine_rows(dh, n, static_cast<const T*>(qs), static_cast<const E*>(kb + off * C), C, scores);
            const T mx = kernels::max(n, static_cast<const T*>(scores));
            kernels::map(n, scores, [mx](auto v) {
                using std::exp;
                return exp(v - decltype(v)(mx));
            }, static_cast<const T*>(scores));
            const T inv = T(1) / kernels::sum(n, static_cast<const T*>(scores));
            // The weights' normalisation applied to the dh outputs instead of the n weights.
            T* out = y + b * D + off;
            kernels::combine_rows(n, dh, static_cast<const T*>(scores), static_cast<const E*>(vb + off), D, out);
            kernels::map(dh, out, [inv](auto v) { return v * decltype(v)(inv); }, static_cast<const T*>(out));
        }
    }
}

template <int Heads, bool Bf16 = false>
struct cached_attention_op {
    static constexpr std::string_view name = "cached_attention";
    static constexpr bool reads_bf16_storage = Bf16;  ///< the caches may be bf16_inputs
    static std::string describe() { return std::to_string(Heads) + " heads" + (Bf16 ? ", bf16 cache" : ""); }
    template <class Q, class K, class V, class Kc, class Vc, class Pos>
    static consteval bool check() {
        return Q::rank == 3 && std::is_same_v<Q, K> && std::is_same_v<Q, V> && Q::dims[1] == dim(1) &&
               Q::dims[2].is_static() && Q::dims[2].n % Heads == 0 && Kc::rank == 3 && Vc::rank == 3 &&
               Kc::dims[0] == Q::dims[0] && Kc::dims[1] == Q::dims[2] && Vc::dims[0] == Q::dims[0] &&
               Vc::dims[2] == Q::dims[2] && Kc::dims[2] == Vc::dims[1] && Pos::rank == 1 && Pos::dims[0] == Q::dims[0];
    }
    template <class Q, class... R>
    static consteval auto dims() { return Q::dims; }
    static std::size_t scratch_size(const rshape&, const std::array<rshape, 6>& x) {
        return x[4].d[1] + x[0].d[2] / Heads;
    }

    template <class T>
    static void forward(op_io<T, 6>& c) { cached_attention_forward<T, Bf16>(c, std::size_t(Heads)); }
    template <class T>
    static void backward(op_io<T, 6>&) { inference_only(name); }
    // ONNX: the caches are state (see cache_store_op): position pos[b] of each set to k, v (Where
    // on a one-hot of the positions), then attention of q over positions 0 .. pos[b] of the new
    // caches, heads split by Reshape.
    template <class B>
    static void onnx(B& b) {
        const long long D = b.xshape(0)[-1].n, dh = D / Heads;
        const std::string positions = b.emit("Range", {b.int_scalar(0), b.emit("Squeeze", {b.extent(4, 1)}), b.int_scalar(1)});  // (C)
        const std::string at = b.emit("Equal", {positions, b.emit("Unsqueeze", {b.x(5), b.ints({1})})});  // (B, C)
        const std::string kc = b.emit("Where", {b.emit("Unsqueeze", {at, b.ints({1})}),
                                                b.emit("Transpose", {b.x(1)}, {{"perm", std::vector<long long>{0, 2, 1}}}), b.x(3)});
        const std::string vc = b.emit("Where", {b.emit("Unsqueeze", {at, b.ints({2})}), b.x(2), b.x(4)});
        b.set_state(3, kc);
        b.set_state(4, vc);
        const std::vector<long long> p0213{0, 2, 1, 3};
        const std::string q = b.emit("Transpose", {b.emit("Reshape", {b.x(0), b.ints({0, 1, Heads, dh})})}, {{"perm", p0213}});
        const std::string k = b.emit("Reshape", {kc, b.ints({0, Heads, dh, -1})});  // (B, H, dh, C)
        const std::string s = b.emit("Mul", {b.emit("MatMul", {q, k}), b.scalar(1.0 / std::sqrt(double(dh)))});  // (B, H, 1, C)
        const std::string visible = b.emit("LessOrEqual", {positions, b.emit("Reshape", {b.x(5), b.ints({-1, 1, 1, 1})})});
        const std::string w = onnx_visible_softmax(b, s, visible);  // (masks.hpp)
        const std::string v = b.emit("Transpose", {b.emit("Reshape", {vc, b.ints({0, 0, Heads, dh})})}, {{"perm", p0213}});
        const std::string o = b.emit("Transpose", {b.emit("MatMul", {w, v})}, {{"perm", p0213}});
        b.emit_y("Reshape", {o, b.ints({0, 1, D})});
    }
};

/// The kernels compiled once (include/ctgraph/compiled.cpp): one decoding step in float and double
/// against float caches, and in float against bf16 ones; declared `extern template` where
/// CTG_SEPARATE_COMPILATION is defined.
#define CTG_KV_CACHE_INSTANCES_FLOAT(how)                                           \
    how void cached_attention_forward<float, false>(op_io<float, 6>&, std::size_t); \
    how void cached_attention_forward<float, true>(op_io<float, 6>&, std::size_t);
#define CTG_KV_CACHE_INSTANCES_DOUBLE(how) \
    how void cached_attention_forward<double, false>(op_io<double, 6>&, std::size_t);
#if defined(CTG_SEPARATE_COMPILATION)
CTG_KV_CACHE_INSTANCES_FLOAT(extern template)
CTG_KV_CACHE_INSTANCES_DOUBLE(extern template)
#endif
}  // namespace ops

/// Stores k (B, T, D) at positions 0 .. T-1 of `cache`, (B, C, D), or (B, D, C) when FeatureMajor,
/// and returns k (see the file comment). The cache may be a bf16_input (k is stored rounded).
template <bool FeatureMajor = false, expr K, expr Cache>
constexpr auto cache_store(K k, Cache cache) {
    using Op = ops::cache_store_op<FeatureMajor, Cache::is_bf16>;
    static_assert(with_shapes<any_poison<K, Cache> || Op::template check<typename K::shape, typename Cache::shape>(),
                              typename K::shape::pretty, typename Cache::shape::pretty>::value,
                  "ctg::cache_store: keys (B, T, D) go into a cache (B, C, D), or (B, D, C) feature-major, of the "
                  "same B and D");
    return make_float_node<Op>(k, cache);
}

/// One decoding step of attention against a KV cache (see the file comment). The caches are both
/// float inputs or both bf16_inputs.
template <int Heads, expr Q, expr K, expr V, expr Kc, expr Vc, expr Pos>
constexpr auto cached_attention(Q q, K k, V v, Kc kc, Vc vc, Pos pos) {
    using Op = ops::cached_attention_op<Heads, Kc::is_bf16>;
    static_assert(with_shapes<any_poison<Q, K, V, Kc, Vc, Pos> ||
                                  (Pos::is_index && Kc::is_bf16 == Vc::is_bf16 && !Q::is_bf16 && !K::is_bf16 && !V::is_bf16 &&
                                   Op::template check<typename Q::shape, typename K::shape, typename V::shape,
                                                                       typename Kc::shape, typename Vc::shape, typename Pos::shape>()),
                              typename Q::shape::pretty, typename Kc::shape::pretty, typename Pos::shape::pretty>::value,
                  "ctg::cached_attention: q, k, v must be float (B, 1, D) with D a multiple of the heads, the key cache "
                  "(B, D, C), the value cache (B, C, D), both float or both bf16, the positions an index_input (B)");
    return make_node<Op>(q, k, v, kc, vc, pos);
}
}  // namespace ctg
