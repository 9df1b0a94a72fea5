#!/usr/bin/env bash
# Builds the libFuzzer targets over the file readers (fuzz/fuzz_npz.cpp, fuzz/fuzz_safetensors.cpp)
# with clang++ and AddressSanitizer + UndefinedBehaviorSanitizer, then runs each, one after the
# other, in one process (the machine is shared):
#
#   scripts/fuzz.sh [seconds] [runs]   each target until `runs` executions or `seconds`, whichever
#                                      comes first (defaults: 1000000 runs, 3600 s; runs -1: no limit)
#   CXX_FUZZ=clang++-16 scripts/fuzz.sh ...   another clang (default clang++, clang 14 on Debian 12)
#
# Installs clang and libclang-rt-14-dev (libFuzzer's runtime, libclang_rt.fuzzer-x86_64.a) when
# missing. Works in build-fuzz/: seeds written by tests/formats_ref.py (small valid files) in
# build-fuzz/seeds/<target>, the corpus each run grows (kept between runs) in
# build-fuzz/<target>/corpus, a crashing input in build-fuzz/<target>/artifacts/, the log in
# build-fuzz/<target>/log. Then the line and branch coverage of the reader headers by each corpus
# (a build with -fprofile-instr-generate run once over the corpus; llvm-cov-14). Exits non-zero when
# a target finds anything.
set -euo pipefail
cd "$(dirname "$0")/.."
seconds=${1:-3600} runs=${2:-1000000}
cxx=${CXX_FUZZ:-clang++}
scripts/setup.sh clang libclang-rt-14-dev llvm-14
out=build-fuzz
mkdir -p "$out"
/usr/bin/python3 tests/formats_ref.py seeds "$out/seeds"
for t in npz safetensors; do
  echo "fuzz: building fuzz_$t with $cxx"
  "$cxx" -std=c++20 -g -O1 -fsanitize=fuzzer,address,undefined -fno-sanitize-recover=all \
    -Iinclude -Igraph -Iops "fuzz/fuzz_$t.cpp" -lz -o "$out/fuzz_$t"
done
status=0
for t in npz safetensors; do
  fuzz/run.sh "$out/fuzz_$t" "$out/seeds/$t" "$out/$t" "$seconds" "$runs" "fuzz/$t.dict" || status=1
done

# Coverage of the readers by what the runs kept (corpus and seeds), one execution per input.
declare -A headers=([npz]="include/ctgraph/npz.hpp include/ctgraph/binary_file.hpp"
                    [safetensors]="include/ctgraph/safetensors.hpp include/ctgraph/binary_file.hpp")
for t in npz safetensors; do
  "$cxx" -std=c++20 -O1 -fsanitize=fuzzer -fprofile-instr-generate -fcoverage-mapping \
    -Iinclude -Igraph -Iops "fuzz/fuzz_$t.cpp" -lz -o "$out/cov_$t"
  rm -f "$out/$t/cov.profraw"
  LLVM_PROFILE_FILE="$out/$t/cov.profraw" "$out/cov_$t" -runs=0 "$out/$t/corpus" "$out/seeds/$t" > "$out/$t/cov.log" 2>&1
  llvm-profdata-14 merge -sparse "$out/$t/cov.profraw" -o "$out/$t/cov.profdata"
  echo "fuzz: coverage of the $t reader by build-fuzz/$t/corpus ($(ls "$out/$t/corpus" | wc -l) inputs):"
  # shellcheck disable=SC2086
  llvm-cov-14 report "$out/cov_$t" -instr-profile="$out/$t/cov.profdata" ${headers[$t]} | sed 's/^/  /'
done
exit $status
