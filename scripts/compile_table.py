#!/usr/bin/env python3
"""Compile time and peak compiler memory of every test, example and benchmark translation unit.

    cmake -S . -B build-clang -DCMAKE_EXPORT_COMPILE_COMMANDS=ON -DCMAKE_CXX_COMPILER=clang++
    scripts/compile_table.py build-clang [more build dirs...]

Runs each TU's own compile command from compile_commands.json, one at a time, under
/usr/bin/time -v, and prints a Markdown table with one column pair per build directory. The
Catch2 main and the one-line header checks are left out (they are not ctgraph code).
"""
import json
import os
import re
import subprocess
import sys
import tempfile


def measure(entry):
    cmd = entry["command"]
    with tempfile.TemporaryDirectory() as tmp:
        cmd = re.sub(r"-o \S+", f"-o {tmp}/tu.o", cmd)
        r = subprocess.run(["/usr/bin/time", "-v", "sh", "-c", cmd], cwd=entry["directory"],
                           capture_output=True, text=True)
    if r.returncode != 0:
        return None
    wall = re.search(r"Elapsed \(wall clock\) time \(h:mm:ss or m:ss\): ([0-9:.]+)", r.stderr).group(1)
    parts = [float(p) for p in wall.split(":")]
    secs = sum(p * 60 ** i for i, p in enumerate(reversed(parts)))
    kb = int(re.search(r"Maximum resident set size \(kbytes\): (\d+)", r.stderr).group(1))
    return secs, kb // 1024


def units(build):
    with open(os.path.join(build, "compile_commands.json")) as f:
        db = json.load(f)
    with open(os.path.join(build, "CMakeCache.txt")) as f:
        root = re.search(r"^CMAKE_HOME_DIRECTORY:INTERNAL=(.*)$", f.read(), re.M).group(1)
    out = {}
    for e in db:
        rel = os.path.relpath(e["file"], root)
        if rel.startswith(("tests/test_", "examples/", "bench/")):
            out[rel] = e
    return out


def main():
    builds = sys.argv[1:]
    if not builds:
        sys.exit(__doc__)
    tables = [units(b) for b in builds]
    names = sorted(set().union(*tables))
    print("| file | " + " | ".join(f"{b}: s | MB" for b in builds) + " |")
    print("|---|" + "---|---|" * len(builds))
    for n in names:
        cells = []
        for t in tables:
            m = measure(t[n]) if n in t else None
            cells.append(f"{m[0]:.1f} | {m[1]}" if m else "- | -")
        print(f"| {n} | " + " | ".join(cells) + " |", flush=True)


if __name__ == "__main__":
    main()
