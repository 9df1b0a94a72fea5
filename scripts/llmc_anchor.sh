#!/usr/bin/env bash
# llm.c's CPU trainer (train_gpt2.c, Karpathy's reference C implementation of GPT-2 training, OpenMP)
# as a second anchor beside PyTorch for the gpt2-124m workload: GPT-2 small (124 M parameters, tied
# head), batch 4 x 64 tokens, AdamW; its own timer around each training step (data batch, forward,
# backward, update). Prints the median step time of the steps after the first.
#
#   scripts/llmc_anchor.sh LLMC_DIR [--threads K] [--steps N] [--work DIR]
#
# LLMC_DIR: llm.c's source: a checkout (git clone https://github.com/karpathy/llm.c, on a machine
#   with internet), or a bare git directory (its HEAD's train_gpt2.c and llmc/ are extracted). Only
#   train_gpt2.c and the headers it includes (llmc/*.h) are used; nothing of llm.c is kept here.
# --threads K: OMP_NUM_THREADS (default 1). --steps N: training steps, 2 to 41 (default 11: 1 warm-up,
#   10 measured). --work DIR: keep the binary and the generated inputs there (about 500 MB) and reuse
#   them; by default a temporary directory, removed at exit.
#
# Built as llm.c's Makefile builds it for CPU with OpenMP: -Ofast -march=native -fopenmp -DOMP, -lm
# -lgomp; compiler $CC (default gcc; the Makefile's default is clang), flags replaceable with
# LLMC_CFLAGS. Its source is not changed. train_gpt2.c takes no arguments: it opens gpt2_124M.bin,
# dev/data/tinyshakespeare/tiny_shakespeare_{train,val}.bin and gpt2_tokenizer.bin by relative path
# and runs steps 0 to 40. scripts/llmc_checkpoint.py writes those files (random weights in llm.c's
# checkpoint format, random tokens, a placeholder tokenizer); the trainer runs from the work
# directory and is stopped once it has printed N steps. Between steps, outside its timer, it
# computes a validation loss (steps 0, 10, 20, 30, 40: 5 forward passes) and samples 63 tokens
# (steps 20 and 40: 63 forward passes); N <= 20 never samples.
set -euo pipefail
usage() { sed -n '7,14p' "$0" | sed 's/^# \{0,1\}//' >&2; exit 2; }
(($# >= 1)) || usage
src=$1; shift
threads=1 steps=11 work=
while (($#)); do
  case $1 in
    --threads) threads=$2; shift 2 ;;
    --steps) steps=$2; shift 2 ;;
    --work) work=$2; shift 2 ;;
    *) usage ;;
  esac
done
[[ $threads =~ ^[1-9][0-9]*$ ]] || usage
[[ $steps =~ ^[0-9]+$ ]] && ((steps >= 2 && steps <= 41)) || { echo "--steps: 2 to 41 (train_gpt2.c runs steps 0 to 40)" >&2; exit 2; }
here="$(cd "$(dirname "$0")/.." && pwd)"

pid= tmp=
cleanup() {
  if [[ -n $pid ]]; then kill "$pid" 2> /dev/null || true; wait "$pid" 2> /dev/null || true; fi
  if [[ -n $tmp ]]; then rm -rf "$tmp"; fi
}
trap cleanup EXIT
trap 'exit 130' INT TERM
if [[ -n $work ]]; then
  mkdir -p "$work"; work="$(cd "$work" && pwd)"
else
  work="$(mktemp -d "${TMPDIR:-/tmp}/llmc_anchor.XXXXXX")" tmp=$work
fi

# llm.c's source: a work tree, or a bare git directory's HEAD
commit=
if [[ -f $src/train_gpt2.c ]]; then
  [[ -e $src/.git ]] && commit="$(git -C "$src" rev-parse HEAD 2> /dev/null || true)"
elif git --git-dir="$src" rev-parse --verify -q HEAD:train_gpt2.c > /dev/null 2>&1; then
  commit="$(git --git-dir="$src" rev-parse HEAD)"
  mkdir -p "$work/src"
  git --git-dir="$src" archive HEAD train_gpt2.c llmc | tar -x -C "$work/src"
  src="$work/src"
