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
// This header includes ctgraph/safetensors.hpp (nlohmann-json) and is not part of ctgraph.hpp.
#pragma once
#include <algorithm>
#include <cstddef>
#include <functional>
#include <map>
#include <set>
#include <string>
#include <type_traits>
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

/// Copies between a file tensor's elements and its parameters. ToStore: file -> store.
template <bool ToStore, class T, class Store>
void layout_copy(const layout_entry& e, Store& store, std::conditional_t<ToStore, const T*, T*> file) {
    const auto [R, C] = layout_matrix(e);
    const std::size_t n = e.params.size();
    const std::size_t r = e.split_rows ? R / n : R, c = e.split_rows ? C : C / n;
    for (std::size_t j = 0; j < n; ++j) {
        const std::size_t s = store.slot(e.params[j]);
        const std::size_t off = e.layers ? e.layer * r * c : 0;
        const std::size_t r0 = e.split_rows ? j * r : 0, c0 = e.split_rows ? 0 : j * c;
        auto p = store.value(s) + off;
        for (std::size_t i = 0; i < r; ++i)
            for (std::size_t k = 0; k < c; ++k) {
                const std::size_t f = (r0 + i) * C + c0 + k, q = e.transposed ? k * r + i : i * c + k;
                if constexpr (ToStore) p[q] = e.summed ? p[q] + file[f] : file[f];
                else file[f] = e.summed ? 0 : p[q];
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
    for (std::size_t i = 0; i < layout.size(); ++i)
        layout_copy<true, T>(layout[i], store, safetensors::to_vector<T>(*source[i]).data());
    store.strict(true);
}

/// The layout's tensors from the store, in the store's type. A parameter missing from the store
/// throws ctg::error naming it; one of another shape, ctg::shape_error (`who` begins the message).
template <class T>
std::vector<safetensors::tensor> layout_tensors(const parameter_store<T>& store, const std::vector<layout_param>& params,
                                                const std::vector<layout_entry>& layout, const std::string& who) {
    for (const auto& p : params)
        if (store.at(store.slot(p.name)).shape.to_vector() != p.shape)
            throw shape_error(who + ": parameter '" + p.name + "' has shape " + to_string(store.at(store.slot(p.name)).shape) +
                              " in the store; the model needs " + safetensors::detail::shape_string(p.shape));
    std::vector<safetensors::tensor> out;
    std::vector<T> buf;
    for (const auto& e : layout) {
        std::size_t n = 1;
        for (std::size_t d : e.shape) n *= d;
        buf.assign(n, T(0));
        layout_copy<false, T>(e, store, buf.data());
        out.push_back(safetensors::from_data(e.name, buf.data(), e.shape));
    }
    return out;
}

}  // namespace detail
}  // namespace ctg::nn
