#!/bin/sh
# GPT-2 small decoded by ggml's gpt-2 example and by ctgraph on the same weights, one thread, side
# by side: float32, 8-bit (ggml Q8_0 / ctgraph int8) and 4-bit (Q4_0 / q4). ggml is not a
# dependency: give this script a ggml source tree (https://github.com/ggerganov/ggml).
#   scripts/ggml_compare.sh GGML_SOURCE_DIR [BUILD_DIR]     (BUILD_DIR: ctgraph's build, default build)
# Writes the weights with bench/ctg-ggml-gpt2 (nn::gpt2, seeded), quantises them with ggml's
# gpt-2-quantize, and prints each side's ms per token and first greedy tokens after the prompt [0].
set -eu
GGML=$1
B=${2:-build}
cmake -S "$GGML" -B "$B/ggml" -DCMAKE_BUILD_TYPE=Release -DGGML_NATIVE=ON -DGGML_BUILD_TESTS=OFF -DGGML_BUILD_EXAMPLES=ON >/dev/null
cmake --build "$B/ggml" --target gpt-2-ctx gpt-2-quantize -j2 >/dev/null
cmake --build "$B" --target ctg-ggml-gpt2 >/dev/null
"$B/bench/ctg-ggml-gpt2" write "$B/ggml/gpt2-f32.bin"
for t in q8_0 q4_0; do "$B/ggml/bin/gpt-2-quantize" "$B/ggml/gpt2-f32.bin" "$B/ggml/gpt2-$t.bin" $t >/dev/null; done
for m in f32 q8_0 q4_0; do
  for r in 1 2 3; do
    echo "ggml $m, run $r:"
    "$B/ggml/bin/gpt-2-ctx" -m "$B/ggml/gpt2-$m.bin" -p 0 -n 128 -t 1 --top_k 1 -s 1 2>&1 |
      grep -E "predict time|^0" | sed 's/^/  /' | cut -c1-160
  done
done
"$B/bench/ctg-ggml-gpt2" time --tokens 128 --reps 3
