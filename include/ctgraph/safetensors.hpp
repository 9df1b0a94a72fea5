// ctgraph/safetensors.hpp: safetensors files (read, write) and parameter-store save/load.
//
// The format (https://huggingface.co/docs/safetensors): an 8-byte little-endian header length N,
// N bytes of JSON header, then the data buffer. The header is an object
//   {"W": {"dtype": "F32", "shape": [3, 4], "data_offsets": [0, 48]}, ..., "__metadata__": {"k": "v"}}
// whose offsets are relative to the start of the buffer; tensors are little-endian and C-ordered.
//
//   ctg::safetensors::save(store, "model.safetensors");  // one tensor per parameter, F32 or F64
//   ctg::safetensors::load(store, "model.safetensors");  // all-or-nothing: on error nothing changes
//   ctg::safetensors::read("x.safetensors", &metadata);   // every tensor, by name (raw bytes)
//
// Reading checks everything the specification asks for and throws ctg::io_error naming the file
// and, where there is one, the tensor: the header length (at least 2, at most 100,000,000 bytes, not
// past the end of the file), a header that starts with '{' and is valid UTF-8 JSON, an object, with
// no key twice (at any depth), every tensor entry an object of exactly "dtype", "shape" and
// "data_offsets", a known dtype, a shape of non-negative integers whose byte size does not
// overflow, offsets [begin, end) with begin <= end inside the buffer and end - begin equal to
// dtype size x shape, and the tensors covering the buffer exactly (sorted by offset, no overlap,
// no gap, nothing after the last); "__metadata__" must be an object of strings. read() accepts
// every byte-sized dtype of the format (BOOL U8 I8 F8_E5M2 F8_E4M3 I16 U16 F16 BF16 I32 U32 F32 I64
// U64 F64); to_vector converts all but the F8 types; load() takes F32, F64, F16 and BF16 tensors
// (F16 and BF16 widen exactly). The JSON is parsed by nlohmann-json (CMake:
// nlohmann_json::nlohmann_json, through ctgraph::ctgraph). This header is not part of
// ctgraph/ctgraph.hpp (it would bring nlohmann/json.hpp into every translation unit): include it.
//
// write() lays tensors out in the order given, contiguously, after a header padded with spaces to a
// multiple of 8 bytes, and is atomic: a temporary file in the same directory, fsynced, renamed over
// `path`, which is untouched on any failure (ctgraph/binary_file.hpp). POSIX only.
#pragma once
#include <algorithm>
#include <bit>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <limits>
#include <map>
#include <set>
#include <string>
#include <string_view>
#include <type_traits>
#include <utility>
#include <vector>

#include <nlohmann/json.hpp>

#include "ctgraph/binary_file.hpp"
#include "ctgraph/error.hpp"
#include "ctgraph/feed.hpp"  // ctg::feed(prog, name, array): a program's input from a file's array
#include "ctgraph/params.hpp"

/// safetensors files: save and load a parameter store, read and write raw tensors of every dtype
/// and the `__metadata__`; every rule of the format is checked on reading.
namespace ctg::safetensors {

/// One tensor of a file: raw little-endian, C-order bytes and a safetensors dtype.
struct tensor {
    std::string name;  ///< the tensor's key in the header
    std::string dtype;  ///< "F32", "F64", "F16", "BF16", "I64", ... (see the file comment)
    std::vector<std::size_t> shape;  ///< empty for a 0-d tensor (one element)
    std::vector<char> bytes;  ///< size() * itemsize bytes