else
  echo "$src: no train_gpt2.c (a checkout of https://github.com/karpathy/llm.c, or its git directory)" >&2
  exit 1
fi

cc=${CC:-gcc}
cflags=${LLMC_CFLAGS:--Ofast -Wno-unused-result -march=native -fopenmp -DOMP}
"$cc" $cflags "$src/train_gpt2.c" -lm -lgomp -o "$work/train_gpt2"

data=$work/dev/data/tinyshakespeare
if [[ ! -f $work/gpt2_124M.bin || ! -f $work/gpt2_tokenizer.bin ||
      ! -f $data/tiny_shakespeare_train.bin || ! -f $data/tiny_shakespeare_val.bin ]]; then
  /usr/bin/python3 "$here/scripts/llmc_checkpoint.py" "$work" > /dev/null
fi

# Its stdout is line-buffered (stdbuf) so that step lines arrive as they are printed.
log="$work/train_gpt2.log"
: > "$log"
load_before="$(cut -d' ' -f1-3 /proc/loadavg)"
(cd "$work" && OMP_NUM_THREADS=$threads exec stdbuf -oL ./train_gpt2 > "$log" 2>&1) &
pid=$!
# The trainer's CPU time (user + system, in clock ticks) each time a step line appears: CPU time per
# step, and the share of the cores it had (other processes on the machine take the rest).
start=$EPOCHREALTIME ticks=0 seen=0 cpu=
while kill -0 "$pid" 2> /dev/null; do
  n=$(grep -c '^step [0-9]*: ' "$log" || true)
  stat=$(cat "/proc/$pid/stat" 2> /dev/null) && read -r -a f <<< "${stat##*) }" && ticks=$((f[11] + f[12]))
  if ((n > seen)); then cpu+="$n:$ticks "; seen=$n; fi
  ((n < steps)) || break
  sleep 0.2
done
kill "$pid" 2> /dev/null || true
wait "$pid" 2> /dev/null || true
pid=
cpu="$ticks $(getconf CLK_TCK) $start $EPOCHREALTIME $cpu"
load_after="$(cut -d' ' -f1-3 /proc/loadavg)"

ms=$(sed -n 's/^step \([0-9]*\): .*(took \([0-9.]*\) ms)$/\1 \2/p' "$log" | head -n "$steps")
if (($(wc -l <<< "$ms") < steps)); then
  echo "train_gpt2 stopped after $(grep -c '^step ' "$log" || true) of $steps steps; its output:" >&2
  cat "$log" >&2
  exit 1
fi
grep -E '^(num_parameters|step [0-9]+):' "$log" | head -n $((steps + 1))
/usr/bin/python3 - "$threads" "$commit" "$load_before" "$load_after" "$cpu" "$ms" <<'EOF'
import statistics, sys
threads, commit, before, after, cpu, ms = sys.argv[1:]
ticks, hz, start, end = map(float, cpu.split()[:4])
share = 100 * ticks / hz / (int(threads) * (end - start))
t = [float(line.split()[1]) for line in ms.splitlines() if line.strip()][1:]  # after the first step
# CPU seconds of step k: between the appearance of step lines k-1 and k, for steps 1 to 9, 11 to 19,
# ... (steps 10, 20, ... add a validation loss, steps 20 and 40 sampling); read every 0.2 s
marks = dict(map(float, m.split(":")) for m in cpu.split()[4:])
c = [(marks[n] - marks[n - 1]) / hz for n in marks if n - 1 in marks and n > 1 and (n - 1) % 10]
print(f"llm.c train_gpt2 {commit[:12] or '(commit unknown)'}: B=4 T=64, {threads} thread(s), "
      f"median {statistics.median(t):.1f} ms over {len(t)} steps after 1 warm-up "
      f"(min {min(t):.1f}, max {max(t):.1f}); load average before {before}, after {after}; "
      f"the trainer had {share:.0f} % of {threads} core(s) over the run"
      + (f", median CPU time per step {statistics.median(c):.1f} s" if c else ""))
EOF
