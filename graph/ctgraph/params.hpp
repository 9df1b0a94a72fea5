// ctgraph/params.hpp: parameters held by name.
//
// A parameter_store holds every parameter's values and gradients in two flat, aligned arrays (so an
// optimizer is one loop over contiguous memory) and a table of names, shapes and offsets. Programs
// bind to a store by name, so a training program and a decoding program can share one.
//
// Default initialisation (seeded, deterministic), per layer for a stacked (layered) parameter:
// rank >= 2 -> Xavier/Glorot uniform U(-a, a), a = sqrt(6 / (fan_in + fan_out)), fan_in = product
// of all but the last dimension, fan_out = last dimension; rank <= 1 -> zeros (biases), except a
// gain: a vector whose name ends in "weight" or "gamma" (a norm's scale, as PyTorch names
// LayerNorm's) -> ones; LoRA adapters as PyTorch's PEFT library makes them: a name ending in
// "lora_A" (In, r) -> Kaiming-uniform U(-1/sqrt(In), 1/sqrt(In)), in "lora_B" (r, Out) -> zeros
// (the adapted layer starts as the layer). Override per parameter with `init(name, fn)` or by
// writing `value(name)`; `init_matching(entries, seed)` initialises only some (new adapters over
// loaded weights).
//
// bf16 copies (float stores; mixed-precision programs enable them): a bf16 copy of every value,
// which bf16 products read instead of converting a weight at every use (kernels::bf16_copies).
// An optimizer rewrites a parameter's copy in the same pass as its update (value_storage +
// write_bf16); anything else that may write a value (value(), values(), init, add) marks the copy
// stale, and refresh_bf16() - which every mixed-precision program calls before its forward pass -
// converts the stale ones. (A pointer from value() kept and written through after another step
// bypasses this: write weights through value() each time.)
//
// Extensions (float stores): copies of the values kept elsewhere, as the quantised copies of
// graph/ctgraph/quant_store.hpp, attach a detail::store_extension, which the store tells when values
// are written (the same events that mark bf16 copies stale), when its values move, and which it
// clones with the store. The store's header carries no code of theirs.
#pragma once
#include <algorithm>
#include <cmath>
#include <cstddef>
#include <cstring>
#include <functional>
#include <memory>
#include <random>
#include <string>
#include <string_view>
#include <type_traits>
#include <vector>

#include "ctgraph/error.hpp"
#include "ctgraph/kernels/bf16.hpp"
#include "ctgraph/memory.hpp"
#include "ctgraph/names.hpp"
#include "ctgraph/tensor.hpp"

namespace ctg {

namespace detail {
/// Something kept beside a float store's values (see the file comment): told what happens to them.
struct store_extension {
    virtual ~store_extension() = default;
    /// Slot `slot`'s values (every slot's, with all_slots) may have been written.
    virtual void values_written(std::size_t slot) = 0;
    /// The store's values now live at [begin, end) (after it grew, or in a copy of the store).
    virtual void values_moved(const void* store, const float* begin, const float* end) = 0;
    /// A copy for a copy of the store (its values then move: values_moved follows).
    virtual std::unique_ptr<store_extension> clone() const = 0;
    static constexpr std::size_t all_slots = ~std::size_t(0);  ///< values_written's "every slot"
};
}  // namespace detail

/// Every parameter's values and gradients in two flat, aligned arrays, held by name (slot =
/// position of the name); shared between programs through a std::shared_ptr. Default initialisation
/// by init(seed): Xavier/Glorot uniform for rank >= 2, zeros for vectors, ones for vectors whose name
/// ends in "weight" or "gamma". Lookups of a missing name throw ctg::error; adding a name again with
/// another shape throws ctg::shape_error.
/// @tparam T float or double
template <class T>
class parameter_store {
public:
    /// A parameter's name, shape and place in the flat arrays.
    struct entry {
        std::string name;  ///< the parameter's name ("W", "block.attn.W_q")
        rshape shape;  ///< its shape (with a leading layer axis for a stacked parameter)
        std::size_t offset = 0;  ///< into values()
        std::size_t layer_axes = 0;  ///< leading axes that stack one tensor per layer (ctg::repeat)
        /// Frozen (options::frozen of a program that reads it; set_frozen): no gradient, no optimizer state.
        bool frozen = false;
        /// Into grads(), where its gradient is (the gradients are allocated by their first use): the
        /// parameters that train, in slot order, so `offset` itself while none is frozen.
        std::size_t grad_offset = 0;
    };

