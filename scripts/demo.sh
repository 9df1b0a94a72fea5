#!/usr/bin/env bash
# Installs what is missing, builds, and trains the main demo: a character-level GPT on the text
# shipped in data/text (progress line, validation loss, loss curves as PNG, a checkpoint, generated
# text). Outputs go to build/char_gpt/. Extra arguments go to `char_gpt train` (e.g. --steps 500).
# Then: build/examples/char_gpt generate build/char_gpt/char_gpt.npz "Your prompt"
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/setup.sh
cmake -S . -B build -DCMAKE_BUILD_TYPE=Release
cmake --build build -j"$(nproc)" --target char_gpt
mkdir -p build/char_gpt
build/examples/char_gpt train --out build/char_gpt "$@"
