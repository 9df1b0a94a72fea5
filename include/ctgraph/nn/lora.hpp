// ctgraph/nn/lora.hpp: low-rank adapters (LoRA, Hu et al. 2021) on a model's projections.
//
//   using adapters = nn::lora<8, 16.0, "q.", "v.">;                  // r 8, alpha 16, on q and v
//   using model = nn::gpt2<50257, 1024, 768, 12, 12, 3072, 0.0, adapters>;
//   auto prog = compile<float, options{.trainable = "*lora_*"}>(model::loss(tokens, targets));
//   prog.params().init_matching("*lora_*", seed);                    // A Kaiming-uniform, B zero
//
// A projection named P (a module's prefix and the projection's: "q.", "blocks.fc1.") that ends
// with one of Targets computes y = x W + b + (alpha / r) (x A) B, with A = `<P>lora_A` (In, r)
// and B = `<P>lora_B` (r, Out) beside `<P>weight` and `<P>bias`; other projections are the plain
// layer. Inside ctg::repeat, A and B are stacked per layer like every block parameter
// (`blocks.q.lora_A`: (L, In, r)). B starts at zero, so the adapted model starts as the base one.
// Freeze the base with options::trainable = "*lora_*" (docs/guide/fine-tuning.md): backward then
// runs the adapters' products and the activations' adjoints, and no x^T dY of a frozen weight.
//
// merge(store) folds each A B into its W (W + (alpha / r) A B) and returns a store without the
// adapters: the base model's programs, decoding path and speed, over the adapted weights.
// save(store, path) / load(store, path) write and read the adapters alone (safetensors, their
// names in the store, the rank, alpha and targets in the metadata); load refuses a file for
// another model or other adapters before it changes anything.
#pragma once
#include <cmath>
#include <map>
#include <string>
#include <string_view>
#include <vector>

#include "ctgraph/error.hpp"
#include "ctgraph/nn/adapter.hpp"
#include "ctgraph/ops/matmul.hpp"
#include "ctgraph/ops/scale.hpp"
#include "ctgraph/params.hpp"
#include "ctgraph/safetensors.hpp"

namespace ctg::nn {

namespace detail {
template <std::size_t N, std::size_t M>
constexpr bool ends_with(const fixed_string<N>& s, const fixed_string<M>& t) {
    return s.view().ends_with(t.view());
}
}  // namespace detail

/// LoRA of rank R and scale Alpha / R on the projections whose names end with one of Targets (see
/// the file comment). Targets name projections as the modules do: "q.", "k.", "v.", "proj." (the
/// attention's), "fc1.", "fc2." (the FFN's), "cross.q." (a decoder's cross-attention), "head.".
template <int R, cval Alpha, fixed_string... Targets>
struct lora {
    static_assert(R >= 1, "ctg::nn::lora: the rank must be at least 1");
    static_assert(sizeof...(Targets) >= 1, "ctg::nn::lora: name the projections to adapt (\"q.\", \"v.\", ...)");
    static constexpr int rank = R;                             ///< r
    static constexpr double alpha = Alpha.value();             ///< alpha
    static constexpr double scaling = Alpha.value() / R;       ///< alpha / r, the adapter's factor
    /// Whether the projection named P has an adapter.
    template <fixed_string P>
    static constexpr bool adapts = (detail::ends_with(P, Targets) || ...);
    /// The projection P (In -> Out) of x: x W + b, plus (alpha / r) (x A) B where it is adapted.
    template <fixed_string P, int In, int Out, expr X>
    static constexpr auto linear(X x) {
        auto base = no_adapter::linear<P, In, Out>(x);
        if constexpr (!adapts<P>) {
            return base;
        } else {
            using A = param<P + fixed_string("lora_A"), In, R>;
            using B = param<P + fixed_string("lora_B"), R, Out>;
            // (the factor on the r-wide product, the smallest tensor of the three)
            return base + scale<cval(Alpha.value() / R)>(x * A{}) * B{};
        }
    }
    /// The targets, space-separated (the adapters' file metadata).
    static std::string targets() {
        std::string s;
        ((s += (s.empty() ? "" : " ") + std::string(Targets.view())), ...);
        return s;
    }

