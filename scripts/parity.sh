#!/usr/bin/env bash
# Parity with PyTorch: dumps a workload with bench/torch_ref.py (float32 and float64) and checks
# ctg-bench against it (loss, every gradient, weights after the first update).
#   scripts/parity.sh CTG_BENCH WORKDIR WORKLOAD...
set -euo pipefail
bench=$1; dir=$2; shift 2
here="$(cd "$(dirname "$0")/.." && pwd)"
mkdir -p "$dir"
for w in "$@"; do
  for dtype in float32 float64; do
    OMP_NUM_THREADS=1 /usr/bin/python3 "$here/bench/torch_ref.py" --workload "$w" --dump-npz "$dir" --dtype "$dtype" > /dev/null
    "$bench" --workload "$w" --check "$dir" --dtype "$dtype"
  done
done
