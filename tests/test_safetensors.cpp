// safetensors read/write: files written by an independent writer (tests/formats_ref.py, by the
// specification) load with the same bytes and values, files written here pass that script's
// checking reader, every rule of the format is enforced with an io_error naming file and tensor,
// random corruption never crashes, parameter stores round-trip all-or-nothing and save atomically.
//
// The Python cases run /usr/bin/python3 (python3-numpy, installed by scripts/setup.sh); without it
// they fail, saying so, rather than skip.
#include <catch2/catch.hpp>

#include <cmath>
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

#include <ctgraph/ctgraph.hpp>
#include <ctgraph/npz.hpp>
#include <ctgraph/safetensors.hpp>

#ifndef CTG_FORMATS_REF
#error "CTG_FORMATS_REF (the path of tests/formats_ref.py) must be defined by the build"
#endif

using namespace ctg;
namespace fs = std::filesystem;
namespace st = ctg::safetensors;
using Catch::Matchers::Contains;

namespace {

// A fresh directory per test case, removed at the end.
struct temp_dir {
    fs::path root;
    temp_dir() {
        static int counter = 0;
        root = fs::temp_directory_path() / ("ctg_st_" + std::to_string(::getpid()) + "_" + std::to_string(counter++));
        fs::remove_all(root);
        fs::create_directories(root);
    }
    ~temp_dir() {
        std::error_code ec;
        fs::remove_all(root, ec);
    }
    std::string operator/(const std::string& name) const { return (root / name).string(); }
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
void put_file(const std::string& path, const std::string& bytes) {
    std::ofstream out(path, std::ios::binary | std::ios::trunc);
    out.write(bytes.data(), std::streamsize(bytes.size()));
    REQUIRE(out.good());
}

/// The message of the io_error `f` throws ("no io_error" when it throws nothing).
template <class F>
std::string io_message(F&& f) {
    try {
        f();
    } catch (const io_error& e) {
        return e.what();
    }
    return "no io_error";
}

void require_numpy() {
    if (std::system("/usr/bin/python3 -c 'import numpy' >/dev/null 2>&1") != 0)
        FAIL("python3-numpy is required for this test: `/usr/bin/python3 -c 'import numpy'` failed "
             "(scripts/setup.sh installs python3-numpy)");
}
/// Runs tests/formats_ref.py with `args`; true when it exits with 0.
bool python(const std::string& args) {
    return std::system(("/usr/bin/python3 " CTG_FORMATS_REF " " + args).c_str()) == 0;
}

// ---- The tensors of formats_ref.py's expected(), built here ---------------------------------------

template <class S>
st::tensor raw(std::string name, std::string dtype, std::vector<std::size_t> shape, std::vector<S> values) {
    st::tensor t{std::move(name), std::move(dtype), std::move(shape), std::vector<char>(values.size() * sizeof(S))};
    binary_file::store_le(values.data(), values.size(), t.bytes.data());
    return t;
}

std::vector<st::tensor> expected_tensors() {
    std::vector<float> f32(6), cube(24);
    for (std::size_t i = 0; i < 6; ++i) f32[i] = float(double(i) * 0.25 - 1);
    for (std::size_t i = 0; i < 24; ++i) cube[i] = float(double(i) * 0.5 - 3);
    return {
        raw<float>("f32", "F32", {2, 3}, f32),
        raw<double>("f64", "F64", {4}, {0.0, 1.0 / 3.0, 2.0 / 3.0, 1.0}),
        // 0.5 -1.5 65504 2^-24 -0 inf -inf nan
        raw<std::uint16_t>("f16", "F16", {8}, {0x3800, 0xBE00, 0x7BFF, 0x0001, 0x8000, 0x7C00, 0xFC00, 0x7E00}),
        raw<std::uint16_t>("bf16", "BF16", {2, 2}, {0x3F80, 0xC020, 0x7180, 0x0008}),  // 1 -2.5 2^100 2^-130
        raw<std::int8_t>("i8", "I8", {3}, {-128, 0, 127}),
        raw<std::uint8_t>("u8", "U8", {3}, {0, 200, 255}),
        raw<std::int16_t>("i16", "I16", {2}, {-32768, 32767}),
        raw<std::uint16_t>("u16", "U16", {2}, {0, 65535}),
        raw<std::int32_t>("i32", "I32", {2, 2}, {1, -2, 3, -4}),
        raw<std::uint32_t>("u32", "U32", {2}, {0, 4294967295u}),
        raw<std::int64_t>("i64", "I64", {3}, {-(std::int64_t(1) << 40), 0, (std::int64_t(1) << 62) + 1}),
        raw<std::uint64_t>("u64", "U64", {2}, {0, ~std::uint64_t(0)}),
        raw<std::uint8_t>("flags", "BOOL", {3}, {1, 0, 1}),
        raw<std::uint8_t>("f8", "F8_E4M3", {2}, {0x38, 0xB8}),
        raw<double>("scalar", "F64", {}, {3.141592653589793}),
        raw<float>("empty", "F32", {0, 3}, {}),
        raw<float>("cube", "F32", {2, 3, 4}, cube),
    };
}
const st::metadata expected_metadata = {{"format", "pt"}, {"writer", "tests/formats_ref.py"}};

void check_expected(const std::map<std::string, st::tensor>& got) {
    const auto want = expected_tensors();
    CHECK(got.size() == want.size());
    for (const st::tensor& w : want) {
        INFO("tensor " << w.name);
        const auto it = got.find(w.name);
        REQUIRE(it != got.end());
        CHECK(it->second.name == w.name);
        CHECK(it->second.dtype == w.dtype);
        CHECK(it->second.shape == w.shape);
        CHECK(it->second.bytes == w.bytes);
    }
}

/// A file of the given header text (used as is) and data bytes.
std::string st_file(const std::string& header, const std::string& data = "") {
    std::string f;
    for (int i = 0; i < 8; ++i) f += char((std::uint64_t(header.size()) >> (8 * i)) & 0xFF);
    return f + header + data;
}

// ---- Stores (as in test_npz.cpp) ------------------------------------------------------------------

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
template <class T>
bool same_values(const parameter_store<T>& a, const parameter_store<T>& b) {
    if (a.size() != b.size()) return false;
    for (std::size_t s = 0; s < a.size(); ++s)
        if (!(a.at(s).shape == b.at(s).shape) ||
            std::memcmp(a.value(s), b.value(s), a.at(s).shape.size() * sizeof(T)) != 0)
            return false;
    return true;
}

}  // namespace

// ---- Files from and to the reference script ---------------------------------------------------------

TEST_CASE("safetensors written by the specification load with every dtype, byte for byte", "[safetensors][python]") {
    require_numpy();
    temp_dir dir;
    REQUIRE(python("gen " + dir.root.string()));

    st::metadata meta;
    INFO("ref.safetensors: metadata, data laid out in reverse, header padded");
    check_expected(st::read(dir / "ref.safetensors", &meta));
    CHECK(meta == expected_metadata);
    INFO("bare.safetensors: no metadata, no padding");
    check_expected(st::read(dir / "bare.safetensors", &meta));
    CHECK(meta.empty());
    const auto bytes = file_bytes(dir / "ref.safetensors");
    check_expected(st::parse(bytes.data(), bytes.size(), "in memory"));

    // The values, converted.
    const auto got = st::read(dir / "ref.safetensors");
    CHECK(st::to_vector<double>(got.at("f64"))[1] == 1.0 / 3.0);
    CHECK(st::to_vector<double>(got.at("scalar")) == std::vector<double>{3.141592653589793});
    const auto h = st::to_vector<float>(got.at("f16"));
    CHECK(h[0] == 0.5f);
    CHECK(h[1] == -1.5f);
    CHECK(h[2] == 65504.0f);
    CHECK(h[3] == std::ldexp(1.0f, -24));  // the smallest subnormal half
    CHECK((h[4] == 0 && std::signbit(h[4])));
    CHECK(h[5] == std::numeric_limits<float>::infinity());
    CHECK(h[6] == -std::numeric_limits<float>::infinity());
    CHECK(std::isnan(h[7]));
    CHECK(st::to_vector<double>(got.at("bf16")) == std::vector<double>{1.0, -2.5, std::ldexp(1.0, 100), std::ldexp(1.0, -130)});
    CHECK(st::to_vector<std::int32_t>(got.at("i8")) == std::vector<std::int32_t>{-128, 0, 127});
    CHECK(st::to_vector<std::int32_t>(got.at("u8")) == std::vector<std::int32_t>{0, 200, 255});
    CHECK(st::to_vector<std::int64_t>(got.at("i16")) == std::vector<std::int64_t>{-32768, 32767});
    CHECK(st::to_vector<std::int32_t>(got.at("u16")) == std::vector<std::int32_t>{0, 65535});
    CHECK(st::to_vector<std::int64_t>(got.at("u32")) == std::vector<std::int64_t>{0, 4294967295});
    CHECK(st::to_vector<std::int64_t>(got.at("i64"))[2] == (std::int64_t(1) << 62) + 1);
    CHECK(st::to_vector<double>(got.at("flags")) == std::vector<double>{1, 0, 1});
    CHECK(st::to_vector<float>(got.at("empty")).empty());
    CHECK(st::to_vector<double>(got.at("cube"))[23] == 8.5);
    // What does not convert says why.
    CHECK_THAT(io_message([&] { st::to_vector<std::int64_t>(got.at("u64")); }),
               Contains("'u64'") && Contains("element 1") && Contains("not representable as I64"));
    CHECK_THAT(io_message([&] { st::to_vector<std::int32_t>(got.at("u32")); }), Contains("element 1"));
    CHECK_THAT(io_message([&] { st::to_vector<std::int32_t>(got.at("f16")); }), Contains("element 0"));  // 0.5
    CHECK_THAT(io_message([&] { st::to_vector<float>(got.at("f8")); }), Contains("'f8'") && Contains("F8_E4M3"));
}

TEST_CASE("numpy.savez_compressed and the specification's safetensors hold the same arrays", "[safetensors][npz][python]") {
    require_numpy();
    temp_dir dir;
    REQUIRE(python("gen " + dir.root.string()));
    const auto npz_file = npz::read(dir / "ref.npz");
    const auto st_file_ = st::read(dir / "ref.safetensors");
    CHECK(npz_file.size() == 8);  // f32 f64 i32 i64 flags scalar empty cube
    for (const auto& [name, a] : npz_file) {
        INFO("array " << name);
        REQUIRE(st_file_.count(name));
        const st::tensor& t = st_file_.at(name);
        CHECK(a.shape == t.shape);
        CHECK(a.bytes == t.bytes);
        if (a.descr != "|b1") CHECK(npz::to_vector<double>(a) == st::to_vector<double>(t));
    }
}

TEST_CASE("safetensors written here pass the reference reader", "[safetensors][python]") {
    require_numpy();
    temp_dir dir;
    st::write(dir / "ours.safetensors", expected_tensors(), expected_metadata);
    CHECK(python("check " + (dir / "ours.safetensors")));
    CHECK(dir.temporaries().empty());
    check_expected(st::read(dir / "ours.safetensors"));

    st::save(pattern_store<float>(), dir / "f.safetensors");
    CHECK(python("store " + (dir / "f.safetensors") + " F32"));
    st::save(pattern_store<double>(), dir / "d.safetensors");
    CHECK(python("store " + (dir / "d.safetensors") + " F64"));
    CHECK(!python("store " + (dir / "f.safetensors") + " F64 >/dev/null"));  // the check can fail
    // The file without metadata is refused by the check (it wants the metadata).
    st::write(dir / "nometa.safetensors", expected_tensors());
    CHECK(!python("check " + (dir / "nometa.safetensors") + " >/dev/null"));
}

// ---- Parameter stores ----------------------------------------------------------------------------

TEMPLATE_TEST_CASE("a store round-trips through safetensors save and load bit for bit", "[safetensors]", float, double) {
    temp_dir dir;
    const std::string path = dir / "model.safetensors";
    const auto saved = random_store<TestType>(7);
    st::save(saved, path, {{"step", "100"}});
    st::metadata meta;
    const auto file = st::read(path, &meta);
    CHECK(meta == st::metadata{{"step", "100"}});
    REQUIRE(file.size() == 4);
    CHECK(file.at("W").dtype == (sizeof(TestType) == 4 ? "F32" : "F64"));
    CHECK(file.at("W").shape == std::vector<std::size_t>{3, 4});
    CHECK(file.at("s").shape.empty());

    auto loaded = pattern_store<TestType>();
    REQUIRE(!same_values(loaded, saved));
    st::load(loaded, path);
    CHECK(same_values(loaded, saved));  // -0, denormals, inf, NaN included
    CHECK(dir.temporaries().empty());
}

TEST_CASE("stores load from F64, F32, F16 and BF16 tensors", "[safetensors]") {
    temp_dir dir;
    const auto d = pattern_store<double>();  // multiples of 1/8 near 0: exact in every float dtype
    st::save(d, dir / "d.safetensors");
    auto f = random_store<float>(1);
    st::load(f, dir / "d.safetensors");
    for (std::size_t s = 0; s < d.size(); ++s)
        for (std::size_t i = 0; i < d.at(s).shape.size(); ++i) CHECK(double(f.value(s)[i]) == d.value(s)[i]);

    // The same values as F16 and BF16 tensors, bit patterns computed here from the floats.
    for (const char* dtype : {"F16", "BF16"}) {
        INFO(dtype);
        std::vector<st::tensor> ts;
        for (std::size_t s = 0; s < d.size(); ++s) {
            std::vector<std::uint16_t> bits;
            for (std::size_t i = 0; i < d.at(s).shape.size(); ++i) {
                const float v = float(d.value(s)[i]);
                const std::uint32_t b = std::bit_cast<std::uint32_t>(v);
                if (dtype[0] == 'B') {
                    bits.push_back(std::uint16_t(b >> 16));
                } else {  // a normal half (or zero): rebias the exponent, keep the top 10 mantissa bits
                    const int e = int((b >> 23) & 0xFF);
                    bits.push_back(std::uint16_t(((b >> 16) & 0x8000) | (e ? ((e - 112) << 10) | ((b >> 13) & 0x3FF) : 0)));
                }
            }
            ts.push_back(raw<std::uint16_t>(d.at(s).name, dtype, d.at(s).shape.to_vector(), bits));
        }
        st::write(dir / "h.safetensors", ts);
        auto g = random_store<double>(2);
        st::load(g, dir / "h.safetensors");
        CHECK(same_values(g, d));
    }
}

TEST_CASE("safetensors load checks the whole file against the store and changes nothing on error", "[safetensors]") {
    temp_dir dir;
    auto store = random_store<float>(11);
    const auto before = store;
    auto unchanged = [&] { return same_values(store, before); };
    const auto other = pattern_store<float>();
    auto tensors_of = [&](const parameter_store<float>& ps) {
        std::vector<st::tensor> r;
        for (std::size_t s = 0; s < ps.size(); ++s)
            r.push_back(st::from_data(ps.at(s).name, ps.value(s), ps.at(s).shape.to_vector()));
        return r;
    };
    const std::string path = dir / "f.safetensors";
    auto load_msg = [&](const std::vector<st::tensor>& ts, bool allow_extra = false) {
        st::write(path, ts);
        return io_message([&] { st::load(store, path, allow_extra); });
    };

    SECTION("wrong shape: names the parameter and both shapes; earlier parameters untouched") {
        auto t = tensors_of(other);
        t[1] = st::from_data("b", other.value(0), {2, 2});
        CHECK_THAT(load_msg(t), Contains(path) && Contains("'b'") && Contains("(4)") && Contains("(2,2)"));
        CHECK(unchanged());
    }
    SECTION("missing parameters are listed") {
        auto t = tensors_of(other);
        t.erase(t.begin() + 2);
        t.pop_back();
        CHECK_THAT(load_msg(t), Contains("missing parameters: 's', 'k'"));
        CHECK(unchanged());
    }
    SECTION("extra tensors are an error unless allowed") {
        auto t = tensors_of(other);
        const double x = 1;
        t.push_back(st::from_data("extra", &x, {}));
        CHECK_THAT(load_msg(t), Contains("tensors not in the store: 'extra'"));
        CHECK(unchanged());
        CHECK(load_msg(t, true) == "no io_error");
        CHECK(same_values(store, other));
    }
    SECTION("an integer tensor for a parameter is refused") {
        auto t = tensors_of(other);
        const std::int64_t ints[4] = {1, 2, 3, 4};
        t[1] = st::from_data("b", ints, {4});
        CHECK_THAT(load_msg(t), Contains("'b'") && Contains("I64") && Contains("F32, F64, F16 or BF16"));
        CHECK(unchanged());
    }
    SECTION("a corrupt file leaves the store as it was") {
        st::save(other, path);
        auto bytes = file_bytes(path);
        bytes.resize(bytes.size() - 4);
        put_file(path, std::string(bytes.begin(), bytes.end()));
        CHECK_THAT(io_message([&] { st::load(store, path); }), Contains(path) && Contains("'k'") && Contains("run past"));
        CHECK(unchanged());
    }
}

TEST_CASE("safetensors save is atomic: a failed save leaves the previous file byte-identical", "[safetensors]") {
    temp_dir dir;
    const std::string path = dir / "model.safetensors";
    st::save(pattern_store<float>(), path);
    const auto previous = file_bytes(path);
    auto intact = [&] { return file_bytes(path) == previous && dir.temporaries().empty(); };

    SECTION("the disk fills up half way (a file-size limit below the new file's size)") {
        parameter_store<float> big;
        big.add("W", rshape{2, {256, 256}});
        big.init(1);
        rlimit old{};
        REQUIRE(::getrlimit(RLIMIT_FSIZE, &old) == 0);
        rlimit small = old;
        small.rlim_cur = 64 * 1024;
        const auto old_handler = std::signal(SIGXFSZ, SIG_IGN);
        REQUIRE(::setrlimit(RLIMIT_FSIZE, &small) == 0);
        const std::string m = io_message([&] { st::save(big, path); });
        ::setrlimit(RLIMIT_FSIZE, &old);
        std::signal(SIGXFSZ, old_handler);
        CHECK_THAT(m, Contains("ctg::safetensors::write") && Contains(path) && Contains("cannot write the temporary file"));
        CHECK(intact());
    }
    SECTION("the target's directory does not exist") {
        const std::string lost = dir / "no/such/dir/model.safetensors";
        CHECK_THAT(io_message([&] { st::save(pattern_store<float>(), lost); }),
                   Contains(lost) && Contains("cannot create the temporary file"));
        CHECK(intact());
    }
    SECTION("the target is a directory: the final rename fails and the temporary file goes") {
        const std::string occupied = dir / "occupied.safetensors";
        fs::create_directories(occupied + "/inside");
        CHECK_THAT(io_message([&] { st::save(pattern_store<float>(), occupied); }), Contains("cannot rename"));
        CHECK(intact());
    }
    SECTION("a parameter name that is not UTF-8 is refused before anything is written") {
        parameter_store<float> bad;
        bad.add("W\xff", rshape{1, {2}});
        CHECK_THAT(io_message([&] { st::save(bad, path); }), Contains("'W\xff'") && Contains("not valid UTF-8"));
        CHECK(intact());
    }
}

TEST_CASE("safetensors write refuses tensors it cannot write and creates nothing", "[safetensors]") {
    temp_dir dir;
    const std::string path = dir / "bad.safetensors";
    const float v[2] = {1, 2};
    const auto ok = st::from_data("ok", v, {2});
    auto with = [&](st::tensor t) { return std::vector<st::tensor>{ok, std::move(t)}; };
    auto msg = [&](std::vector<st::tensor> ts, st::metadata m = {}) {
        return io_message([&] { st::write(path, ts, m); });
    };
    CHECK_THAT(msg(with(st::from_data("", v, {2}))), Contains(path) && Contains("empty name"));
    CHECK_THAT(msg(with(st::from_data("__metadata__", v, {2}))), Contains("reserved for the metadata"));
    CHECK_THAT(msg(with(ok)), Contains("'ok'") && Contains("duplicate name"));
    CHECK_THAT(msg(with(st::tensor{"c", "C64", {1}, std::vector<char>(8)})), Contains("'c'") && Contains("unknown dtype 'C64'"));
    CHECK_THAT(msg(with(st::tensor{"c", "F32", {3}, std::vector<char>(8)})),
               Contains("'c'") && Contains("8 bytes do not match shape (3)"));
    CHECK_THAT(msg({ok}, {{"k", "\xc3"}}), Contains("metadata entry 'k'") && Contains("UTF-8"));
    CHECK(fs::is_empty(dir.root));
    // Names and metadata in UTF-8 (and with quotes, backslashes, control characters) are fine.
    const std::string odd = "caf\xc3\xa9 \"q\" \\ \n\x01";
    st::write(path, with(st::from_data(odd, v, {1, 2})), {{odd, odd}});
    st::metadata meta;
    const auto got = st::read(path, &meta);
    CHECK(got.count(odd));
    CHECK(meta.at(odd) == odd);
    // An empty file: no tensors, no data.
    st::write(path, {});
    CHECK(st::read(path).empty());
    CHECK(file_bytes(path).size() == 16);
}

// ---- Malformed files ---------------------------------------------------------------------------------

TEST_CASE("every rule of the safetensors format is checked, with the file and tensor named", "[safetensors]") {
    temp_dir dir;
    const std::string path = dir / "bad.safetensors";
    auto message = [&](const std::string& bytes) {
        put_file(path, bytes);
        return io_message([&] { st::read(path); });
    };
    const std::string eight(8, 'x'), sixteen(16, 'x');
    auto entry = [](const std::string& name, const std::string& dtype, const std::string& shape, std::uint64_t b,
                    std::uint64_t e) {
        return "\"" + name + "\":{\"dtype\":\"" + dtype + "\",\"shape\":" + shape + ",\"data_offsets\":[" +
               std::to_string(b) + "," + std::to_string(e) + "]}";
    };
    const std::string a = entry("a", "F32", "[2]", 0, 8);
    REQUIRE(message(st_file("{" + a + "}", eight)) == "no io_error");
    REQUIRE(message(st_file("{" + a + "}    ", eight)) == "no io_error");  // padded with spaces

    SECTION("the file and the header length") {
        CHECK_THAT(message(""), Contains(path) && Contains("file is empty"));
        CHECK_THAT(message("abc"), Contains("too short for a safetensors file (3 bytes)"));
        std::string big = st_file("{}");
        big[7] = char(0x80);  // 2^63
        CHECK_THAT(message(big), Contains("header length 9223372036854775810 is over the format's limit"));
        big = st_file("{}");
        big[3] = 0x10;  // 256 MiB + 2
        CHECK_THAT(message(big), Contains("over the format's limit of 100000000"));
        CHECK_THAT(message(st_file("{" + a + "}", eight).substr(0, 20)), Contains("runs past the end of the file (20 bytes)"));
        CHECK_THAT(message(st_file("{")), Contains("too short for a JSON object"));
        CHECK_THAT(message(st_file("")), Contains("header length 0 is too short"));
        CHECK_THAT(message(st_file(" {}")), Contains("does not start with '{'"));
        CHECK_THAT(message(st_file("[1, 2]")), Contains("does not start with '{'"));
    }
    SECTION("the JSON") {
        CHECK_THAT(message(st_file("{\"a\": }")), Contains(path) && Contains("header is not valid JSON") && Contains("parse error"));
        CHECK_THAT(message(st_file("{} x")), Contains("not valid JSON"));
        CHECK_THAT(message(st_file(std::string("{}\0 hidden", 9))), Contains("not valid JSON: a NUL byte at offset 2"));
        CHECK_THAT(message(st_file("{\"\xff\": 1}")), Contains("not valid JSON"));  // not UTF-8
        CHECK_THAT(message(st_file("{" + a + "," + a + "}", eight)), Contains("the header names 'a' twice"));
        CHECK_THAT(message(st_file("{\"a\":{\"dtype\":\"F32\",\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,8]}}", eight)),
                   Contains("tensor 'a'") && Contains("its entry names 'dtype' twice"));
        CHECK_THAT(message(st_file("{\"__metadata__\":{\"k\":\"1\",\"k\":\"2\"}}")), Contains("\"__metadata__\" names 'k' twice"));
        CHECK_THAT(message(st_file("{\"__metadata__\":{},\"__metadata__\":{}}")), Contains("names '__metadata__' twice"));
    }
    SECTION("entries") {
        CHECK_THAT(message(st_file("{\"a\": 5}")), Contains("tensor 'a'") && Contains("entry is a number, not an object"));
        CHECK_THAT(message(st_file("{\"\": {}}")), Contains("empty tensor name"));
        CHECK_THAT(message(st_file("{\"a\":{\"dtype\":\"F32\",\"shape\":[2]}}", eight)), Contains("tensor 'a'") && Contains("lacks one of"));
        CHECK_THAT(message(st_file("{\"a\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,8],\"x\":1}}", eight)),
                   Contains("unexpected key 'x'"));
        CHECK_THAT(message(st_file("{" + entry("a", "F17", "[2]", 0, 8) + "}", eight)),
                   Contains(path) && Contains("tensor 'a'") && Contains("unknown dtype 'F17'"));
        CHECK_THAT(message(st_file("{\"a\":{\"dtype\":4,\"shape\":[2],\"data_offsets\":[0,8]}}", eight)),
                   Contains("\"dtype\" is a number, not a string"));
        CHECK_THAT(message(st_file("{" + entry("a", "F32", "2", 0, 8) + "}", eight)), Contains("\"shape\" is a number, not an array"));
        CHECK_THAT(message(st_file("{" + entry("a", "F32", "[-2]", 0, 8) + "}", eight)),
                   Contains("\"shape\" holds -2, not a non-negative integer"));
        CHECK_THAT(message(st_file("{" + entry("a", "F32", "[2.0]", 0, 8) + "}", eight)), Contains("\"shape\" holds 2.0"));
        CHECK_THAT(message(st_file("{" + entry("a", "F32", "[true]", 0, 8) + "}", eight)), Contains("holds a boolean"));
        CHECK_THAT(message(st_file("{" + entry("a", "F32", "[18446744073709551616]", 0, 8) + "}", eight)),
                   Contains("not a non-negative integer"));  // 2^64: a float to JSON
        CHECK_THAT(message(st_file("{" + entry("a", "F64", "[4294967296,4294967296]", 0, 8) + "}", eight)),
                   Contains("shape (4294967296,4294967296) overflows"));
        CHECK_THAT(message(st_file("{\"a\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0]}}", eight)),
                   Contains("\"data_offsets\" is not [begin, end]"));
        CHECK_THAT(message(st_file("{\"a\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,-8]}}", eight)),
                   Contains("\"data_offsets\" is not [begin, end]"));
        CHECK_THAT(message(st_file("{" + entry("a", "F32", "[0]", 8, 0) + "}", eight)), Contains("[8, 0) end before they begin"));
        CHECK_THAT(message(st_file("{" + entry("a", "F32", "[4]", 0, 16) + "}", eight)),
                   Contains("tensor 'a'") && Contains("[0, 16) run past the end of the data (8 bytes)"));
        CHECK_THAT(message(st_file("{" + entry("a", "F32", "[3]", 0, 8) + "}", eight)),
                   Contains("[0, 8) hold 8 bytes but shape (3) of dtype F32 takes 12"));
        CHECK_THAT(message(st_file("{\"__metadata__\": [1]}")), Contains("\"__metadata__\" is not an object"));
        CHECK_THAT(message(st_file("{\"__metadata__\": {\"k\": 1}}")), Contains("\"__metadata__\" entry 'k' is a number"));
    }
    SECTION("the tensors cover the data exactly") {
        CHECK_THAT(message(st_file("{" + a + "," + entry("b", "F32", "[2]", 4, 12) + "}", sixteen)),
                   Contains("tensor 'b'") && Contains("[4, 12) overlaps tensor 'a''s, which ends at 8"));
        CHECK_THAT(message(st_file("{" + a + "," + entry("b", "F32", "[2]", 0, 8) + "}", eight)), Contains("overlaps"));
        CHECK_THAT(message(st_file("{" + entry("a", "F32", "[1]", 0, 4) + "," + entry("b", "F32", "[1]", 8, 12) + "}",
                                   std::string(12, 'x'))),
                   Contains("tensor 'b'") && Contains("bytes [4, 8) of the data before it belong to no tensor"));
        CHECK_THAT(message(st_file("{" + entry("a", "F32", "[1]", 4, 8) + "}", eight)), Contains("bytes [0, 4)"));
        CHECK_THAT(message(st_file("{" + a + "}", sixteen)), Contains("the last 8 bytes of the data (16 bytes) belong to no tensor"));
        CHECK_THAT(message(st_file("{}", "x")), Contains("the last 1 bytes"));
        // Empty tensors take no bytes, wherever they sit between the others.
        CHECK(message(st_file("{" + entry("e", "F32", "[0,4]", 8, 8) + "," + a + "," + entry("f", "F32", "[0]", 0, 0) +
                              "," + entry("g", "F32", "[2]", 8, 16) + "}",
                              sixteen)) == "no io_error");
        CHECK_THAT(message(st_file("{" + a + "," + entry("e", "F32", "[0]", 4, 4) + "}", eight)), Contains("tensor 'e'") && Contains("overlaps"));
    }
}

TEST_CASE("every prefix and single-byte corruption of a safetensors file is an io_error or a clean read", "[safetensors]") {
    temp_dir dir;
    const std::string path = dir / "valid.safetensors";
    st::write(path, expected_tensors(), expected_metadata);
    const auto valid = file_bytes(path);
    const auto want = st::read(path);
    check_expected(want);
    for (std::size_t n = 0; n < valid.size(); ++n) {
        INFO("prefix of " << n << " bytes");
        CHECK_THAT(io_message([&] { st::parse(valid.data(), n, path); }), Contains(path));
    }
    // A flip in the header (ASCII JSON) leaves invalid UTF-8 or invalid JSON, or breaks the length:
    // always an io_error. A flip in the data changes that tensor's bytes (the format has no checksum).
    const std::size_t data_start = 8 + std::size_t(binary_file::bytes_view{reinterpret_cast<const unsigned char*>(valid.data()), 8}.u64(0));
    std::vector<std::size_t> header_accepted, data_misread;
    for (std::size_t i = 0; i < valid.size(); ++i) {
        auto bytes = valid;
        bytes[i] = char(bytes[i] ^ 0xFF);
        try {
            const auto got = st::parse(bytes.data(), bytes.size(), path);
            if (i < data_start) {
                header_accepted.push_back(i);
            } else {  // exactly one tensor differs, in exactly that byte
                std::size_t differing = 0;
                for (const auto& [name, t] : got) differing += t.bytes != want.at(name).bytes;
                if (differing != 1 || got.size() != want.size()) data_misread.push_back(i);
            }
        } catch (const io_error&) {
            if (i >= data_start) data_misread.push_back(i);
        }
    }
    CHECK(header_accepted.empty());
    CHECK(data_misread.empty());
}

TEST_CASE("ctg::feed: a program's inputs from safetensors tensors", "[safetensors]") {
    using X = input<"x", dyn('B'), 2>;
    using Tok = index_input<"tok", dyn('B')>;
    auto prog = compile<float>(sum(mul(X{}, embedding(param<"E", 4, 2>{}, Tok{}))));
    prog.params().init(2);
    const double x[] = {0.5, -1.0, 2.0, 0.25, 1.5, -0.5};
    const std::int64_t tok[] = {3, 0, 2};
    const float xf[] = {0.5f, -1.0f, 2.0f, 0.25f, 1.5f, -0.5f};
    const index_t ids[] = {3, 0, 2};
    prog.feed("x", xf, rshape{2, {3, 2}});
    prog.feed("tok", ids, rshape{1, {3}});
    const float by_hand = prog.forward();
    // F64 values and I64 ids, through a file's bytes
    const std::vector<safetensors::tensor> written = {safetensors::from_data("x", x, {3, 2}), safetensors::from_data("tok", tok, {3})};
    const std::string header = safetensors::detail::file_header(written, {}, "<memory>");
    std::vector<char> file(header.begin(), header.end());
    for (const auto& t : written) file.insert(file.end(), t.bytes.begin(), t.bytes.end());
    const auto read = safetensors::parse(file.data(), file.size());
    ctg::feed(prog, "x", read.at("x"));
    ctg::feed(prog, "tok", read.at("tok"));
    CHECK(prog.forward() == by_hand);
}
