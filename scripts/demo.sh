#!/usr/bin/env bash
# Installs what is missing, builds, and trains the main demo (an MLP on the shipped digits data).
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/setup.sh
cmake -S . -B build -DCMAKE_BUILD_TYPE=Release
cmake --build build -j"$(nproc)" --target mlp_digits
build/examples/mlp_digits "$@"
