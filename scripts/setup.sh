#!/usr/bin/env bash
# Installs what ctgraph needs on Debian 12 (only what is missing). Run as root or with sudo.
#   scripts/setup.sh [more packages...]    (scripts/test.sh adds the compiler it was asked for)
set -euo pipefail
packages=(g++ cmake make time libboost-dev xtensor-dev libxsimd-dev xtl-dev catch2 libopenblas-dev zlib1g-dev nlohmann-json3-dev
  libdnnl-dev python3-numpy python3-torch libopenmpi-dev openmpi-bin doxygen pkg-config libsentencepiece-dev python3-sentencepiece libonnx-dev libprotobuf-dev "$@")  # MPI: optional for the library (ctgraph::dist); CI runs its tests. doxygen: the API reference (scripts/docs.sh). pkg-config, libsentencepiece-dev, python3-sentencepiece: examples/subword_gpt and its cross-check. libonnx-dev, libprotobuf-dev: ONNX export (ctgraph::onnx); Node.js and npm for ONNX Runtime: below
missing=()
for p in "${packages[@]}"; do
  dpkg -s "$p" >/dev/null 2>&1 || missing+=("$p")
done
if ((${#missing[@]})); then
  echo "setup: installing ${missing[*]}"
  SUDO=""
  [ "$(id -u)" -eq 0 ] || SUDO="sudo"
  $SUDO apt-get update -q
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -q --no-install-recommends "${missing[@]}"
else
  echo "setup: all packages present"
fi

# ONNX Runtime for the ONNX export's checks (tests, examples, bench): onnxruntime-node from npm into
# scripts/onnx/node_modules. --ignore-scripts: its CPU binaries ship in the package; the install
# script would fetch optional GPU parts from elsewhere, which fails here. Skipped when present.
# Node.js and npm come with the machine's image (NodeSource's nodejs here); Debian's otherwise.
onnx_dir="$(cd "$(dirname "$0")" && pwd)/onnx"
if ! command -v node >/dev/null || ! command -v npm >/dev/null; then
  echo "setup: installing nodejs npm"
  SUDO=""
  [ "$(id -u)" -eq 0 ] || SUDO="sudo"
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -q --no-install-recommends nodejs npm
fi
if [ ! -d "$onnx_dir/node_modules/onnxruntime-node" ]; then
  echo "setup: installing onnxruntime-node (npm) into $onnx_dir"
  (cd "$onnx_dir" && npm ci --ignore-scripts --no-audit --no-fund --loglevel=error)
fi
