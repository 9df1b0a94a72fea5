#!/usr/bin/python3
"""Side-by-side benchmark: PyTorch (bench/torch_ref.py, a copy of shared/bench/torch_ref.py) and
ctg-bench on the same workload, one after the other in one run, as a table of medians and ratios.

  bench/compare.py [--workloads mlp ... | --all] [--threads 1 2] [--steps 20] [--reps 3]
                   [--precision f32|bf16] [--ctg-bench build/bench/ctg-bench] [--no-bound]
  bench/compare.py --onnx [--workloads gpt-s ... | --all] [--steps 20] [--reps 3]
  bench/compare.py --weights int8|q4 [--workloads decode-gpt2-cache decode-cache] [--steps 5] [--reps 3]

--weights: quantised decoding. For each decode workload, one thread, --reps rounds alternating
ctgraph in float32, ctgraph with int8 or 4-bit weights (ctg-bench --weights) and, for int8,
PyTorch's dynamic int8 quantisation of the Linear layers (torch_ref.py --quantize-dynamic); the
machine's read bandwidth measured in the same run (ctg-bench --rates). The table: ms per token of
each, the speed-up over ctgraph's float32, the bytes a token reads with the quantised weights, the
bandwidth that makes and its fraction of the measured bandwidth, and PyTorch / ctgraph.

--onnx: ONNX Runtime instead of PyTorch as the peer, for inference: ctg-onnx-bench exports each
workload's inference program, times ctgraph and ONNX Runtime (onnxruntime-node, one thread, every
graph optimisation) on the same inputs, and checks that their outputs agree.

Each (workload, threads) pair runs PyTorch then ctgraph, --reps times alternately; the table shows
the median over the repetitions of each side's median step time. ratio = PyTorch / ctgraph (above 1:
ctgraph is faster). GFLOP/s counts matrix products only, by torch_ref.py's formula for the workload.
GEMM bound = the matrix-product FLOPs a ctgraph step really runs (counted in kernels::gemm) at the
machine's best float rate at that thread count, measured in the same run (the faster of torch_ref.py's
mm2048, one 2048^2 sgemm through OpenBLAS, and a 2048^3 product through kernels::gemm); "% bound" =
bound / ctgraph time. Decode workloads: the tokens/s of the memory bound (the machine's read
bandwidth, ctg-bench --rates, over the bytes a cached token reads: every weight and the cache so
far) and the fraction of it ctgraph reaches. At one thread "% oneDNN bound" is the same bound at
oneDNN's own f32 rate (ctg-bench --rates: a packed 2048^3 product through oneDNN directly).
The gpt workloads (gpt2-124m-lora, gpt-m-frozen-embed among them) also get a line: their step's
products, forward and backward counted apart in kernels::gemm, against the program's summary, and
that step's time by phase (forward, backward, optimizer).
--precision bf16 runs PyTorch's forward under torch.autocast("cpu", dtype=torch.bfloat16)
(torch_ref.py --autocast bf16) and ctgraph's program with bf16 products (ctg-bench --precision
bf16); the bound is then the step's product FLOPs at ctgraph's bf16 rate (ctg-bench --rates: a
2048^3 bf16 product through kernels::gemm at that thread count), and the machine's float and bf16
rates (oneDNN and kernels::gemm) are printed first. Peak RSS is the whole process's (max over repetitions). Decode workloads also
show tokens/s. PyTorch runs under Debian's /usr/bin/python3 with torch and OpenBLAS threads set to K
and, at K=2, OMP_WAIT_POLICY=PASSIVE (WORKLOADS.md: without it libgomp's spinning starves OpenBLAS).
"""
import argparse
import json
import os
import statistics
import subprocess
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
# The reference workloads of WORKLOADS.md (--all). Any other workload both sides know runs with
# --workloads, e.g. gpt2-124m-2l (gpt2-124m cut to 2 layers: the float64 parity check's workload).
ALL = ["mlp", "rnn", "s2s", "attn-sdp", "attn-sdp-causal", "attn-dot", "attn-bilinear", "attn-additive",
       "gpt-s", "gpt-m", "gpt2-124m", "gpt2-124m-lora", "gpt-m-frozen-embed", "decode-cache", "decode-nocache",
       "decode-gpt2-cache"]


