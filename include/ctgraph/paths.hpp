// ctgraph/paths.hpp: the few file-system operations the checkpoints, the trainer and the file
// writers need, declared without <filesystem>: that header alone costs a g++ unit about 16 MB of
// compiler memory (7 MB under clang), and every program that includes ctgraph/ctgraph.hpp would
// pay it. The definitions (paths_impl.hpp) are in the library's compiled part where programs link
// it (CTG_SEPARATE_COMPILATION), and included here otherwise.
#pragma once
#include <string>
#include <vector>

namespace ctg::paths {

/// `dir / file` as std::filesystem::path joins them (an empty dir gives `file`).
template <class = void>
std::string join(const std::string& dir, const std::string& file);
/// The directory part of `path`, "." when it has none.
template <class = void>
std::string directory_of(const std::string& path);
/// The file-name part of `path`.
template <class = void>
std::string file_name_of(const std::string& path);
/// The names of the entries of directory `dir` ("." when empty), in the order the system lists
/// them; none when it cannot be read.
template <class = void>
std::vector<std::string> entry_names(const std::string& dir);
/// Removes the file `path`; whether it did (an error is no removal).
template <class = void>
bool remove_file(const std::string& path);
/// Creates directory `dir` and its parents as needed: "" when `dir` is a directory afterwards,
/// else why not.
template <class = void>
std::string make_directories(const std::string& dir);

// (The library's instances: include/ctgraph/compiled.cpp.)
#define CTG_PATHS_INSTANCES(how)                                                    \
    how std::string join<void>(const std::string&, const std::string&);             \
    how std::string directory_of<void>(const std::string&);                         \
    how std::string file_name_of<void>(const std::string&);                         \
    how std::vector<std::string> entry_names<void>(const std::string&);             \
    how bool remove_file<void>(const std::string&);                                 \
    how std::string make_directories<void>(const std::string&);
#if defined(CTG_SEPARATE_COMPILATION)
CTG_PATHS_INSTANCES(extern template)
#endif

}  // namespace ctg::paths

#if !defined(CTG_SEPARATE_COMPILATION)
#include "ctgraph/paths_impl.hpp"
#endif
