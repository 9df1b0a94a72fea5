// ctgraph/binary_file.hpp: what the file-format readers and writers share (npz.hpp,
// safetensors.hpp): reading a whole file, writing one atomically, overflow-checked sizes,
// bounds-checked little-endian reads, and quoting names in messages.
//
// Every failure throws ctg::io_error whose message starts with the caller's `who` (for example
// "ctg::npz::read") and names the file: "<who>: '<path>': <what>".
// atomic_file writes `path + ".tmp.<pid>"` in the same directory, fsyncs and closes it, checks
// every step, then renames it over `path`; on any failure the temporary file is removed and `path`
// is left as it was. write_atomically(path, bytes, who) is that for bytes in memory: every file
// ctgraph writes (npz, safetensors, checkpoints, the trainer's CSV, PNG charts) goes through it.
// A process killed while writing cannot remove its temporary file: remove_stale_temporaries(dir)
// removes those whose writer is no longer alive (the trainer and checkpoint::save call it before
// they write). POSIX only (open/read/write/fsync/rename/kill).
#pragma once
#include <algorithm>
#include <array>
#include <bit>
#include <cerrno>
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <limits>
#include <string>
#include <string_view>
#include <vector>

#include <fcntl.h>
#include <signal.h>
#include <sys/stat.h>
#include <unistd.h>

#include "ctgraph/error.hpp"
#include "ctgraph/params.hpp"
#include "ctgraph/paths.hpp"

