#!/usr/bin/env bash
# Differential tests: random ctgraph programs, each checked against the same program in PyTorch, by
# finite differences, at 1 and 2 threads, as an inference program and through the fused training
# step (tests/differential/README.md).
#
#   scripts/differential.sh N [SEED]     N programs from SEED on (default: from the clock; printed),
#                                        each failing one shrunk to a minimal program and printed in
#                                        C++ and in PyTorch; exit status 1 on any mismatch
#   options (before N):
#     --build-dir DIR     a configured build directory whose compiler and flags to use (default: build)
#     --work DIR          where sources, objects, data and results go (default: DIR/differential-runs)
#     --jobs J            compilers run at once (default: 2)
#     --no-reduce         report failing programs without shrinking them
#     --seeds A:B         the seeds A..B-1 instead of N [SEED] (the fixed set the ctest runs)
set -euo pipefail
here="$(cd "$(dirname "$0")/.." && pwd)"
build="$here/build" work="" jobs=2 reduce=(--reduce) seeds=""
while (($#)); do
  case "$1" in
    --build-dir) build=$2; shift 2 ;;
    --work) work=$2; shift 2 ;;
    --jobs) jobs=$2; shift 2 ;;
    --no-reduce) reduce=(); shift ;;
    --seeds) seeds=$2; shift 2 ;;
    -*) echo "scripts/differential.sh: unknown option '$1' (see the comment at the top)" >&2; exit 2 ;;
    *) break ;;
  esac
done
toolchain="$build/tests/differential/toolchain.txt"
if [[ ! -f $toolchain ]]; then
  echo "scripts/differential.sh: no $toolchain: configure a build first (cmake -S . -B build, or scripts/test.sh)" >&2
  exit 2
fi
what=()
if [[ -n $seeds ]]; then
  what=(--seeds "$seeds")
  reduce=()
else
  if (($# < 1)); then echo "usage: scripts/differential.sh [options] N [SEED]" >&2; exit 2; fi
  what=(--count "$1")
  if (($# >= 2)); then what+=(--seed "$2"); fi
fi
[[ -z $work ]] && work="$build/differential-runs"
# python3-torch is Debian's package: the system interpreter, whatever python3 is first on PATH.
exec /usr/bin/python3 "$here/tests/differential/difftest.py" --toolchain "$toolchain" --work "$work" --jobs "$jobs" \
  --coverage "${what[@]}" "${reduce[@]}"