    /// Adds a parameter (zero-initialised); returns its slot. Re-adding the same name with the same
    /// shape returns the existing slot; a different shape throws.
    std::size_t add(std::string_view name, const rshape& shape, std::size_t layer_axes = 0) {
        if (auto s = find(name); s >= 0) {
            if (!(entries_[std::size_t(s)].shape == shape))
                throw shape_error("ctg::parameter_store: parameter '" + std::string(name) + "' exists with shape " +
                                  to_string(entries_[std::size_t(s)].shape) + ", cannot add it with shape " +
                                  to_string(shape));
            return std::size_t(s);
        }
        entry e{std::string(name), shape, total_, layer_axes, false, grad_total_};
        total_ += round_up_elems<T>(shape.size());
        grad_total_ += round_up_elems<T>(shape.size());
        entries_.push_back(e);
        values_.resize(total_, T(0));
        if (!grads_.empty()) grads_.resize(grad_total_, T(0));  // else allocated by the first use (gradients())
        if (bf16_on_) resize_bf16();
        moved();
        return entries_.size() - 1;
    }

    parameter_store() = default;
    /// Copies names, values and gradients (and the bf16 copies, if enabled).
    parameter_store(const parameter_store& o)
        : entries_(o.entries_), total_(o.total_), grad_total_(o.grad_total_), values_(o.values_), grads_(o.grads_),
          zero_pending_(o.zero_pending_) {
        strict_ = o.strict_;
        if (o.bf16_on_) enable_bf16();  // its own copy, registered for its own values
        if (o.extension_) extension_ = o.extension_->clone(), moved();
    }
    /// Copies names, values and gradients (and the bf16 copies, if enabled).
    parameter_store& operator=(const parameter_store& o) {
        if (this == &o) return *this;
        entries_ = o.entries_, total_ = o.total_, grad_total_ = o.grad_total_, values_ = o.values_, grads_ = o.grads_,
        zero_pending_ = o.zero_pending_;
        strict_ = o.strict_;
        if (o.bf16_on_ || bf16_on_) enable_bf16(); else resize_bf16();
        extension_ = o.extension_ ? o.extension_->clone() : nullptr;
        moved();
        return *this;
    }
    ~parameter_store() {
        if (bf16_on_) kernels::bf16_copies::instance().remove(this);
    }

    // ---------------------------------------------------------------- bf16 copies
    /// Keeps a bf16 copy of every value from now on (float stores; see the file comment).
    void enable_bf16() {
        if constexpr (!std::is_same_v<T, float>) throw error("ctg::parameter_store::enable_bf16: bf16 copies are of float values");
        bf16_on_ = true;
        resize_bf16();
        std::fill(bf16_stale_.begin(), bf16_stale_.end(), 1);
    }
    bool has_bf16() const { return bf16_on_; }  ///< whether bf16 copies are kept
    /// Converts the copies of the parameters written since their copy was made (no-op without copies).
    void refresh_bf16() {
        if (!bf16_on_ || !any_stale_) return;
        for (std::size_t s = 0; s < entries_.size(); ++s)
            if (bf16_stale_[s]) write_bf16(s, 0, entries_[s].shape.size()), bf16_stale_[s] = 0;
        any_stale_ = false;
    }
    /// The bf16 copy of a parameter (nullptr without copies); current after refresh_bf16().
    const kernels::bf16_bits* bf16_value(std::size_t slot) const {
        return bf16_on_ ? bf16_.data() + entries_[slot].offset : nullptr;
    }
    /// The values of a slot without marking its bf16 copy stale: for programs, which read them, and
    /// optimizers, which convert every range they write with write_bf16 in the same pass.
    T* value_storage(std::size_t slot) { return values_.data() + entries_[slot].offset; }
    /// The store's extension (quantised copies: graph/ctgraph/quant_store.hpp), or null.
    detail::store_extension* extension() const { return extension_.get(); }
    /// Attaches an extension (float stores), which is told where the values are at once.
    void set_extension(std::unique_ptr<detail::store_extension> e) {
        extension_ = std::move(e);
        moved();
    }
    /// Converts elements [lo, hi) of a parameter into its bf16 copy (no-op without copies).
    void write_bf16(std::size_t slot, std::size_t lo, std::size_t hi) {
        if constexpr (std::is_same_v<T, float>)
            if (bf16_on_) {
                const std::size_t o = entries_[slot].offset;
                kernels::pack_bf16(false, 1, hi - lo, values_.data() + o + lo, hi - lo, bf16_.data() + o + lo);
            }
    }

