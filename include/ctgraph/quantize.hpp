// ctgraph/quantize.hpp: weight-only quantised models in files.
//
//   nn::gpt_generator<model, float, precision::f32, precision::f32, weight_format::q4> gen(store, 1, 512);
//   ctg::save_quantized(*store, weight_format::q4, "model.q4.safetensors");  // the 4-bit copies, the float rest
//   ...
//   ctg::load_quantized(*other_store, "model.q4.safetensors");  // codes as saved, not quantised again
//
// A program compiled with options{.weights = weight_format::int8 or q4} quantises, in its store,
// every parameter its products read as a weight (ctg::quantize, graph/ctgraph/quant_store.hpp). save_quantized writes
// the store as safetensors: each parameter with a copy in the format asked for as its codes and
// scales, every other one as F32 under its own name. The tensor names say the scheme:
//
//   <name>.int8         I8   (..., N, K)      column n's K codes, symmetric, in [-127, 127]
//   <name>.int8_scale   F32  (..., N)         column n's scale: W[k][n] = scale[n] code[n][k]
//   <name>.q4_0         U8   (..., N, K/32, 16)  ggml's Q4_0 blocks of column n: byte j holds code
//                                            j (low nibble) and j + 16 (high), code - 8 in [-8, 7]
//   <name>.q4_0_scale   F16  (..., N, K/32)   each block's scale: W = scale (code - 8)
//
// with "..." a stacked parameter's layer axes. N is the product's output size, K its input size:
// for a weight (K, N) read as x W, and for a parameter (N, K) read transposed (a tied head, x E^T),
// whose metadata entry then says "transposed". The metadata holds "ctgraph.quantized.<name>" =
// "int8" | "q4_0" [+ " transposed"] for each quantised parameter.
//
// load_quantized reads such a file into a float store that has the parameters (construct the
// program first, it adds them): the quantised parameters get their copies from the file's codes
// (bit for bit; nothing is quantised again) and their float values become the dequantised weights,
// the others their F32 values. All or nothing: the file is checked whole first (every parameter
// there, with its shape; codes in range) and the store is unchanged if anything is wrong.
#pragma once
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "ctgraph/error.hpp"
#include "ctgraph/kernels/quant.hpp"
#include "ctgraph/params.hpp"
#include "ctgraph/quant_store.hpp"
#include "ctgraph/safetensors.hpp"

