#!/usr/bin/env bash
# Parity with PyTorch: dumps a workload with bench/torch_ref.py (float32 and float64) and checks
# ctg-bench against it (loss, every gradient, weights after the first update).
#   scripts/parity.sh CTG_BENCH WORKDIR WORKLOAD...
#   scripts/parity.sh --bf16 CTG_BENCH WORKDIR WORKLOAD...
#   scripts/parity.sh --dtype float64 CTG_BENCH WORKDIR WORKLOAD...
# --dtype float32|float64: that dtype only (default both).
# --bf16: the program with bf16 products (ctg-bench --precision bf16) against the float64 dump,
# each tensor within 3e-2 or 1.5 times PyTorch's own mixed precision's error on it (the dump of
# torch_ref.py --autocast bf16, in WORKDIR/autocast), on the machine's default bf16 engine.
# --bf16 --other-engine W,W: those workloads also on the other engine (oneDNN's kernels or the
# emulation, whichever is not the default), from the same dumps; where oneDNN has no bf16 kernels
# the emulation is the only engine, and the script says so.
set -euo pipefail
bf16=0 other="" dtypes="float32 float64"
if [[ ${1:-} == --dtype ]]; then
  case ${2:-} in float32|float64) dtypes=$2 ;; *) echo "parity.sh: --dtype is float32 or float64" >&2; exit 2 ;; esac
  shift 2
fi
if [[ ${1:-} == --bf16 ]]; then bf16=1; shift; fi
if [[ ${1:-} == --other-engine ]]; then other=",$2,"; shift 2; fi
bench=$1; dir=$2; shift 2
here="$(cd "$(dirname "$0")/.." && pwd)"
mkdir -p "$dir"
for w in "$@"; do
  if ((bf16)); then
    OMP_NUM_THREADS=1 /usr/bin/python3 "$here/bench/torch_ref.py" --workload "$w" --dump-npz "$dir" --dtype float64 > /dev/null
    OMP_NUM_THREADS=1 /usr/bin/python3 "$here/bench/torch_ref.py" --workload "$w" --dump-npz "$dir/autocast" --dtype float32 \
      --autocast bf16 --no-f64-check > /dev/null
    out=$("$bench" --workload "$w" --check "$dir" --dtype float64 --precision bf16) || { echo "$out"; exit 1; }
    echo "$out"
    if [[ $other == *",$w,"* ]]; then
      engine=$(sed -n 's/^bf16 products: //p' <<< "$out")
      case $engine in
        onednn) second=emulated ;;
        emulated) second=onednn ;;
        *) echo "parity.sh: ctg-bench did not say which bf16 engine ran" >&2; exit 1 ;;
      esac
      if ! out=$(CTG_BF16_ENGINE=$second "$bench" --workload "$w" --check "$dir" --dtype float64 --precision bf16 2>&1); then
        echo "$out"
        if [[ $second == onednn && $out == *"oneDNN has no bf16 kernels here"* ]]; then
          echo "parity.sh: $w checked on the emulation only: oneDNN has no bf16 kernels on this machine"
          continue
        fi
        exit 1
      fi
      echo "$out"
    fi
    continue
  fi
  for dtype in $dtypes; do
    # (--no-f64-check: the float32 dump's own float64 comparison, for meta.json only, would run the
    # float64 step a second time; at GPT-2's widths that was most of the test's time.)
    OMP_NUM_THREADS=1 /usr/bin/python3 "$here/bench/torch_ref.py" --workload "$w" --dump-npz "$dir" --dtype "$dtype" \
      --no-f64-check > /dev/null
    "$bench" --workload "$w" --check "$dir" --dtype "$dtype"
  done
done
