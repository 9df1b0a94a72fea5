// NPZ read/write: round trips, files from and to real numpy (numpy.savez and savez_compressed),
// DEFLATE entries (valid, corrupt, truncated, mis-sized, zip bombs), corrupt files, strict and
// all-or-nothing loading, atomic saving.
//
// The numpy cases run /usr/bin/python3 (python3-numpy, installed by scripts/setup.sh); without it
// they fail, saying so, rather than skip.
#include <catch2/catch.hpp>

#include <csignal>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <limits>
#include <random>
#include <string>
#include <vector>

#include <sys/resource.h>
#include <unistd.h>
#include <zlib.h>

#include <ctgraph/ctgraph.hpp>
#include <ctgraph/npz.hpp>

using namespace ctg;
namespace fs = std::filesystem;
using Catch::Matchers::Contains;

namespace {

// A fresh directory per test case, removed at the end.
struct temp_dir {
    fs::path root;
    temp_dir() {
        static int counter = 0;
        root = fs::temp_directory_path() /
               ("ctg_npz_" + std::to_string(::getpid()) + "_" + std::to_string(counter++));
        fs::remove_all(root);
        fs::create_directories(root);
    }
    ~temp_dir() {
        std::error_code ec;
        fs::remove_all(root, ec);
    }
    std::string operator/(const std::string& name) const { return (root / name).string(); }
    /// Names of leftover temporary files (".tmp.") anywhere below the directory.
    std::vector<std::string> temporaries() const {
        std::vector<std::string> r;
        for (auto& e : fs::recursive_directory_iterator(root))
            if (e.path().filename().string().find(".tmp.") != std::string::npos) r.push_back(e.path().string());
        return r;
    }
};

std::vector<char> file_bytes(const std::string& path) {
    std::ifstream in(path, std::ios::binary);
    REQUIRE(in);
    return {std::istreambuf_iterator<char>(in), {}};
}
void put_file(const std::string& path, const std::vector<char>& bytes) {
    std::ofstream out(path, std::ios::binary | std::ios::trunc);
    out.write(bytes.data(), std::streamsize(bytes.size()));
    REQUIRE(out.good());
}

/// The message of the io_error `f` throws ("no io_error" when it throws nothing; any other
/// exception escapes and fails the test).
template <class F>
std::string io_message(F&& f) {
    try {
        f();
    } catch (const io_error& e) {
        return e.what();
    }
    return "no io_error";
}

// ---- Python / numpy --------------------------------------------------------------------------

// expected() must match expected_arrays() below, element for element.
const char* const python_script = R"PY(
import io, struct, sys, zipfile
import numpy as np

def expected():
    return {
        'f32': (np.arange(6) * 0.25 - 1).astype('<f4').reshape(2, 3),
        'f64': np.arange(4, dtype='<f8') / 3.0,
        'i64': np.array([-(2**40), 0, 2**62 + 1], dtype='<i8'),
        'i32': np.array([[1, -2], [3, -4]], dtype='<i4'),
        'scalar': np.array(np.pi, dtype='<f8'),
        'cube': (np.arange(24) * 0.5 - 3).astype('<f4').reshape(2, 3, 4),
        'flags': np.array([True, False, True]),
        'empty': np.zeros((0, 3), dtype='<f4'),
    }

def npy(arr, version=None):
    b = io.BytesIO()
    np.lib.format.write_array(b, arr, version=version)
    return b.getvalue()

def stored_zip(path, entries):
    with zipfile.ZipFile(path, 'w', zipfile.ZIP_STORED) as z:
        for name, data in entries:
            z.writestr(name, data)

def gen(d):
    e = expected()
    np.savez(d + '/savez.npz', **e)
    versions = [(1, 0), (2, 0), (3, 0)]
    stored_zip(d + '/versions.npz',
               [(k + '.npy', npy(v, versions[i % 3])) for i, (k, v) in enumerate(e.items())])
    np.savez_compressed(d + '/compressed.npz', **e)
    # DEFLATE at levels 1 and 9 beside STORED entries in one archive.
    with zipfile.ZipFile(d + '/mixed.npz', 'w') as z:
        for i, (k, v) in enumerate(e.items()):
            z.writestr(k + '.npy', npy(v), compress_type=[zipfile.ZIP_STORED, zipfile.ZIP_DEFLATED][i % 2],
                       compresslevel=[1, 9][i % 4 // 2])
    np.savez(d + '/fortran.npz', a=np.asfortranarray(np.ones((2, 3), dtype='<f4')))
    np.savez(d + '/bigendian.npz', a=np.ones(3, dtype='>f4'))
    np.savez(d + '/complex.npz', a=np.ones(3, dtype='<c8'))
    np.savez(d + '/structured.npz', a=np.zeros(2, dtype=[('x', '<f4'), ('y', '<i4')]))
    stored_zip(d + '/short.npz', [('a.npy', npy(np.ones(5, dtype='<f8'))[:-16])])
    stored_zip(d + '/notnpy.npz', [('a.npy', npy(np.ones(2))), ('readme.txt', b'hello')])
    # A stream-written zip: sizes and CRC in data descriptors after the data, not in local headers.
    class Sink(io.RawIOBase):
        def __init__(self): self.data = bytearray()
        def writable(self): return True
        def write(self, b): self.data += b; return len(b)
    for name, method in (('stream', zipfile.ZIP_STORED), ('stream_deflated', zipfile.ZIP_DEFLATED)):
        sink = Sink()
        with zipfile.ZipFile(sink, 'w', method) as z:
            for k, v in e.items():
                with z.open(k + '.npy', 'w') as f:
                    f.write(npy(v))
        open(d + '/' + name + '.npz', 'wb').write(bytes(sink.data))
    # Full ZIP64 (extra fields in the central directory, ZIP64 end records) and an archive comment,
    # as written for archives above 4 GiB: lower zipfile's thresholds to get it on small data.
    limits = zipfile.ZIP64_LIMIT, zipfile.ZIP_FILECOUNT_LIMIT
    zipfile.ZIP64_LIMIT, zipfile.ZIP_FILECOUNT_LIMIT = 64, 1
    for name, method in (('zip64', zipfile.ZIP_STORED), ('zip64_deflated', zipfile.ZIP_DEFLATED)):
        with zipfile.ZipFile(d + '/' + name + '.npz', 'w', method) as z:
            z.comment = b'written with ZIP64 end records'
            for k, v in e.items():
                with z.open(k + '.npy', 'w', force_zip64=True) as f:
                    f.write(npy(v))
    zipfile.ZIP64_LIMIT, zipfile.ZIP_FILECOUNT_LIMIT = limits

def check_layout(path):
    z = zipfile.ZipFile(path)
    assert z.testzip() is None, 'CRC'
    for info in z.infolist():
        assert info.compress_type == zipfile.ZIP_STORED, info.filename
        raw = z.read(info.filename)
        assert raw[:8] == b'\x93NUMPY\x01\x00', info.filename
        hlen = struct.unpack('<H', raw[8:10])[0]
        assert (10 + hlen) % 64 == 0, 'data not 64-byte aligned in ' + info.filename

def check(path):
    check_layout(path)
    got = np.load(path, allow_pickle=False)
    e = expected()
    assert sorted(got.files) == sorted(e), (got.files, list(e))
    for k, v in e.items():
        a = got[k]
        assert a.dtype == v.dtype and a.shape == v.shape, (k, a.dtype, a.shape)
        assert a.tobytes() == v.tobytes(), k

def store(path, dtype):
    check_layout(path)
    got = np.load(path, allow_pickle=False)
    shapes = {'W': (3, 4), 'b': (4,), 's': (), 'k': (2, 2, 2)}
    assert list(got.files) == list(shapes), got.files
    for slot, (k, shape) in enumerate(shapes.items()):
        n = int(np.prod(shape))
        want = ((np.arange(n) - 3) / 8 + slot).astype(dtype).reshape(shape)
        a = got[k]
        assert a.dtype == want.dtype and a.shape == want.shape and a.tobytes() == want.tobytes(), k

if __name__ == '__main__':
    try:
        {'gen': gen, 'check': check, 'store': store}[sys.argv[1]](*sys.argv[2:])
    except AssertionError as err:
        print('numpy check failed:', err)
        sys.exit(1)
)PY";

void require_numpy() {
    if (std::system("/usr/bin/python3 -c 'import numpy' >/dev/null 2>&1") != 0)
        FAIL("python3-numpy is required for this test: `/usr/bin/python3 -c 'import numpy'` failed "
             "(scripts/setup.sh installs python3-numpy)");
}

/// Runs the script above with `args`; true when it exits with 0.
bool python(const temp_dir& dir, const std::string& args) {
    const std::string script = dir / "npz_check.py";
    {
        std::ofstream out(script);
        out << python_script;
    }
    return std::system(("/usr/bin/python3 " + script + " " + args).c_str()) == 0;
}

/// The arrays of the script's expected(), built with the C++ API.
std::vector<npz::array> expected_arrays() {
    std::vector<float> f32(6), cube(24);
    for (std::size_t i = 0; i < 6; ++i) f32[i] = float(double(i) * 0.25 - 1);
    for (std::size_t i = 0; i < 24; ++i) cube[i] = float(double(i) * 0.5 - 3);
    const double f64[] = {0.0, 1.0 / 3.0, 2.0 / 3.0, 3.0 / 3.0};
    const std::int64_t i64[] = {-(std::int64_t(1) << 40), 0, (std::int64_t(1) << 62) + 1};
    const std::int32_t i32[] = {1, -2, 3, -4};
    const double pi = 3.141592653589793;
    return {npz::from_data("f32", f32.data(), {2, 3}),
            npz::from_data("f64", f64, {4}),
            npz::from_data("i64", i64, {3}),
            npz::from_data("i32", i32, {2, 2}),
            npz::from_data("scalar", &pi, {}),
            npz::from_data("cube", cube.data(), {2, 3, 4}),
            npz::array{"flags", "|b1", {3}, {1, 0, 1}},
            npz::from_data("empty", f32.data(), {0, 3})};
}

/// Every expected array is in `got`, with the same dtype, shape and bytes, and nothing else is.
void check_expected(const std::map<std::string, npz::array>& got) {
    const auto want = expected_arrays();
    CHECK(got.size() == want.size());
    for (const npz::array& w : want) {
        INFO("array " << w.name);
        const auto it = got.find(w.name);
        REQUIRE(it != got.end());
        CHECK(it->second.name == w.name);
        CHECK(it->second.descr == w.descr);
        CHECK(it->second.shape == w.shape);
        CHECK(it->second.bytes == w.bytes);
    }
}

bool same_arrays(const std::map<std::string, npz::array>& a, const std::map<std::string, npz::array>& b) {
    return std::equal(a.begin(), a.end(), b.begin(), b.end(), [](const auto& x, const auto& y) {
        return x.first == y.first && x.second.name == y.second.name && x.second.descr == y.second.descr &&
               x.second.shape == y.second.shape && x.second.bytes == y.second.bytes;
    });
}

// ---- Hand-built archives (DEFLATE entries with chosen sizes and CRCs) --------------------------

/// Raw DEFLATE (no zlib header or trailer), as ZIP method 8 holds it.
std::string deflate_raw(const std::string& data, int level = 6) {
    z_stream z{};
    REQUIRE(deflateInit2(&z, level, Z_DEFLATED, -MAX_WBITS, 8, Z_DEFAULT_STRATEGY) == Z_OK);
    std::string out(deflateBound(&z, uLong(data.size())), '\0');
    z.next_in = reinterpret_cast<Bytef*>(const_cast<char*>(data.data()));
    z.avail_in = uInt(data.size());
    z.next_out = reinterpret_cast<Bytef*>(out.data());
    z.avail_out = uInt(out.size());
    const int rc = deflate(&z, Z_FINISH);
    out.resize(z.total_out);
    deflateEnd(&z);
    REQUIRE(rc == Z_STREAM_END);
    return out;
}

struct zip_entry {
    std::string name;
    unsigned method;      // 0 STORED, 8 DEFLATE, anything else
    std::string payload;  // the bytes in the file (compressed for DEFLATE)
    std::uint32_t crc;
    std::uint64_t usize;  // declared uncompressed size; 0xFFFFFFFF or more goes into a ZIP64 extra field
};

/// The whole .npy file of an array.
std::string npy_bytes(const npz::array& a) {
    return npz::detail::npy_header(a.descr, a.shape) + std::string(a.bytes.begin(), a.bytes.end());
}
zip_entry stored(const npz::array& a) {
    const std::string npy = npy_bytes(a);
    return {a.name + ".npy", 0, npy, npz::crc32(npy.data(), npy.size()), npy.size()};
}
zip_entry deflated(const npz::array& a, int level = 6) {
    const std::string npy = npy_bytes(a);
    return {a.name + ".npy", 8, deflate_raw(npy, level), npz::crc32(npy.data(), npy.size()), npy.size()};
}

/// A zip archive of the entries as given (sizes and CRCs are not checked here).
std::vector<char> zip_of(const std::vector<zip_entry>& entries) {
    auto put = [](std::string& s, std::uint64_t v, int n) {
        for (int i = 0; i < n; ++i) s += char((v >> (8 * i)) & 0xFF);
    };
    std::string f, cd;
    for (const zip_entry& e : entries) {
        const bool z64 = e.usize >= 0xFFFFFFFF;
        std::string common;  // version needed .. name length, shared by both headers
        put(common, z64 ? 45 : 20, 2);
        put(common, 0, 2);  // flags
        put(common, e.method, 2);
        put(common, 0, 2), put(common, 0x21, 2);  // time, date
        put(common, e.crc, 4);
        put(common, e.payload.size(), 4);
        put(common, z64 ? 0xFFFFFFFF : e.usize, 4);
        put(common, e.name.size(), 2);
        std::string extra;
        if (z64) put(extra, 1, 2), put(extra, 8, 2), put(extra, e.usize, 8);
        const std::size_t local = f.size();
        put(f, 0x04034b50, 4);
        f += common;
        put(f, 0, 2);  // no extra field in the local header
        f += e.name + e.payload;
        put(cd, 0x02014b50, 4);
        put(cd, 20, 2);  // made by
        cd += common;
        put(cd, extra.size(), 2);
        put(cd, 0, 2), put(cd, 0, 2), put(cd, 0, 2), put(cd, 0, 4);  // comment, disk, attributes
        put(cd, local, 4);
        cd += e.name + extra;
    }
    const std::size_t cd_offset = f.size();
    f += cd;
    put(f, 0x06054b50, 4);
    put(f, 0, 4);
    put(f, entries.size(), 2), put(f, entries.size(), 2);
    put(f, cd.size(), 4), put(f, cd_offset, 4);
    put(f, 0, 2);
    return {f.begin(), f.end()};
}

// ---- Stores ----------------------------------------------------------------------------------

/// W (3,4), b (4), s (), k (2,2,2); element i of slot s = (i - 3) / 8 + s (the script's store()).
template <class T>
parameter_store<T> pattern_store() {
    parameter_store<T> ps;
    ps.add("W", rshape{2, {3, 4}});
    ps.add("b", rshape{1, {4}});
    ps.add("s", rshape{0, {}});
    ps.add("k", rshape{3, {2, 2, 2}});
    for (std::size_t s = 0; s < ps.size(); ++s)
        for (std::size_t i = 0; i < ps.at(s).shape.size(); ++i) ps.value(s)[i] = T((double(i) - 3) / 8 + double(s));
    return ps;
}

/// The same shapes, filled with random bit patterns of ordinary and special values.
template <class T>
parameter_store<T> random_store(unsigned seed) {
    auto ps = pattern_store<T>();
    std::mt19937_64 rng(seed);
    std::normal_distribution<T> normal;
    const T special[] = {T(-0.0), std::numeric_limits<T>::denorm_min(), std::numeric_limits<T>::infinity(),
                         std::numeric_limits<T>::quiet_NaN(), std::numeric_limits<T>::max(), T(1) / T(3)};
    std::size_t k = 0;
    for (std::size_t s = 0; s < ps.size(); ++s)
        for (std::size_t i = 0; i < ps.at(s).shape.size(); ++i, ++k)
            ps.value(s)[i] = k < std::size(special) ? special[k] : normal(rng);
    return ps;
}

/// Bit-for-bit equality of every parameter's values.
template <class T>
bool same_values(const parameter_store<T>& a, const parameter_store<T>& b) {
    if (a.size() != b.size()) return false;
    for (std::size_t s = 0; s < a.size(); ++s)
        if (!(a.at(s).shape == b.at(s).shape) ||
            std::memcmp(a.value(s), b.value(s), a.at(s).shape.size() * sizeof(T)) != 0)
            return false;
    return true;
}

/// Every value of `to` is bit-equal to the matching value of `from` converted to U.
template <class U, class T>
bool converted_from(const parameter_store<U>& to, const parameter_store<T>& from) {
    for (std::size_t s = 0; s < from.size(); ++s)
        for (std::size_t i = 0; i < from.at(s).shape.size(); ++i) {
            const U want = U(from.value(s)[i]);
            if (std::memcmp(&to.value(s)[i], &want, sizeof want) != 0) return false;
        }
    return true;
}

}  // namespace

TEST_CASE("CRC-32 is the ZIP/zlib one", "[npz]") {
    CHECK(npz::crc32("123456789", 9) == 0xCBF43926u);  // the standard check value
    CHECK(npz::crc32("", 0) == 0u);
    CHECK(npz::crc32("6789", 4, npz::crc32("12345", 5)) == 0xCBF43926u);  // chains like zlib's
}

TEMPLATE_TEST_CASE("a store round-trips through save and load bit for bit", "[npz]", float, double) {
    temp_dir dir;
    const std::string path = dir / "model.npz";
    const auto saved = random_store<TestType>(7);
    npz::save(saved, path);

    const auto file = npz::read(path);
    REQUIRE(file.size() == 4);
    CHECK(file.at("W").descr == (sizeof(TestType) == 4 ? "<f4" : "<f8"));
    CHECK(file.at("W").shape == std::vector<std::size_t>{3, 4});
    CHECK(file.at("s").shape.empty());
    CHECK(file.at("k").shape == std::vector<std::size_t>{2, 2, 2});

    auto loaded = pattern_store<TestType>();
    REQUIRE(!same_values(loaded, saved));
    npz::load(loaded, path);
    CHECK(same_values(loaded, saved));  // -0, denormals, inf, NaN included
    CHECK(dir.temporaries().empty());
}

TEST_CASE("float64 files load into float stores and float32 files into double stores", "[npz]") {
    temp_dir dir;
    const auto d = random_store<double>(3);
    npz::save(d, dir / "d.npz");
    auto f = pattern_store<float>();
    npz::load(f, dir / "d.npz");
    CHECK(converted_from(f, d));

    npz::save(f, dir / "f.npz");
    auto back = pattern_store<double>();
    npz::load(back, dir / "f.npz");
    CHECK(converted_from(back, f));
}

TEST_CASE("arrays of every dtype round-trip through write and read, and to_vector converts", "[npz]") {
    temp_dir dir;
    npz::write(dir / "all.npz", expected_arrays());
    const auto got = npz::read(dir / "all.npz");
    check_expected(got);

    CHECK(got.at("scalar").size() == 1);
    CHECK(got.at("empty").size() == 0);
    CHECK(npz::to_vector<double>(got.at("scalar")) == std::vector<double>{3.141592653589793});
    CHECK(npz::to_vector<double>(got.at("i64"))[0] == -1099511627776.0);
    CHECK(npz::to_vector<std::int64_t>(got.at("i64"))[2] == (std::int64_t(1) << 62) + 1);
    CHECK(npz::to_vector<float>(got.at("f64"))[1] == float(1.0 / 3.0));
    CHECK(npz::to_vector<std::int64_t>(got.at("i32")) == std::vector<std::int64_t>{1, -2, 3, -4});
    const float whole[] = {-3, 0, 2147483520.0f};  // exact integers convert to integer types
    CHECK(npz::to_vector<std::int32_t>(npz::from_data("w", whole, {3})) ==
          std::vector<std::int32_t>{-3, 0, 2147483520});
    const float too_big[] = {2147483648.0f};
    CHECK_THAT(io_message([&] { npz::to_vector<std::int32_t>(npz::from_data("t", too_big, {1})); }),
               Contains("element 0"));

    // Conversions that would lose information or make no sense throw.
    CHECK_THAT(io_message([&] { npz::to_vector<float>(got.at("flags")); }), Contains("'flags'") && Contains("|b1"));
    CHECK_THAT(io_message([&] { npz::to_vector<std::int32_t>(got.at("f32")); }),
               Contains("element 1") && Contains("not representable as <i4"));  // -0.75
    CHECK_THAT(io_message([&] { npz::to_vector<std::int32_t>(got.at("i64")); }), Contains("element 0"));
    npz::array broken{"x", "<f4", {3}, std::vector<char>(8)};
    CHECK_THAT(io_message([&] { npz::to_vector<float>(broken); }), Contains("8 bytes do not match shape (3)"));
}

TEST_CASE("write refuses arrays it cannot write and creates nothing", "[npz]") {
    temp_dir dir;
    const std::string path = dir / "bad.npz";
    const float v[2] = {1, 2};
    auto ok = npz::from_data("ok", v, {2});
    auto with = [&](npz::array a) { return std::vector<npz::array>{ok, std::move(a)}; };

    CHECK_THAT(io_message([&] { npz::write(path, with(npz::from_data("", v, {2}))); }), Contains("empty name"));
    CHECK_THAT(io_message([&] { npz::write(path, with(npz::from_data(std::string("a\0b", 3), v, {2}))); }),
               Contains("\\x00") && Contains("NUL"));
    CHECK_THAT(io_message([&] { npz::write(path, with(ok)); }), Contains("'ok'") && Contains("duplicate"));
    CHECK_THAT(io_message([&] { npz::write(path, with(npz::array{"c", "<c8", {1}, std::vector<char>(8)})); }),
               Contains("unsupported dtype '<c8'"));
    CHECK_THAT(io_message([&] { npz::write(path, with(npz::array{"c", "<f4", {3}, std::vector<char>(8)})); }),
               Contains("'c'") && Contains("8 bytes do not match shape (3)"));
    CHECK(fs::is_empty(dir.root));

    // Archives of 4 GiB or more would need ZIP64: refused before anything is written.
    CHECK_THAT(io_message([&] { npz::detail::plan({{5, 5'000'000'000ULL}}, path); }), Contains("ZIP64"));
    CHECK_THAT(io_message([&] { npz::detail::plan({{5, 3'000'000'000ULL}, {5, 3'000'000'000ULL}}, path); }),
               Contains("ZIP64"));
    CHECK_NOTHROW(npz::detail::plan({{5, 3'000'000'000ULL}}, path));
}

TEST_CASE("numpy.savez, numpy.savez_compressed and zipfile archives load (DEFLATE, ZIP64, data descriptors, NPY 1.0, 2.0 "
          "and 3.0)",
          "[npz][numpy]") {
    require_numpy();
    temp_dir dir;
    REQUIRE(python(dir, "gen " + dir.root.string()));

    INFO("numpy.savez");
    check_expected(npz::read(dir / "savez.npz"));
    INFO("numpy.savez_compressed");
    check_expected(npz::read(dir / "compressed.npz"));
    CHECK(same_arrays(npz::read(dir / "compressed.npz"), npz::read(dir / "savez.npz")));
    INFO("STORED and DEFLATE entries at levels 1 and 9 in one archive");
    check_expected(npz::read(dir / "mixed.npz"));
    INFO("DEFLATE with data descriptors");
    check_expected(npz::read(dir / "stream_deflated.npz"));
    INFO("DEFLATE with ZIP64 extra fields and end records");
    check_expected(npz::read(dir / "zip64_deflated.npz"));
    INFO("NPY versions 1.0, 2.0, 3.0 in a plain zip");
    check_expected(npz::read(dir / "versions.npz"));
    INFO("data descriptors");
    check_expected(npz::read(dir / "stream.npz"));
    INFO("ZIP64 central directory and end records, archive comment");
    check_expected(npz::read(dir / "zip64.npz"));
    const auto got = npz::read(dir / "savez.npz");
    CHECK(npz::to_vector<double>(got.at("cube"))[23] == 8.5);
    CHECK(npz::to_vector<double>(got.at("f64"))[2] == 2.0 / 3.0);
}

TEST_CASE("files written by ctg::npz load in numpy", "[npz][numpy]") {
    require_numpy();
    temp_dir dir;
    npz::write(dir / "ours.npz", expected_arrays());
    CHECK(python(dir, "check " + (dir / "ours.npz")));

    npz::save(pattern_store<float>(), dir / "f.npz");
    CHECK(python(dir, "store " + (dir / "f.npz") + " '<f4'"));
    npz::save(pattern_store<double>(), dir / "d.npz");
    CHECK(python(dir, "store " + (dir / "d.npz") + " '<f8'"));
    CHECK(!python(dir, "store " + (dir / "f.npz") + " '<f8' >/dev/null"));  // the check can fail
}

TEST_CASE("numpy files outside what ctg reads are rejected with the reason", "[npz][numpy]") {
    require_numpy();
    temp_dir dir;
    REQUIRE(python(dir, "gen " + dir.root.string()));
    auto message = [&](const std::string& file) { return io_message([&] { npz::read(dir / file); }); };

    CHECK_THAT(message("fortran.npz"), Contains(dir / "fortran.npz") && Contains("'a.npy'") && Contains("fortran_order"));
    CHECK_THAT(message("bigendian.npz"), Contains("'a.npy'") && Contains("big-endian dtype '>f4'"));
    CHECK_THAT(message("complex.npz"), Contains("'a.npy'") && Contains("unsupported dtype '<c8'"));
    CHECK_THAT(message("structured.npz"), Contains("'a.npy'") && Contains("unsupported dtype"));
    CHECK_THAT(message("short.npz"), Contains("'a.npy'") && Contains("data size 24 bytes does not match shape (5)"));
    CHECK_THAT(message("notnpy.npz"), Contains("'readme.txt'") && Contains("not a .npy entry"));
}

TEST_CASE("missing, empty, truncated and non-zip files throw io_error naming the file", "[npz]") {
    temp_dir dir;
    const std::string none = dir / "none.npz";
    CHECK_THAT(io_message([&] { npz::read(none); }), Contains(none) && Contains("cannot open"));
    CHECK_THAT(io_message([&] { npz::read(dir.root.string()); }), Contains("not a regular file"));

    put_file(dir / "empty.npz", {});
    CHECK_THAT(io_message([&] { npz::read(dir / "empty.npz"); }), Contains(dir / "empty.npz") && Contains("empty"));
    const std::string text = "this is a text file, not an archive at all";
    put_file(dir / "text.npz", {text.begin(), text.end()});
    CHECK_THAT(io_message([&] { npz::read(dir / "text.npz"); }), Contains("bad magic"));

    // Every prefix at a 7-byte step of a valid file: an io_error each time, never a crash.
    npz::write(dir / "valid.npz", expected_arrays());
    const auto valid = file_bytes(dir / "valid.npz");
    REQUIRE(valid.size() > 1000);
    const std::string cut = dir / "cut.npz";
    for (std::size_t n = 0; n < valid.size(); n += 7) {
        put_file(cut, {valid.begin(), valid.begin() + long(n)});
        INFO("prefix of " << n << " bytes");
        CHECK_THAT(io_message([&] { npz::read(cut); }), Contains(cut));
    }
    CHECK(npz::read(dir / "valid.npz").size() == 8);
}

TEST_CASE("a flipped byte in the data fails the CRC check", "[npz]") {
    temp_dir dir;
    const std::string path = dir / "p.npz";
    const double v[4] = {1.5, -2.25, 3.125, 1e300};
    npz::write(path, {npz::from_data("W", v, {2, 2})});
    auto bytes = file_bytes(path);
    const auto at = std::search(bytes.begin(), bytes.end(), reinterpret_cast<const char*>(v),
                                reinterpret_cast<const char*>(v) + sizeof v);
    REQUIRE(at != bytes.end());
    at[9] ^= 0x01;
    put_file(path, bytes);
    CHECK_THAT(io_message([&] { npz::read(path); }), Contains(path) && Contains("'W.npy'") && Contains("CRC-32 mismatch"));
}

TEST_CASE("every single-byte corruption is an io_error or a clean read", "[npz]") {
    temp_dir dir;
    npz::write(dir / "valid.npz", expected_arrays());
    const auto valid = file_bytes(dir / "valid.npz");
    const std::string path = dir / "bad.npz";
    const auto want = npz::read(dir / "valid.npz");
    std::size_t rejected = 0;
    std::vector<std::size_t> changed;  // accepted, yet read differently
    for (std::size_t i = 0; i < valid.size(); ++i) {
        auto bytes = valid;
        bytes[i] = char(bytes[i] ^ 0xFF);
        put_file(path, bytes);
        try {
            // Only metadata the reader does not use (time stamps, versions, attributes) may change.
            if (!same_arrays(npz::read(path), want)) changed.push_back(i);
        } catch (const io_error&) {
            ++rejected;
        }
    }
    CHECK(changed.empty());
    CHECK(rejected > valid.size() * 3 / 4);
}

TEST_CASE("DEFLATE entries inflate through zlib at every level, beside STORED ones", "[npz]") {
    temp_dir dir;
    const auto arrays = expected_arrays();
    for (int level : {0, 1, 6, 9}) {
        std::vector<zip_entry> entries;
        for (std::size_t i = 0; i < arrays.size(); ++i)
            entries.push_back(i % 3 == 2 ? stored(arrays[i]) : deflated(arrays[i], level));
        put_file(dir / "d.npz", zip_of(entries));
        INFO("level " << level);
        check_expected(npz::read(dir / "d.npz"));
        const auto bytes = file_bytes(dir / "d.npz");
        check_expected(npz::parse(bytes.data(), bytes.size(), "in memory"));
    }
}

TEST_CASE("bad DEFLATE entries are io_errors naming the file and the entry", "[npz]") {
    temp_dir dir;
    const std::string path = dir / "bad.npz";
    std::vector<double> v(300);
    for (std::size_t i = 0; i < v.size(); ++i) v[i] = double(i % 17) * 0.5;  // compresses well
    const npz::array a = npz::from_data("W", v.data(), {20, 15});
    const zip_entry good = deflated(a);
    const std::uint64_t n = npy_bytes(a).size();
    REQUIRE(good.payload.size() < n / 4);
    auto message = [&](const zip_entry& e) {
        put_file(path, zip_of({stored(npz::from_data("first", v.data(), {2})), e}));
        return io_message([&] { npz::read(path); });
    };
    CHECK(message(good) == "no io_error");

    zip_entry e = good;
    e.usize = n - 1;
    CHECK_THAT(message(e), Contains(path) && Contains("'W.npy'") && Contains("inflates to more than its declared uncompressed size"));
    e.usize = n + 1;
    CHECK_THAT(message(e), Contains(path) && Contains("'W.npy'") && Contains("inflates to " + std::to_string(n) + " bytes, not its declared"));
    e = good;
    e.payload.resize(e.payload.size() / 2);
    CHECK_THAT(message(e), Contains(path) && Contains("'W.npy'") && Contains("truncated"));
    e.payload.clear();  // nothing can inflate to 2528 bytes
    CHECK_THAT(message(e), Contains(path) && Contains("'W.npy'") && Contains("more than DEFLATE can produce"));
    e = good;
    e.payload[0] = char(e.payload[0] | 0x06);  // block type 3: reserved
    CHECK_THAT(message(e), Contains(path) && Contains("'W.npy'") && Contains("corrupt DEFLATE data: invalid block type"));
    e = good;
    e.payload += "xyz";
    CHECK_THAT(message(e), Contains(path) && Contains("'W.npy'") && Contains("3 bytes follow the end of the DEFLATE stream"));
    e = good;
    e.crc ^= 1;
    CHECK_THAT(message(e), Contains(path) && Contains("'W.npy'") && Contains("CRC-32 mismatch"));
    e = good;
    e.method = 12;  // bzip2
    CHECK_THAT(message(e), Contains(path) && Contains("'W.npy'") && Contains("compression method 12 is not supported"));

    // The inflated .npy must still be a well-formed one: the checks after inflation apply.
    std::string short_npy = npy_bytes(a);
    short_npy.resize(short_npy.size() - 8);
    e = {"W.npy", 8, deflate_raw(short_npy), npz::crc32(short_npy.data(), short_npy.size()), short_npy.size()};
    CHECK_THAT(message(e), Contains(path) && Contains("'W.npy'") && Contains("data size 2392 bytes does not match shape (20,15)"));

    // One name twice (STORED and DEFLATE, both intact).
    put_file(path, zip_of({stored(a), good}));
    CHECK_THAT(io_message([&] { npz::read(path); }), Contains("'W.npy'") && Contains("duplicate entry"));
}

TEST_CASE("zip bombs are refused without inflating beyond the declared size", "[npz]") {
    temp_dir dir;
    const std::string path = dir / "bomb.npz";
    const std::string zeros(std::size_t(64) << 20, '\0');  // 64 MiB -> about 64 KiB of DEFLATE
    const std::string bomb = deflate_raw(zeros, 9);
    REQUIRE(bomb.size() < zeros.size() / 500);
    auto message = [&](std::uint64_t declared) {
        put_file(path, zip_of({{"x.npy", 8, bomb, npz::crc32(zeros.data(), zeros.size()), declared}}));
        return io_message([&] { npz::read(path); });
    };
    // A small declared size: inflation stops one byte past it.
    CHECK_THAT(message(4096), Contains(path) && Contains("'x.npy'") && Contains("more than its declared") &&
                                  Contains("zip bomb"));
    // A declared size DEFLATE cannot reach from these bytes (1 TiB, in a ZIP64 extra field): refused
    // before any allocation.
    CHECK_THAT(message(std::uint64_t(1) << 40), Contains("'x.npy'") && Contains("more than DEFLATE can produce"));
    CHECK_THAT(message(0xFFFFFFFFull), Contains("more than DEFLATE can produce"));
    // The true size is accepted by the container; the zeros are not an .npy.
    CHECK_THAT(message(zeros.size()), Contains("'x.npy'") && Contains("not a .npy file"));
    // A stream that ends exactly where the output buffer has grown to, short of the declared size.
    std::string z64k(65536, '\0');
    std::mt19937 rng(1);
    for (char& c : z64k) c = char(rng() & 0x0F);  // compresses about 2:1
    put_file(path, zip_of({{"x.npy", 8, deflate_raw(z64k), npz::crc32(z64k.data(), z64k.size()), 100000}}));
    CHECK_THAT(io_message([&] { npz::read(path); }), Contains("inflates to 65536 bytes, not its declared"));
}

TEST_CASE("every prefix and single-byte corruption of a DEFLATE archive is an io_error or a clean read", "[npz]") {
    temp_dir dir;
    std::vector<zip_entry> entries;
    for (const auto& a : expected_arrays()) entries.push_back(deflated(a));
    const auto valid = zip_of(entries);
    const std::string path = dir / "bad.npz";
    put_file(path, valid);
    const auto want = npz::read(path);
    check_expected(want);
    for (std::size_t n = 0; n < valid.size(); n += 3) {
        INFO("prefix of " << n << " bytes");
        CHECK_THAT(io_message([&] { npz::parse(valid.data(), n, path); }), Contains(path));
    }
    std::size_t rejected = 0;
    std::vector<std::size_t> changed;
    for (std::size_t i = 0; i < valid.size(); ++i) {
        auto bytes = valid;
        bytes[i] = char(bytes[i] ^ 0xFF);
        try {
            if (!same_arrays(npz::parse(bytes.data(), bytes.size(), path), want)) changed.push_back(i);
        } catch (const io_error&) {
            ++rejected;
        }
    }
    CHECK(changed.empty());
    CHECK(rejected > valid.size() * 3 / 4);
}

TEST_CASE("load checks the whole file against the store and changes nothing on error", "[npz]") {
    temp_dir dir;
    auto store = random_store<float>(11);
    const auto before = store;
    auto unchanged = [&] { return same_values(store, before); };
    const auto other = pattern_store<float>();  // same names and shapes, other values
    auto arrays_of = [&](const parameter_store<float>& ps) {
        std::vector<npz::array> r;
        for (std::size_t s = 0; s < ps.size(); ++s)
            r.push_back(npz::from_data(ps.at(s).name, ps.value(s), ps.at(s).shape.to_vector()));
        return r;
    };
    auto load_msg = [&](std::vector<npz::array> arrays, bool allow_extra = false) {
        npz::write(dir / "f.npz", arrays);
        return io_message([&] { npz::load(store, dir / "f.npz", allow_extra); });
    };

    SECTION("wrong shape: names the parameter and both shapes; earlier parameters untouched") {
        auto a = arrays_of(other);
        a[1] = npz::from_data("b", other.value(0), {2, 2});  // 'b' is (4) in the store
        CHECK_THAT(load_msg(a), Contains(dir / "f.npz") && Contains("'b'") && Contains("(4)") && Contains("(2,2)"));
        CHECK(unchanged());  // 'W' came first and matched, yet was not written
    }
    SECTION("missing parameters are listed") {
        auto a = arrays_of(other);
        a.erase(a.begin() + 2);  // 's'
        a.pop_back();            // 'k'
        CHECK_THAT(load_msg(a), Contains("missing parameters: 's', 'k'"));
        CHECK(unchanged());
    }
    SECTION("extra arrays are an error unless allowed") {
        auto a = arrays_of(other);
        const double x = 1;
        a.push_back(npz::from_data("extra", &x, {}));
        CHECK_THAT(load_msg(a), Contains("arrays not in the store: 'extra'"));
        CHECK(unchanged());
        CHECK(load_msg(a, true) == "no io_error");
        CHECK(same_values(store, other));
    }
    SECTION("an integer array for a parameter is refused") {
        auto a = arrays_of(other);
        const std::int64_t ints[4] = {1, 2, 3, 4};
        a[1] = npz::from_data("b", ints, {4});
        CHECK_THAT(load_msg(a), Contains("'b'") && Contains("<i8") && Contains("float32 or float64"));
        CHECK(unchanged());
    }
    SECTION("a corrupt file leaves the store as it was") {
        npz::save(other, dir / "g.npz");
        auto bytes = file_bytes(dir / "g.npz");
        bytes.resize(bytes.size() - 30);
        put_file(dir / "g.npz", bytes);
        CHECK_THAT(io_message([&] { npz::load(store, dir / "g.npz"); }), Contains(dir / "g.npz"));
        CHECK(unchanged());
    }
}

TEST_CASE("save is atomic: a failed save leaves the previous file byte-identical", "[npz]") {
    temp_dir dir;
    const std::string path = dir / "model.npz";
    npz::save(pattern_store<float>(), path);
    const auto previous = file_bytes(path);
    auto intact = [&] { return file_bytes(path) == previous && dir.temporaries().empty(); };

    SECTION("the disk fills up half way (a file-size limit below the new file's size)") {
        parameter_store<float> big;
        big.add("W", rshape{2, {256, 256}});
        big.init(1);
        rlimit old{};
        REQUIRE(::getrlimit(RLIMIT_FSIZE, &old) == 0);
        rlimit small = old;
        small.rlim_cur = 64 * 1024;  // the temporary file fails at 64 KiB of 256 KiB
        const auto old_handler = std::signal(SIGXFSZ, SIG_IGN);
        REQUIRE(::setrlimit(RLIMIT_FSIZE, &small) == 0);
        const std::string m = io_message([&] { npz::save(big, path); });
        ::setrlimit(RLIMIT_FSIZE, &old);
        std::signal(SIGXFSZ, old_handler);
        CHECK_THAT(m, Contains(path) && Contains("cannot write the temporary file") && Contains(".tmp."));
        CHECK(intact());
    }
    SECTION("a parameter name that cannot be written") {
        parameter_store<float> bad;
        bad.add(std::string("W\0x", 3), rshape{1, {2}});
        CHECK_THAT(io_message([&] { npz::save(bad, path); }), Contains("\\x00") && Contains("NUL"));
        CHECK(intact());
    }
    SECTION("the target's directory does not exist") {
        const std::string lost = dir / "no/such/dir/model.npz";
        CHECK_THAT(io_message([&] { npz::save(pattern_store<float>(), lost); }),
                   Contains(lost) && Contains("cannot create the temporary file"));
        CHECK(intact());
    }
    SECTION("the target is a directory: the final rename fails and the temporary file goes") {
        const std::string occupied = dir / "occupied.npz";
        fs::create_directories(occupied + "/inside");
        CHECK_THAT(io_message([&] { npz::save(pattern_store<float>(), occupied); }), Contains("cannot rename"));
        CHECK(fs::is_directory(occupied + "/inside"));
        CHECK(intact());
    }
    SECTION("a successful save replaces the file") {
        const auto next = random_store<float>(5);
        npz::save(next, path);
        auto back = pattern_store<float>();
        npz::load(back, path);
        CHECK(same_values(back, next));
        CHECK(dir.temporaries().empty());
    }
}

TEST_CASE("ctg::feed: a program's inputs from npz arrays, converted, their shapes bound and checked", "[npz]") {
    constexpr dim B = dyn('B'), T = dyn('T');
    using X = input<"x", B, T, 3>;
    using Tok = index_input<"tok", B, T>;
    auto prog = compile<double>(sum(mul(X{}, embedding(param<"E", 5, 3>{}, Tok{}))));
    prog.params().init(1);
    std::vector<float> x(2 * 4 * 3);
    for (std::size_t k = 0; k < x.size(); ++k) x[k] = 0.25f * float(k) - 2.0f;
    const std::vector<std::int64_t> tok = {0, 1, 2, 3, 4, 4, 3, 2};
    // by hand: the values as doubles, the ids as int32
    const std::vector<double> xd(x.begin(), x.end());
    const std::vector<index_t> ids(tok.begin(), tok.end());
    prog.feed("x", xd.data(), rshape{3, {2, 4, 3}});
    prog.feed("tok", ids.data(), rshape{2, {2, 4}});
    const double by_hand = prog.forward();
    // from arrays of other types (<f4 values, <i8 ids), written and read back
    temp_dir dir;
    npz::write(dir / "batch.npz", {npz::from_data("x", x.data(), {2, 4, 3}), npz::from_data("tok", tok.data(), {2, 4})});
    const auto arrays = npz::read(dir / "batch.npz");
    prog.feed("x", std::vector<double>(24, 0.0).data(), rshape{3, {2, 4, 3}});  // overwritten below
    ctg::feed(prog, "x", arrays.at("x"));
    ctg::feed(prog, "tok", arrays.at("tok"));
    CHECK(prog.forward() == by_hand);
    // another batch size binds B anew
    ctg::feed(prog, "x", npz::from_data("x", x.data(), {1, 4, 3}));
    ctg::feed(prog, "tok", npz::from_data("tok", tok.data(), {1, 4}));
    CHECK_NOTHROW(prog.forward());
    // what cannot be fed says what and where
    const double not_ids[] = {1.0, 2.5};
    CHECK_THAT(io_message([&] { ctg::feed(prog, "tok", npz::from_data("ids", not_ids, {1, 2})); }),
               Contains("'ids'") && Contains("element 1"));
    const float five_axes[] = {1};
    CHECK_THAT(io_message([&] { ctg::feed(prog, "x", npz::from_data("deep", five_axes, {1, 1, 1, 1, 1})); }),
               Contains("'deep'") && Contains("5 axes"));
    CHECK_THROWS_AS(ctg::feed(prog, "x", npz::from_data("x", x.data(), {2, 3, 4})), ctg::error);  // the last axis is 3
    CHECK_THROWS_WITH(ctg::feed(prog, "y", arrays.at("x")), Contains("no input named 'y'"));
}
