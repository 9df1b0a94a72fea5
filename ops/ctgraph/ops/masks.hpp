// ctgraph/ops/masks.hpp: attention masks as types, the M of O = softmax(S + M) V.
//
// A mask says which keys j each query i may see (the seed's visibility set Omega_i); everything
// else gets weight 0, as if M_ij = -inf, without an n x m tensor of -inf being built or added.
// Masks are values of empty types and combine with &&:
//
//   no_mask{}                     every key
//   causal{}                      j <= p(i)
//   local_window<W>{}             |j - p(i)| <= W
//   local_window<W, window::past>{}   p(i) - W <= j <= p(i)   (the one-sided, causal form)
//   visible_if<Pred>{}            Pred::visible(p(i), j), a compile-time predicate (a named type)
//   key_padding(lengths)          j < lengths[b]: lengths an index_input (B), each in [1, m]
//   key_padding_mask(pad)         pad[b][j] == 0: pad an index_input (B, m) of 0/1, 1 = padding
//                                 anywhere in the row (PyTorch's key_padding_mask, True = ignore)
//   mask_matrix(M)                M[i][j] != 0 (or M[b][i][j]): an index_input (n, m) or (B, n, m)
//   causal{} && key_padding(len)  both
//
// Positions are aligned at the end: query i of n sits at key position p(i) = i + m - n, so with
// n = m it is i, and one new query against a cache of m keys sits at m - 1 (incremental decoding).
// A query that sees no key gets an all-zero row of weights (and no gradient), never NaN.
//
// What a mask type provides (the contract masked_softmax relies on):
//   using operands = tlist<...>;                       its runtime tensors (index inputs), if any
//   template <class S, class... Ops> static consteval bool check();   static shape rule
//   static void validate(const mask_args&);            runtime checks (throws naming the input)
//   static col_range cols(const mask_args&, b, i);     visible keys lie in [lo, hi)
//   static constexpr bool dense;                       true: inside the range, ask visible()
//   static bool visible(const mask_args&, b, i, j);    (dense masks only)
//   static std::string describe();
// b is the score matrix's index along the first axis (the batch), i the query, j the key.
// A mask without operands gives every b the same ranges: attention's products compute the parts
// of one score matrix and use them for all (masked_rows::same_blocks; Debug builds check it).
#pragma once
#include <algorithm>
#include <cstddef>
#include <string>
#include <string_view>
#include <type_traits>
#include <vector>

#include "ctgraph/error.hpp"
#include "ctgraph/graph/node.hpp"
#include "ctgraph/tensor.hpp"

namespace ctg {

/// What a mask sees of one masked_softmax call: its operands and the score tensor's sizes.
struct mask_args {
    const view* x = nullptr;  ///< the mask's operands, in `operands` order
    const std::string_view* names = nullptr;  ///< their input names, for messages
    /// @{ queries (n) and keys (m) of one score matrix
    std::size_t n = 0, m = 0;
    /// @}
    std::size_t batches = 1;  ///< extent of the score tensor's first axis (1 for rank 2)
    long long offset() const { return (long long)m - (long long)n; }  ///< p(i) = i + offset
};

/// Visible keys of one query lie in [lo, hi); hi <= lo means none.
struct col_range {
    /// @{ the first visible key (lo) and one past the last (hi)
    long long lo = 0, hi = 0;
    /// @}
};

/// What a mask's ONNX lowering sees (B: ctg::onnx::op_lowering): the score tensor (..., n, m),
/// whose axes give n and m at run time, and the mask's operands (int64 inputs). A mask's
/// `onnx_visible(mask_onnx<B>&)` returns the name of a boolean tensor that broadcasts against
/// the scores (true: visible), or "" for every key; masked_softmax then writes
/// Where(visible, Softmax(Where(visible, S, lowest)), 0): zeros where hidden, and a row with
/// nothing visible all zeros, as here.
template <class B>
struct mask_onnx {
    B& b;                         ///< the lowering of the node the mask belongs to
    std::string scores;           ///< the score tensor's value name
    std::size_t rank = 0;         ///< its rank (>= 2)
    std::size_t first = 0;        ///< the index of the mask's first operand among the node's
    std::string queries_;         ///< made once: the query positions (n, 1), int64
    std::string keys_;            ///< made once: the keys (m), int64

