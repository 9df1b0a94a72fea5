// tests/temp_dir.hpp: a fresh directory per use, removed at the end, and a Python reference
// script run into one.
#pragma once
#include <catch2/catch.hpp>

#include <cstdlib>
#include <filesystem>
#include <string>
#include <system_error>

#include <unistd.h>

namespace ctg::testing {

struct temp_dir {
    std::filesystem::path root;
    explicit temp_dir(const std::string& prefix = "ctg_") {
        static int counter = 0;
        root = std::filesystem::temp_directory_path() / (prefix + std::to_string(::getpid()) + "_" + std::to_string(counter++));
        std::filesystem::remove_all(root);
        std::filesystem::create_directories(root);
    }
    temp_dir(const temp_dir&) = delete;  // a copy's destructor would remove the directory
    temp_dir& operator=(const temp_dir&) = delete;
    ~temp_dir() {
        std::error_code ec;
        std::filesystem::remove_all(root, ec);
    }
    std::string operator/(const std::string& name) const { return (root / name).string(); }
};

/// Runs `/usr/bin/python3 script args DIR` into d; a machine without python3-torch fails the test
/// saying so.
inline void run_python_reference(const temp_dir& d, const std::string& script_and_args) {
    if (std::system("/usr/bin/python3 -c 'import torch, numpy' >/dev/null 2>&1") != 0)
        FAIL("python3-torch is required for this test: `/usr/bin/python3 -c 'import torch'` failed "
             "(scripts/setup.sh installs python3-torch)");
    REQUIRE(std::system(("OMP_NUM_THREADS=1 /usr/bin/python3 " + script_and_args + " " + d.root.string()).c_str()) == 0);
}

}  // namespace ctg::testing
