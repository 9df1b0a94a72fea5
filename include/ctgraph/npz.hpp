// ctgraph/npz.hpp: NumPy .npz archives (read, write) and parameter-store save/load.
//
// An .npz is a ZIP archive of .npy files, one per array. This header implements the ZIP container
// itself, with zlib for DEFLATE and CRC-32. It reads what numpy.savez writes (STORED entries) and
// what numpy.savez_compressed writes (DEFLATE entries, inflated by zlib), with ZIP64 extra fields,
// ZIP64 end-of-central-directory records, data descriptors and NPY format versions 1.0, 2.0 and
// 3.0. It writes STORED entries only, as numpy.savez does: parameters are float data that deflate
// shrinks by a few per cent, and stored data stays 64-byte aligned in the file (NPY 1.0 headers
// padded as numpy pads them, a plain ZIP without ZIP64; archives of 4 GiB or more are refused).
//
//   ctg::npz::save(store, "model.npz");   // one array per parameter, dtype of the store
//   ctg::npz::load(store, "model.npz");   // all-or-nothing: on any error the store is unchanged
//   ctg::npz::read("x.npz");              // every array, by name; parse(bytes, n, name) from memory
//
// Every malformed input (truncated, corrupt, Fortran-ordered, big-endian, an unknown dtype, a size
// that disagrees with the shape, a CRC mismatch; for DEFLATE entries also a corrupt or truncated
// stream, a stream that inflates to more or fewer bytes than the declared size, or a declared size
// beyond what DEFLATE can expand the compressed bytes to) throws ctg::io_error naming the file and
// the entry; every offset read from the file is bounds-checked, and no allocation exceeds the
// declared sizes once those are checked against the file. write() is atomic: it writes
// `path + ".tmp.<pid>"` in the same directory, fsyncs and closes it, checks every step, then renames
// it over `path`; on any failure the temporary file is removed and `path` is left as it was.
// POSIX only (open/write/fsync/rename). Links zlib (CMake: ZLIB::ZLIB, through ctgraph::ctgraph).
#pragma once
#include <algorithm>
#include <array>
#include <bit>
#include <cerrno>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <limits>
#include <map>
#include <set>
#include <string>
#include <string_view>
#include <tuple>
#include <type_traits>
#include <utility>
#include <vector>

#include <zlib.h>

#include "ctgraph/binary_file.hpp"
#include "ctgraph/error.hpp"
#include "ctgraph/feed.hpp"  // ctg::feed(prog, name, array): a program's input from a file's array
#include "ctgraph/params.hpp"

namespace ctg::npz {

/// One array of an archive: raw little-endian, C-order bytes and a NumPy dtype string.
struct array {
    std::string name;  ///< key in the archive (the entry name without ".npy")
    std::string descr;  ///< "<f4", "<f8", "<i4", "<i8" or "|b1"
    std::vector<std::size_t> shape;  ///< empty for a 0-d array (one element)
    std::vector<char> bytes;  ///< size() * itemsize bytes

    /// Number of elements (product of the shape; 1 for a 0-d array).
    std::size_t size() const {
        std::size_t n = 1;
        for (std::size_t d : shape) n *= d;
        return n;
    }
};

/// CRC-32 (ISO-HDLC, the one ZIP and zlib use), computed by zlib. Chains like zlib:
/// crc32(b, nb, crc32(a, na)) is the CRC of a followed by b.
inline std::uint32_t crc32(const void* data, std::size_t n, std::uint32_t crc = 0) {
    const auto* p = static_cast<const Bytef*>(data);
    uLong c = crc;
    while (n) {  // zlib takes at most 4 GiB - 1 per call (uInt)
        const uInt chunk = uInt(std::min<std::size_t>(n, std::numeric_limits<uInt>::max()));
        c = ::crc32(c, p, chunk);
        p += chunk, n -= chunk;
    }
    return std::uint32_t(c);
}

namespace detail {

using binary_file::byte_count;
using binary_file::bytes_view;
using binary_file::in_quotes;
using binary_file::load_le;
using binary_file::mul_ok;
using binary_file::shape_string;
using binary_file::store_le;

/// Size in bytes of one element of a supported dtype; 0 when the dtype is not supported.
inline std::size_t itemsize(std::string_view descr) {
    if (descr == "<f4" || descr == "<i4") return 4;
    if (descr == "<f8" || descr == "<i8") return 8;
    if (descr == "|b1") return 1;
    return 0;
}
inline constexpr const char* supported_dtypes = "<f4 <f8 <i4 <i8 |b1";

template <class T>
constexpr bool is_element = std::is_same_v<T, float> || std::is_same_v<T, double> ||
                            std::is_same_v<T, std::int32_t> || std::is_same_v<T, std::int64_t>;

template <class T>
constexpr const char* descr_of() {
    static_assert(is_element<T>, "ctg::npz: element type must be float, double, int32_t or int64_t");
    if constexpr (std::is_same_v<T, float>) return "<f4";
    else if constexpr (std::is_same_v<T, double>) return "<f8";
    else if constexpr (std::is_same_v<T, std::int32_t>) return "<i4";
    else return "<i8";
}

[[noreturn]] inline void fail(const char* fn, std::string_view path, std::string_view entry, const std::string& what) {
    std::string m = std::string("ctg::npz::") + fn + ": " + in_quotes(path);
    if (!entry.empty()) m += ": entry " + in_quotes(entry);
    throw io_error(m + ": " + what);
}
[[noreturn]] inline void fail_read(std::string_view path, std::string_view entry, const std::string& what) {
    fail("read", path, entry, what);
}

// ---------------------------------------------------------------------------------------------
// The .npy header: a Python dict literal, e.g. {'descr': '<f4', 'fortran_order': False, 'shape': (3,), }

struct pyval {
    enum class kind { str, boolean, integer, none, tuple, list, dict } k = kind::none;
    std::string s;
    bool b = false;
    std::uint64_t i = 0;
    std::vector<pyval> items;  // tuple / list elements; dict: key, value, key, value, ...
};

/// A recursive-descent parser for the Python literals NumPy writes (depth-limited).
class literal_parser {
public:
    literal_parser(std::string_view text, std::string_view path, std::string_view entry)
        : t_(text), path_(path), entry_(entry) {}

