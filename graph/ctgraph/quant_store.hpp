// ctgraph/quant_store.hpp: a float parameter store's quantised copies (options::weights).
//
//   ctg::quantize(store, slot, weight_format::int8);          // what a program with .weights does
//   const auto* q = ctg::quantized(store, slot, weight_format::int8);
//
// The copies hang on the store as its extension (params.hpp, detail::store_extension): per slot, one
// per format, each a kernels::quantized_tensor of one matrix per layer. The store tells them when
// values are written (the copy is then stale; refresh_quantized, which programs with .weights call
// before their forward pass, quantises it again), when its values move, and clones them with
// itself. They register the store's float range with kernels::quantized_weights, where a product
// finds a weight's copy by the pointer it was given (kernels/quant_product.hpp). Kept out of
// params.hpp so that a program that quantises nothing does not compile any of it.
#pragma once
#include <algorithm>
#include <array>
#include <cstddef>
#include <memory>
#include <string>
#include <tuple>
#include <type_traits>
#include <utility>
#include <vector>

#include "ctgraph/error.hpp"
#include "ctgraph/graph/weights.hpp"
#include "ctgraph/kernels/quant.hpp"
#include "ctgraph/params.hpp"

namespace ctg {

namespace detail {
/// (graph/weights.hpp: programs with options::weights check that this header is here.)
template <>
struct quantized_copies_declared<float> : std::true_type {};

/// A float store's quantised copies (see the file comment). (A template, as everything in this
/// header, so that a program that quantises nothing does not compile it: T is float.)
template <class T>
class quantized_copies final : public store_extension {
    static_assert(std::is_same_v<T, float>, "ctg: quantised copies are of float stores");
public:
    ~quantized_copies() override { kernels::quantized_weights::instance().remove(this); }
    void values_written(std::size_t slot) override {
        for (auto& copies : copies_)
            for (std::size_t s = 0; s < copies.size(); ++s)
                if (copies[s] && (slot == all_slots || s == slot)) copies[s]->stale = true, any_stale_ = true;
    }
    void values_moved(const void* store, const float* begin, const float* end) override {
        store_ = static_cast<const parameter_store<T>*>(store);
        kernels::quantized_weights::instance().put(this, begin, end, &lookup);
    }
    std::unique_ptr<store_extension> clone() const override {
        auto c = std::make_unique<quantized_copies>();
        for (std::size_t f = 0; f < 2; ++f)
            for (const auto& q : copies_[f]) c->copies_[f].push_back(q ? std::make_unique<kernels::quantized_tensor>(*q) : nullptr);
        c->any_stale_ = any_stale_;
        return c;
    }

