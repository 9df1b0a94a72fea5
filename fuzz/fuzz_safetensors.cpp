// libFuzzer target: the safetensors reader, ctg::safetensors::parse, on arbitrary bytes.
//
// An io_error is the expected way to refuse an input; any other exception, a crash, a leak or
// undefined behaviour (ASan, UBSan) is a finding. What the reader accepts must be consistent (bytes
// = itemsize x shape) and must round-trip: written back by the writer's own code (header and data,
// in memory) it must be accepted by the writer's checks and read again as the same tensors and
// metadata. Accepted tensors are converted with to_vector.
//
// Build and run: scripts/fuzz.sh (or the fuzz.safetensors ctest in a clang build).
#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include <ctgraph/safetensors.hpp>

namespace st = ctg::safetensors;

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
    std::map<std::string, st::tensor> got;
    st::metadata meta;
    try {
        got = st::parse(data, size, "fuzz", &meta);
    } catch (const ctg::io_error&) {
        return 0;
    }
    std::vector<st::tensor> tensors;
    for (const auto& [name, t] : got) {
        std::size_t bytes = 0;
        if (name != t.name || !st::detail::byte_count(t.shape, st::detail::itemsize(t.dtype), bytes) ||
            bytes != t.bytes.size())
            __builtin_trap();  // accepted a tensor whose bytes disagree with its dtype and shape
        for (int k = 0; k < 2; ++k) try {
                if (k == 0) (void)st::to_vector<double>(t);
                else (void)st::to_vector<std::int64_t>(t);
            } catch (const ctg::io_error&) {
            }
        tensors.push_back(t);
    }
    // Round trip through the writer (an io_error here is a finding too: it is not caught).
    st::detail::check_for_write(tensors, meta, "fuzz-write");
    std::string file = st::detail::file_header(tensors, meta, "fuzz-write");
    for (const st::tensor& t : tensors) file.append(t.bytes.begin(), t.bytes.end());
    st::metadata meta2;
    const auto again = st::parse(file.data(), file.size(), "fuzz-reread", &meta2);
    if (meta2 != meta || again.size() != got.size()) __builtin_trap();
    for (const auto& [name, t] : got) {
        const auto it = again.find(name);
        if (it == again.end() || it->second.dtype != t.dtype || it->second.shape != t.shape ||
            it->second.bytes != t.bytes)
            __builtin_trap();
    }
    return 0;
}