    /// Slot of a parameter, or -1.
    long find(std::string_view name) const {
        for (std::size_t i = 0; i < entries_.size(); ++i)
            if (entries_[i].name == name) return long(i);
        return -1;
    }
    /// Slot of a parameter; throws naming the parameter when it does not exist.
    std::size_t slot(std::string_view name) const {
        long s = find(name);
        if (s < 0) throw error("ctg::parameter_store: no parameter named '" + std::string(name) + "'");
        return std::size_t(s);
    }

    std::size_t size() const { return entries_.size(); }  ///< the number of parameters
    const entry& at(std::size_t slot) const { return entries_[slot]; }  ///< the name, shape and offset of a slot
    const std::vector<entry>& entries() const { return entries_; }  ///< every parameter, in slot order

    /// The values of a slot, writable (marks its bf16 copy stale).
    T* value(std::size_t slot) {
        mark_stale(slot);
        return values_.data() + entries_[slot].offset;
    }
    /// The values of a slot.
    const T* value(std::size_t slot) const { return values_.data() + entries_[slot].offset; }
    /// The gradient of a slot (settles a pending zero_grad() first); throws ctg::error for a
    /// frozen parameter, which has none.
    T* grad(std::size_t slot) { return settled_grads().data() + grad_offset_of(slot); }
    /// The gradient of a slot, read-only (settles a pending zero_grad() first).
    const T* grad(std::size_t slot) const { return settled_grads().data() + grad_offset_of(slot); }

    // ---------------------------------------------------------------- frozen parameters
    /// Freezes a parameter (or lets it train again): a frozen one has no gradient memory (grads()
    /// holds the others' only, at entry::grad_offset) and optimizers neither update it nor keep
    /// state for it. A training program compiled with options::frozen or options::trainable sets
    /// this for the parameters it reads when it is made over the store. Gradients of parameters
    /// that train before and after are kept; an optimizer's state is sized anew at its next step.
    void set_frozen(std::size_t slot, bool frozen) { set_frozen(1, &slot, [frozen](std::size_t) { return frozen; }); }
    /// The same for `count` slots at once, frozen_of(k) for slots[k]: the gradients are laid out
    /// again once (a program marks all its parameters so).
    template <class FrozenOf>
    void set_frozen(std::size_t count, const std::size_t* slots, FrozenOf&& frozen_of) {
        std::vector<unsigned char> was(entries_.size());
        bool changed = false;
        for (std::size_t s = 0; s < entries_.size(); ++s) was[s] = entries_[s].frozen;
        for (std::size_t k = 0; k < count; ++k) {
            const bool f = frozen_of(k);
            changed = changed || entries_[slots[k]].frozen != f;
            entries_[slots[k]].frozen = f;
        }
        if (!changed) return;
        // The gradients of the parameters that train, in slot order, laid out again.
        std::vector<std::size_t> old(entries_.size());
        std::size_t n = 0;
        for (std::size_t s = 0; s < entries_.size(); ++s) {
            old[s] = entries_[s].grad_offset;
            entries_[s].grad_offset = n;
            if (!entries_[s].frozen) n += round_up_elems<T>(entries_[s].shape.size());
        }
        grad_total_ = n;
        if (grads_.empty()) return;  // (allocated by the first use, at the new layout)
        aligned_vector<T> g(grad_total_, T(0));
        for (std::size_t s = 0; s < entries_.size(); ++s)
            if (!entries_[s].frozen && !was[s])  // (one that trained before too keeps its gradient)
                std::copy_n(grads_.data() + old[s], entries_[s].shape.size(), g.data() + entries_[s].grad_offset);
        grads_ = std::move(g);
    }
    /// Whether a parameter is frozen (set_frozen).
    bool frozen(std::size_t slot) const { return entries_[slot].frozen; }
    /// Elements of grads(), with padding: an optimizer's state arrays have as many.
    std::size_t grad_elements() const { return grad_total_; }
    /// Elements of the parameters that train (without padding).
    std::size_t num_trainable_elements() const {
        std::size_t n = 0;
        for (auto& e : entries_) n += e.frozen ? 0 : e.shape.size();
        return n;
    }