    /// Operand k of the mask (an int64 tensor).
    const std::string& x(std::size_t k) const { return b.x(first + k); }
    /// The rank of operand k of the mask.
    std::size_t xrank(std::size_t k) const { return b.xshape(first + k).rank; }
    /// The extent of the scores' axis a (from the end: -1 keys, -2 queries) as a 0-d int64.
    std::string extent(long a) {
        const long ax = long(rank) + a;
        return b.emit("Squeeze", {b.emit("Shape", {scores}, {{"start", ax}, {"end", ax + 1}})});
    }
    /// The position of each query, p(i) = i + m - n, as (n, 1).
    const std::string& queries() {
        if (queries_.empty()) {
            const std::string n = extent(-2), m = extent(-1);
            const std::string p = b.emit("Range", {b.emit("Sub", {m, n}), m, b.int_scalar(1)});
            queries_ = b.emit("Unsqueeze", {p, b.ints({1})});
        }
        return queries_;
    }
    /// The keys 0 .. m - 1, as (m).
    const std::string& keys() {
        if (keys_.empty()) keys_ = b.emit("Range", {b.int_scalar(0), extent(-1), b.int_scalar(1)});
        return keys_;
    }
    /// A tensor over (batch, ..., key axes) of rank r made to broadcast against the scores: axes of
    /// size 1 inserted after the batch axis up to the scores' rank.
    std::string per_batch(const std::string& v, std::size_t r) {
        if (r >= rank) return v;
        std::vector<long long> axes;
        for (std::size_t a = 1; a < 1 + rank - r; ++a) axes.push_back((long long)a);
        return b.emit("Unsqueeze", {v, b.ints(axes)});
    }
};

/// ONNX: softmax over the last axis of the scores `s` restricted to `visible` (a boolean tensor
/// that broadcasts against them; "" for every key): hidden keys get 0, a row with nothing visible
/// all zeros, as masked_softmax computes. Writes the value named `out` (a fresh one when empty)
/// and returns its name. B: ctg::onnx::op_lowering.
template <class B>
std::string onnx_visible_softmax(B& b, const std::string& s, const std::string& visible, const std::string& out = {}) {
    if (visible.empty()) {
        if (out.empty()) return b.emit("Softmax", {s}, {{"axis", -1}});
        b.emit_to("Softmax", {s}, out, {{"axis", -1}});
        return out;
    }
    const std::string hidden = b.scalar(-3.0e38);  // finite: a row of hidden keys stays finite, then zeroed
    const std::string p = b.emit("Softmax", {b.emit("Where", {visible, s, hidden})}, {{"axis", -1}});
    if (out.empty()) return b.emit("Where", {visible, p, b.scalar(0.0)});
    b.emit_to("Where", {visible, p, b.scalar(0.0)}, out);
    return out;
}

/// Marks mask types (masks are values of empty types).
struct mask_base {
    static constexpr bool is_ctg_mask = true;  ///< what the attention_mask concept checks
};
template <class M>
concept attention_mask = std::is_base_of_v<mask_base, M>;

namespace detail {
template <class A, class B>
struct tlist_cat;
template <class... A, class... B>
struct tlist_cat<tlist<A...>, tlist<B...>> {
    using type = tlist<A..., B...>;
};
template <class L, std::size_t K>
struct tlist_at;
template <class T, class... R>
struct tlist_at<tlist<T, R...>, 0> {
    using type = T;
};
template <class T, class... R, std::size_t K>
struct tlist_at<tlist<T, R...>, K> {
    using type = typename tlist_at<tlist<R...>, K - 1>::type;
};
}  // namespace detail

/// Every key is visible.
struct no_mask : mask_base {
    using operands = tlist<>;  ///< the mask's runtime tensors (index inputs), none for no_mask
    static constexpr bool dense = false;  ///< true when visible() must be asked inside cols()' range
    /// The static shape rule against the score shape S (always true for no_mask).
    template <class S, class... Ops>
    static consteval bool check() { return true; }
    /// Runtime checks of the operands (none for this mask).
    static void validate(const mask_args&) {}
    /// The range [lo, hi) of keys that query i of batch b may see.
    static col_range cols(const mask_args& a, std::size_t, std::size_t) { return {0, (long long)a.m}; }
    /// Whether key j is visible to query i of batch b (inside cols()' range).
    static bool visible(const mask_args&, std::size_t, std::size_t, std::size_t) { return true; }
    /// ONNX: every key (mask_onnx).
    template <class B>
    static std::string onnx_visible(mask_onnx<B>&) { return {}; }
    /// The mask's name in to_text() and messages.
    static std::string describe() { return "none"; }
};

/// Keys at or before the query's position: j <= i + m - n.
struct causal : mask_base {
    using operands = tlist<>;  ///< the mask's runtime tensors (index inputs), none for causal
    static constexpr bool dense = false;  ///< true when visible() must be asked inside cols()' range
    /// The static shape rule against the score shape S (always true for causal).
    template <class S, class... Ops>
    static consteval bool check() { return true; }
    /// Runtime checks of the operands (none for this mask).
    static void validate(const mask_args&) {}
    /// The range [lo, hi) of keys that query i of batch b may see.
    static col_range cols(const mask_args& a, std::size_t, std::size_t i) {
        return {0, std::min((long long)a.m, (long long)i + a.offset() + 1)};
    }
    /// Whether key j is visible to query i of batch b (inside cols()' range).
    static bool visible(const mask_args&, std::size_t, std::size_t, std::size_t) { return true; }
    /// ONNX: j <= p(i), (n, m) (mask_onnx).
    template <class B>
    static std::string onnx_visible(mask_onnx<B>& o) { return o.b.emit("LessOrEqual", {o.keys(), o.queries()}); }
    /// The mask's name in to_text() and messages.
    static std::string describe() { return "causal"; }
};

/// Which side of the query a local window spans.
enum class window { both, past };

/// Keys within W positions of the query: |j - p(i)| <= W, or p(i) - W <= j <= p(i) for window::past.
template <long long W, window Side = window::both>
struct local_window : mask_base {
    static_assert(W >= 0, "ctg::local_window: the width must not be negative");
    using operands = tlist<>;  ///< the mask's runtime tensors (index inputs), none for local_window
    static constexpr bool dense = false;  ///< true when visible() must be asked inside cols()' range
    /// The static shape rule against the score shape S (always true for local_window).
    template <class S, class... Ops>
    static consteval bool check() { return true; }
    /// Runtime checks of the operands (none for this mask).
    static void validate(const mask_args&) {}
    /// The range [lo, hi) of keys that query i of batch b may see.
    static col_range cols(const mask_args& a, std::size_t, std::size_t i) {
        const long long p = (long long)i + a.offset();
        const long long hi = Side == window::past ? p + 1 : p + W + 1;
        return {std::max(0LL, p - W), std::min((long long)a.m, hi)};
    }
    /// Whether key j is visible to query i of batch b (inside cols()' range).
    static bool visible(const mask_args&, std::size_t, std::size_t, std::size_t) { return true; }
    /// ONNX: d = p(i) - j, |d| <= W or 0 <= d <= W, (n, m) (mask_onnx).
    template <class B>
    static std::string onnx_visible(mask_onnx<B>& o) {
        const std::string d = o.b.emit("Sub", {o.queries(), o.keys()});
        const std::string w = o.b.ints({W});
        if constexpr (Side == window::past)
            return o.b.emit("And", {o.b.emit("GreaterOrEqual", {d, o.b.ints({0})}), o.b.emit("LessOrEqual", {d, w})});
        else return o.b.emit("LessOrEqual", {o.b.emit("Abs", {d}), w});
    }
    /// The mask's name in to_text() and messages.
    static std::string describe() { return (Side == window::past ? "past window " : "window ") + std::to_string(W); }
};

/// Keys for which Pred::visible(p(i), j) holds: any visibility set known at compile time. Pred is a
/// named type with `static constexpr bool visible(std::size_t query_position, std::size_t key)`.
template <class Pred>
struct visible_if : mask_base {
    static_assert(requires(std::size_t i, std::size_t j) { { Pred::visible(i, j) } -> std::convertible_to<bool>; },
                  "ctg::visible_if: the predicate type needs static bool visible(std::size_t query, std::size_t key)");
    using operands = tlist<>;  ///< the mask's runtime tensors (index inputs), none for visible_if
    static constexpr bool dense = true;  ///< true when visible() must be asked inside cols()' range
    /// The static shape rule against the score shape S (always true for visible_if).
    template <class S, class... Ops>
    static consteval bool check() { return true; }
    /// Runtime checks of the operands (none for this mask).
    static void validate(const mask_args&) {}
    /// The range [lo, hi) of keys that query i of batch b may see.
    static col_range cols(const mask_args& a, std::size_t, std::size_t) { return {0, (long long)a.m}; }
    /// Whether key j is visible to query i of batch b (inside cols()' range).
    static bool visible(const mask_args& a, std::size_t, std::size_t i, std::size_t j) {
        const long long p = (long long)i + a.offset();
        return p >= 0 && Pred::visible(std::size_t(p), j);
    }
    /// ONNX: the predicate's table over (key position, key) for the scores' static key count m,
    /// rows p(i) gathered at run time (mask_onnx). A dynamic m has no table: ctg::error.
    template <class B>
    static std::string onnx_visible(mask_onnx<B>& o) {
        const dim m = o.b.yshape()[-1];
        if (!m.is_static())
            throw error("ctg::onnx::save: a visible_if mask needs a static key count to be exported (its table is "
                        "computed at export time); the scores' last axis is dynamic");
        const std::size_t n = std::size_t(m.n);
        std::vector<long long> table(n * n);
        for (std::size_t p = 0; p < n; ++p)
            for (std::size_t j = 0; j < n; ++j) table[p * n + j] = Pred::visible(p, j) ? 1 : 0;
        const std::string t = o.b.emit("Reshape", {o.b.ints(table), o.b.ints({(long long)n, (long long)n})});
        const std::string rows = o.b.emit("Squeeze", {o.queries(), o.b.ints({1})});
        return o.b.emit("Cast", {o.b.emit("Gather", {t, rows}, {{"axis", 0}})}, {{"to", 9}});
    }
    /// The mask's name in to_text() and messages.
    static std::string describe() { return "predicate"; }
};

/// Keys before each sequence's length: j < lengths[b], lengths an index_input (B) with values in
/// [1, m] (a key sequence padded to m).
template <class Len>
struct key_padding : mask_base {
    constexpr key_padding() = default;
    constexpr explicit key_padding(Len) {}  ///< key_padding(lengths): lengths an index_input (B)
    using operands = tlist<Len>;  ///< the mask's runtime tensors (index inputs)
    static constexpr bool dense = false;  ///< true when visible() must be asked inside cols()' range
    /// The static shape rule of the operands against the score shape S.
    template <class S, class L>
    static consteval bool check() {
        return L::rank == 1 && S::rank >= 3 && S::dims[0] == L::dims[0];
    }
    /// Runtime checks of the operands; throws ctg::shape_error or ctg::index_error naming the input.
    static void validate(const mask_args& a) {
        const view& len = a.x[0];
        if (len.size() != a.batches)
            throw shape_error("ctg::key_padding: input '" + std::string(a.names[0]) + "' holds " +
                              std::to_string(len.size()) + " lengths for a batch of " + std::to_string(a.batches));
        const index_t* l = len.as<index_t>();
        for (std::size_t b = 0; b < a.batches; ++b)
            if (l[b] < 1 || std::size_t(l[b]) > a.m)
                throw index_error("ctg::key_padding: length " + std::to_string(l[b]) + " of sequence " + std::to_string(b) +
                                  " in input '" + std::string(a.names[0]) + "' is outside [1, " + std::to_string(a.m) +
                                  "] (the padded key length)");
    }
    /// The range [lo, hi) of keys that query i of batch b may see.
    static col_range cols(const mask_args& a, std::size_t b, std::size_t) { return {0, (long long)a.x[0].as<index_t>()[b]}; }
    /// Whether key j is visible to query i of batch b (inside cols()' range).
    static bool visible(const mask_args&, std::size_t, std::size_t, std::size_t) { return true; }
    /// ONNX: j < lengths[b], (B, 1.., m) (mask_onnx).
    template <class B>
    static std::string onnx_visible(mask_onnx<B>& o) {
        const std::string len = o.b.emit("Unsqueeze", {o.x(0), o.b.ints({1})});
        return o.per_batch(o.b.emit("Less", {o.keys(), len}), 2);
    }
    /// The mask's name in to_text() and messages.
    static std::string describe() { return "key padding"; }
};

/// Keys not marked as padding: j visible where pad[b][j] == 0, pad an index_input (B, m) of 0/1
/// with 1 where key j of sequence b is padding, anywhere in the row: PyTorch's `key_padding_mask`
/// (True = ignore) as integers. Every row must leave a key visible: a sequence of padding alone is
/// an index_error naming the row (PyTorch gives NaN there). With the padding at the end of each
/// row it equals key_padding(lengths), which is cheaper (no per-key test in the softmax).
template <class Pad>
struct key_padding_mask : mask_base {
    constexpr key_padding_mask() = default;
    constexpr explicit key_padding_mask(Pad) {}  ///< key_padding_mask(pad): pad an index_input (B, m) of 0/1
    using operands = tlist<Pad>;  ///< the mask's runtime tensors (index inputs)
    static constexpr bool dense = true;  ///< true when visible() must be asked inside cols()' range
    /// The static shape rule of the operands against the score shape S: (B, m) for (B, ..., n, m).
    template <class S, class P>
    static consteval bool check() {
        if constexpr (P::rank != 2 || S::rank < 3) return false;
        else return S::dims[0] == P::dims[0] && S::dims[S::rank - 1] == P::dims[1];
    }
    /// Runtime checks of the operands; throws ctg::shape_error or ctg::index_error naming the input.
    static void validate(const mask_args& a) {
        const view& pad = a.x[0];
        const rshape& s = pad.shape;
        const std::string name(a.names[0]);
        if (s.rank != 2 || s.d[0] != a.batches || s.d[1] != a.m)
            throw shape_error("ctg::key_padding_mask: input '" + name + "' has shape " + to_string(s) + "; the scores need (" +
                              std::to_string(a.batches) + "," + std::to_string(a.m) + "): one entry per sequence and key");
        const index_t* v = pad.as<index_t>();
        for (std::size_t b = 0; b < a.batches; ++b) {
            bool any = false;
            for (std::size_t j = 0; j < a.m; ++j) {
                const index_t x = v[b * a.m + j];
                if (x != 0 && x != 1)
                    throw index_error("ctg::key_padding_mask: value " + std::to_string(x) + " at (" + std::to_string(b) + "," +
                                      std::to_string(j) + ") of input '" + name +
                                      "' is neither 0 (a key to attend to) nor 1 (padding, ignored)");
                any = any || x == 0;
            }
            if (!any)
                throw index_error("ctg::key_padding_mask: row " + std::to_string(b) + " of input '" + name + "' marks all " +
                                  std::to_string(a.m) + " keys as padding, so its queries would see no key (PyTorch " +
                                  "gives NaN there): leave every sequence a key (a 0), or the empty sequence out of the batch");
        }
    }
    /// The range [lo, hi) of keys that query i of batch b may see: from the first key that is not
    /// padding to the last (what lies between is asked of visible()).
    static col_range cols(const mask_args& a, std::size_t b, std::size_t) {
        const index_t* v = a.x[0].as<index_t>() + b * a.m;
        long long lo = 0, hi = (long long)a.m;
        while (lo < hi && v[lo] != 0) ++lo;
        while (hi > lo && v[hi - 1] != 0) --hi;
        return {lo, hi};
    }
    /// Whether key j is visible to query i of batch b (inside cols()' range).
    static bool visible(const mask_args& a, std::size_t b, std::size_t, std::size_t j) {
        return a.x[0].as<index_t>()[b * a.m + j] == 0;
    }
    /// ONNX: pad[b][j] == 0, (B, 1.., m) (mask_onnx).
    template <class B>
    static std::string onnx_visible(mask_onnx<B>& o) {
        return o.per_batch(o.b.emit("Equal", {o.x(0), o.b.ints({0})}), 2);
    }
    /// The mask's name in to_text() and messages.
    static std::string describe() { return "key padding mask"; }
};

/// Keys where a 0/1 matrix fed at run time is non-zero: an index_input (n, m) shared by the batch,
/// or (B, n, m) per sequence.
template <class Mat>
struct mask_matrix : mask_base {
    constexpr mask_matrix() = default;
    constexpr explicit mask_matrix(Mat) {}  ///< mask_matrix(M): M an index_input (n, m) or (B, n, m) of 0/1
    using operands = tlist<Mat>;  ///< the mask's runtime tensors (index inputs)
    static constexpr bool dense = true;  ///< true when visible() must be asked inside cols()' range
    /// The static shape rule of the operands against the score shape S.
    template <class S, class M>
    static consteval bool check() {
        if constexpr (M::rank == 2) {
            return S::dims[S::rank - 2] == M::dims[0] && S::dims[S::rank - 1] == M::dims[1];
        } else if constexpr (M::rank == 3) {
            return S::rank >= 3 && S::dims[0] == M::dims[0] && S::dims[S::rank - 2] == M::dims[1] &&
                   S::dims[S::rank - 1] == M::dims[2];
        } else {
            return false;
        }
    }
    /// Runtime checks of the operands; throws ctg::shape_error or ctg::index_error naming the input.
    static void validate(const mask_args& a) {
        const rshape& s = a.x[0].shape;
        const bool ok = (s.rank == 2 && s.d[0] == a.n && s.d[1] == a.m) ||
                        (s.rank == 3 && s.d[0] == a.batches && s.d[1] == a.n && s.d[2] == a.m);
        if (!ok)
            throw shape_error("ctg::mask_matrix: input '" + std::string(a.names[0]) + "' has shape " + to_string(s) +
                              "; the scores need (" + std::to_string(a.n) + "," + std::to_string(a.m) + ") or (" +
                              std::to_string(a.batches) + "," + std::to_string(a.n) + "," + std::to_string(a.m) + ")");
    }
    /// The range [lo, hi) of keys that query i of batch b may see.
    static col_range cols(const mask_args& a, std::size_t, std::size_t) { return {0, (long long)a.m}; }
    /// Whether key j is visible to query i of batch b (inside cols()' range).
    static bool visible(const mask_args& a, std::size_t b, std::size_t i, std::size_t j) {
        const index_t* v = a.x[0].as<index_t>();
        const std::size_t base = a.x[0].shape.rank == 3 ? b * a.n * a.m : 0;
        return v[base + i * a.m + j] != 0;
    }
    /// ONNX: M != 0, (n, m) or (B, 1.., n, m) (mask_onnx).
    template <class B>
    static std::string onnx_visible(mask_onnx<B>& o) {
        const std::string v = o.b.emit("Not", {o.b.emit("Equal", {o.x(0), o.b.ints({0})})});
        return o.xrank(0) == 3 ? o.per_batch(v, 3) : v;
    }
    /// The mask's name in to_text() and messages.
    static std::string describe() { return "matrix"; }
};

/// Both masks: the intersection of their visibility sets.
template <class A, class B>
struct mask_and : mask_base {
    using operands = typename detail::tlist_cat<typename A::operands, typename B::operands>::type;  ///< the mask's runtime tensors (index inputs)
    static constexpr bool dense = A::dense || B::dense;  ///< true when visible() must be asked inside cols()' range
    static constexpr std::size_t na = A::operands::size;  ///< the number of A's operands (they come first)

