#!/usr/bin/env bash
# Builds the API reference with Doxygen (docs/Doxyfile) into BUILD_DIR/docs/html (default: build)
# and fails, listing them, if Doxygen warned about anything: an undocumented public entity, a
# parameter that does not exist, bad markup. scripts/test.sh runs it when doxygen is installed.
#   scripts/docs.sh [BUILD_DIR]
set -euo pipefail
cd "$(dirname "$0")/.."
out="${1:-build}/docs"
if ! command -v doxygen >/dev/null; then
  echo "docs: doxygen is not installed (Debian: apt-get install doxygen)" >&2
  exit 2
fi
version=$(grep -oE 'version = "[0-9.]+"' include/ctgraph/version.hpp | grep -oE '[0-9.]+')
mkdir -p "$out"
rm -f "$out/warnings.log"
start=$SECONDS
CTG_DOCS_OUT="$out" CTG_VERSION="$version" doxygen docs/Doxyfile
if [[ -s $out/warnings.log ]]; then
  # Doxygen prints some warnings once per template instance: list each once.
  sort -u "$out/warnings.log" >&2
  echo "docs: $(sort -u "$out/warnings.log" | grep -c warning) Doxygen warnings (above); every public entity needs a /// comment" >&2
  exit 1
fi
echo "docs: no warnings; $out/html/index.html ($((SECONDS - start)) s)"
