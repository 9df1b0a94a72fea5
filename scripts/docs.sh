#!/usr/bin/env bash
# Builds the API reference with Doxygen (docs/Doxyfile) into BUILD_DIR/docs/html (default: build)
# and fails, listing them, if Doxygen warned about a header: an undocumented public entity, a
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
# Doxygen prints some warnings once per template instance: each is listed once. Warnings in the
# headers (an undocumented public entity, a parameter that does not exist, bad markup) fail; those
# in the Markdown pages (README, docs/*.md: Doxygen's Markdown misreads a few constructs that render
# well elsewhere) are listed as notes.
sort -u "$out/warnings.log" > "$out/warnings.sorted"
headers=$(grep -E '\.hpp:[0-9]+: warning' "$out/warnings.sorted" || true)
pages=$(grep -vE '\.hpp:[0-9]+: warning' "$out/warnings.sorted" || true)
if [[ -n $pages ]]; then
  echo "$pages" | sed 's/: warning: /: note: /' >&2
fi
if [[ -n $headers ]]; then
  echo "$headers" >&2
  echo "docs: $(echo "$headers" | wc -l) Doxygen warnings in the headers (above): every public entity needs a /// comment" >&2
  exit 1
fi
echo "docs: no warnings in the headers; $out/html/index.html ($((SECONDS - start)) s)"
