#!/usr/bin/env bash
# Installs ctgraph from a configured build tree into a temporary prefix, then configures, builds and
# runs an outside project that finds it with find_package(ctgraph CONFIG).
#   scripts/check_install.sh BUILD_DIR WORK_DIR
set -euo pipefail
build=$1; work=$2
here="$(cd "$(dirname "$0")/.." && pwd)"
rm -rf "$work" && mkdir -p "$work"
cmake --install "$build" --prefix "$work/prefix" > "$work/install.log"
# No build type (no optimisation): the check is that the package is found and its program builds,
# links and runs; unoptimised, its three units compile in half the time (13 against 25 CPU-s).
cmake -S "$here/tests/install_consumer" -B "$work/consumer" -DCMAKE_PREFIX_PATH="$work/prefix" \
  -DCMAKE_BUILD_TYPE= > "$work/configure.log"
cmake --build "$work/consumer" > "$work/build.log"
"$work/consumer/consumer"
"$work/consumer/consumer_headers"
# ctgraph::onnx, where it was installed and found (Debian's libonnx-dev).
if [ -x "$work/consumer/consumer_onnx" ]; then (cd "$work/consumer" && ./consumer_onnx); fi