    /// The static shape rule: A's on its operands, B's on the rest.
    template <class S, class... Ops>
    static consteval bool check() {
        return check_split<S>(std::make_index_sequence<na>{}, std::make_index_sequence<sizeof...(Ops) - na>{},
                              tlist<Ops...>{});
    }
    /// The arguments as B sees them (its own operands).
    static mask_args second(const mask_args& a) {
        mask_args s = a;
        s.x = a.x + na;
        s.names = a.names + na;
        return s;
    }
    /// Runtime checks of the operands; throws ctg::shape_error or ctg::index_error naming the input.
    static void validate(const mask_args& a) {
        A::validate(a);
        B::validate(second(a));
    }
    /// The range [lo, hi) of keys that query i of batch b may see.
    static col_range cols(const mask_args& a, std::size_t b, std::size_t i) {
        const col_range r1 = A::cols(a, b, i), r2 = B::cols(second(a), b, i);
        return {std::max(r1.lo, r2.lo), std::min(r1.hi, r2.hi)};
    }
    /// Whether key j is visible to query i of batch b (inside cols()' range).
    static bool visible(const mask_args& a, std::size_t b, std::size_t i, std::size_t j) {
        return A::visible(a, b, i, j) && B::visible(second(a), b, i, j);
    }
    /// ONNX: both visibility tensors, And-ed (mask_onnx).
    template <class Bd>
    static std::string onnx_visible(mask_onnx<Bd>& o) {
        const std::string a = A::onnx_visible(o);
        mask_onnx<Bd> ob{o.b, o.scores, o.rank, o.first + na, o.queries_, o.keys_};
        const std::string v = B::onnx_visible(ob);
        o.queries_ = ob.queries_, o.keys_ = ob.keys_;
        if (a.empty()) return v;
        if (v.empty()) return a;
        return o.b.emit("And", {a, v});
    }
    /// The mask's name in to_text() and messages.
    static std::string describe() { return A::describe() + " && " + B::describe(); }

private:
    template <class L, std::size_t K>
    using at = typename detail::tlist_at<L, K>::type;
    template <class S, std::size_t... I, std::size_t... J, class... Ops>
    static consteval bool check_split(std::index_sequence<I...>, std::index_sequence<J...>, tlist<Ops...>) {
        using L = tlist<Ops...>;
        return A::template check<S, at<L, I>...>() && B::template check<S, at<L, na + J>...>();
    }
};

/// `a && b`: the intersection of two masks.
template <attention_mask A, attention_mask B>
constexpr mask_and<A, B> operator&&(A, B) { return {}; }

}  // namespace ctg