    pyval parse_all() {
        pyval v = value(0);
        skip_ws();
        if (i_ != t_.size()) bad("unexpected text after the dictionary");
        return v;
    }

private:
    [[noreturn]] void bad(const std::string& what) const {
        fail_read(path_, entry_, "malformed .npy header at character " + std::to_string(i_) + ": " + what);
    }
    void skip_ws() {
        while (i_ < t_.size() && (t_[i_] == ' ' || t_[i_] == '\t' || t_[i_] == '\n' || t_[i_] == '\r')) ++i_;
    }
    bool eat(char c) {
        skip_ws();
        if (i_ < t_.size() && t_[i_] == c) return ++i_, true;
        return false;
    }
    /// Elements up to `close`, separated by commas, a trailing comma allowed; dicts take key: value.
    void sequence(pyval& v, char close, bool dict, int depth) {
        while (!eat(close)) {
            v.items.push_back(value(depth + 1));
            if (dict) {
                if (v.items.back().k != pyval::kind::str) bad("a dictionary key is not a string");
                if (!eat(':')) bad("expected ':'");
                v.items.push_back(value(depth + 1));
            }
            if (!eat(',')) {
                if (!eat(close)) bad(std::string("expected ',' or '") + close + "'");
                return;
            }
        }
    }
    pyval value(int depth) {
        if (depth > 16) bad("nested too deeply");
        skip_ws();
        if (i_ >= t_.size()) bad("unexpected end");
        pyval v;
        const char c = t_[i_];
        if ((c == 'u' || c == 'b') && i_ + 1 < t_.size() && (t_[i_ + 1] == '\'' || t_[i_ + 1] == '"')) ++i_;
        if (t_[i_] == '\'' || t_[i_] == '"') {
            const char q = t_[i_++];
            v.k = pyval::kind::str;
            while (true) {
                if (i_ >= t_.size()) bad("unterminated string");
                char ch = t_[i_++];
                if (ch == q) break;
                if (ch == '\\') {
                    if (i_ >= t_.size()) bad("unterminated string");
                    ch = t_[i_++];
                }
                v.s += ch;
            }
        } else if (c >= '0' && c <= '9') {
            v.k = pyval::kind::integer;
            while (i_ < t_.size() && t_[i_] >= '0' && t_[i_] <= '9') {
                const std::uint64_t d = std::uint64_t(t_[i_++] - '0');
                if (v.i > (std::numeric_limits<std::uint64_t>::max() - d) / 10) bad("integer too large");
                v.i = v.i * 10 + d;
            }
            if (i_ < t_.size() && (t_[i_] == 'L' || t_[i_] == 'l')) ++i_;  // Python 2 long
        } else if (c == '(' || c == '[' || c == '{') {
            ++i_;
            v.k = c == '(' ? pyval::kind::tuple : c == '[' ? pyval::kind::list : pyval::kind::dict;
            sequence(v, c == '(' ? ')' : c == '[' ? ']' : '}', c == '{', depth);
        } else {
            for (auto [word, k, b] : {std::tuple{"True", pyval::kind::boolean, true},
                                      std::tuple{"False", pyval::kind::boolean, false},
                                      std::tuple{"None", pyval::kind::none, false}})
                if (t_.substr(i_, std::strlen(word)) == word) {
                    i_ += std::strlen(word);
                    v.k = k;
                    v.b = b;
                    return v;
                }
            bad(std::string("unexpected character '") + c + "'");
        }
        return v;
    }