    /// Slot `slot`'s copy in `format`, or null.
    kernels::quantized_tensor* get(std::size_t slot, weight_format format) const {
        const auto& copies = copies_[index(format)];
        return slot < copies.size() ? copies[slot].get() : nullptr;
    }
    /// Sets slot `slot`'s copy in its format.
    void set(std::size_t slot, std::unique_ptr<kernels::quantized_tensor> t) {
        auto& copies = copies_[index(t->format)];
        if (copies.size() <= slot) copies.resize(slot + 1);
        copies[slot] = std::move(t);
    }
    /// Marks the other format's copy of a slot stale (its values changed under it).
    void others_stale(std::size_t slot, weight_format format) {
        for (auto& copies : copies_)
            if (slot < copies.size() && copies[slot] && copies[slot]->format != format) copies[slot]->stale = true, any_stale_ = true;
    }
    /// Whether some copy is stale; clears the flag (refresh_quantized).
    bool take_stale() { return std::exchange(any_stale_, false); }
    /// Every copy, for refresh_quantized: f(slot, copy).
    template <class F>
    void each(F&& f) const {
        for (const auto& copies : copies_)
            for (std::size_t s = 0; s < copies.size(); ++s)
                if (copies[s]) f(s, *copies[s]);
    }

private:
    static std::size_t index(weight_format f) { return f == weight_format::int8 ? 0 : 1; }
    // The matrix at `offset` into the store's values: the slot holding it (entries are in offset
    // order), then its layer, which must start there.
    static const kernels::quantized_weight* lookup(const void* owner, std::size_t offset, bool transposed, weight_format format) {
        const auto& self = *static_cast<const quantized_copies*>(owner);
        const auto& entries = self.store_->entries();
        auto it = std::upper_bound(entries.begin(), entries.end(), offset,
                                   [](std::size_t o, const typename parameter_store<T>::entry& e) { return o < e.offset; });
        if (it == entries.begin() || format == weight_format::f32) return nullptr;
        const std::size_t slot = std::size_t(it - entries.begin()) - 1;
        const kernels::quantized_tensor* q = self.get(slot, format);
        if (!q || q->transposed != transposed || q->matrices.empty()) return nullptr;
        const std::size_t per = q->matrices[0].K * q->matrices[0].N, rel = offset - entries[slot].offset;
        if (per == 0 || rel % per || rel / per >= q->matrices.size()) return nullptr;
        return &q->matrices[rel / per];
    }
    std::array<std::vector<std::unique_ptr<kernels::quantized_tensor>>, 2> copies_;  // [0] int8, [1] q4; per slot
    const parameter_store<T>* store_ = nullptr;
    bool any_stale_ = false;
};

/// The store's quantised copies, made on first use.
template <class T>
quantized_copies<T>& copies_of(parameter_store<T>& store) {
    if (auto* e = dynamic_cast<quantized_copies<T>*>(store.extension())) return *e;
    auto made = std::make_unique<quantized_copies<T>>();
    quantized_copies<T>& r = *made;
    store.set_extension(std::move(made));
    return r;
}
}  // namespace detail

/// The quantised copy of parameter `slot` in `format` (int8 or q4), or null.
template <class T>
const kernels::quantized_tensor* quantized(const parameter_store<T>& store, std::size_t slot, weight_format format) {
    const auto* e = dynamic_cast<const detail::quantized_copies<T>*>(store.extension());
    return e && format != weight_format::f32 ? e->get(slot, format) : nullptr;
}

/// Bytes of the store's quantised copies in `format`.
template <class T>
std::size_t quantized_bytes(const parameter_store<T>& store, weight_format format) {
    std::size_t n = 0;
    for (std::size_t s = 0; s < store.size(); ++s)
        if (const auto* q = quantized(store, s, format)) n += q->bytes();
    return n;
}

/// Keeps a quantised copy of parameter `slot` for the products that read it as a weight
/// (options::weights): each matrix of its last two axes (each layer's of a stacked parameter) in
/// `format`, int8 with a scale per output column or q4 with a float16 scale per group of 32 inputs
/// (kernels/quant.hpp). transposed: products read it as x E^T (a tied head reading the embedding
/// (vocab, width)), so its output columns are E's rows. The copy is kept current: writing the
/// values marks it stale, refresh_quantized() quantises it again. A slot keeps one copy per format
/// (programs of both formats may share a store); the same format and orientation again does
/// nothing, another orientation replaces the copy. Throws ctg::error for a parameter of rank < 2 or
/// format f32, ctg::shape_error for q4 with an input size not a multiple of 32,
/// ctg::numeric_error for a weight that is not finite: each naming the parameter.
template <class T>
void quantize(parameter_store<T>& store, std::size_t slot, weight_format format, bool transposed = false) {
    const auto& e = store.at(slot);
    if (format == weight_format::f32) throw error("ctg::quantize: weight_format::f32 is no quantised format ('" + e.name + "')");
    if (e.shape.rank < 2) throw error("ctg::quantize: '" + e.name + "' has shape " + to_string(e.shape) + ", not a matrix");
    auto& copies = detail::copies_of(store);
    if (const auto* q = copies.get(slot, format); q && q->transposed == transposed && !q->stale) return;
    const std::size_t r0 = e.shape.d[e.shape.rank - 2], r1 = e.shape.d[e.shape.rank - 1];
    const std::size_t K = transposed ? r1 : r0, N = transposed ? r0 : r1, count = r0 * r1 != 0 ? e.shape.size() / (r0 * r1) : 0;
    auto t = std::make_unique<kernels::quantized_tensor>();
    t->format = format, t->transposed = transposed;
    t->matrices.reserve(count);
    const T* v = store.value_storage(slot);
    try {
        for (std::size_t m = 0; m < count; ++m) t->matrices.push_back(kernels::quantize_weight(format, v + m * r0 * r1, K, N, transposed));
    } catch (const shape_error& x) {
        throw shape_error(std::string(x.what()) + " (parameter '" + e.name + "')");
    } catch (const numeric_error& x) {
        throw numeric_error(std::string(x.what()) + " (parameter '" + e.name + "')");
    }
    copies.set(slot, std::move(t));
}

/// Sets a parameter's quantised copy (ctg::load_quantized): its matrices must have the parameter's
/// shape (ctg::shape_error otherwise); its values become the dequantised weights (the model the copy
/// stands for), and its copy in the other format, if any, goes stale.
template <class T>
void set_quantized(parameter_store<T>& store, std::size_t slot, kernels::quantized_tensor t) {
    const auto& e = store.at(slot);
    if (t.format == weight_format::f32) throw error("ctg::set_quantized: weight_format::f32 is no quantised format ('" + e.name + "')");
    const std::size_t r0 = e.shape.rank >= 2 ? e.shape.d[e.shape.rank - 2] : 0, r1 = e.shape.rank >= 2 ? e.shape.d[e.shape.rank - 1] : 0;
    const std::size_t K = t.transposed ? r1 : r0, N = t.transposed ? r0 : r1;
    const bool fits = r0 * r1 > 0 && t.matrices.size() == e.shape.size() / (r0 * r1) &&
                      std::all_of(t.matrices.begin(), t.matrices.end(), [&](const kernels::quantized_weight& m) {
                          return m.K == K && m.N == N && m.format == t.format && m.transposed == t.transposed;
                      });
    if (!fits) throw shape_error("ctg::set_quantized: the quantised matrices do not have the shape of '" + e.name + "' " + to_string(e.shape));
    T* v = store.value_storage(slot);  // (written without marking this copy stale)
    for (std::size_t m = 0; m < t.matrices.size(); ++m)
        for (std::size_t k = 0; k < K; ++k)
            for (std::size_t n = 0; n < N; ++n) v[m * r0 * r1 + (t.transposed ? n * K + k : k * N + n)] = float(t.matrices[m].at(k, n));
    store.write_bf16(slot, 0, e.shape.size());
    auto& copies = detail::copies_of(store);
    t.stale = false;
    const weight_format f = t.format;
    copies.set(slot, std::make_unique<kernels::quantized_tensor>(std::move(t)));
    copies.others_stale(slot, f);
}

/// Quantises again the copies whose values were written since (programs with options::weights call
/// it before their forward pass).
template <class T>
void refresh_quantized(parameter_store<T>& store) {
    auto* e = dynamic_cast<detail::quantized_copies<T>*>(store.extension());
    if (!e || !e->take_stale()) return;
    std::vector<std::tuple<std::size_t, weight_format, bool>> stale;
    e->each([&](std::size_t s, const kernels::quantized_tensor& q) {
        if (q.stale) stale.emplace_back(s, q.format, q.transposed);
    });
    for (auto [s, f, t] : stale) quantize(store, s, f, t);
}

}  // namespace ctg
