#!/usr/bin/python3
"""Side-by-side benchmark: PyTorch (bench/torch_ref.py, a copy of shared/bench/torch_ref.py) and
ctg-bench on the same workload, one after the other in one run, as a table of medians and ratios.

  bench/compare.py [--workloads mlp ...] [--threads 1 2] [--steps 20] [--ctg-bench build/bench/ctg-bench]

ratio = PyTorch median / ctgraph median (above 1: ctgraph is faster). GFLOP/s counts matrix
products only, by torch_ref.py's formula for the workload. Peak RSS is the whole process's.
PyTorch runs under Debian's /usr/bin/python3 with torch and OpenBLAS threads set to K and, at K=2,
OMP_WAIT_POLICY=PASSIVE (WORKLOADS.md: without it libgomp's spinning starves OpenBLAS).
"""
import argparse
import json
import os
import subprocess
import sys

HERE = os.path.dirname(os.path.abspath(__file__))


def run_json(cmd, env):
    out = subprocess.run(cmd, env=env, check=True, capture_output=True, text=True).stdout
    lines = [l for l in out.splitlines() if l.startswith("{") or l.startswith("[")]
    if not lines:
        sys.exit("no JSON from: " + " ".join(cmd) + "\n" + out)
    r = json.loads(lines[-1])
    return r[0] if isinstance(r, list) else r


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--workloads", nargs="+", default=["mlp"])
    ap.add_argument("--threads", nargs="+", type=int, default=[1, 2])
    ap.add_argument("--steps", type=int, default=20)
    ap.add_argument("--ctg-bench", default=os.path.join(HERE, "..", "build", "bench", "ctg-bench"))
    ap.add_argument("--torch-ref", default=os.path.join(HERE, "torch_ref.py"))
    args = ap.parse_args()

    rows = []
    for w in args.workloads:
        for k in args.threads:
            env = dict(os.environ)
            env["OPENBLAS_NUM_THREADS"] = str(k)
            env["OMP_NUM_THREADS"] = str(k)
            if k >= 2:
                env["OMP_WAIT_POLICY"] = "PASSIVE"
            t = run_json(["/usr/bin/python3", args.torch_ref, "--workload", w, "--threads", str(k),
                          "--steps", str(args.steps), "--json"], env)
            c = run_json([args.ctg_bench, "--workload", w, "--threads", str(k), "--steps", str(args.steps),
                          "--json"], env)
            rows.append((w, k, t["median_ms"], c["median_ms"], t["median_ms"] / c["median_ms"], t["gflops"],
                         c["gflops"], t["peak_rss_mib"], c["peak_rss_mib"]))
    head = ("workload", "threads", "torch ms", "ctgraph ms", "ratio", "torch GF/s", "ctg GF/s", "torch RSS MiB",
            "ctg RSS MiB")
    print("| " + " | ".join(head) + " |")
    print("|" + "---|" * len(head))
    for r in rows:
        print("| %s | %d | %.3f | %.3f | %.2f | %.1f | %.1f | %.0f | %.0f |" % r)


if __name__ == "__main__":
    main()