namespace ctg {

namespace detail {
inline std::string quantized_scheme(const kernels::quantized_tensor& q) {
    return std::string(q.format == weight_format::int8 ? "int8" : "q4_0") + (q.transposed ? " transposed" : "");
}
inline safetensors::tensor raw_tensor(std::string name, const char* dtype, std::vector<std::size_t> shape, const void* data,
                                      std::size_t bytes) {
    safetensors::tensor t;
    t.name = std::move(name), t.dtype = dtype, t.shape = std::move(shape);
    t.bytes.assign(static_cast<const char*>(data), static_cast<const char*>(data) + bytes);
    return t;
}
}  // namespace detail

/// Writes a float store with its quantised copies in `format` (int8 or q4) as safetensors (see the
/// file comment), atomically: a failed write leaves the previous file. Throws ctg::error when the
/// store has no copy in that format (no program with options{.weights = format} was made over it).
inline void save_quantized(const parameter_store<float>& store, weight_format format, const std::string& path) {
    if (quantized_bytes(store, format) == 0)
        throw error("ctg::save_quantized: the store has no " + std::string(format == weight_format::int8 ? "int8" : format == weight_format::q4 ? "q4" : "quantised") +
                    " copies (a program compiled with options{.weights = ...} over it makes them)");
    std::vector<safetensors::tensor> tensors;
    safetensors::metadata meta{{"ctgraph.format", "quantized weights 1"}};
    for (std::size_t s = 0; s < store.size(); ++s) {
        const auto& e = store.at(s);
        const kernels::quantized_tensor* q = quantized(store, s, format);
        if (!q) {
            tensors.push_back(safetensors::from_data(e.name, store.value(s), e.shape.to_vector()));
            continue;
        }
        std::vector<std::size_t> lead(e.shape.d.begin(), e.shape.d.begin() + (e.shape.rank - 2));
        const std::size_t K = q->matrices.front().K, N = q->matrices.front().N;
        meta["ctgraph.quantized." + e.name] = detail::quantized_scheme(*q);
        auto with = [&](std::initializer_list<std::size_t> tail) {
            std::vector<std::size_t> sh = lead;
            sh.insert(sh.end(), tail);
            return sh;
        };
        if (q->format == weight_format::int8) {
            std::vector<std::int8_t> codes;
            std::vector<float> scales;
            codes.reserve(q->matrices.size() * N * K);
            for (const auto& m : q->matrices)
                for (std::size_t n = 0; n < N; ++n) {
                    codes.insert(codes.end(), m.q8.q.begin() + std::ptrdiff_t(n * m.q8.Kp), m.q8.q.begin() + std::ptrdiff_t(n * m.q8.Kp + K));
                    scales.push_back(m.q8.scale[n]);
                }
            tensors.push_back(detail::raw_tensor(e.name + ".int8", "I8", with({N, K}), codes.data(), codes.size()));
            tensors.push_back(detail::raw_tensor(e.name + ".int8_scale", "F32", with({N}), scales.data(), scales.size() * 4));
        } else {
            std::vector<std::uint8_t> blocks;
            std::vector<std::uint16_t> scales;
            for (const auto& m : q->matrices) {
                blocks.insert(blocks.end(), m.q4.nibbles.begin(), m.q4.nibbles.end());
                scales.insert(scales.end(), m.q4.scale.begin(), m.q4.scale.end());
            }
            tensors.push_back(detail::raw_tensor(e.name + ".q4_0", "U8", with({N, K / 32, 16}), blocks.data(), blocks.size()));
            tensors.push_back(detail::raw_tensor(e.name + ".q4_0_scale", "F16", with({N, K / 32}), scales.data(), scales.size() * 2));
        }
    }
    safetensors::write(path, tensors, meta);
}

/// Reads a file written by save_quantized into a float store that has its parameters (see the file
/// comment). Throws ctg::io_error naming the file and every parameter that is missing, of another
/// shape or dtype, or out of range; the store is then unchanged.
inline void load_quantized(parameter_store<float>& store, const std::string& path) {
    safetensors::metadata meta;
    const auto file = safetensors::read(path, &meta);
    std::vector<std::string> problems;
    std::vector<std::vector<float>> plain(store.size());
    std::vector<std::unique_ptr<kernels::quantized_tensor>> quantised(store.size());
    auto find = [&](const std::string& name, const char* dtype, const std::vector<std::size_t>& shape) -> const safetensors::tensor* {
        auto it = file.find(name);
        if (it == file.end()) return problems.push_back("'" + name + "' is missing"), nullptr;
        if (it->second.dtype != dtype || it->second.shape != shape) {
            std::string want, got;
            for (auto d : shape) want += (want.empty() ? "" : ", ") + std::to_string(d);
            for (auto d : it->second.shape) got += (got.empty() ? "" : ", ") + std::to_string(d);
            problems.push_back("'" + name + "' is " + it->second.dtype + " (" + got + "), the store needs " + dtype + " (" + want + ")");
            return nullptr;
        }
        return &it->second;
    };
    std::size_t used = 0;
    for (std::size_t s = 0; s < store.size(); ++s) {
        const auto& e = store.at(s);
        const auto m = meta.find("ctgraph.quantized." + e.name);
        if (m == meta.end()) {
            if (const auto* t = find(e.name, "F32", e.shape.to_vector())) plain[s] = safetensors::to_vector<float>(*t), ++used;
            continue;
        }
        const std::string scheme = m->second;
        const bool transposed = scheme.ends_with(" transposed");
        const std::string kind = transposed ? scheme.substr(0, scheme.size() - 11) : scheme;
        if ((kind != "int8" && kind != "q4_0") || e.shape.rank < 2) {
            problems.push_back("'" + e.name + "' has scheme '" + scheme + "' (int8 or q4_0 [transposed], for a matrix)");
            continue;
        }
        const std::size_t r0 = e.shape.d[e.shape.rank - 2], r1 = e.shape.d[e.shape.rank - 1];
        const std::size_t K = transposed ? r1 : r0, N = transposed ? r0 : r1, count = e.shape.size() / std::max<std::size_t>(1, r0 * r1);
        std::vector<std::size_t> lead(e.shape.d.begin(), e.shape.d.begin() + (e.shape.rank - 2));
        auto with = [&](std::initializer_list<std::size_t> tail) {
            std::vector<std::size_t> sh = lead;
            sh.insert(sh.end(), tail);
            return sh;
        };
        auto q = std::make_unique<kernels::quantized_tensor>();
        q->transposed = transposed;
        if (kind == "int8") {
            q->format = weight_format::int8;
            const auto* codes = find(e.name + ".int8", "I8", with({N, K}));
            const auto* scales = find(e.name + ".int8_scale", "F32", with({N}));
            if (!codes || !scales) continue;
            used += 2;
            const auto* c = reinterpret_cast<const std::int8_t*>(codes->bytes.data());
            bool in_range = true;
            for (std::size_t mi = 0; mi < count; ++mi) {
                kernels::quantized_weight w;
                w.format = weight_format::int8, w.transposed = transposed, w.K = K, w.N = N;
                w.q8.K = K, w.q8.N = N, w.q8.Kp = (K + 63) / 64 * 64;
                w.q8.q.assign(N * w.q8.Kp, 0);
                w.q8.scale.resize(N);
                w.q8.column_sum.assign(N, 0);
                std::memcpy(w.q8.scale.data(), scales->bytes.data() + mi * N * 4, N * 4);
                for (std::size_t n = 0; n < N; ++n) {
                    in_range = in_range && std::isfinite(w.q8.scale[n]);
                    for (std::size_t k = 0; k < K; ++k) {
                        const std::int8_t v = c[(mi * N + n) * K + k];
                        in_range = in_range && v != -128;
                        w.q8.q[n * w.q8.Kp + k] = v;
                        w.q8.column_sum[n] += v;
                    }
                }
                q->matrices.push_back(std::move(w));
            }
            if (!in_range) problems.push_back("'" + e.name + "' has a code -128 or a scale that is not finite");
        } else {
            q->format = weight_format::q4;
            if (K % 32) {
                problems.push_back("'" + e.name + "' is q4_0 with an input size " + std::to_string(K) + " not a multiple of 32");
                continue;
            }
            const auto* blocks = find(e.name + ".q4_0", "U8", with({N, K / 32, 16}));
            const auto* scales = find(e.name + ".q4_0_scale", "F16", with({N, K / 32}));
            if (!blocks || !scales) continue;
            used += 2;
            const std::size_t per = N * (K / 32);
            bool finite = true;
            for (std::size_t mi = 0; mi < count; ++mi) {
                kernels::quantized_weight w;
                w.format = weight_format::q4, w.transposed = transposed, w.K = K, w.N = N;
                w.q4.K = K, w.q4.N = N, w.q4.G = K / 32;
                w.q4.nibbles.resize(per * 16);
                w.q4.scale.resize(per);
                std::memcpy(w.q4.nibbles.data(), blocks->bytes.data() + mi * per * 16, per * 16);
                std::memcpy(w.q4.scale.data(), scales->bytes.data() + mi * per * 2, per * 2);
                for (auto h : w.q4.scale) finite = finite && (h & 0x7c00) != 0x7c00;
                q->matrices.push_back(std::move(w));
            }
            if (!finite) problems.push_back("'" + e.name + "' has a scale that is not finite");
        }
        quantised[s] = std::move(q);
    }
    if (problems.empty() && used != file.size()) {
        for (const auto& [name, t] : file) {
            bool known = false;
            for (std::size_t s = 0; s < store.size() && !known; ++s) {
                const std::string& n = store.at(s).name;
                known = name == n || name == n + ".int8" || name == n + ".int8_scale" || name == n + ".q4_0" || name == n + ".q4_0_scale";
            }
            if (!known) problems.push_back("'" + name + "' is in the file but not in the store");
        }
    }
    if (!problems.empty()) {
        std::string msg = "ctg::load_quantized: " + path + ":";
        for (const auto& p : problems) msg += "\n  " + p;
        throw io_error(msg);
    }
    for (std::size_t s = 0; s < store.size(); ++s) {
        if (quantised[s]) set_quantized(store, s, std::move(*quantised[s]));
        else std::copy(plain[s].begin(), plain[s].end(), store.value(s));
    }
}

}  // namespace ctg