    /// The flat arrays (padding between parameters is kept at zero). grads() holds the gradients
    /// of the parameters that train (entry::grad_offset): the layout of values() while none is frozen.
    aligned_vector<T>& values() {
        mark_all_stale();
        return values_;
    }
    aligned_vector<T>& grads() { return settled_grads(); }  ///< every gradient, flat (settles a pending zero_grad())
    const aligned_vector<T>& values() const { return values_; }  ///< every value, flat
    const aligned_vector<T>& grads() const { return settled_grads(); }  ///< every gradient, flat

    /// Total number of parameter elements (without padding).
    std::size_t num_elements() const {
        std::size_t n = 0;
        for (auto& e : entries_) n += e.shape.size();
        return n;
    }

    /// Clears every gradient, lazily (as PyTorch's zero_grad(set_to_none=True) avoids its pass over
    /// memory): the next program::backward() over this store lets each of its parameters' first
    /// writer assign the gradient (a weight gradient's GEMM at beta 0) and zeroes only the others.
    /// Any other access to the gradients (grad(), grads(), an optimizer) clears them for real first,
    /// so a cleared store never shows stale values; a backward that throws leaves the clear pending.
    /// (mlp at 2 threads: the serial 0.8 MB memset was 6 % of a step.)
    void zero_grad() { zero_pending_ = true; }

    /// Whether the gradients' memory exists: it is allocated by the first use of a gradient (a
    /// training program's planning, grad(), grads(), an optimizer), so a store read only by
    /// inference programs and generators holds the values alone.
    bool gradients_allocated() const { return grad_total_ > 0 && grads_.size() == grad_total_; }

    /// For programs: whether a zero_grad() is pending, and the gradients' memory without settling it.
    bool zero_pending() const { return zero_pending_; }
    /// For programs: the gradient's memory of a slot, leaving a pending zero_grad() pending.
    T* grad_storage(std::size_t slot) { return gradients().data() + grad_offset_of(slot); }
    /// Ends a pending zero_grad(): `written(slot)` says which slots the caller's backward pass writes
    /// first with =; the others are zeroed here.
    template <class Written>
    void settle_zero(Written&& written) {
        if (!zero_pending_) return;
        zero_pending_ = false;
        for (std::size_t s = 0; s < entries_.size(); ++s)
            if (!entries_[s].frozen && !written(s))
                std::fill_n(gradients().data() + entries_[s].grad_offset, entries_[s].shape.size(), T(0));
    }

    /// Default initialisation of every parameter from `seed` (see the file comment).
    void init(unsigned long long seed) {
        mark_all_stale();
        for (std::size_t s = 0; s < entries_.size(); ++s) init_default(s, seed);
    }
    /// Default initialisation (as init(seed)) of the parameters that `entries` match (names,
    /// prefixes cut at a '.', '*' patterns: "*lora_*"), the others untouched; returns how many.
    std::size_t init_matching(std::string_view entries, unsigned long long seed) {
        std::size_t n = 0;
        for (std::size_t s = 0; s < entries_.size(); ++s)
            if (detail::matched_by_entries(entries, entries_[s].name)) init_default(s, seed), ++n;
        return n;
    }
    /// Sets one parameter's values with fn(rng, index) for each element.
    void init(std::string_view name, const std::function<T(std::mt19937_64&, std::size_t)>& fn,
              unsigned long long seed = 0) {
        std::size_t s = slot(name);
        std::mt19937_64 rng(seed ^ std::hash<std::string_view>{}(name));
        for (std::size_t i = 0; i < entries_[s].shape.size(); ++i) value(s)[i] = fn(rng, i);
    }

    // ---------------------------------------------------------------- strictness
    /// A strict store refuses new parameters from programs: a program compiled over it that needs a
    /// parameter the store lacks throws ctg::error listing every missing name with the closest names
    /// present, and adds nothing (a misspelt prefix would otherwise give zero-initialised weights and
    /// wrong outputs without a word). Off for a new store (a program's own, or one programs fill);
    /// on for a store that a loader has filled from a file (nn::load_torch, nn::load_hf_gpt2). To add
    /// new parameters beside loaded ones (a new head over a loaded encoder), call strict(false)
    /// before compiling the program over the store. add() itself is never refused.
    void strict(bool on) { strict_ = on; }
    /// Whether the store refuses new parameters from programs (see strict(bool)).
    bool strict() const { return strict_; }

private:
    std::size_t grad_offset_of(std::size_t slot) const {
        if (entries_[slot].frozen)
            throw error("ctg::parameter_store: parameter '" + entries_[slot].name +
                        "' is frozen (options::frozen or options::trainable of the program that trains it): it has no gradient");
        return entries_[slot].grad_offset;
    }
    void mark_stale(std::size_t slot) {
        if (bf16_on_) bf16_stale_[slot] = 1, any_stale_ = true;
        if (extension_) extension_->values_written(slot);
    }
    void mark_all_stale() {
        if (bf16_on_) std::fill(bf16_stale_.begin(), bf16_stale_.end(), 1), any_stale_ = true;
        if (extension_) extension_->values_written(detail::store_extension::all_slots);
    }
    void moved() {
        if constexpr (std::is_same_v<T, float>)
            if (extension_) extension_->values_moved(this, values_.data(), values_.data() + values_.size());
    }
    void resize_bf16() {
        if (!bf16_on_) {
            bf16_.clear(), bf16_stale_.clear();
            return;
        }
        bf16_.resize(total_, 0);
        bf16_stale_.resize(entries_.size(), 1);
        any_stale_ = true;
        if constexpr (std::is_same_v<T, float>)
            kernels::bf16_copies::instance().put(this, values_.data(), values_.data() + values_.size(), bf16_.data());
    }