    /// Number of elements (product of the shape; 1 for a 0-d tensor).
    std::size_t size() const {
        std::size_t n = 1;
        for (std::size_t d : shape) n *= d;
        return n;
    }
};

/// The header's "__metadata__": free-form strings.
using metadata = std::map<std::string, std::string>;

/// Refused above this header length, as the reference implementation does.
inline constexpr std::uint64_t max_header_bytes = 100'000'000;

namespace detail {

using binary_file::byte_count;
using binary_file::in_quotes;
using binary_file::load_le;
using binary_file::shape_string;

/// Size in bytes of one element of a dtype of the format; 0 for anything else.
inline std::size_t itemsize(std::string_view dtype) {
    static constexpr std::pair<std::string_view, std::size_t> table[] = {
        {"BOOL", 1}, {"U8", 1},  {"I8", 1},   {"F8_E5M2", 1}, {"F8_E4M3", 1}, {"I16", 2}, {"U16", 2}, {"F16", 2},
        {"BF16", 2}, {"I32", 4}, {"U32", 4},  {"F32", 4},     {"I64", 8},     {"U64", 8}, {"F64", 8}};
    for (auto [name, size] : table)
        if (name == dtype) return size;
    return 0;
}
inline constexpr const char* known_dtypes = "BOOL U8 I8 F8_E5M2 F8_E4M3 I16 U16 F16 BF16 I32 U32 F32 I64 U64 F64";

template <class T>
constexpr bool is_element = std::is_same_v<T, float> || std::is_same_v<T, double> ||
                            std::is_same_v<T, std::int32_t> || std::is_same_v<T, std::int64_t>;
template <class T>
constexpr const char* dtype_of() {
    static_assert(is_element<T>, "ctg::safetensors: element type must be float, double, int32_t or int64_t");
    if constexpr (std::is_same_v<T, float>) return "F32";
    else if constexpr (std::is_same_v<T, double>) return "F64";
    else if constexpr (std::is_same_v<T, std::int32_t>) return "I32";
    else return "I64";
}

[[noreturn]] inline void fail(const char* fn, std::string_view path, std::string_view tensor_name,
                              const std::string& what) {
    std::string m = std::string("ctg::safetensors::") + fn + ": " + in_quotes(path);
    if (!tensor_name.empty()) m += ": tensor " + in_quotes(tensor_name);
    throw io_error(m + ": " + what);
}

/// IEEE binary16 -> float (exact: every half is a float).
inline float half_to_float(std::uint16_t h) {
    const std::uint32_t sign = std::uint32_t(h & 0x8000u) << 16, exp = (h >> 10) & 0x1Fu, mant = h & 0x3FFu;
    if (exp == 0) {  // zero or subnormal: mant * 2^-24
        const float v = std::ldexp(float(mant), -24);
        return sign ? -v : v;
    }
    const std::uint32_t bits = exp == 0x1F ? sign | 0x7F800000u | (mant << 13)  // inf, NaN (payload kept)
                                           : sign | ((exp + 112) << 23) | (mant << 13);
    return std::bit_cast<float>(bits);
}
/// bfloat16 -> float (the upper half of a float's bits).
inline float bf16_to_float(std::uint16_t h) { return std::bit_cast<float>(std::uint32_t(h) << 16); }

/// Element i of a tensor's bytes as S (a stored type), with F16/BF16/BOOL read through their loaders.
struct f16_tag {};
struct bf16_tag {};
struct bool_tag {};
template <class S>
auto element(const char* p) {
    if constexpr (std::is_same_v<S, f16_tag>) return half_to_float(load_le<std::uint16_t>(p));
    else if constexpr (std::is_same_v<S, bf16_tag>) return bf16_to_float(load_le<std::uint16_t>(p));
    else if constexpr (std::is_same_v<S, bool_tag>) return std::uint8_t(*p != 0);
    else return load_le<S>(p);
}
template <class S>
constexpr std::size_t stored_size() {
    if constexpr (std::is_same_v<S, f16_tag> || std::is_same_v<S, bf16_tag>) return 2;
    else if constexpr (std::is_same_v<S, bool_tag>) return 1;
    else return sizeof(S);
}

template <class T, class S>
void convert(const tensor& t, std::vector<T>& out) {
    const std::size_t n = t.size();
    out.resize(n);
    for (std::size_t i = 0; i < n; ++i) {
        const auto v = element<S>(t.bytes.data() + i * stored_size<S>());
        using V = decltype(v);
        bool ok = true;
        if constexpr (std::is_floating_point_v<T>) {
            out[i] = T(v);
        } else if constexpr (std::is_floating_point_v<V>) {  // float -> int: exact values only
            ok = std::isfinite(v) && v == std::trunc(v) && double(v) >= double(std::numeric_limits<T>::min()) &&
                 double(v) < -double(std::numeric_limits<T>::min());
            if (ok) out[i] = T(v);
        } else {
            ok = std::in_range<T>(v);
            if (ok) out[i] = T(v);
        }
        if (!ok) {
            const std::string value = [&] {  // a float's own shortest digits: 3.0000002 is not "3.000000"
                if constexpr (std::is_floating_point_v<V>) return ctg::detail::shortest_text(v);
                else return std::to_string(v);
            }();
            throw io_error("ctg::safetensors::to_vector: tensor " + in_quotes(t.name) + ": element " +
                           std::to_string(i) + " (" + value + ") is not representable as " + dtype_of<T>());
        }
    }
}

/// Checks the tensors and metadata a writer is given; returns each tensor's byte size.
inline void check_for_write(const std::vector<tensor>& tensors, const metadata& meta, std::string_view path) {
    std::set<std::string_view> seen;
    for (const tensor& t : tensors) {
        auto bad = [&](const std::string& what) { fail("write", path, t.name.empty() ? "" : t.name, what); };
        if (t.name.empty()) bad("a tensor has an empty name");
        if (t.name == "__metadata__") bad("the name is reserved for the metadata");
        if (!seen.insert(t.name).second) bad("duplicate name");
        const std::size_t item = itemsize(t.dtype);
        if (item == 0) bad("unknown dtype " + in_quotes(t.dtype) + "; known: " + known_dtypes);
        std::size_t want = 0;
        if (!byte_count(t.shape, item, want) || want != t.bytes.size())
            bad(std::to_string(t.bytes.size()) + " bytes do not match shape " + shape_string(t.shape) +
                " of dtype " + t.dtype);
        try {
            (void)nlohmann::json(t.name).dump();
        } catch (const nlohmann::json::exception&) {
            bad("the name is not valid UTF-8");
        }
    }
    for (const auto& [k, v] : meta) {
        try {
            (void)nlohmann::json(k).dump(), (void)nlohmann::json(v).dump();
        } catch (const nlohmann::json::exception&) {
            fail("write", path, {}, "metadata entry " + in_quotes(k) + " is not valid UTF-8");
        }
    }
}

/// The bytes before the data: the 8-byte header length and the JSON header, padded with spaces so
/// that the data starts at a multiple of 8. Tensors are laid out in the order given. The tensors
/// must have passed check_for_write.
inline std::string file_header(const std::vector<tensor>& tensors, const metadata& meta, std::string_view path) {
    nlohmann::json h = nlohmann::json::object();
    if (!meta.empty()) h["__metadata__"] = meta;
    std::uint64_t at = 0;
    for (const tensor& t : tensors) {
        h[t.name] = {{"dtype", t.dtype}, {"shape", t.shape}, {"data_offsets", {at, at + t.bytes.size()}}};
        at += t.bytes.size();
    }
    std::string json = h.dump();
    json.append((8 - json.size() % 8) % 8, ' ');
    if (json.size() > max_header_bytes)
        fail("write", path, {}, "header of " + std::to_string(json.size()) + " bytes exceeds the format's limit of " +
                                    std::to_string(max_header_bytes));
    std::string out;
    for (int i = 0; i < 8; ++i) out += char((std::uint64_t(json.size()) >> (8 * i)) & 0xFF);
    return out + json;
}

/// Parses a whole safetensors file held in memory; `path` only names it in messages.
// (A template of nothing so that a program can compile it once: CTG_SEPARATE_COMPILATION, at the end.)
template <class = void>
std::map<std::string, tensor> parse_file(binary_file::bytes_view f, const std::string& path, metadata* meta) {
    using nlohmann::json;
    auto bad = [&](const std::string& what) { fail("read", path, {}, what); };
    if (f.n == 0) bad("file is empty");
    if (f.n < 8) bad("too short for a safetensors file (" + std::to_string(f.n) + " bytes): truncated");
    const std::uint64_t hlen = f.u64(0);
    if (hlen > max_header_bytes)
        bad("header length " + std::to_string(hlen) + " is over the format's limit of " +
            std::to_string(max_header_bytes) + " bytes: corrupt or not a safetensors file");
    if (hlen > f.n - 8)
        bad("header length " + std::to_string(hlen) + " runs past the end of the file (" + std::to_string(f.n) +
            " bytes): truncated or not a safetensors file");
    if (hlen < 2) bad("header length " + std::to_string(hlen) + " is too short for a JSON object");
    const char* text = reinterpret_cast<const char*>(f.p) + 8;
    if (text[0] != '{') bad("header does not start with '{': not a safetensors file");
    // JSON text never holds a raw NUL, and nlohmann-json would take one for the end of the input.
    if (const void* nul = std::memchr(text, 0, std::size_t(hlen)))
        bad("header is not valid JSON: a NUL byte at offset " +
            std::to_string(static_cast<const char*>(nul) - text) + " of the header");

    // Duplicate keys: nlohmann-json keeps the last silently; the callback sees every key of every
    // object (one key set per open object).
    std::vector<std::set<std::string>> open;
    std::string top_key, dup_key, dup_owner;  // dup_owner: the top-level key the duplicate is under
    bool dup = false, dup_top = false;
    const json::parser_callback_t watch = [&](int /*depth*/, json::parse_event_t e, json& v) {
        if (e == json::parse_event_t::object_start) {
            open.emplace_back();
        } else if (e == json::parse_event_t::object_end) {
            if (!open.empty()) open.pop_back();
        } else if (e == json::parse_event_t::key && !open.empty() && v.is_string()) {
            const std::string& k = v.get_ref<const std::string&>();
            if (open.size() == 1) top_key = k;
            if (!open.back().insert(k).second && !dup) dup = true, dup_key = k, dup_top = open.size() == 1, dup_owner = top_key;
        }
        return true;
    };
    json h;
    try {
        h = json::parse(text, text + hlen, watch);
    } catch (const json::exception& e) {
        bad(std::string("header is not valid JSON: ") + e.what());
    }
    if (dup) {
        if (dup_top) bad("the header names " + in_quotes(dup_key) + " twice");
        if (dup_owner == "__metadata__") bad("\"__metadata__\" names " + in_quotes(dup_key) + " twice");
        fail("read", path, dup_owner, "its entry names " + in_quotes(dup_key) + " twice");
    }
    if (!h.is_object()) bad("header is not a JSON object");

    const std::uint64_t buffer = f.n - 8 - hlen;
    const unsigned char* data = f.p + 8 + hlen;
    std::map<std::string, tensor> out;
    struct span {
        std::uint64_t begin, end;
        const std::string* name;
    };
    std::vector<span> spans;
    metadata meta_found;
    for (const auto& kv : h.items()) {
        const std::string& name = kv.key();  // not a structured binding: clang 14 cannot capture one
        const json& v = kv.value();
        if (name == "__metadata__") {
            if (!v.is_object()) bad("\"__metadata__\" is not an object");
            for (const auto& [k, s] : v.items()) {
                if (!s.is_string())
                    bad("\"__metadata__\" entry " + in_quotes(k) + " is a " + s.type_name() + ", not a string");
                meta_found.emplace(k, s.template get<std::string>());  // (template: a structured binding is dependent here)
            }
            continue;
        }
        auto tbad = [&](const std::string& what) { fail("read", path, name, what); };
        if (name.empty()) tbad("empty tensor name");
        if (!v.is_object()) tbad(std::string("entry is a ") + v.type_name() + ", not an object");
        for (const auto& [k, unused] : v.items()) {
            (void)unused;
            if (k != "dtype" && k != "shape" && k != "data_offsets")
                tbad("unexpected key " + in_quotes(k) + " (an entry holds \"dtype\", \"shape\" and \"data_offsets\")");
        }
        if (!v.contains("dtype") || !v.contains("shape") || !v.contains("data_offsets"))
            tbad("entry lacks one of \"dtype\", \"shape\", \"data_offsets\"");
        const json &dt = v.at("dtype"), &sh = v.at("shape"), &off = v.at("data_offsets");

        tensor t;
        t.name = name;
        if (!dt.is_string()) tbad(std::string("\"dtype\" is a ") + dt.type_name() + ", not a string");
        t.dtype = dt.get<std::string>();
        const std::size_t item = itemsize(t.dtype);
        if (item == 0) tbad("unknown dtype " + in_quotes(t.dtype) + "; known: " + known_dtypes);
        if (!sh.is_array()) tbad(std::string("\"shape\" is a ") + sh.type_name() + ", not an array");
        for (const json& d : sh) {
            if (!d.is_number_unsigned() || !std::in_range<std::size_t>(d.get<std::uint64_t>()))
                tbad("\"shape\" holds " + (d.is_number() ? d.dump() : std::string("a ") + d.type_name()) +
                     ", not a non-negative integer");
            t.shape.push_back(std::size_t(d.get<std::uint64_t>()));
        }
        std::size_t want = 0;
        if (!byte_count(t.shape, item, want)) tbad("shape " + shape_string(t.shape) + " overflows");
        if (!off.is_array() || off.size() != 2 || !off[0].is_number_unsigned() || !off[1].is_number_unsigned())
            tbad("\"data_offsets\" is not [begin, end] of two non-negative integers");
        const std::uint64_t begin = off[0].get<std::uint64_t>(), end = off[1].get<std::uint64_t>();
        const std::string range = "[" + std::to_string(begin) + ", " + std::to_string(end) + ")";
        if (begin > end) tbad("\"data_offsets\" " + range + " end before they begin");
        if (end > buffer)
            tbad("\"data_offsets\" " + range + " run past the end of the data (" + std::to_string(buffer) +
                 " bytes): truncated or corrupt");
        if (end - begin != want)
            tbad("\"data_offsets\" " + range + " hold " + std::to_string(end - begin) + " bytes but shape " +
                 shape_string(t.shape) + " of dtype " + t.dtype + " takes " + std::to_string(want));
        t.bytes.assign(data + begin, data + end);
        const auto it = out.emplace(name, std::move(t)).first;
        spans.push_back({begin, end, &it->first});
    }

    // The tensors must cover the data exactly: in offset order, each begins where the last ended.
    std::sort(spans.begin(), spans.end(), [](const span& a, const span& b) {
        return a.begin != b.begin ? a.begin < b.begin : a.end < b.end;
    });
    std::uint64_t at = 0;
    const std::string* last = nullptr;
    for (const span& s : spans) {
        if (s.begin < at)
            fail("read", path, *s.name,
                 "data [" + std::to_string(s.begin) + ", " + std::to_string(s.end) + ") overlaps tensor " +
                     in_quotes(*last) + "'s, which ends at " + std::to_string(at));
        if (s.begin > at)
            fail("read", path, *s.name,
                 "bytes [" + std::to_string(at) + ", " + std::to_string(s.begin) +
                     ") of the data before it belong to no tensor: corrupt");
        at = s.end;
        last = s.name;
    }
    if (at != buffer)
        bad("the last " + std::to_string(buffer - at) + " bytes of the data (" + std::to_string(buffer) +
            " bytes) belong to no tensor: corrupt");
    if (meta) *meta = std::move(meta_found);
    return out;
}

}  // namespace detail

/// Reads every tensor of a safetensors file (and, when `meta` is given, its "__metadata__").
/// Throws io_error on any malformed input (see the file comment).
inline std::map<std::string, tensor> read(const std::string& path, metadata* meta = nullptr) {
    const std::vector<unsigned char> buf = binary_file::slurp(path, "ctg::safetensors::read");
    return detail::parse_file({buf.data(), buf.size()}, path, meta);
}

/// The same, from a file held in memory (`size` bytes at `data`); `name` stands for the file in messages.
inline std::map<std::string, tensor> parse(const void* data, std::size_t size, const std::string& name = "<memory>",
                                           metadata* meta = nullptr) {
    return detail::parse_file({static_cast<const unsigned char*>(data), size}, name, meta);
}

namespace detail {
/// safetensors::write's work (a template of nothing, as parse_file).
template <class = void>
void write_file(const std::string& path, const std::vector<tensor>& tensors, const metadata& meta) {
    check_for_write(tensors, meta, path);
    const std::string header = file_header(tensors, meta, path);
    binary_file::atomic_file out(path, "ctg::safetensors::write");
    out.write(header.data(), header.size());
    for (const tensor& t : tensors) out.write(t.bytes.data(), t.bytes.size());
    out.commit();
}
}  // namespace detail

/// Writes tensors (in this order) and metadata as a safetensors file, atomically.
inline void write(const std::string& path, const std::vector<tensor>& tensors, const metadata& meta = {}) {
    detail::write_file(path, tensors, meta);
}

/// A tensor of `shape` holding a copy of data[0 .. product(shape)); T: float, double, int32_t, int64_t.
template <class T>
tensor from_data(std::string name, const T* data, std::vector<std::size_t> shape) {
    tensor t{std::move(name), detail::dtype_of<T>(), std::move(shape), {}};
    std::size_t bytes = 0;
    if (!detail::byte_count(t.shape, sizeof(T), bytes))
        throw io_error("ctg::safetensors::from_data: tensor " + detail::in_quotes(t.name) + ": shape " +
                       detail::shape_string(t.shape) + " overflows");
    t.bytes.resize(bytes);
    binary_file::store_le(data, t.size(), t.bytes.data());
    return t;
}

/// The tensor's elements converted to T (float, double, int32_t, int64_t) from any dtype but the F8
/// ones (BOOL gives 0 and 1). Integer targets take only exactly representable values; anything
/// else throws io_error.
template <class T>
std::vector<T> to_vector(const tensor& t) {
    static_assert(detail::is_element<T>, "ctg::safetensors::to_vector: T must be float, double, int32_t or int64_t");
    auto bad = [&](const std::string& what) {
        throw io_error("ctg::safetensors::to_vector: tensor " + detail::in_quotes(t.name) + ": " + what);
    };
    const std::size_t item = detail::itemsize(t.dtype);
    std::size_t want = 0;
    if (item == 0 || t.dtype.starts_with("F8_"))
        bad("cannot convert dtype " + detail::in_quotes(t.dtype) + " (F8 types and unknown dtypes)");
    if (!detail::byte_count(t.shape, item, want) || want != t.bytes.size())
        bad(std::to_string(t.bytes.size()) + " bytes do not match shape " + detail::shape_string(t.shape) +
            " of dtype " + t.dtype);
    std::vector<T> out;
    const std::string& d = t.dtype;
    if (d == "F32") detail::convert<T, float>(t, out);
    else if (d == "F64") detail::convert<T, double>(t, out);
    else if (d == "F16") detail::convert<T, detail::f16_tag>(t, out);
    else if (d == "BF16") detail::convert<T, detail::bf16_tag>(t, out);
    else if (d == "BOOL") detail::convert<T, detail::bool_tag>(t, out);
    else if (d == "I8") detail::convert<T, std::int8_t>(t, out);
    else if (d == "U8") detail::convert<T, std::uint8_t>(t, out);
    else if (d == "I16") detail::convert<T, std::int16_t>(t, out);
    else if (d == "U16") detail::convert<T, std::uint16_t>(t, out);
    else if (d == "I32") detail::convert<T, std::int32_t>(t, out);
    else if (d == "U32") detail::convert<T, std::uint32_t>(t, out);
    else if (d == "I64") detail::convert<T, std::int64_t>(t, out);
    else detail::convert<T, std::uint64_t>(t, out);
    return out;
}

/// Saves every parameter of the store as one tensor, named as the parameter, of the store's dtype
/// (F32 or F64), in the store's order.
template <class T>
void save(const parameter_store<T>& store, const std::string& path, const metadata& meta = {}) {
    static_assert(std::is_same_v<T, float> || std::is_same_v<T, double>, "ctg::safetensors::save: float or double store");
    std::vector<tensor> tensors;
    tensors.reserve(store.size());
    for (std::size_t s = 0; s < store.size(); ++s)
        tensors.push_back(from_data(store.at(s).name, store.value(s), store.at(s).shape.to_vector()));
    write(path, tensors, meta);
}

/// Loads every parameter of the store from a safetensors file: each must be there with the same
/// shape, as F32, F64, F16 or BF16 (converted to T). Tensors the store does not have are an error
/// unless allow_extra. All-or-nothing: everything is checked and converted first; on error the store
/// is unchanged and the io_error lists every missing, extra or mismatched tensor.
template <class T>
void load(parameter_store<T>& store, const std::string& path, bool allow_extra) {
    static_assert(std::is_same_v<T, float> || std::is_same_v<T, double>, "ctg::safetensors::load: float or double store");
    binary_file::load_store(
        store, read(path), path, "ctg::safetensors::load", "tensors", allow_extra,
        [](const tensor& t) {
            return t.dtype == "F32" || t.dtype == "F64" || t.dtype == "F16" || t.dtype == "BF16"
                       ? std::string()
                       : " has dtype " + t.dtype + " in the file (parameters take F32, F64, F16 or BF16)";
        },
        [](const tensor& t) { return to_vector<T>(t); });
}

/// Strict load: tensors in the file that the store does not have are an error.
template <class T>
void load(parameter_store<T>& store, const std::string& path) {
    load(store, path, false);
}

// Compiled once where a program defines CTG_SEPARATE_COMPILATION (see kernels/gemm.hpp).
#define CTG_SAFETENSORS_INSTANCES(how)                                                                  \
    how std::map<std::string, tensor> detail::parse_file<void>(binary_file::bytes_view, const std::string&,  \
                                                               metadata*);                               \
    how void detail::write_file<void>(const std::string&, const std::vector<tensor>&, const metadata&);
#if defined(CTG_SEPARATE_COMPILATION)
CTG_SAFETENSORS_INSTANCES(extern template)
#endif

}  // namespace ctg::safetensors