/// What the file-format readers and writers share: whole-file reads, atomic writes, overflow-checked
/// sizes and bounds-checked little-endian reads. Failures throw ctg::io_error naming the file.
namespace ctg::binary_file {

/// 's', with control characters and bytes such as NUL spelled `\xNN` so the message stays whole.
inline std::string in_quotes(std::string_view s) {
    std::string r = "'";
    for (const char c : s) {
        if ((unsigned char)c >= 0x20 && c != 0x7F) {
            r += c;
        } else {
            static constexpr char hex[] = "0123456789abcdef";
            r += "\\x";
            r += hex[(unsigned char)c >> 4];
            r += hex[c & 0xF];
        }
    }
    return r + "'";
}

/// "(2,3)", the spelling of ctg::to_string(rshape).
inline std::string shape_string(const std::vector<std::size_t>& s) {
    std::string r = "(";
    for (std::size_t i = 0; i < s.size(); ++i) r += (i ? "," : "") + std::to_string(s[i]);
    return r + ")";
}

/// a * b, or false when it overflows.
inline bool mul_ok(std::size_t a, std::size_t b, std::size_t& out) {
    if (b != 0 && a > std::numeric_limits<std::size_t>::max() / b) return false;
    out = a * b;
    return true;
}
/// Number of bytes of `shape` elements of `item` bytes, or false when it overflows.
inline bool byte_count(const std::vector<std::size_t>& shape, std::size_t item, std::size_t& out) {
    out = item;
    for (std::size_t d : shape)
        if (!mul_ok(out, d, out)) return false;
    return true;
}

// Little-endian element copies (memcpy on a little-endian host).
/// Writes n elements of src to dst as little-endian bytes (a memcpy on a little-endian host).
template <class T>
void store_le(const T* src, std::size_t n, char* dst) {
    if constexpr (std::endian::native == std::endian::little) {
        if (n) std::memcpy(dst, src, n * sizeof(T));
    } else {
        for (std::size_t i = 0; i < n; ++i) {
            auto b = std::bit_cast<std::array<char, sizeof(T)>>(src[i]);
            std::reverse(b.begin(), b.end());
            std::memcpy(dst + i * sizeof(T), b.data(), sizeof(T));
        }
    }
}
/// Reads one T from little-endian bytes at src.
template <class T>
T load_le(const char* src) {
    std::array<char, sizeof(T)> b;
    std::memcpy(b.data(), src, sizeof(T));
    if constexpr (std::endian::native != std::endian::little) std::reverse(b.begin(), b.end());
    return std::bit_cast<T>(b);
}

/// Bounds-checked little-endian reads from a byte buffer.
struct bytes_view {
    const unsigned char* p = nullptr;  ///< the buffer
    std::size_t n = 0;  ///< its size in bytes
    /// Whether [off, off + len) lies inside the buffer (overflow-safe).
    bool has(std::uint64_t off, std::uint64_t len) const { return off <= n && len <= n - off; }
    std::uint64_t le(std::size_t off, int bytes) const {  ///< the unsigned little-endian integer of `bytes` bytes at off (the caller has checked has(off, bytes))
        std::uint64_t v = 0;
        for (int i = bytes - 1; i >= 0; --i) v = (v << 8) | p[off + std::size_t(i)];
        return v;
    }
    std::uint16_t u16(std::size_t off) const { return std::uint16_t(le(off, 2)); }  ///< 2 bytes at off (checked by the caller)
    std::uint32_t u32(std::size_t off) const { return std::uint32_t(le(off, 4)); }  ///< 4 bytes at off (checked by the caller)
    std::uint64_t u64(std::size_t off) const { return le(off, 8); }  ///< 8 bytes at off (checked by the caller)
};

/// "<who>: '<path>': <what>" as an io_error.
[[noreturn]] inline void fail(std::string_view who, std::string_view path, const std::string& what) {
    throw io_error(std::string(who) + ": " + in_quotes(path) + ": " + what);
}

/// The whole file, or io_error (cannot open, not a regular file, read error, shrank while read).
inline std::vector<unsigned char> slurp(const std::string& path, std::string_view who) {
    auto sys = [&](const char* what) {
        const int e = errno;
        fail(who, path, what + std::string(": ") + std::strerror(e));
    };
    const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
    if (fd < 0) sys("cannot open");
    struct closer {
        int fd;
        ~closer() { ::close(fd); }
    } guard{fd};
    struct stat st {};
    if (::fstat(fd, &st) != 0) sys("cannot stat");
    if (!S_ISREG(st.st_mode)) fail(who, path, "not a regular file");
    std::vector<unsigned char> buf(std::size_t(st.st_size));
    std::size_t got = 0;
    while (got < buf.size()) {
        const ssize_t r = ::read(fd, buf.data() + got, buf.size() - got);
        if (r < 0 && errno == EINTR) continue;
        if (r < 0) sys("read error");
        if (r == 0) fail(who, path, "file shrank while being read");
        got += std::size_t(r);
    }
    return buf;
}

namespace detail {
/// Test hook, for tests that kill a writer mid-file (tests/test_resume.cpp): when set, every
/// atomic_file::write() calls it after each chunk it has written to the temporary file, with the
/// target's path and the bytes written to the temporary so far; a test sets it to raise(SIGKILL) at a
/// chosen call. Not for other uses. Unset (nullptr, the default) it costs one load and a branch per
/// write() call, which writes a whole array or file at once.
inline void (*after_write)(const std::string& path, std::size_t written) = nullptr;
}  // namespace detail

/// Bytes written to the file: all-or-nothing into a temporary, renamed over the target.
class atomic_file {
public:
    /// Creates the temporary `path + ".tmp.<pid>"`; throws ctg::io_error (its message starting with `who`) when it cannot.
    atomic_file(const std::string& path, std::string_view who)
        : path_(path), tmp_(path + ".tmp." + std::to_string(long(::getpid()))), who_(who) {
        fd_ = ::open(tmp_.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0666);
        if (fd_ < 0) sys("cannot create the temporary file");
    }
    atomic_file(const atomic_file&) = delete;
    atomic_file& operator=(const atomic_file&) = delete;
    ~atomic_file() {
        if (fd_ >= 0) ::close(fd_);
        if (!done_) ::unlink(tmp_.c_str());
    }
    /// Appends n bytes to the temporary; throws ctg::io_error on failure.
    void write(const void* data, std::size_t n) {
        const char* p = static_cast<const char*>(data);
        while (n) {
            const ssize_t w = ::write(fd_, p, std::min<std::size_t>(n, std::size_t(1) << 30));
            if (w < 0 && errno == EINTR) continue;
            if (w <= 0) sys("cannot write the temporary file");
            p += w, n -= std::size_t(w), written_ += std::size_t(w);
            if (detail::after_write) detail::after_write(path_, written_);
        }
    }
    /// Flushes (fsync), closes and renames the temporary over the target; throws ctg::io_error on failure, leaving the target as it was.
    void commit() {
        if (::fsync(fd_) != 0) sys("cannot fsync the temporary file");
        const int fd = fd_;
        fd_ = -1;
        if (::close(fd) != 0) sys("cannot close the temporary file");
        if (std::rename(tmp_.c_str(), path_.c_str()) != 0) sys("cannot rename over it the temporary file");
        done_ = true;
        // Make the rename itself durable (best effort: the data is in place either way).
        const auto slash = path_.find_last_of('/');
        const std::string dir = slash == std::string::npos ? "." : slash == 0 ? "/" : path_.substr(0, slash);
        const int dfd = ::open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
        if (dfd >= 0) ::fsync(dfd), ::close(dfd);
    }

private:
    [[noreturn]] void sys(const char* what) const {
        const int e = errno;
        fail(who_, path_, what + (" " + in_quotes(tmp_)) + ": " + std::strerror(e));
    }
    std::string path_, tmp_;
    std::string who_;
    int fd_ = -1;
    bool done_ = false;
    std::size_t written_ = 0;
};

/// `bytes` as the whole content of `path`, atomically (atomic_file); `who` starts the error messages.
inline void write_atomically(const std::string& path, const void* bytes, std::size_t n, std::string_view who) {
    atomic_file out(path, who);
    out.write(bytes, n);
    out.commit();
}

/// The pid of a temporary file name "<target>.tmp.<pid>" (as atomic_file names them), or 0.
inline long temporary_pid(std::string_view file_name) {
    const auto at = file_name.rfind(".tmp.");
    if (at == std::string_view::npos || at == 0) return 0;
    const std::string_view digits = file_name.substr(at + 5);
    if (digits.empty() || digits.size() > 9) return 0;
    long pid = 0;
    for (const char c : digits) {
        if (c < '0' || c > '9') return 0;
        pid = pid * 10 + (c - '0');
    }
    return pid;
}

/// Removes the temporary files "<target>.tmp.<pid>" in `dir` (only those whose target's name starts
/// with `prefix`, when given) whose writer is gone: kill(pid, 0) fails with ESRCH. A temporary of a
/// live process is kept (it may be writing now; EPERM means alive too), and so is one of this
/// process (a write in progress on another thread). A pid that a new process has taken since keeps
/// its dead writer's file until that process ends: no harm but the space. Returns how many files
/// were removed; errors (an unreadable directory, a file gone meanwhile) are skipped.
inline std::size_t remove_stale_temporaries(const std::string& dir, std::string_view prefix = {}) {
    std::size_t removed = 0;
    for (const std::string& name : paths::entry_names(dir)) {
        if (!name.starts_with(prefix)) continue;
        const long pid = temporary_pid(name);
        if (pid <= 0 || pid == long(::getpid())) continue;
        if (::kill(pid_t(pid), 0) == 0 || errno != ESRCH) continue;
        if (paths::remove_file(paths::join(dir.empty() ? "." : dir, name))) ++removed;
    }
    return removed;
}

/// Loads every parameter of `store` from `file` (name -> entry with a `shape` vector), all or nothing:
/// each parameter must be there with its shape, and `dtype_problem(entry)` empty (else it says what
/// is wrong, e.g. " has dtype <i4 in the file (parameters take float32 or float64)"); `convert(entry)`
/// gives its values as T. Entries the store lacks are errors unless allow_extra. On any problem the
/// io_error (`who`: the function; `kind`: "arrays", "tensors") lists them all and the store is
/// unchanged. npz::load and safetensors::load are this with their formats' entries.
template <class T, class Map, class DtypeProblem, class Convert>
void load_store(parameter_store<T>& store, const Map& file, const std::string& path, std::string_view who,
                std::string_view kind, bool allow_extra, DtypeProblem dtype_problem, Convert convert) {
    std::vector<std::vector<T>> staged(store.size());
    std::string missing, extra, problems;
    auto list = [](std::string& l, const std::string& item) { l += (l.empty() ? "" : ", ") + in_quotes(item); };
    for (std::size_t s = 0; s < store.size(); ++s) {
        const auto& e = store.at(s);
        const auto it = file.find(e.name);
        if (it == file.end()) {
            list(missing, e.name);
            continue;
        }
        const auto& a = it->second;
        if (const std::string why = dtype_problem(a); !why.empty())
            problems += "; parameter " + in_quotes(e.name) + why;
        else if (a.shape != e.shape.to_vector())
            problems += "; parameter " + in_quotes(e.name) + " has shape " + shape_string(e.shape.to_vector()) +
                        " in the store but " + shape_string(a.shape) + " in the file";
        else
            staged[s] = convert(a);
    }
    if (!allow_extra)
        for (const auto& [name, a] : file)
            if (store.find(name) < 0) list(extra, name);
    if (!missing.empty()) problems += "; missing parameters: " + missing;
    if (!extra.empty())
        problems += "; " + std::string(kind) + " not in the store: " + extra + " (load(store, path, true) ignores them)";
    if (!problems.empty())
        throw io_error(std::string(who) + ": " + in_quotes(path) + " does not match the parameter store: " +
                       problems.substr(2));
    for (std::size_t s = 0; s < store.size(); ++s) std::copy(staged[s].begin(), staged[s].end(), store.value(s));
}

}  // namespace ctg::binary_file
