// ctgraph/nn/checkpoint_layout.hpp: the part shared by the loaders and savers of other frameworks'
// checkpoints (nn/gpt2_hf.hpp: Hugging Face GPT-2; nn/torch_layout.hpp: PyTorch modules).
//
// A layout is a list of entries, one per tensor of the file: its name and shape there, and the
// store parameters it holds. A tensor holds one parameter or several side by side (packed: split
// evenly into row blocks, as nn.MultiheadAttention's in_proj_weight, or column blocks, as GPT-2's
// c_attn), each part the whole parameter or its row `layer` when the parameter is stacked over
// layers (ctg::repeat), each part as it is or transposed (PyTorch's Linear weights are (out, in),
// ctgraph's (in, out)), or added to what an earlier entry loaded (two PyTorch biases summed into
// one). The mapping is by name and each tensor has its one orientation, so a square
// weight cannot be read the wrong way round.
//
// Checking is all-or-nothing and lists every problem: a tensor missing (with the expected shape), of
// another shape (expected and actual), of another dtype (F32, F64, F16 and BF16 are converted), a
// store parameter of another shape; the caller adds its own checks and throws one ctg::io_error.
//
// Saving writes the values, or any other per-parameter array through the same mapping
// (nn::parameter_array: the gradients, nn::what::gradients, or an optimizer's moment), so that a
// gradient can be compared with PyTorch's p.grad under its name and in its orientation. Such a file
// has no tensor for a parameter without an array (a frozen one: PyTorch's p.grad is None), zeros
// for the parts without one of a tensor that packs several parameters, and says both in its
// metadata (layout_save).
// This header includes ctgraph/safetensors.hpp (nlohmann-json) and is not part of ctgraph.hpp.
#pragma once
#include <algorithm>
#include <cstddef>
#include <functional>
#include <map>
#include <set>
#include <string>
#include <type_traits>
#include <utility>
#include <vector>

#include "ctgraph/params.hpp"
#include "ctgraph/safetensors.hpp"

namespace ctg::nn {

/// One tensor of a checkpoint and the store parameters it holds (see the file comment).
struct layout_entry {
    std::string name;                  ///< the tensor's name in the file
    std::vector<std::size_t> shape;    ///< its shape in the file
    std::vector<std::string> params;   ///< the store parameters of its parts, in order
    bool split_rows = false;           ///< parts are row blocks of a 2-D tensor (else blocks of its last axis)
    bool transposed = false;           ///< each part is the transpose of the parameter (2-D tensors only)
    std::size_t layers = 0;            ///< 0: whole parameters; else they are stacked (layers, ...) ...
    std::size_t layer = 0;             ///< ... and this tensor holds row `layer` of each
    /// The tensor is added to its parameters, which an earlier entry loads (nn.RNN's bias_hh into
    /// the one bias of nn::elman, after bias_ih); saved as zeros, so the earlier one holds the sum.
    bool summed = false;
};

/// A store parameter of a layout: its name, its shape (with the layer axis when stacked) and the
/// number of leading layer axes.
struct layout_param {
    std::string name;                ///< the store name
    std::vector<std::size_t> shape;  ///< the shape in the store
    std::size_t layer_axes = 0;      ///< 1 when stacked over layers (ctg::repeat), else 0
};

/// Which per-parameter array a saver (nn::save_torch, nn::save_hf_gpt2) writes, in the checkpoint's
/// names and orientation; also what a parameter_array of one's own is like.
enum class what {
    values,     ///< the parameters' values: the checkpoint itself (the default)
    gradients,  ///< their gradients (parameter_store::grad), to compare with PyTorch's p.grad; none for a frozen one
};

/// A per-parameter array for a saver to write in a checkpoint's layout: the store's values or
/// gradients (from nn::what), or one of one's own, `of(slot)` the array of the store's parameter
/// `slot` (the parameter's shape, stacked layers first), null when it has none (as a frozen one's
/// gradient). `like` says how a tensor that PyTorch adds to another (nn.RNN's bias_hh, added on
/// loading to bias_ih in nn::elman's one bias) is written: what::values, zeros (the other holds the
/// sum: an average of the weights); what::gradients, the array whole in both (the derivative of a
/// sum by either addend: an optimizer's moments).
///
///   nn::save_torch<M>(store, "grads.safetensors", nn::what::gradients);
///   nn::save_torch<M>(store, "m.safetensors", nn::parameter_array<float>("adam.m", nn::what::gradients,
///       [&](std::size_t s) { return store.frozen(s) ? nullptr : m.data() + store.at(s).grad_offset; }));
template <class T>
struct parameter_array {
    /// The store's values (what::values) or gradients (what::gradients); implicit, so that a saver
    /// takes `nn::what::gradients` itself.
    parameter_array(what w)
        : contents(w == what::values ? "values" : "gradients"), like(w), store_values(w == what::values) {}
    /// An array of one's own: `contents` names it in the file's metadata.
    parameter_array(std::string contents, what like, std::function<const T*(std::size_t slot)> of)
        : contents(std::move(contents)), like(like), of(std::move(of)) {}