    /// A copy of the store with each adapter folded into its weight, W + (alpha / r) A B (per
    /// layer for stacked ones), and without the adapters: what the base model's programs read.
    /// Throws ctg::error for an adapter without its weight or partner, or with shapes that do not fit.
    template <class T>
    static parameter_store<T> merge(const parameter_store<T>& store) {
        parameter_store<T> out;
        for (std::size_t s = 0; s < store.size(); ++s) {
            const auto& e = store.at(s);
            if (is_adapter(e.name)) continue;
            const std::size_t o = out.add(e.name, e.shape, e.layer_axes);
            std::copy_n(store.value(s), e.shape.size(), out.value(o));
        }
        for (std::size_t s = 0; s < store.size(); ++s) {
            const std::string& name = store.at(s).name;
            if (!name.ends_with("lora_A")) continue;
            const std::string p = name.substr(0, name.size() - 6);
            const long b = store.find(p + "lora_B");
            const long w = out.find(p + "weight");
            if (b < 0 || w < 0)
                throw error("ctg::nn::lora::merge: adapter '" + name + "' has no " + (b < 0 ? "'" + p + "lora_B'" : "weight '" + p + "weight'"));
            const auto &ea = store.at(s), &eb = store.at(std::size_t(b)), &ew = out.at(std::size_t(w));
            const std::size_t la = ea.layer_axes, layers = la ? ea.shape.d[0] : 1;
            const std::size_t in = ea.shape.d[la], r = ea.shape.d[la + 1], cols = eb.shape.d[la + 1];
            if (eb.shape.rank != ea.shape.rank || eb.shape.d[la] != r || ew.layer_axes != la || ew.shape.d[la] != in ||
                ew.shape.d[la + 1] != cols || (la && (eb.shape.d[0] != layers || ew.shape.d[0] != layers)))
                throw error("ctg::nn::lora::merge: '" + name + "' " + to_string(ea.shape) + ", '" + p + "lora_B' " +
                            to_string(eb.shape) + " and '" + p + "weight' " + to_string(ew.shape) + " do not fit");
            const T* A = store.value(s);
            const T* B = store.value(std::size_t(b));
            T* W = out.value(std::size_t(w));
            for (std::size_t l = 0; l < layers; ++l)  // W += scaling A B, in double, one layer at a time
                for (std::size_t i = 0; i < in; ++i)
                    for (std::size_t j = 0; j < cols; ++j) {
                        double acc = 0;
                        for (std::size_t k = 0; k < r; ++k) acc += double(A[(l * in + i) * r + k]) * double(B[(l * r + k) * cols + j]);
                        T& x = W[(l * in + i) * cols + j];
                        x = T(double(x) + scaling * acc);
                    }
        }
        return out;
    }

    /// Writes the store's adapters alone to a safetensors file (atomically): their names in the
    /// store, the values in T; the rank, alpha and targets in the metadata.
    template <class T>
    static void save(const parameter_store<T>& store, const std::string& path) {
        std::vector<safetensors::tensor> ts;
        for (std::size_t s = 0; s < store.size(); ++s)
            if (is_adapter(store.at(s).name))
                ts.push_back(safetensors::from_data(store.at(s).name, store.value(s), store.at(s).shape.to_vector()));
        if (ts.empty()) throw error("ctg::nn::lora::save: the store holds no adapter (no parameter named *lora_A or *lora_B)");
        safetensors::write(path, ts, metadata());
    }
    /// Reads adapters that save() wrote into the store's adapters of the same names: the file must
    /// hold exactly the store's adapters, with their shapes, and this rank, alpha and targets.
    /// Checks everything first (ctg::io_error naming the file and the difference), then copies.
    template <class T>
    static void load(parameter_store<T>& store, const std::string& path) {
        safetensors::metadata meta;
        const std::map<std::string, safetensors::tensor> file = safetensors::read(path, &meta);
        auto fail = [&](const std::string& what) { throw io_error("ctg::nn::lora::load: '" + path + "': " + what); };
        for (const auto& [key, value] : metadata()) {
            const auto it = meta.find(key);
            if (it == meta.end() || it->second != value)
                fail("the adapters were saved with " + key + " " + (it == meta.end() ? "(none)" : it->second) + ", these have " +
                     key + " " + value);
        }
        for (std::size_t s = 0; s < store.size(); ++s) {
            const auto& e = store.at(s);
            if (!is_adapter(e.name)) continue;
            const auto it = file.find(e.name);
            if (it == file.end()) fail("no tensor '" + e.name + "' (adapters of another model?)");
            if (it->second.shape != e.shape.to_vector())
                fail("tensor '" + e.name + "' has shape " + binary_file::shape_string(it->second.shape) + " in the file, " +
                     to_string(e.shape) + " in the store");
        }
        for (const auto& [name, t] : file)
            if (store.find(name) < 0 || !is_adapter(name)) fail("tensor '" + name + "' is not an adapter of this store");
        for (std::size_t s = 0; s < store.size(); ++s)
            if (is_adapter(store.at(s).name)) {
                const auto v = safetensors::to_vector<T>(file.at(store.at(s).name));
                std::copy(v.begin(), v.end(), store.value(s));
            }
    }

private:
    static bool is_adapter(std::string_view name) { return name.ends_with("lora_A") || name.ends_with("lora_B"); }
    static std::map<std::string, std::string> metadata() {
        char a[64];
        std::snprintf(a, sizeof a, "%.17g", alpha);
        return {{"ctgraph.lora.rank", std::to_string(R)}, {"ctgraph.lora.alpha", a}, {"ctgraph.lora.targets", targets()}};
    }
};

}  // namespace ctg::nn
