#!/usr/bin/env bash
# Measures LibTorch's rate on the decode-cache workload on this machine (bench/libtorch_decode.cpp),
# for the performance target's "5x LibTorch". Installs Debian's libtorch-dev if missing (about 1 GB).
#   scripts/libtorch_decode.sh [THREADS...]     default: 1 2
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/setup.sh libtorch-dev
mkdir -p build
g++ -std=c++17 -O2 -DNDEBUG bench/libtorch_decode.cpp -o build/libtorch-decode \
  -I/usr/include/torch/csrc/api/include -ltorch -ltorch_cpu -lc10 -pthread
for t in "${@:-1 2}"; do
  for k in $t; do build/libtorch-decode "$k"; done
done
