#!/usr/bin/env python3
"""Compile time and peak compiler memory of users' programs (bench/compile/*.cpp).

    bench/compile_bench.py [--compilers g++ clang++] [--opts O2 O0] [--reps 3]
                           [--programs gpt_f32_f64 ...] [--headers] [--against REV]
                           [--run BUILD_DIR] [--check BASELINE.json] [--write-baseline FILE]
    bench/compile_bench.py --features [--compilers g++] [--opts O2] [--reps 3]

Each program is compiled alone (-c, one at a time, under /usr/bin/time -v) with the flags CMake's
ctgraph::ctgraph gives a user's unit: C++20, -march=native, -DNDEBUG, the include folders,
CTG_SEPARATE_COMPILATION (the compiled part is linked, not generated again), oneDNN's define where
it is installed, and the compiler flags the target adds (cmake/compile_flags.txt is the one list,
read by CMake and by this script). Printed: a Markdown table of medians, wall and user CPU seconds
and peak MB, per program, compiler and optimisation level.

  --headers        compile header-only instead (ctgraph::headers: no CTG_SEPARATE_COMPILATION)
  --against REV    also compile each program header-only against the headers of git revision REV
                   (a worktree in a temporary folder), alternating with the current tree, and print
                   the ratios (the programs are the current ones; a program that REV cannot compile
                   is reported so)
  --run BUILD_DIR  also link each program with BUILD_DIR's libctgraph.a and run it (it must exit 0)
  --check FILE     CI's creep check: each program's user CPU time, divided by the time of
                   bench/compile/reference.cpp (template-heavy code that does not include ctgraph)
                   compiled in the same run, must stay within 15 % of the ratio FILE records, and
                   its peak memory within 15 % of FILE's; a program over is measured once more and
                   fails only if over again. Exit status 1 on a failure.
  --write-baseline FILE   write the ratios and memory of this run as the baseline for --check
  --features       what each feature costs: bench/compile/features.cpp (one GPT training step)
                   alone and with each feature macro (bf16, recomputation, frozen parameters, LoRA,
                   the KV-cache generator, MPI, xtensor views), alternating, medians of --reps
"""
import argparse
import json
import os
import platform
import re
import shutil
import statistics
import subprocess
import sys
import tempfile

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
FEATURES = ["", "WITH_BF16", "WITH_RECOMPUTE", "WITH_FROZEN", "WITH_LORA", "WITH_KV_CACHE", "WITH_MPI", "WITH_XTENSOR"]
PROGRAMS = ["gpt_f32_f64", "gpt_bf16", "encoder_tagger", "seq2seq_additive", "bilstm", "user_score"]
TOLERANCE = 1.15


def target_flags(cxx, tree=ROOT):
    """The flags ctgraph::headers adds for this compiler (cmake/compile_flags.txt) in `tree`; a tree
    from before that file gave clang its two flags and g++ none."""
    gnu = "clang" not in os.path.basename(cxx)
    path = os.path.join(tree, "cmake", "compile_flags.txt")
    if not os.path.exists(path):
        return [] if gnu else ["-ffp-contract=fast", "-fbracket-depth=1024"]
    flags = []
    with open(path) as f:
        for line in f:
            line = line.split("#")[0].strip()
            if not line:
                continue
            who, _, rest = line.partition(":")
            if who.strip() == "all" or (who.strip() == "gnu") == gnu:
                flags += rest.split()
    return flags


def onednn_flags():
    return ["-DCTG_WITH_ONEDNN"] if os.path.exists("/usr/include/oneapi/dnnl/dnnl.hpp") else []


def command(cxx, opt, src, out, tree, separate):
    cmd = [cxx, "-std=c++20", opt, "-DNDEBUG", "-march=native", "-DXTENSOR_USE_XSIMD", *onednn_flags(),
           *target_flags(cxx, tree), f"-I{tree}/include", f"-I{tree}/graph", f"-I{tree}/ops", "-c", src, "-o", out]
    if separate:
        cmd.insert(3, "-DCTG_SEPARATE_COMPILATION")
    return cmd