# The inference workloads of the ONNX Runtime comparison (ctg-onnx-bench: the forward of the
# training workloads, decoding steps, GPT-2's prefill and cached step).
ONNX = ["mlp", "rnn", "s2s", "attn-sdp", "attn-sdp-causal", "attn-dot", "attn-bilinear", "attn-additive", "gpt-s",
        "gpt-m", "decode-cache", "decode-nocache", "gpt2-124m", "gpt2-124m-prefill", "decode-gpt2-cache"]


def onnx_table(args):
    """--onnx: ctgraph and ONNX Runtime on the same exported model, one thread, medians over
    --reps rounds of --steps runs each (ctg-onnx-bench); ratio = ONNX Runtime / ctgraph."""
    workloads = ONNX if args.all else args.workloads
    cmd = [args.onnx_bench, "--workloads"] + workloads + ["--reps", str(args.steps), "--rounds", str(max(args.reps, 1))]
    out = subprocess.run(cmd, env=thread_env(1), check=True, capture_output=True, text=True).stdout
    rows = json.loads([l for l in out.splitlines() if l.startswith("[")][-1])
    head = ("workload", "threads", "ONNX Runtime ms", "ctgraph ms", "ratio", "max |diff| / scale")
    print("| " + " | ".join(head) + " |")
    print("|" + "---|" * len(head))
    for x in rows:
        print("| %s | 1 | %.3f | %.3f | %.2f | %.1e |" % (x["workload"], x["ort_ms"], x["ctg_ms"], x["ort_ms"] / x["ctg_ms"],
                                                       x["max_diff"]))


def weights_table(args):
    """--weights: quantised decoding against ctgraph's float32 and PyTorch's quantize_dynamic (int8)."""
    workloads = ["decode-gpt2-cache", "decode-cache"] if args.workloads == ["mlp"] else args.workloads
    env = thread_env(1)
    bw = [run_json([args.ctg_bench, "--rates", "--threads", "1"], env)["read_gbps"]]
    rows = []
    for w in workloads:
        f32, q, torch_q = [], [], []
        for _ in range(max(args.reps, 1)):
            base = [args.ctg_bench, "--workload", w, "--threads", "1", "--steps", str(args.steps), "--json"]
            f32.append(run_json(base, env))
            q.append(run_json(base + ["--weights", args.weights], env))
            if args.weights == "int8":
                torch_q.append(run_json(["/usr/bin/python3", args.torch_ref, "--workload", w, "--threads", "1", "--steps",
                                         str(args.steps), "--warmup", "1", "--json", "--quantize-dynamic"], env))
            print("done: %s round %d" % (w, len(f32)), file=sys.stderr, flush=True)
        bw.append(run_json([args.ctg_bench, "--rates", "--threads", "1"], env)["read_gbps"])
        f_ms = statistics.median(r["ms_per_token"] for r in f32)
        q_ms = statistics.median(r["ms_per_token"] for r in q)
        mb = q[0]["bytes_per_token"] / 1e6
        t_ms = statistics.median(r["ms_per_token"] for r in torch_q) if torch_q else None
        rows.append((w, f_ms, q_ms, f_ms / q_ms, mb, mb / q_ms, t_ms))
    gbps = statistics.median(bw)
    print("memory read bandwidth (ctg-bench --rates, %d measurements in this run): median %.1f GB/s, range %.1f-%.1f"
          % (len(bw), gbps, min(bw), max(bw)))
    head = ("workload", "threads", "ctgraph f32 ms/token", "ctgraph %s ms/token" % args.weights, "speed-up",
            "MB/token", "GB/s", "% of bandwidth", "PyTorch dynamic int8 ms/token", "PyTorch / ctgraph")
    print("| " + " | ".join(head) + " |")
    print("|" + "---|" * len(head))
    for w, f_ms, q_ms, up, mb, g, t_ms in rows:
        print("| %s | 1 | %.3f | %.3f | %.2f | %.1f | %.1f | %.0f | %s | %s |" % (
            w, f_ms, q_ms, up, mb, g, 100 * g / gbps, "-" if t_ms is None else "%.3f" % t_ms,
            "-" if t_ms is None else "%.2f" % (t_ms / q_ms)))


