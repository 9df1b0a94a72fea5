// libFuzzer target: the .npz reader, ctg::npz::parse, on arbitrary bytes.
//
// Every input is parsed as an archive. An input that starts with the .npy magic is also wrapped, here,
// in a one-entry archive twice, STORED and DEFLATE, with the right CRC and sizes, so that the
// mutations reach the .npy header parser and the inflate path behind the CRC check. An io_error is
// the expected way to refuse an input; any other exception, a crash, a leak or undefined behaviour
// (ASan, UBSan) is a finding. Parsed arrays must be consistent (bytes = itemsize x shape), and are
// converted with to_vector.
//
// Build and run: scripts/fuzz.sh (or the fuzz.npz ctest in a clang build).
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <string>

#include <zlib.h>

#include <ctgraph/npz.hpp>

namespace {

void exercise(const std::map<std::string, ctg::npz::array>& arrays) {
    for (const auto& [name, a] : arrays) {
        std::size_t bytes = 0;
        if (name != a.name || !ctg::npz::detail::byte_count(a.shape, ctg::npz::detail::itemsize(a.descr), bytes) ||
            bytes != a.bytes.size())
            __builtin_trap();  // the reader accepted an array whose bytes disagree with its shape
        try {
            (void)ctg::npz::to_vector<double>(a);
        } catch (const ctg::io_error&) {
        }
        try {
            (void)ctg::npz::to_vector<std::int32_t>(a);
        } catch (const ctg::io_error&) {
        }
    }
}

void parse(const void* data, std::size_t size) {
    try {
        exercise(ctg::npz::parse(data, size, "fuzz"));
    } catch (const ctg::io_error&) {
    }
}

void put(std::string& s, std::uint64_t v, int n) {
    for (int i = 0; i < n; ++i) s += char((v >> (8 * i)) & 0xFF);
}

/// A one-entry archive "a.npy" holding `npy` (method 0) or its raw DEFLATE (method 8).
std::string archive(const std::uint8_t* npy, std::size_t n, unsigned method) {
    std::string payload(reinterpret_cast<const char*>(npy), n);
    if (method == 8) {
        z_stream z{};
        if (deflateInit2(&z, 1, Z_DEFLATED, -MAX_WBITS, 8, Z_DEFAULT_STRATEGY) != Z_OK) std::abort();
        std::string out(deflateBound(&z, uLong(n)), '\0');
        z.next_in = const_cast<Bytef*>(npy);
        z.avail_in = uInt(n);
        z.next_out = reinterpret_cast<Bytef*>(out.data());
        z.avail_out = uInt(out.size());
        if (deflate(&z, Z_FINISH) != Z_STREAM_END) std::abort();
        out.resize(z.total_out);
        deflateEnd(&z);
        payload = out;
    }
    std::string common;
    put(common, 20, 2), put(common, 0, 2), put(common, method, 2), put(common, 0, 4);
    put(common, ctg::npz::crc32(npy, n), 4);
    put(common, payload.size(), 4), put(common, n, 4);
    put(common, 5, 2), put(common, 0, 2);  // name length, extra length
    std::string f;
    put(f, 0x04034b50, 4);
    f += common + "a.npy" + payload;
    const std::size_t cd_at = f.size();
    put(f, 0x02014b50, 4);
    put(f, 20, 2);
    f += common;
    put(f, 0, 2), put(f, 0, 2), put(f, 0, 2), put(f, 0, 4), put(f, 0, 4);  // comment .. local offset 0
    f += "a.npy";
    const std::size_t cd_size = f.size() - cd_at;
    put(f, 0x06054b50, 4), put(f, 0, 4), put(f, 1, 2), put(f, 1, 2);
    put(f, cd_size, 4), put(f, cd_at, 4), put(f, 0, 2);
    return f;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
    parse(data, size);
    if (size >= 6 && std::memcmp(data, "\x93NUMPY", 6) == 0)
        for (unsigned method : {0u, 8u}) {
            const std::string a = archive(data, size, method);
            parse(a.data(), a.size());
        }
    return 0;
}