    void init_default(std::size_t s, unsigned long long seed) {
        const entry& e = entries_[s];
        T* v = value(s);
        rshape layer;  // one layer's shape
        layer.rank = e.shape.rank - e.layer_axes;
        for (std::size_t a = 0; a < layer.rank; ++a) layer.d[a] = e.shape.d[a + e.layer_axes];
        if (layer.rank <= 1) {
            const bool gain = e.name.ends_with("weight") || e.name.ends_with("gamma");
            std::fill(v, v + e.shape.size(), T(gain ? 1 : 0));
            return;
        }
        const double fan_out = double(layer.cols());
        const double fan_in = double(layer.rows());
        if (e.name.ends_with("lora_B")) {  // (LoRA: the adapter adds nothing until it trains)
            std::fill(v, v + e.shape.size(), T(0));
            return;
        }
        // LoRA's A as PEFT's kaiming_uniform_(a = sqrt(5)) of its (r, In) weight: bound 1/sqrt(In).
        const double a = e.name.ends_with("lora_A") ? 1.0 / std::sqrt(fan_in) : std::sqrt(6.0 / (fan_in + fan_out));
        // Each parameter gets its own stream (seed mixed with its name), so adding a parameter does
        // not change the others' initial values.
        std::mt19937_64 rng(seed ^ (std::hash<std::string>{}(e.name) * 0x9E3779B97F4A7C15ULL));
        std::uniform_real_distribution<double> u(-a, a);
        for (std::size_t i = 0; i < e.shape.size(); ++i) v[i] = T(u(rng));
    }

    std::vector<entry> entries_;
    std::size_t total_ = 0;
    std::size_t grad_total_ = 0;  // elements of the gradients (the parameters that train)
    aligned_vector<T> values_, grads_;
    bool zero_pending_ = false;  // zero_grad() called, not yet carried out (see zero_grad)
    bool bf16_on_ = false, any_stale_ = false;  // bf16 copies kept; some slot's copy is stale
    bool strict_ = false;  // programs may not add parameters (strict(bool))
    aligned_vector<kernels::bf16_bits> bf16_;
    std::vector<unsigned char> bf16_stale_;  // per slot
    std::unique_ptr<detail::store_extension> extension_;  // quantised copies (set_extension), or null

    // The gradients' memory, allocated (zeroed) by the first use: a store that only inference
    // programs and generators read never holds it (GPT-2 small: 650 MB of a decoder's 1.7 GB).
    aligned_vector<T>& gradients() const {
        auto& self = const_cast<parameter_store&>(*this);  // (allocation is not a change of state)
        if (self.grads_.size() != grad_total_) self.grads_.resize(grad_total_, T(0));
        return self.grads_;
    }
    aligned_vector<T>& settled_grads() const {
        auto& self = const_cast<parameter_store&>(*this);  // (a const store never has a pending zero)
        aligned_vector<T>& g = gradients();
        if (zero_pending_) {
            self.zero_pending_ = false;
            if (!g.empty()) std::memset(g.data(), 0, g.size() * sizeof(T));  // (memset(nullptr, 0, 0) is UB)
        }
        return g;
    }
};

// The store's members for float and double are compiled once, in the library (include/ctgraph/
// compiled.cpp), where CTG_SEPARATE_COMPILATION is defined (ops/instances.hpp says why).
#if defined(CTG_SEPARATE_COMPILATION)
extern template class parameter_store<float>;
extern template class parameter_store<double>;
#endif

}  // namespace ctg
