#!/usr/bin/env python3
"""Compile time and peak compiler memory of the gpt-s and gpt-m training programs
(bench/gpt_compile_unit.cpp) with each compiler given, at -O3 -march=native (a Release build).

    scripts/gpt_compile_time.py [--reps 3] [g++ clang++-14 clang++-16 ...]

Prints a Markdown table of medians (wall seconds, peak MB) and the gpt-m / gpt-s ratio per compiler.
"""
import argparse
import os
import re
import statistics
import subprocess
import tempfile

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
CONFIGS = {"gpt-s": [], "gpt-m": ["-DGPT_CONTEXT=256", "-DGPT_WIDTH=384", "-DGPT_HEADS=6", "-DGPT_LAYERS=4"]}


def measure(cxx, defines):
    with tempfile.TemporaryDirectory() as tmp:
        cmd = [cxx, "-std=c++20", "-O3", "-DNDEBUG", "-march=native", "-DXTENSOR_USE_XSIMD",
               f"-I{ROOT}/include", f"-I{ROOT}/graph", f"-I{ROOT}/ops", *defines, "-c",
               f"{ROOT}/bench/gpt_compile_unit.cpp", "-o", f"{tmp}/gpt.o"]
        if "clang" in cxx:
            cmd.insert(1, "-fbracket-depth=1024")
        r = subprocess.run(["/usr/bin/time", "-v", *cmd], capture_output=True, text=True)
    if r.returncode != 0:
        raise SystemExit(f"{cxx} failed:\n{r.stderr[-3000:]}")
    wall = re.search(r"Elapsed \(wall clock\) time \(h:mm:ss or m:ss\): ([0-9:.]+)", r.stderr).group(1)
    secs = sum(float(p) * 60 ** i for i, p in enumerate(reversed(wall.split(":"))))
    mb = int(re.search(r"Maximum resident set size \(kbytes\): (\d+)", r.stderr).group(1)) // 1024
    return secs, mb


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--reps", type=int, default=3)
    ap.add_argument("compilers", nargs="*", default=["g++", "clang++-14", "clang++-16"])
    a = ap.parse_args()
    print("| compiler | gpt-s: s | MB | gpt-m: s | MB | gpt-m / gpt-s time |")
    print("|---|---|---|---|---|---|")
    for cxx in a.compilers:
        res = {}
        for name, defs in CONFIGS.items():
            runs = [measure(cxx, defs) for _ in range(a.reps)]
            res[name] = (statistics.median(r[0] for r in runs), max(r[1] for r in runs))
        s, m = res["gpt-s"], res["gpt-m"]
        print(f"| {cxx} | {s[0]:.1f} | {s[1]} | {m[0]:.1f} | {m[1]} | {m[0] / s[0]:.2f} |", flush=True)


if __name__ == "__main__":
    main()