def measure(cmd):
    r = subprocess.run(["/usr/bin/time", "-f", "TIME %e %U %M", *cmd], capture_output=True, text=True)
    m = re.search(r"TIME ([0-9.]+) ([0-9.]+) (\d+)", r.stderr)
    if r.returncode != 0 or not m:
        return None, r.stderr[-4000:]
    return (float(m.group(1)), float(m.group(2)), int(m.group(3)) // 1024), None


def compile_one(cxx, opt, name, tree, separate, tmp, extra=()):
    src = os.path.join(ROOT, "bench", "compile", name + ".cpp")
    out = os.path.join(tmp, f"{name}.o")
    return measure(command(cxx, opt, src, out, tree, separate) + list(extra)), out


def mpi_flags():
    r = subprocess.run(["mpicxx", "--showme:compile"], capture_output=True, text=True)
    if r.returncode != 0:
        raise SystemExit("--features needs MPI's mpicxx (Debian: libopenmpi-dev)")
    return r.stdout.split()


def run_features(a, tmp):
    print(f"host: {host()}")
    print("\n| feature | compiler | wall s | CPU s | peak MB | CPU added | MB added |")
    print("|---|---|---|---|---|---|---|")
    for cxx in a.compilers:
        for opt in a.opts:
            got = {f: [] for f in FEATURES}
            for _ in range(a.reps):
                for f in FEATURES:  # alternating: a slower moment of the host spreads over all
                    extra = ([f"-D{f}"] if f else []) + (mpi_flags() if f == "WITH_MPI" else [])
                    (t, err), _ = compile_one(cxx, opt, "features", ROOT, not a.headers, tmp, extra)
                    if t is None:
                        raise SystemExit(f"features {f}: {cxx} {opt} failed:\n{err}")
                    got[f].append(t)
            base = [median([t[i] for t in got[""]]) for i in range(3)]
            for f in FEATURES:
                wall, cpu, mb = (median([t[i] for t in got[f]]) for i in range(3))
                added = f"{cpu - base[1]:+.1f} s ({(cpu / base[1] - 1) * 100:+.0f} %) | {mb - base[2]:+.0f}" if f else "| "
                print(f"| {f or 'none (the base)'} | {cxx} {opt} | {wall:.1f} | {cpu:.1f} | {mb:.0f} | {added} |", flush=True)
    return 0


def median(xs):
    return statistics.median(xs) if xs else float("nan")


def link_and_run(cxx, obj, build, name):
    lib = os.path.join(build, "libctgraph.a")
    exe = obj[:-2]
    libs = [lib, "-lopenblas", "-lz"] + (["-ldnnl"] if onednn_flags() else [])
    r = subprocess.run([cxx, obj, *libs, "-o", exe], capture_output=True, text=True)
    if r.returncode != 0:
        raise SystemExit(f"{name}: linking failed:\n{r.stderr[-3000:]}")
    r = subprocess.run([exe], capture_output=True, text=True, timeout=300)
    if r.returncode != 0:
        raise SystemExit(f"{name}: the program failed ({r.returncode}):\n{r.stdout[-2000:]}{r.stderr[-2000:]}")
    return r.stdout.strip().splitlines()[-1] if r.stdout.strip() else ""


def host():
    model = ""
    try:
        with open("/proc/cpuinfo") as f:
            m = re.search(r"model name\s*:\s*(.*)", f.read())
            model = m.group(1).strip() if m else ""
    except OSError:
        pass
    return f"{model or platform.processor()}, {os.cpu_count()} CPUs"


def compiler_version(cxx):
    r = subprocess.run([cxx, "--version"], capture_output=True, text=True)
    return r.stdout.splitlines()[0] if r.returncode == 0 else cxx


def key(cxx, opt):
    return ("clang" if "clang" in os.path.basename(cxx) else "gnu") + " " + opt


def run_check(a, tmp):
    with open(a.check) as f:
        base = json.load(f)
    failed = []
    for cxx in a.compilers:
        for opt in a.opts:
            k = key(cxx, opt)
            if k not in base:
                print(f"{k}: no baseline in {a.check}; skipped")
                continue

            def ref_time():
                (t, err), _ = compile_one(cxx, opt, "reference", ROOT, True, tmp)
                if t is None:
                    raise SystemExit(f"reference: {cxx} failed:\n{err}")
                return t[1]

            # The reference before and after the programs; the slower of the two counts (the host
            # slowed down, not the programs).
            r0 = ref_time()
            got = {}
            for name in a.programs:
                if not base[k].get(name):
                    continue
                (t, err), _ = compile_one(cxx, opt, name, ROOT, True, tmp)
                if t is None:
                    raise SystemExit(f"{name}: {cxx} {opt} failed:\n{err}")
                got[name] = t
            ref = max(r0, ref_time())
            for name, t in got.items():
                want = base[k][name]
                for attempt in (1, 2):
                    if attempt == 2:  # over: once more, between two more references
                        r1 = ref_time()
                        (t, err), _ = compile_one(cxx, opt, name, ROOT, True, tmp)
                        ref = max(r1, ref_time())
                    ratio, mb = t[1] / ref, t[2]
                    over = ratio > want["ratio"] * TOLERANCE or mb > want["mb"] * TOLERANCE
                    print(f"{k} {name}: {t[1]:.1f} s CPU = {ratio:.2f}x the reference ({ref:.1f} s), baseline "
                          f"{want['ratio']:.2f}x; {mb} MB, baseline {want['mb']} MB"
                          f"{' OVER' if over else ''}{' (again)' if over and attempt == 2 else ''}", flush=True)
                    if not over:
                        break
                    if attempt == 2:
                        failed.append(f"{k} {name}")
    if failed:
        print("compile time or memory grew by more than 15 % (docs/compile-time.md): " + ", ".join(failed))
        return 1
    return 0


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--compilers", nargs="+", default=["g++", "clang++"])
    ap.add_argument("--opts", nargs="+", default=["O2", "O0"], help="optimisation levels, without the dash (O2 O0 O3)")
    ap.add_argument("--reps", type=int, default=1)
    ap.add_argument("--programs", nargs="+", default=PROGRAMS)
    ap.add_argument("--headers", action="store_true")
    ap.add_argument("--against")
    ap.add_argument("--run")
    ap.add_argument("--check")
    ap.add_argument("--write-baseline")
    ap.add_argument("--features", action="store_true")
    a = ap.parse_args()
    a.opts = ["-" + o.lstrip("-") for o in a.opts]
    for p in a.programs:
        if p != "reference" and p not in PROGRAMS:
            raise SystemExit(f"unknown program '{p}' (one of {', '.join(PROGRAMS)})")
    with tempfile.TemporaryDirectory() as tmp:
        if a.check:
            return run_check(a, tmp)
        if a.features:
            return run_features(a, tmp)
        old = None
        if a.against:
            old = os.path.join(tmp, "against")
            subprocess.run(["git", "-C", ROOT, "worktree", "add", "--detach", old, a.against], check=True,
                           capture_output=True)
        try:
            print(f"host: {host()}")
            rows, baseline = [], {}
            for cxx in a.compilers:
                print(f"{cxx}: {compiler_version(cxx)}", flush=True)
                for opt in a.opts:
                    k = key(cxx, opt)
                    refs = []
                    for name in a.programs:
                        now, before, line = [], [], ""
                        for _ in range(a.reps):
                            if old:
                                (t, err), _ = compile_one(cxx, opt, name, old, False, tmp)
                                before.append(t)
                            (t, err), obj = compile_one(cxx, opt, name, ROOT, not a.headers, tmp)
                            if t is None:
                                raise SystemExit(f"{name}: {cxx} {opt} failed:\n{err}")
                            now.append(t)
                            if a.write_baseline:
                                (r, err), _ = compile_one(cxx, opt, "reference", ROOT, True, tmp)
                                refs.append(r[1])
                        if a.run and name != "reference":
                            line = link_and_run(cxx, obj, a.run, name)
                        wall, cpu, mb = (median([t[i] for t in now]) for i in range(3))
                        row = f"| {name} | {cxx} {opt} | {wall:.1f} | {cpu:.1f} | {mb:.0f} |"
                        if old:
                            ok = [t for t in before if t]
                            if ok:
                                bw, bc, bm = (median([t[i] for t in ok]) for i in range(3))
                                row += f" {bw:.1f} | {bm:.0f} | {wall / bw:.2f} | {mb / bm:.2f} |"
                            else:
                                row += " does not compile | | | |"
                        rows.append(row)
                        print(row + (f"  ({line})" if line else ""), flush=True)
                        baseline.setdefault(k, {})[name] = {"cpu": cpu, "mb": int(mb)}
                    if a.write_baseline:
                        ref = median(refs)
                        for name in a.programs:
                            baseline[k][name]["ratio"] = round(baseline[k][name]["cpu"] / ref, 3)
                        baseline[k]["reference_cpu"] = ref
            head = "| program | compiler | wall s | CPU s | peak MB |"
            if old:
                head += f" {a.against} wall s | {a.against} MB | time ratio | memory ratio |"
            print("\n" + head)
            print("|" + "---|" * (head.count("|") - 1))
            print("\n".join(rows))
            if a.write_baseline:
                baseline["host"] = host()
                with open(a.write_baseline, "w") as f:
                    json.dump(baseline, f, indent=1, sort_keys=True)
                    f.write("\n")
                print(f"wrote {a.write_baseline}")
        finally:
            if old:
                subprocess.run(["git", "-C", ROOT, "worktree", "remove", "--force", old], capture_output=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