    std::string_view t_;
    std::size_t i_ = 0;
    std::string_view path_, entry_;
};

/// Parses one .npy file (the bytes of a zip entry) into an array named `name`.
inline array parse_npy(bytes_view d, std::string name, std::string_view path, std::string_view entry) {
    auto bad = [&](const std::string& what) { fail_read(path, entry, what); };
    if (!d.has(0, 10) || std::memcmp(d.p, "\x93NUMPY", 6) != 0) bad("not a .npy file (bad magic)");
    const unsigned major = d.p[6], minor = d.p[7];
    if (major < 1 || major > 3 || minor != 0)
        bad("unsupported .npy format version " + std::to_string(major) + "." + std::to_string(minor));
    const std::size_t start = major == 1 ? 10 : 12;
    if (!d.has(0, start)) bad("truncated .npy header");
    const std::uint64_t hlen = major == 1 ? d.u16(8) : d.u32(8);
    if (!d.has(start, hlen)) bad(".npy header length " + std::to_string(hlen) + " runs past the end of the entry");

    const pyval dict = literal_parser({reinterpret_cast<const char*>(d.p) + start, std::size_t(hlen)}, path, entry)
                           .parse_all();
    if (dict.k != pyval::kind::dict) bad(".npy header is not a dictionary");
    const pyval *descr = nullptr, *fortran = nullptr, *shape = nullptr;
    for (std::size_t k = 0; k < dict.items.size(); k += 2) {
        const std::string& key = dict.items[k].s;
        const pyval* v = &dict.items[k + 1];
        const pyval** slot = key == "descr" ? &descr : key == "fortran_order" ? &fortran : key == "shape" ? &shape : nullptr;
        if (!slot) bad(".npy header has an unexpected key " + in_quotes(key));
        if (*slot) bad(".npy header repeats the key " + in_quotes(key));
        *slot = v;
    }
    if (!descr || !fortran || !shape) bad(".npy header lacks one of 'descr', 'fortran_order', 'shape'");

    array a;
    a.name = std::move(name);
    if (descr->k != pyval::kind::str)
        bad("unsupported dtype (a structured or non-string descr); supported: " + std::string(supported_dtypes));
    a.descr = descr->s;
    if (!a.descr.empty() && a.descr[0] == '>')
        bad("big-endian dtype " + in_quotes(a.descr) + " is not supported (save arr.astype('<" + a.descr.substr(1) + "'))");
    const std::size_t item = itemsize(a.descr);
    if (item == 0) bad("unsupported dtype " + in_quotes(a.descr) + "; supported: " + supported_dtypes);
    if (fortran->k != pyval::kind::boolean) bad("'fortran_order' is not True or False");
    if (fortran->b) bad("fortran_order=True is not supported (save np.ascontiguousarray(arr))");
    if (shape->k != pyval::kind::tuple) bad("'shape' is not a tuple");
    for (const pyval& e : shape->items) {
        if (e.k != pyval::kind::integer || e.i > std::numeric_limits<std::size_t>::max()) bad("'shape' holds a non-integer");
        a.shape.push_back(std::size_t(e.i));
    }
    std::size_t want = 0;
    if (!byte_count(a.shape, item, want)) bad("shape " + shape_string(a.shape) + " overflows");
    const std::size_t have = d.n - std::size_t(start + hlen);
    if (have != want)
        bad("data size " + std::to_string(have) + " bytes does not match shape " + shape_string(a.shape) + " of dtype " +
            a.descr + " (" + std::to_string(want) + " bytes)");
    const char* data = reinterpret_cast<const char*>(d.p) + start + hlen;
    a.bytes.assign(data, data + have);
    return a;
}

// ---------------------------------------------------------------------------------------------
// The ZIP container (APPNOTE.TXT): local headers, central directory, end records.

inline constexpr std::uint32_t sig_local = 0x04034b50, sig_central = 0x02014b50, sig_end = 0x06054b50,
                               sig_end64 = 0x06064b50, sig_locator64 = 0x07064b50;

/// DEFLATE expands at most 1032 to 1 (a 258-byte match per two bits, plus block headers): a
/// declared size beyond this for its compressed size cannot be true, and is refused before any
/// allocation (a zip bomb's declared size, or a corrupt one).
inline constexpr std::uint64_t max_deflate_ratio = 1032;

/// Inflates one raw DEFLATE entry (ZIP method 8) that must produce exactly `usize` bytes from
/// exactly the `in.n` compressed bytes. io_error naming the file and entry on a corrupt or
/// truncated stream, on output beyond `usize` (never written anywhere: inflation stops one byte
/// past the declared size), on fewer bytes than `usize`, and on bytes left after the stream's end.
/// Memory: at most twice what has inflated so far, never more than `usize`.
inline std::vector<unsigned char> inflate_entry(bytes_view in, std::uint64_t usize, std::string_view path,
                                                std::string_view entry) {
    auto bad = [&](const std::string& what) { fail_read(path, entry, what); };
    const std::string sizes = " (declared " + std::to_string(usize) + " bytes from " + std::to_string(in.n) +
                              " compressed)";
    if (usize / max_deflate_ratio > in.n)
        bad("declared uncompressed size is more than DEFLATE can produce" + sizes + ": corrupt or a zip bomb");
    // The output grows with what really inflates (doubling, up to the declared size), so a declared
    // size that lies costs no memory the data does not fill.
    std::vector<unsigned char> out;
    auto grow = [&] {
        const std::uint64_t next = std::min<std::uint64_t>(usize, std::max<std::uint64_t>(2 * out.size(), 1u << 16));
        try {
            out.resize(std::size_t(next));
        } catch (const std::exception&) {  // bad_alloc, length_error
            bad("cannot allocate " + std::to_string(next) + " bytes to inflate into" + sizes);
        }
    };
    z_stream z{};
    if (inflateInit2(&z, -MAX_WBITS) != Z_OK) bad("zlib inflateInit2 failed");
    struct ender {
        z_stream* z;
        ~ender() { inflateEnd(z); }
    } guard{&z};

    constexpr std::size_t step = std::numeric_limits<uInt>::max();  // zlib counts in uInt
    std::size_t in_at = 0, out_at = 0;
    unsigned char spill = 0;  // where inflation goes once `out` is full: any byte there is too many
    for (;;) {
        if (out_at == out.size() && out.size() < usize) grow();
        const bool full = out_at == out.size();  // the declared size is reached
        z.next_in = const_cast<Bytef*>(in.p + in_at);
        z.avail_in = uInt(std::min(in.n - in_at, step));
        z.next_out = full ? &spill : out.data() + out_at;
        z.avail_out = full ? 1u : uInt(std::min(out.size() - out_at, step));
        const uInt avail_in = z.avail_in, avail_out = z.avail_out;
        const int rc = inflate(&z, Z_NO_FLUSH);
        in_at += avail_in - z.avail_in;
        if (full && z.avail_out == 0)
            bad("inflates to more than its declared uncompressed size" + sizes + ": corrupt or a zip bomb");
        if (!full) out_at += avail_out - z.avail_out;
        if (rc == Z_STREAM_END) break;
        if (rc == Z_DATA_ERROR || rc == Z_NEED_DICT)
            bad(std::string("corrupt DEFLATE data: ") + (z.msg ? z.msg : "invalid stream") + sizes);
        if (rc == Z_MEM_ERROR) bad("zlib is out of memory");
        if (rc != Z_OK && rc != Z_BUF_ERROR) bad("zlib inflate failed (" + std::to_string(rc) + ")");
        // Z_OK made progress; Z_BUF_ERROR made none, and with room to write that means no input left.
        if (rc == Z_BUF_ERROR || (z.avail_in == avail_in && z.avail_out == avail_out)) {
            if (in_at == in.n)
                bad("DEFLATE stream ends early: truncated after " + std::to_string(out_at) + " bytes" + sizes);
            bad("zlib inflate makes no progress" + sizes);  // not expected: there is input and room
        }
    }
    if (out_at != usize)
        bad("inflates to " + std::to_string(out_at) + " bytes, not its declared uncompressed size" + sizes);
    if (in_at != in.n)
        bad(std::to_string(in.n - in_at) + " bytes follow the end of the DEFLATE stream" + sizes + ": corrupt");
    return out;
}

/// Parses an .npz held in memory; `path` only names it in messages. (A template of nothing so that
/// a program can compile it once: CTG_SEPARATE_COMPILATION, at the end of this file.)
template <class = void>
std::map<std::string, array> parse_archive(bytes_view f, const std::string& path) {
    auto bad = [&](const std::string& what) { fail_read(path, {}, what); };
    if (f.n == 0) bad("file is empty");
    if (f.n < 22) bad("too short for a zip archive (" + std::to_string(f.n) + " bytes): truncated or not an .npz");
    if (f.u32(0) != sig_local && f.u32(0) != sig_end) bad("not a zip archive (bad magic): not an .npz");

    // End of central directory: the last signature that leaves room for its comment.
    std::size_t eocd = f.n;
    for (std::size_t back = 0; back <= 0xFFFF && back + 22 <= f.n; ++back) {
        const std::size_t pos = f.n - 22 - back;
        if (f.u32(pos) == sig_end && f.u16(pos + 20) <= back) {
            eocd = pos;
            break;
        }
    }
    if (eocd == f.n) bad("no end-of-central-directory record: truncated or not a zip archive");
    std::uint64_t disk = f.u16(eocd + 4), cd_disk = f.u16(eocd + 6), n_disk = f.u16(eocd + 8),
                  n_total = f.u16(eocd + 10), cd_size = f.u32(eocd + 12), cd_off = f.u32(eocd + 16);
    std::uint64_t cd_limit = eocd;  // the central directory ends before the end records
    if (eocd >= 20 && f.u32(eocd - 20) == sig_locator64) {
        const std::uint64_t at = f.u64(eocd - 20 + 8);
        if (f.u32(eocd - 20 + 4) != 0 || f.u32(eocd - 20 + 16) != 1) bad("multi-disk zip archives are not supported");
        if (!f.has(at, 56) || at + 56 > eocd - 20 || f.u32(std::size_t(at)) != sig_end64)
            bad("bad zip64 end-of-central-directory record: truncated or corrupt");
        const std::size_t z = std::size_t(at);
        disk = f.u32(z + 16), cd_disk = f.u32(z + 20), n_disk = f.u64(z + 24), n_total = f.u64(z + 32);
        cd_size = f.u64(z + 40), cd_off = f.u64(z + 48);
        cd_limit = at;
    } else if (n_total == 0xFFFF || cd_size == 0xFFFFFFFF || cd_off == 0xFFFFFFFF) {
        bad("zip64 end-of-central-directory locator missing: truncated or corrupt");
    }
    if (disk != 0 || cd_disk != 0 || n_disk != n_total) bad("multi-disk zip archives are not supported");
    if (cd_off > cd_limit || cd_size > cd_limit - cd_off)
        bad("central directory lies outside the file: truncated or corrupt");
    if (n_total > cd_size / 46) bad("central directory too small for its " + std::to_string(n_total) + " entries");

    std::map<std::string, array> out;
    std::size_t p = std::size_t(cd_off);
    const std::size_t cd_end = std::size_t(cd_off + cd_size);
    const bytes_view cd{f.p, cd_end};  // reads of the directory stay inside it
    for (std::uint64_t e = 0; e < n_total; ++e) {
        if (!cd.has(p, 46) || cd.u32(p) != sig_central)
            bad("central directory entry " + std::to_string(e) + " is corrupt");
        const unsigned flags = cd.u16(p + 8), method = cd.u16(p + 10);
        const std::uint32_t crc = cd.u32(p + 16);
        std::uint64_t csize = cd.u32(p + 20), usize = cd.u32(p + 24), local = cd.u32(p + 42);
        const std::size_t nl = cd.u16(p + 28), el = cd.u16(p + 30), cl = cd.u16(p + 32);
        const unsigned start_disk = cd.u16(p + 34);
        if (!cd.has(p + 46, nl + el + cl)) bad("central directory entry " + std::to_string(e) + " is truncated");
        const std::string entry(reinterpret_cast<const char*>(f.p) + p + 46, nl);
        auto ebad = [&](const std::string& what) { fail_read(path, entry, what); };

        // ZIP64 extra field (id 1): the 8-byte values of the fields stored as 0xFFFFFFFF, in order.
        bool need64 = usize == 0xFFFFFFFF || csize == 0xFFFFFFFF || local == 0xFFFFFFFF;
        for (std::size_t x = p + 46 + nl, xend = x + el; x + 4 <= xend;) {
            const unsigned id = cd.u16(x), sz = cd.u16(x + 2);
            if (x + 4 + sz > xend) ebad("extra field runs past its entry");
            if (id == 1) {
                std::size_t q = x + 4;
                for (std::uint64_t* v : {&usize, &csize, &local}) {
                    if (*v != 0xFFFFFFFF) continue;
                    if (q + 8 > x + 4 + sz) ebad("zip64 extra field too short");
                    *v = cd.u64(q);
                    q += 8;
                }
                need64 = false;
            }
            x += 4 + sz;
        }
        if (need64) ebad("zip64 extra field missing");
        if (start_disk != 0 && start_disk != 0xFFFF) bad("multi-disk zip archives are not supported");
        if (flags & 1u) ebad("encrypted entries are not supported");
        if (method != 0 && method != 8)
            ebad("compression method " + std::to_string(method) + " is not supported (STORED and DEFLATE only)");
        if (method == 0 && csize != usize) ebad("stored entry with different compressed and uncompressed sizes");

        // The local header repeats the name; its own sizes may be zeros or a data descriptor's.
        if (!f.has(local, 30) || f.u32(std::size_t(local)) != sig_local)
            ebad("local header missing: truncated or corrupt");
        const std::size_t lo = std::size_t(local), lnl = f.u16(lo + 26), lel = f.u16(lo + 28);
        if (!f.has(lo + 30, lnl + lel) || lnl != nl || std::memcmp(f.p + lo + 30, entry.data(), nl) != 0)
            ebad("local header does not match the central directory: truncated or corrupt");
        if (f.u16(lo + 8) != method) ebad("local header has a different compression method");
        const std::size_t data = lo + 30 + lnl + lel;
        if (!f.has(data, csize)) ebad("data runs past the end of the file: truncated");
        std::vector<unsigned char> inflated;
        bytes_view content{f.p + data, std::size_t(usize)};
        if (method == 8) {
            inflated = inflate_entry({f.p + data, std::size_t(csize)}, usize, path, entry);
            content = {inflated.data(), inflated.size()};
        }
        const std::uint32_t got = crc32(content.p, content.n);
        if (got != crc) {
            char m[96];
            std::snprintf(m, sizeof m, "CRC-32 mismatch (stored %08x, computed %08x): corrupt data", unsigned(crc),
                          unsigned(got));
            ebad(m);
        }

        if (entry.size() <= 4 || entry.compare(entry.size() - 4, 4, ".npy") != 0) ebad("not a .npy entry");
        std::string key = entry.substr(0, entry.size() - 4);
        if (out.count(key)) ebad("duplicate entry");
        array a = parse_npy(content, key, path, entry);
        out.emplace(std::move(key), std::move(a));
        p += 46 + nl + el + cl;
    }
    return out;
}

// ---------------------------------------------------------------------------------------------
// Writing.

inline void put(std::string& s, std::uint64_t v, int bytes) {
    for (int i = 0; i < bytes; ++i) s += char((v >> (8 * i)) & 0xFF);
}

/// The NPY 1.0 header numpy writes for a C-order array (2.0 if it would not fit in 65535 bytes).
inline std::string npy_header(const std::string& descr, const std::vector<std::size_t>& shape) {
    std::string dims;
    for (std::size_t i = 0; i < shape.size(); ++i) dims += (i ? ", " : "") + std::to_string(shape[i]);
    if (shape.size() == 1) dims += ",";
    std::string dict = "{'descr': '" + descr + "', 'fortran_order': False, 'shape': (" + dims + "), }";
    // numpy >= 1.23 leaves room for the first axis to grow to 21 digits in place.
    if (!shape.empty()) dict += std::string(21 - std::to_string(shape[0]).size(), ' ');
    for (int major = 1; major <= 2; ++major) {
        const std::size_t prefix = major == 1 ? 10 : 12;
        const std::size_t pad = 64 - (prefix + dict.size() + 1) % 64;  // 1 to 64, as numpy
        const std::size_t hlen = dict.size() + pad + 1;
        if (major == 1 && hlen > 0xFFFF) continue;
        std::string h("\x93NUMPY", 6);
        h += char(major), h += char(0);
        put(h, hlen, major == 1 ? 2 : 4);
        return h + dict + std::string(pad, ' ') + "\n";
    }
    throw io_error("ctg::npz: .npy header too long");  // not reached: 2.0 takes 4 GiB headers
}

/// Where each entry goes in a plain (non-ZIP64) archive: local header offsets and the central
/// directory's; io_error when a size or offset would need ZIP64 (4 GiB or 65535 entries).
struct layout {
    std::vector<std::uint64_t> local;
    std::uint64_t cd_offset = 0, cd_size = 0;
};
inline layout plan(const std::vector<std::pair<std::size_t, std::uint64_t>>& name_and_data_sizes,
                   std::string_view path) {
    constexpr std::uint64_t limit = 0xFFFFFFFF;  // 0xFFFFFFFF itself means "see ZIP64"
    auto too_big = [&] {
        fail("write", path, {}, "archive would need ZIP64 (an entry, offset or the whole archive of 4 GiB or more, "
                                "or 65535 entries or more); not supported for writing");
    };
    if (name_and_data_sizes.size() >= 0xFFFF) too_big();
    layout l;
    std::uint64_t at = 0;
    for (auto [name, data] : name_and_data_sizes) {
        if (data >= limit || at >= limit) too_big();
        l.local.push_back(at);
        at += 30 + name + data;
        l.cd_size += 46 + name;
    }
    if (at >= limit || l.cd_size >= limit || at + l.cd_size + 22 > limit) too_big();
    l.cd_offset = at;
    return l;
}

}  // namespace detail

/// Reads every array of an .npz (keys without ".npy"). Throws io_error on any malformed input.
inline std::map<std::string, array> read(const std::string& path) {
    const std::vector<unsigned char> buf = binary_file::slurp(path, "ctg::npz::read");
    return detail::parse_archive({buf.data(), buf.size()}, path);
}

/// Reads every array of an .npz held in memory (`size` bytes at `data`); `name` stands for the file
/// in messages. The same checks as read().
inline std::map<std::string, array> parse(const void* data, std::size_t size, const std::string& name = "<memory>") {
    return detail::parse_archive({static_cast<const unsigned char*>(data), size}, name);
}

namespace detail {
/// npz::write's work (a template of nothing, as parse_archive).
template <class = void>
void write_archive(const std::string& path, const std::vector<array>& arrays) {
    std::vector<std::string> names, headers;
    std::set<std::string_view> seen;
    std::vector<std::pair<std::size_t, std::uint64_t>> sizes;
    for (const array& a : arrays) {
        auto bad = [&](const std::string& what) { detail::fail("write", path, {}, "array " + detail::in_quotes(a.name) + ": " + what); };
        if (a.name.empty()) bad("empty name");
        if (a.name.find('\0') != std::string::npos) bad("the name contains a NUL character");
        if (!seen.insert(a.name).second) bad("duplicate name");
        const std::size_t item = detail::itemsize(a.descr);
        if (item == 0) bad("unsupported dtype " + detail::in_quotes(a.descr) + "; supported: " + detail::supported_dtypes);
        std::size_t want = 0;
        if (!detail::byte_count(a.shape, item, want) || want != a.bytes.size())
            bad(std::to_string(a.bytes.size()) + " bytes do not match shape " + detail::shape_string(a.shape) +
                " of dtype " + a.descr);
        names.push_back(a.name + ".npy");
        if (names.back().size() > 0xFFFF) bad("name longer than 65535 bytes");
        headers.push_back(detail::npy_header(a.descr, a.shape));
        sizes.emplace_back(names.back().size(), headers.back().size() + std::uint64_t(a.bytes.size()));
    }
    const detail::layout l = detail::plan(sizes, path);

    binary_file::atomic_file out(path, "ctg::npz::write");
    std::string cd;
    for (std::size_t i = 0; i < arrays.size(); ++i) {
        const std::string& name = names[i];
        const std::uint32_t crc =
            crc32(arrays[i].bytes.data(), arrays[i].bytes.size(), crc32(headers[i].data(), headers[i].size()));
        const bool utf8 = std::any_of(name.begin(), name.end(), [](char c) { return (unsigned char)c >= 0x80; });
        // Fields shared by the local header and the central directory, from "version needed" on.
        std::string common;
        detail::put(common, 20, 2);                  // version needed: 2.0
        detail::put(common, utf8 ? 1u << 11 : 0, 2);  // flags: bit 11 = UTF-8 name
        detail::put(common, 0, 2);                   // method: STORED
        detail::put(common, 0, 2);                   // time 00:00:00
        detail::put(common, 0x21, 2);                // date 1980-01-01 (as numpy.savez)
        detail::put(common, crc, 4);
        detail::put(common, sizes[i].second, 4);  // compressed size
        detail::put(common, sizes[i].second, 4);  // uncompressed size
        detail::put(common, name.size(), 2);
        detail::put(common, 0, 2);  // extra length

        std::string local;
        detail::put(local, detail::sig_local, 4);
        local += common + name + headers[i];
        out.write(local.data(), local.size());
        out.write(arrays[i].bytes.data(), arrays[i].bytes.size());

        detail::put(cd, detail::sig_central, 4);
        detail::put(cd, (3u << 8) | 20, 2);  // made by: Unix, 2.0
        cd += common;
        detail::put(cd, 0, 2);                     // comment length
        detail::put(cd, 0, 2);                     // disk
        detail::put(cd, 0, 2);                     // internal attributes
        detail::put(cd, 0100644u << 16, 4);        // external: regular file, rw-r--r--
        detail::put(cd, l.local[i], 4);
        cd += name;
    }
    detail::put(cd, detail::sig_end, 4);
    detail::put(cd, 0, 4);  // this disk, central directory disk
    detail::put(cd, arrays.size(), 2);
    detail::put(cd, arrays.size(), 2);
    detail::put(cd, l.cd_size, 4);
    detail::put(cd, l.cd_offset, 4);
    detail::put(cd, 0, 2);  // comment length
    out.write(cd.data(), cd.size());
    out.commit();
}
}  // namespace detail

/// Writes arrays as an .npz numpy.load reads (STORED entries, NPY 1.0 headers), atomically: a
/// temporary file in the same directory renamed over `path`, which is untouched on any failure.
inline void write(const std::string& path, const std::vector<array>& arrays) { detail::write_archive(path, arrays); }

/// An array of `shape` holding a copy of data[0 .. product(shape)); T: float, double, int32_t, int64_t.
template <class T>
array from_data(std::string name, const T* data, std::vector<std::size_t> shape) {
    array a{std::move(name), detail::descr_of<T>(), std::move(shape), {}};
    std::size_t bytes = 0;
    if (!detail::byte_count(a.shape, sizeof(T), bytes))
        throw io_error("ctg::npz::from_data: array " + detail::in_quotes(a.name) + ": shape " +
                       detail::shape_string(a.shape) + " overflows");
    a.bytes.resize(bytes);
    detail::store_le(data, a.size(), a.bytes.data());
    return a;
}

namespace detail {
template <class T, class S>
void convert(const array& a, std::vector<T>& out) {
    const std::size_t n = a.size();
    out.resize(n);
    for (std::size_t i = 0; i < n; ++i) {
        const S v = load_le<S>(a.bytes.data() + i * sizeof(S));
        bool ok = true;
        if constexpr (std::is_floating_point_v<T>) {
            out[i] = T(v);
        } else if constexpr (std::is_floating_point_v<S>) {  // float -> int: exact values only
            ok = std::isfinite(v) && v == std::trunc(v) && double(v) >= double(std::numeric_limits<T>::min()) &&
                 double(v) < -double(std::numeric_limits<T>::min());
            if (ok) out[i] = T(v);
        } else {
            ok = std::in_range<T>(v);
            if (ok) out[i] = T(v);
        }
        if (!ok) {
            const std::string value = [&] {  // a float's own shortest digits: 3.0000002 is not "3.000000"
                if constexpr (std::is_floating_point_v<S>) return ctg::detail::shortest_text(v);
                else return std::to_string(v);
            }();
            throw io_error("ctg::npz::to_vector: array " + in_quotes(a.name) + ": element " + std::to_string(i) + " (" +
                           value + ") is not representable as " + descr_of<T>());
        }
    }
}
}  // namespace detail

/// The array's elements converted to T (float, double, int32_t, int64_t) from <f4, <f8, <i4 or <i8.
/// Integer targets take only exactly representable values; anything else throws io_error.
template <class T>
std::vector<T> to_vector(const array& a) {
    static_assert(detail::is_element<T>, "ctg::npz::to_vector: T must be float, double, int32_t or int64_t");
    auto bad = [&](const std::string& what) {
        throw io_error("ctg::npz::to_vector: array " + detail::in_quotes(a.name) + ": " + what);
    };
    const std::size_t item = detail::itemsize(a.descr);
    std::size_t want = 0;
    if (a.descr == "|b1" || item == 0) bad("cannot convert dtype " + detail::in_quotes(a.descr) + " (only <f4 <f8 <i4 <i8)");
    if (!detail::byte_count(a.shape, item, want) || want != a.bytes.size())
        bad(std::to_string(a.bytes.size()) + " bytes do not match shape " + detail::shape_string(a.shape));
    std::vector<T> out;
    if (a.descr == "<f4") detail::convert<T, float>(a, out);
    else if (a.descr == "<f8") detail::convert<T, double>(a, out);
    else if (a.descr == "<i4") detail::convert<T, std::int32_t>(a, out);
    else detail::convert<T, std::int64_t>(a, out);
    return out;
}

/// Saves every parameter of the store as one array, keyed by its name, of the store's dtype.
template <class T>
void save(const parameter_store<T>& store, const std::string& path) {
    static_assert(std::is_same_v<T, float> || std::is_same_v<T, double>, "ctg::npz::save: float or double store");
    std::vector<array> arrays;
    arrays.reserve(store.size());
    for (std::size_t s = 0; s < store.size(); ++s)
        arrays.push_back(from_data(store.at(s).name, store.value(s), store.at(s).shape.to_vector()));
    write(path, arrays);
}

/// Loads every parameter of the store from an .npz: each must be there with the same shape, as
/// float32 or float64 (converted to T). Arrays the store does not have are an error unless
/// allow_extra. All-or-nothing: everything is checked and converted first; on error the store is
/// unchanged and the io_error lists every missing, extra or mismatched array.
template <class T>
void load(parameter_store<T>& store, const std::string& path, bool allow_extra) {
    static_assert(std::is_same_v<T, float> || std::is_same_v<T, double>, "ctg::npz::load: float or double store");
    binary_file::load_store(
        store, read(path), path, "ctg::npz::load", "arrays", allow_extra,
        [](const array& a) {
            return a.descr == "<f4" || a.descr == "<f8"
                       ? std::string()
                       : " has dtype " + a.descr + " in the file (parameters take float32 or float64)";
        },
        [](const array& a) { return to_vector<T>(a); });
}

/// Strict load: arrays in the file that the store does not have are an error.
template <class T>
void load(parameter_store<T>& store, const std::string& path) {
    load(store, path, false);
}

// Compiled once where a program defines CTG_SEPARATE_COMPILATION (see kernels/gemm.hpp): the
// reader's and writer's code, about 2.3 s of g++ per translation unit that reads and writes .npz.
#define CTG_NPZ_INSTANCES(how)                                                                           \
    how std::map<std::string, array> detail::parse_archive<void>(binary_file::bytes_view, const std::string&); \
    how void detail::write_archive<void>(const std::string&, const std::vector<array>&);
#if defined(CTG_SEPARATE_COMPILATION)
CTG_NPZ_INSTANCES(extern template)
#endif

}  // namespace ctg::npz