    std::string contents;  ///< the metadata's "contents" ("values", "gradients", or one's own)
    what like;             ///< how a summed tensor is written (see the struct comment)
    /// Slot -> its array or null; empty for the store's own values and gradients.
    std::function<const T*(std::size_t slot)> of;
    bool store_values = false;  ///< the store's values: the checkpoint, with its metadata alone
};

namespace detail {

/// The rows and columns of an entry's tensor seen as a matrix (a 1-D tensor is one row).
inline std::pair<std::size_t, std::size_t> layout_matrix(const layout_entry& e) {
    if (e.shape.size() == 1) return {1, e.shape[0]};
    return {e.shape[0], e.shape.size() == 2 ? e.shape[1] : 1};
}

/// The shape of one part of an entry as the store holds it (without the layer axis).
inline std::vector<std::size_t> layout_part_shape(const layout_entry& e) {
    const std::size_t n = e.params.size();
    if (e.shape.size() == 1) return {e.shape[0] / n};
    const auto [R, C] = layout_matrix(e);
    const std::size_t r = e.split_rows ? R / n : R, c = e.split_rows ? C : C / n;
    return e.transposed ? std::vector<std::size_t>{c, r} : std::vector<std::size_t>{r, c};
}

/// The parameters of a layout in the order the entries first name them.
inline std::vector<layout_param> layout_params(const std::vector<layout_entry>& layout) {
    std::vector<layout_param> out;
    std::set<std::string> seen;
    for (const auto& e : layout)
        for (const auto& p : e.params) {
            if (!seen.insert(p).second) continue;
            std::vector<std::size_t> s = layout_part_shape(e);
            if (e.layers) s.insert(s.begin(), e.layers);
            out.push_back({p, s, e.layers ? 1u : 0u});
        }
    return out;
}

/// Copies between a file tensor's elements and the arrays of its parts (`part[j]`: the whole array
/// of parameter e.params[j], with the layer axis when stacked). ToStore: file -> arrays, a summed
/// entry added to them; else arrays -> file, a null part as zeros, a summed entry as zeros when
/// `split_sums` (values: the earlier entry holds the sum) and as the array itself otherwise.
template <bool ToStore, class T>
void layout_copy(const layout_entry& e, const std::vector<std::conditional_t<ToStore, T*, const T*>>& part,
                 std::conditional_t<ToStore, const T*, T*> file, bool split_sums = true) {
    const auto [R, C] = layout_matrix(e);
    const std::size_t n = e.params.size();
    const std::size_t r = e.split_rows ? R / n : R, c = e.split_rows ? C : C / n;
    for (std::size_t j = 0; j < n; ++j) {
        const std::size_t off = e.layers ? e.layer * r * c : 0;
        const std::size_t r0 = e.split_rows ? j * r : 0, c0 = e.split_rows ? 0 : j * c;
        const auto p = part[j] ? part[j] + off : nullptr;
        for (std::size_t i = 0; i < r; ++i)
            for (std::size_t k = 0; k < c; ++k) {
                const std::size_t f = (r0 + i) * C + c0 + k, q = e.transposed ? k * r + i : i * c + k;
                if constexpr (ToStore) p[q] = e.summed ? p[q] + file[f] : file[f];
                else file[f] = !p || (e.summed && split_sums) ? T(0) : p[q];
            }
    }
}

/// Whether a loader converts this dtype.
inline bool layout_dtype_ok(const safetensors::tensor& t) {
    return t.dtype == "F32" || t.dtype == "F64" || t.dtype == "F16" || t.dtype == "BF16";
}

/// Checks the store's existing parameters against the layout's shapes and each entry against the
/// file (`file`: the names the layout uses, each to its tensor). Each problem goes to `problem`;
/// each entry found goes into `used`; returns each entry's tensor when it passed (null otherwise).
/// `accepted` ends a dtype problem, e.g. " (nn::gpt2 takes F32, F64, F16 or BF16)".
template <class T>
std::vector<const safetensors::tensor*> layout_match(const parameter_store<T>& store, const std::vector<layout_param>& params,
                                                     const std::vector<layout_entry>& layout,
                                                     const std::map<std::string, const safetensors::tensor*>& file,
                                                     std::set<std::string>& used, const std::string& accepted,
                                                     const std::function<void(const std::string&)>& problem) {
    using safetensors::detail::in_quotes;
    using safetensors::detail::shape_string;
    for (const auto& p : params)
        if (const long s = store.find(p.name); s >= 0 && store.at(std::size_t(s)).shape.to_vector() != p.shape)
            problem("parameter " + in_quotes(p.name) + " has shape " + to_string(store.at(std::size_t(s)).shape) +
                    " in the store; the model needs " + shape_string(p.shape));
    std::vector<const safetensors::tensor*> source(layout.size(), nullptr);
    for (std::size_t i = 0; i < layout.size(); ++i) {
        const layout_entry& e = layout[i];
        const auto it = file.find(e.name);
        if (it == file.end()) {
            problem("tensor " + in_quotes(e.name) + " is missing (expected shape " + shape_string(e.shape) + ")");
            continue;
        }
        used.insert(e.name);
        const safetensors::tensor& t = *it->second;
        if (t.shape != e.shape)
            problem("tensor " + in_quotes(t.name) + " has shape " + shape_string(t.shape) + " in the file; expected " +
                    shape_string(e.shape));
        else if (!layout_dtype_ok(t))
            problem("tensor " + in_quotes(t.name) + " has dtype " + t.dtype + accepted);
        else
            source[i] = &t;
    }
    return source;
}

/// Adds a layout's parameters to the store (those there already must have their shapes).
template <class T>
void layout_add(parameter_store<T>& store, const std::vector<layout_param>& params) {
    for (const auto& p : params) {
        rshape s{p.shape.size(), {}};
        std::copy(p.shape.begin(), p.shape.end(), s.d.begin());
        store.add(p.name, s, p.layer_axes);
    }
}

/// Writes every checked tensor into the store, one converted tensor at a time (peak memory: the
/// file, the store and one tensor), and makes the store strict (parameter_store::strict): a program
/// compiled over it then refuses to add a parameter the file did not give. `source` is
/// layout_match's result with no null left.
template <class T>
void layout_load(parameter_store<T>& store, const std::vector<layout_param>& params, const std::vector<layout_entry>& layout,
                 const std::vector<const safetensors::tensor*>& source) {
    layout_add(store, params);
    for (std::size_t i = 0; i < layout.size(); ++i) {
        std::vector<T*> part;
        for (const auto& p : layout[i].params) part.push_back(store.value(store.slot(p)));
        layout_copy<true, T>(layout[i], part, safetensors::to_vector<T>(*source[i]).data());
    }
    store.strict(true);
}

/// A layout's tensors of one per-parameter array, and the names of those left out (no part has an
/// array: a frozen parameter's gradient) and of those holding zeros for the parts without one.
struct layout_output {
    std::vector<safetensors::tensor> tensors;  ///< in the layout's order
    std::vector<std::string> left_out;         ///< tensors not written
    std::vector<std::string> zero_parts;       ///< tensors written with zeros for some parts
};

/// The layout's tensors of `array` from the store, in the store's type. A parameter missing from the
/// store throws ctg::error naming it; one of another shape, ctg::shape_error (`who` begins the message).
template <class T>
layout_output layout_tensors(const parameter_store<T>& store, const std::vector<layout_entry>& layout,
                             const parameter_array<T>& array, const std::string& who) {
    for (const auto& p : layout_params(layout))
        if (store.at(store.slot(p.name)).shape.to_vector() != p.shape)
            throw shape_error(who + ": parameter '" + p.name + "' has shape " + to_string(store.at(store.slot(p.name)).shape) +
                              " in the store; the model needs " + safetensors::detail::shape_string(p.shape));
    auto of = [&](std::size_t s) -> const T* {
        if (array.of) return array.of(s);
        if (array.store_values) return store.value(s);
        return store.frozen(s) ? nullptr : store.grad(s);
    };
    layout_output out;
    std::vector<T> buf;
    for (const auto& e : layout) {
        std::vector<const T*> part;
        for (const auto& p : e.params) part.push_back(of(store.slot(p)));
        const auto missing = std::size_t(std::count(part.begin(), part.end(), nullptr));
        if (missing == part.size()) {
            out.left_out.push_back(e.name);
            continue;
        }
        if (missing) out.zero_parts.push_back(e.name);
        std::size_t n = 1;
        for (std::size_t d : e.shape) n *= d;
        buf.assign(n, T(0));
        layout_copy<false, T>(e, part, buf.data(), array.like == what::values);
        out.tensors.push_back(safetensors::from_data(e.name, buf.data(), e.shape));
    }
    return out;
}

/// Writes the layout's tensors of `array` to `path` (safetensors::write: atomically), with the
/// metadata {"format": "pt"} that transformers' loader asks for; a file of any other array than the
/// store's values adds "contents" (its name: "gradients"), "frozen" (the tensors left out, their
/// parameters having no array: PyTorch's p.grad is None for a frozen parameter) and "partly_frozen"
/// (the tensors packing several parameters of which some had none, written as zeros; PyTorch's
/// p.grad after zeroing those rows or columns), each a list of names separated by spaces.
template <class T>
void layout_save(const parameter_store<T>& store, const std::vector<layout_entry>& layout, const parameter_array<T>& array,
                 const std::string& path, const std::string& who) {
    const layout_output out = layout_tensors(store, layout, array, who);
    safetensors::metadata meta{{"format", "pt"}};
    if (!array.store_values) {
        auto list = [](const std::vector<std::string>& names) {
            std::string s;
            for (const auto& n : names) s += (s.empty() ? "" : " ") + n;
            return s;
        };
        meta["contents"] = array.contents;
        meta["frozen"] = list(out.left_out);
        meta["partly_frozen"] = list(out.zero_parts);
    }
    safetensors::write(path, out.tensors, meta);
}

}  // namespace detail
}  // namespace ctg::nn
