#!/usr/bin/env bash
# Installs what is missing, builds everything, and runs the whole test suite with CTest.
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/setup.sh
cmake -S . -B build -DCMAKE_BUILD_TYPE=Release
cmake --build build -j"$(nproc)"
# all targets are built first: catch_discover_tests would otherwise register *_NOT_BUILT tests
ctest --test-dir build -j"$(nproc)" --output-on-failure
