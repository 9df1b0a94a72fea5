// ctgraph/paths_impl.hpp: the definitions of ctgraph/paths.hpp, over std::filesystem. Included by
// paths.hpp in header-only builds and by the library's compiled part (include/ctgraph/compiled.cpp).
#pragma once
#include <filesystem>
#include <string>
#include <system_error>
#include <vector>

#include "ctgraph/paths.hpp"

namespace ctg::paths {

template <class>
std::string join(const std::string& dir, const std::string& file) {
    return (std::filesystem::path(dir) / file).string();
}

template <class>
std::string directory_of(const std::string& path) {
    const std::filesystem::path p(path);
    return p.has_parent_path() ? p.parent_path().string() : ".";
}

template <class>
std::string file_name_of(const std::string& path) {
    return std::filesystem::path(path).filename().string();
}

template <class>
std::vector<std::string> entry_names(const std::string& dir) {
    std::vector<std::string> names;
    std::error_code ec;
    std::filesystem::directory_iterator it(dir.empty() ? "." : dir, ec), end;
    for (; !ec && it != end; it.increment(ec)) names.push_back(it->path().filename().string());
    return names;
}

template <class>
bool remove_file(const std::string& path) {
    std::error_code ec;
    return std::filesystem::remove(path, ec);
}

template <class>
std::string make_directories(const std::string& dir) {
    std::error_code ec;
    std::filesystem::create_directories(dir, ec);
    if (ec) return ec.message();
    if (!std::filesystem::is_directory(dir, ec)) return "it is not a directory";
    return "";
}

}  // namespace ctg::paths