def run_json(cmd, env):
    out = subprocess.run(cmd, env=env, check=True, capture_output=True, text=True).stdout
    lines = [l for l in out.splitlines() if l.startswith("{") or l.startswith("[")]
    if not lines:
        sys.exit("no JSON from: " + " ".join(cmd) + "\n" + out)
    r = json.loads(lines[-1])
    return r[0] if isinstance(r, list) else r


def thread_env(k):
    env = dict(os.environ)
    env["OPENBLAS_NUM_THREADS"] = str(k)
    env["OMP_NUM_THREADS"] = str(k)
    if k >= 2:
        env["OMP_WAIT_POLICY"] = "PASSIVE"
    return env


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--workloads", nargs="+", default=["mlp"])
    ap.add_argument("--all", action="store_true", help="every workload: " + " ".join(ALL))
    ap.add_argument("--threads", nargs="+", type=int, default=[1, 2])
    ap.add_argument("--steps", type=int, default=20)
    ap.add_argument("--reps", type=int, default=1)
    ap.add_argument("--no-bound", action="store_true", help="skip the sgemm-rate measurement")
    ap.add_argument("--precision", choices=["f32", "bf16"], default="f32",
                    help="bf16: PyTorch under autocast bf16, ctgraph with bf16 products")
    ap.add_argument("--ctg-bench", default=os.path.join(HERE, "..", "build", "bench", "ctg-bench"))
    ap.add_argument("--torch-ref", default=os.path.join(HERE, "torch_ref.py"))
    ap.add_argument("--onnx", action="store_true",
                    help="ctgraph's inference against ONNX Runtime on the exported model (ctg-onnx-bench), "
                         "for the inference workloads: " + " ".join(ONNX))
    ap.add_argument("--onnx-bench", default=os.path.join(HERE, "..", "build", "bench", "ctg-onnx-bench"))
    ap.add_argument("--weights", choices=["int8", "q4"], default=None,
                    help="quantised decoding (decode workloads, one thread): ctgraph's float32, its quantised "
                         "weights and, for int8, PyTorch's quantize_dynamic")
    args = ap.parse_args()
    if args.onnx:
        return onnx_table(args)
    if args.weights:
        return weights_table(args)
    workloads = ALL if args.all else args.workloads

    # The machine's sgemm rate per thread count, from the same run.
    rate, bandwidth, onednn = {}, {}, {}
    bf16 = args.precision == "bf16"
    if not args.no_bound:
        for k in args.threads:
            r = run_json(["/usr/bin/python3", args.torch_ref, "--workload", "mm2048", "--threads", str(k),
                          "--steps", "5", "--json"], thread_env(k))
            print(f"sgemm 2048^2 at {k} thread(s): {r['gflops']:.1f} GFLOP/s (OpenBLAS)", file=sys.stderr)
            m = run_json([args.ctg_bench, "--rates", "--threads", str(k)], thread_env(k))
            print(f"2048^3 at {k} thread(s): kernels::gemm float {m['gemm_f32_gflops']:.1f} (policy "
                  f"{m.get('f32_policy', '?')}), bf16 {m['gemm_bf16_gflops']:.1f} GFLOP/s ({m['bf16_engine']}); "
                  f"oneDNN at 1 thread float {m['onednn_f32_1thread_gflops']:.1f}, bf16 "
                  f"{m['onednn_bf16_1thread_gflops']:.1f} (ISA {m['onednn_isa']}); memory read "
                  f"{m.get('read_gbps', 0):.1f} GB/s", file=sys.stderr)
            # The bound's rate: the machine's best float rate of the libraries linked (OpenBLAS or
            # ctgraph's kernels::gemm, which is oneDNN's f32 kernel where the policy says), or bf16's.
            rate[k] = m["gemm_bf16_gflops"] if bf16 else max(r["gflops"], m["gemm_f32_gflops"])
            bandwidth[k] = m.get("read_gbps")
            if k == 1 and not bf16 and m.get("onednn_f32_1thread_gflops"):
                onednn[k] = m["onednn_f32_1thread_gflops"]
    torch_extra = ["--autocast", "bf16"] if bf16 else []
    ctg_extra = ["--precision", "bf16"] if bf16 else []

    rows, products = [], []
    for w in workloads:
        steps = str(args.steps)  # every workload the same (WORKLOADS.md: medians of at least 20 steps)
        for k in args.threads:
            env = thread_env(k)
            t_runs, c_runs = [], []
            for _ in range(args.reps):
                t_runs.append(run_json(["/usr/bin/python3", args.torch_ref, "--workload", w, "--threads", str(k),
                                        "--steps", steps, "--json"] + torch_extra, env))
                c_runs.append(run_json([args.ctg_bench, "--workload", w, "--threads", str(k), "--steps", steps,
                                        "--json"] + ctg_extra, env))
            t_ms = statistics.median(r["median_ms"] for r in t_runs)
            c_ms = statistics.median(r["median_ms"] for r in c_runs)
            flops = c_runs[0]["flops_per_step"]
            gemm = c_runs[0].get("gemm_flops_per_step", flops)
            bound = gemm / (rate[k] * 1e9) * 1e3 if k in rate else None
            tokens = ""
            if "tokens_per_s" in c_runs[0]:
                c_tps = statistics.median(r["tokens_per_s"] for r in c_runs)
                tokens = "%.0f / %.0f" % (statistics.median(r["tokens_per_s"] for r in t_runs), c_tps)
                # the memory bound: a token reads every weight and the cache once
                if bandwidth.get(k) and "bytes_per_token" in c_runs[0]:
                    tokens += " (%.0f %% of bandwidth bound)" % (100 * c_tps * c_runs[0]["bytes_per_token"] / (bandwidth[k] * 1e9))
            ob = gemm / (onednn[k] * 1e9) * 1e3 if k in onednn else None
            if "gemm_backward_flops" in c_runs[0]:
                r = c_runs[0]
                products.append("%s at %d thread(s): products forward %.3f + backward %.3f GFLOP counted in kernels::gemm; "
                                "the summary predicts %.3f + %.3f (backward counted / predicted %.4f); freezing saves %.3f "
                                "GFLOP of backward products; %d of %d parameters frozen; one step by phase (ms, medians "
                                "over the repetitions): forward %.1f, backward %.1f, optimizer %.1f" % (
                                    w, k, r["gemm_forward_flops"] / 1e9, r["gemm_backward_flops"] / 1e9,
                                    r["summary_forward_products"] / 1e9, r["summary_backward_products"] / 1e9,
                                    r["gemm_backward_flops"] / max(r["summary_backward_products"], 1),
                                    r["summary_frozen_saved_backward_products"] / 1e9, r["frozen_params"], r["params"],
                                    statistics.median(x["phase_forward_ms"] for x in c_runs),
                                    statistics.median(x["phase_backward_ms"] for x in c_runs),
                                    statistics.median(x["phase_optimizer_ms"] for x in c_runs)))
            rows.append((w, k, t_ms, c_ms, t_ms / c_ms, flops / t_ms / 1e6, flops / c_ms / 1e6,
                         "-" if bound is None else "%.3f" % bound, "-" if bound is None else "%.0f" % (100 * bound / c_ms),
                         "-" if ob is None else "%.0f" % (100 * ob / c_ms),
                         max(r["peak_rss_mib"] for r in t_runs), max(r["peak_rss_mib"] for r in c_runs), tokens,
                         "%d / %d" % (max(r["allocations_n"] for r in c_runs), max(r["allocations_2n"] for r in c_runs)),
                         "%d" % max(r.get("onednn_allocations_2n", 0) for r in c_runs)))
            print("done: %s at %d thread(s)" % (w, k), file=sys.stderr, flush=True)
    head = ("workload", "threads", "torch ms", "ctgraph ms", "ratio", "torch GF/s", "ctg GF/s", "GEMM bound ms",
            "% bound", "% oneDNN bound", "torch RSS MiB", "ctg RSS MiB", "tokens/s torch / ctg", "ctg allocations N / 2N steps",
            "inside oneDNN (2N)")
    print("| " + " | ".join(head) + " |")
    print("|" + "---|" * len(head))
    for r in rows:
        print("| %s | %d | %.3f | %.3f | %.2f | %.1f | %.1f | %s | %s | %s | %.0f | %.0f | %s | %s | %s |" % r)
    print(f"precision: {args.precision}" + (" (PyTorch: torch.autocast bf16)" if bf16 else ""))
    for line in products:
        print(line)


if __name__ == "__main__":
    main()
