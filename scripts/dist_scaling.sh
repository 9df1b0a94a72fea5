#!/usr/bin/env bash
# The figures of docs/scaling.md: char_gpt_mpi's training throughput as 2 ranks x 1 OpenBLAS thread
# (overlapped and not) against 1 rank x 2 threads and 1 rank x 1 thread, each configuration run
# ROUNDS times, interleaved (a busy moment of the machine hits them alike); the median tokens/s.
# Then dist-bench (overlapped against one all-reduce after backward, and the all-reduce sweep).
#   scripts/dist_scaling.sh [BUILD_DIR] [STEPS] [ROUNDS] [BENCH_ROUNDS]   (default: build 150 3 5; 0: no dist-bench)
set -euo pipefail
cd "$(dirname "$0")/.."
build=${1:-build} steps=${2:-150} rounds=${3:-3} bench_rounds=${4:-5}
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
out=$(mktemp -d)
trap 'rm -rf "$out"' EXIT
# name|OpenBLAS threads|ranks|mpirun options|char_gpt_mpi options. mpirun binds each rank to a core
# (np <= 2): a rank with two threads must be unbound, or both threads share one core.
configs=("2x1 overlapped|1|2||" "2x1 one all-reduce|1|2||--no-overlap" "1x2|2|1|--bind-to none|" "1x1|1|1||")
declare -A rates
for ((r = 1; r <= rounds; r++)); do
  for c in "${configs[@]}"; do
    IFS='|' read -r name threads ranks mpi_opts extra <<<"$c"
    line=$(OPENBLAS_NUM_THREADS=$threads mpirun -np "$ranks" --oversubscribe $mpi_opts "$build/examples/char_gpt_mpi" \
      --steps "$steps" --eval-every 100000 --out "$out" $extra | grep '^validation loss')
    rate=$(sed -E 's/.*: ([0-9]+) tokens\/s.*/\1/' <<<"$line")
    hidden=$(sed -E 's/.*backward: ([0-9.]+) ms.*/\1/' <<<"$line")
    echo "round $r  $name: $rate tokens/s, exposed communication $hidden ms/step (load average $(cut -d' ' -f1 /proc/loadavg))"
    rates[$name]+="$rate "
  done
done
echo "median tokens/s over $rounds rounds of $steps steps (global batch 8 x 128 tokens):"
for c in "${configs[@]}"; do
  name=${c%%|*}
  echo "  $name: $(tr ' ' '\n' <<<"${rates[$name]}" | grep . | sort -n | awk '{a[NR]=$1} END {print (NR % 2 ? a[(NR+1)/2] : (a[NR/2]+a[NR/2+1])/2)}')"
done
((bench_rounds > 0)) || exit 0
OPENBLAS_NUM_THREADS=1 mpirun -np 2 --oversubscribe "$build/bench/dist-bench" --allreduce --bucket-kb 256,1024,4096 \
  --rounds "$bench_rounds"
