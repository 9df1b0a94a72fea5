#!/usr/bin/env bash
# One libFuzzer run of a target built from fuzz/*.cpp, single process (the machine is shared):
#   fuzz/run.sh BINARY SEEDS WORK SECONDS RUNS [DICT]
# runs until RUNS executions (-1: no limit) or SECONDS, whichever comes first, from the seed corpus
# SEEDS (read only); new inputs go to WORK/corpus, a crashing input to WORK/artifacts/, the log to
# WORK/log. Exit status: libFuzzer's (0 when nothing was found). Prints the final figures.
set -euo pipefail
bin=$1 seeds=$2 work=$3 seconds=$4 runs=$5 dict=${6:-}
mkdir -p "$work/corpus" "$work/artifacts"
args=(-max_total_time="$seconds" -runs="$runs" -max_len=8192 -timeout=10 -rss_limit_mb=2048
  -print_final_stats=1 -artifact_prefix="$work/artifacts/")
[[ -n $dict ]] && args+=(-dict="$dict")
start=$(date +%s.%N)
rc=0
"$bin" "${args[@]}" "$work/corpus" "$seeds" > "$work/log" 2>&1 || rc=$?
end=$(date +%s.%N)
done_line=$(grep -E '^#[0-9]+[[:space:]]+(DONE|pulse|NEW|REDUCE|INITED)' "$work/log" | tail -1 || true)
execs=$(sed -n 's/^stat::number_of_executed_units: *//p' "$work/log")
printf '%s: %s executions in %.1f s (rc %d); last status: %s\n' "$(basename "$bin")" "${execs:-?}" \
  "$(awk "BEGIN { print $end - $start }")" "$rc" "${done_line:-none}"
if ((rc != 0)); then
  grep -E 'ERROR|SUMMARY|runtime error|deadly signal' "$work/log" | head -5 || true
  echo "see $work/log and $work/artifacts/"
fi
exit $rc
