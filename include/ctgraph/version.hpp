// ctgraph/version.hpp: the library's version, the one place it is written (CMakeLists.txt reads it
// for project(VERSION) and the package's version file, so find_package(ctgraph 0.2) checks it).
// Versions follow CHANGELOG.md; within 0.x, a new minor version may change the API.
#pragma once
#include <string_view>

namespace ctg {
inline constexpr int version_major = 0;  ///< the major version
inline constexpr int version_minor = 2;  ///< the minor version
inline constexpr int version_patch = 0;  ///< the patch version
/// "major.minor.patch"
inline constexpr std::string_view version = "0.2.0";
}  // namespace ctg
