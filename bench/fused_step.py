#!/usr/bin/python3
"""The generated training step (ctg::train_step: each parameter's update inside backward) against
the plain one (zero_grad, forward, backward, then opt.step over every parameter), side by side.

  bench/fused_step.py [--workloads mlp rnn gpt-s] [--threads 1 2] [--steps 50] [--reps 5]

Each (workload, threads) pair runs ctg-bench --step plain then --step fused, --reps times
alternately; the table shows the median over the repetitions of each run's median step time and
plain / fused (above 1: the fused step is faster).
"""
import argparse
import os
import statistics

from compare import HERE, run_json, thread_env


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--workloads", nargs="+", default=["mlp", "rnn", "gpt-s"])
    ap.add_argument("--threads", nargs="+", type=int, default=[1, 2])
    ap.add_argument("--steps", type=int, default=50)
    ap.add_argument("--reps", type=int, default=5)
    ap.add_argument("--ctg-bench", default=os.path.join(HERE, "..", "build", "bench", "ctg-bench"))
    args = ap.parse_args()
    print("| workload | threads | plain ms | fused ms | plain / fused |")
    print("|---|---|---|---|---|")
    for w in args.workloads:
        for k in args.threads:
            times = {"plain": [], "fused": []}
            for _ in range(args.reps):
                for step in ("plain", "fused"):
                    r = run_json([args.ctg_bench, "--workload", w, "--threads", str(k), "--steps", str(args.steps),
                                  "--step", step, "--json"], thread_env(k))
                    times[step].append(r["median_ms"])
            p, f = statistics.median(times["plain"]), statistics.median(times["fused"])
            print(f"| {w} | {k} | {p:.3f} | {f:.3f} | {p / f:.3f} |", flush=True)


if __name__ == "__main__":
    main()
