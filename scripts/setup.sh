#!/usr/bin/env bash
# Installs what ctgraph needs on Debian 12 (only what is missing). Run as root or with sudo.
#   scripts/setup.sh [more packages...]    (scripts/test.sh adds the compiler it was asked for)
set -euo pipefail
packages=(g++ cmake make time libboost-dev xtensor-dev libxsimd-dev xtl-dev catch2 libopenblas-dev zlib1g-dev nlohmann-json3-dev
  libdnnl-dev python3-numpy python3-torch libopenmpi-dev openmpi-bin doxygen pkg-config libsentencepiece-dev python3-sentencepiece "$@")  # MPI: optional for the library (ctgraph::dist); CI runs its tests. doxygen: the API reference (scripts/docs.sh). pkg-config, libsentencepiece-dev, python3-sentencepiece: examples/subword_gpt and its cross-check
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
