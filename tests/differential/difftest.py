#!/usr/bin/env python3
"""Differential tests: random ctgraph programs against the same programs in PyTorch.

    difftest.py --toolchain BUILD/tests/differential/toolchain.txt --work DIR --seeds 0:50
    difftest.py --toolchain ... --work DIR --count 200 --seed 12345 [--reduce]

For each seed, gen.py makes a random well-typed program (a DAG over the public ops), emit.py writes
it in C++ (many programs per translation unit) and in PyTorch, and its data. The C++ programs are
compiled with the build's compiler and flags (toolchain.txt, written by CMake) and run by
harness.cpp, which checks on its own: finite differences on a sample of elements, the inference
program's outputs against the training program's bit for bit, 1 against 2 threads, the fused
training step against the plain one. This script then runs the PyTorch program (float64) with the
same data and dropout masks and compares the loss, every parameter and input gradient, and the
outputs in eval mode, to 1e-9. Exit status 1 on any mismatch; with --reduce each failing program is
shrunk to a minimal one (reduce.py) and printed in C++ and in PyTorch.
"""
import argparse
import collections
import concurrent.futures
import hashlib
import json
import os
import re
import shutil
import subprocess
import sys
import time

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
sys.dont_write_bytecode = True  # nothing written into the source tree
sys.path.insert(0, HERE)
import emit  # noqa: E402
import gen  # noqa: E402

TOL = 1e-9


# ---------------------------------------------------------------------------------------- building

class Toolchain:
    """The build's compiler, flags, include folders, definitions and libraries: toolchain.txt, one
    item a line ("cxx PATH", "flag F", "define D", "include DIR", "lib L"), written by CMake."""

    def __init__(self, path, opt=None):
        t = collections.defaultdict(list)
        with open(path) as f:
            for line in f:
                kind, _, value = line.strip().partition(' ')
                if value and not (kind == 'include' and value in ('/usr/include', '/usr/local/include')):
                    t[kind].append(value)
        self.cxx = t['cxx'][0]
        flags = t['flag']
        if opt is not None and any(re.fullmatch(r'-O[2-3]|-Ofast', f) for f in flags):
            # optimised builds compile the generated units at `opt` instead (compile time: README.md)
            flags = [f for f in flags if not re.fullmatch(r'-O[0-3sg]?|-Ofast', f)] + [opt]
        self.flags = flags + ['-std=c++20'] + ['-D' + d for d in t['define']] + ['-I' + i for i in t['include']] + \
            ['-I' + HERE]
        self.libs = t['lib']
        self.key = hashlib.sha1(json.dumps([self.cxx, self.flags]).encode()).hexdigest()[:12]


def timed(cmd, log):
    """Runs cmd under /usr/bin/time -v; returns (seconds, peak MB, user+sys s)."""
    t0 = time.time()
    timer = ['/usr/bin/time', '-v'] if os.path.exists('/usr/bin/time') else []
    p = subprocess.run(timer + cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    wall = time.time() - t0
    with open(log, 'w') as f:
        f.write(' '.join(cmd) + '\n' + p.stdout)
    if p.returncode != 0:
        tail = '\n'.join(p.stdout.splitlines()[:60])
        raise RuntimeError('command failed (%s):\n%s\n%s' % (log, ' '.join(cmd[:3]) + ' ...', tail))
    mb = re.search(r'Maximum resident set size \(kbytes\): (\d+)', p.stdout)
    us = re.search(r'User time \(seconds\): ([\d.]+)', p.stdout)
    sy = re.search(r'System time \(seconds\): ([\d.]+)', p.stdout)
    cpu = float(us.group(1)) + float(sy.group(1)) if us and sy else wall
    return wall, int(mb.group(1)) / 1024 if mb else 0.0, cpu


def build(tc, work, units, jobs, log=print):
    """Compiles the harness (cached per toolchain) and the units, links the runner."""
    obj = os.path.join(work, 'obj')
    os.makedirs(obj, exist_ok=True)
    cache = os.path.join(os.path.dirname(os.path.abspath(work)), '.harness-%s.o' % tc.key)
    src_hash = hashlib.sha1(open(os.path.join(HERE, 'harness.cpp'), 'rb').read() +
                            open(os.path.join(HERE, 'harness.hpp'), 'rb').read()).hexdigest()[:12]
    cache = cache[:-2] + '-' + src_hash + '.o'
    stats = []
    todo = []
    if not os.path.exists(cache):
        todo.append((os.path.join(HERE, 'harness.cpp'), cache + '.tmp'))
    hdr = os.path.getmtime(os.path.join(HERE, 'harness.hpp'))
    for u in units:  # a unit whose object is newer than it (and than the harness) is not compiled again
        o = os.path.join(obj, os.path.basename(u)[:-4] + '-' + tc.key + '.o')
        if not (os.path.exists(o) and os.path.getmtime(o) > max(os.path.getmtime(u), hdr)):
            todo.append((u, o))

    def one(src_out):
        src, out = src_out
        cmd = [tc.cxx] + tc.flags + ['-c', src, '-o', out]
        try:
            w, mb, cpu = timed(cmd, out + '.log')
        except RuntimeError as e:
            if os.path.exists(out):
                os.remove(out)
            return src, None, str(e), 0
        return src, w, mb, cpu
    failed = {}
    with concurrent.futures.ThreadPoolExecutor(max_workers=max(1, jobs)) as ex:
        for src, w, mb, cpu in ex.map(one, todo):
            if w is None:
                failed[src] = mb
            else:
                stats.append((os.path.basename(src), w, mb, cpu))
    if os.path.join(HERE, 'harness.cpp') in failed:
        raise RuntimeError('the harness does not compile: ' + failed[os.path.join(HERE, 'harness.cpp')])
    if os.path.exists(cache + '.tmp'):
        os.replace(cache + '.tmp', cache)
    exe = os.path.join(work, 'differential_runner')
    objs = [cache] + [os.path.join(obj, os.path.basename(u)[:-4] + '-' + tc.key + '.o') for u in units if u not in failed]
    w, mb, cpu = timed([tc.cxx] + [f for f in tc.flags if f.startswith('-f') or f.startswith('-m')] + objs +
                       ['-o', exe] + tc.libs, os.path.join(work, 'link.log'))
    stats.append(('(link)', w, mb, cpu))
    return exe, stats, failed


# ---------------------------------------------------------------------------------------- PyTorch

_torch = None


def torch_mod():
    global _torch
    if _torch is None:
        import torch
        torch.set_num_threads(1)
        torch.set_default_dtype(torch.float64)
        _torch = torch
    return _torch


def torch_run(prog, data, drops):
    """Runs the PyTorch program: (loss, {param: grad}, {input: grad}, eval loss, eval extras)."""
    torch = torch_mod()
    ns = {}
    exec(compile(emit.TORCH_PRELUDE + emit.torch_source(prog), '<%s>' % prog['name'], 'exec'), ns)
    P, I = {}, {}
    for key, arr in data.items():
        kind, name = key.split('/', 1)
        if kind == 'param':
            P[name] = torch.tensor(arr, dtype=torch.float64, requires_grad=True)
        elif kind == 'input':
            I[name] = torch.tensor(arr, dtype=torch.float64, requires_grad=True)
        elif kind == 'index':
            I[name] = torch.tensor(arr.astype(np.int64))
    M = [torch.tensor((d != 0).astype(np.float64)) for d in drops]
    loss, _ = ns['model'](P, I, M, True)
    loss.backward()
    pg = {k: (v.grad.numpy() if v.grad is not None else np.zeros(v.shape)) for k, v in P.items()}
    ig = {k: (v.grad.numpy() if v.grad is not None else np.zeros(v.shape)) for k, v in I.items() if v.is_floating_point()}
    with torch.no_grad():
        eloss, extras = ns['model'](P, I, M, False)
    return float(loss), pg, ig, float(eloss), [e.detach().numpy() for e in extras]


def close(a, b):
    a, b = np.asarray(a, dtype=np.float64), np.asarray(b, dtype=np.float64)
    if a.shape != b.shape:
        return False, 'shape %s against %s' % (a.shape, b.shape)
    if a.size == 0:
        return True, ''
    err = np.abs(a - b) / np.maximum(1.0, np.abs(b))
    bad = ~(err <= TOL)
    if bad.any():
        i = int(np.argmax(np.where(np.isnan(err), np.inf, err)))
        return False, 'element %d: ctgraph %.17g, PyTorch %.17g (max error %.3g)' % (
            i, a.reshape(-1)[i], b.reshape(-1)[i], float(np.nanmax(err)) if not np.isnan(err).all() else float('nan'))
    return True, ''


def check_program(prog, data, out_dir):
    """Every failure of one program (its report from harness.cpp, then PyTorch): a list of strings."""
    name = prog['name']
    try:
        with open(os.path.join(out_dir, name + '.json')) as f:
            rep = json.load(f)
    except (OSError, ValueError) as e:
        return ['no report from the C++ run (%s)' % e], None
    if 'error' in rep:
        return ['C++: ' + rep['error']], rep
    fails = ['C++: ' + f for f in rep.get('failures', [])]
    for fd in rep.get('fd', []):
        if not fd['ok']:
            fails.append('finite differences: %s: analytic %s, numeric %s' % (fd['what'], fd['analytic'], fd['numeric']))
    out = dict(np.load(os.path.join(out_dir, name + '.npz')))
    drops = [out['drop/dropout%d' % k] for k in range(len(prog['drops']))]
    try:
        loss, pg, ig, eloss, extras = torch_run(prog, data, drops)
    except Exception as e:  # a generator or emitter bug, not ctgraph's: still a failure to look at
        return fails + ['PyTorch program failed: %s: %s' % (type(e).__name__, e)], rep
    checks = [('loss', out['loss'], loss), ('eval loss', out['eval/loss'], eloss)]
    for k, v in pg.items():
        checks.append(('gradient of ' + k, out.get('grad/' + k, np.zeros(v.shape)), v))
    for k, v in ig.items():
        checks.append(('gradient of input ' + k, out.get('igrad/' + k, np.zeros(v.shape)), v))
    for k, v in enumerate(extras):
        checks.append(('extra output %d (eval)' % k, out['eval/extra%d' % k], v))
    for what, a, b in checks:
        ok, why = close(a, b)
        if not ok:
            fails.append('PyTorch: %s: %s' % (what, why))
    return fails, rep


# ---------------------------------------------------------------------------------------- coverage

def coverage(reports, progs):
    """Counts per op: nodes, operand adjoints written fresh (=, first writer) and accumulated
    (+=, another reader wrote first), and pairs (producer op -> consumer op)."""
    ops = collections.Counter()
    modes = collections.defaultdict(collections.Counter)
    pairs = collections.Counter()
    for rep in reports:
        if not rep or 'nodes' not in rep:
            continue
        rows = [l.split() for l in rep['nodes'].strip().splitlines()]
        kind = {int(r[0]): r[1] for r in rows}
        label = {int(r[0]): (r[2] if r[1] == 'op' else r[1]) for r in rows}
        needs = {int(r[0]): r[3] == '1' for r in rows}
        args = {int(r[0]): [int(x) for x in r[4:]] for r in rows}
        N = len(rows)
        written = set()
        for i in range(N - 1, -1, -1):
            if kind[i] != 'op':
                continue
            ops[label[i]] += 1
            for k, j in enumerate(args[i]):
                pairs[(label[j], label[i])] += 1
                if not needs[i] or not needs[j]:
                    continue
                if j in written:
                    modes[label[i]]['add'] += 1
                else:
                    modes[label[i]]['twice' if args[i].count(j) > 1 else 'fresh'] += 1
                    written.add(j)
    for p in progs:  # inside cells: the cell's own graph, ordered as ctgraph orders it (post-order)
        for n in p['nodes']:
            if n['op'] in ('scan', 'repeat'):
                cell_coverage(n, ops, modes, pairs)
    return ops, modes, pairs


def cell_coverage(owner, ops, modes, pairs):
    cell = owner['a']['cell']
    nodes = cell['nodes']
    order, seen = [], set()

    def visit(i):
        if i in seen:
            return
        for j in nodes[i]['args']:
            visit(j)
        seen.add(i)
        order.append(i)
    visit(cell['out'])
    placeholders = ('state', 'step', 'extra')
    variant = {}
    for i in order:
        c = nodes[i]
        variant[i] = c['op'] in placeholders or (owner['op'] == 'repeat' and c['op'] == 'param') or \
            any(variant[j] for j in c['args'])
    leaf = lambda c: c['op'] in placeholders + ('param', 'input', 'index', 'const', 'full', 'outer')
    runs = {i: variant[i] and not leaf(nodes[i]) and not nodes[i]['index'] for i in order}
    owned = {i: runs[i] and i != cell['out'] for i in order}
    suffix = ' (in %s)' % owner['op']
    written = set()
    for i in reversed(order):
        c = nodes[i]
        if leaf(c):
            continue
        ops[c['op'] + suffix] += 1
        for j in c['args']:
            pairs[(nodes[j]['op'] + suffix, c['op'] + suffix)] += 1
            if not runs[i] or not owned.get(j):
                continue
            if j in written:
                modes[c['op'] + suffix]['add'] += 1
            else:
                modes[c['op'] + suffix]['twice' if c['args'].count(j) > 1 else 'fresh'] += 1
                written.add(j)


def print_coverage(ops, modes, pairs, out=print):
    leaves = ('param', 'input', 'index_input', 'constant')
    producers, consumers = collections.defaultdict(set), collections.defaultdict(set)
    for (a, b), c in pairs.items():
        producers[b].add(a)
        consumers[a].add(b)
    out('coverage: op: nodes; adjoints of its operands written first (=) / added to (+=) / read twice by it;')
    out('          distinct ops it reads / distinct ops reading it')
    for op in sorted(ops):
        m = modes.get(op, {})
        out('  %-28s %5d   %5d / %5d / %3d   %3d / %3d' % (op, ops[op], m.get('fresh', 0), m.get('add', 0),
                                                            m.get('twice', 0), len(producers[op] - set(leaves)),
                                                            len(consumers[op])))
    real = {p: c for p, c in pairs.items() if p[0] not in leaves}
    out('coverage: %d distinct op pairs (producer -> consumer) and %d (leaf -> op)' % (len(real), len(pairs) - len(real)))
    one_path = [op for op in sorted(ops) if modes.get(op) and (not modes[op].get('fresh') or not modes[op].get('add'))]
    if one_path:
        out('coverage: ops seen through one adjoint path only: ' + ', '.join(one_path))


# ---------------------------------------------------------------------------------------- the run

def write_program_files(progs, work, per_unit):
    src, data = os.path.join(work, 'src'), os.path.join(work, 'data')
    for d in (src, data):
        os.makedirs(d, exist_ok=True)
    arrays = {}
    for p in progs:
        arrays[p['name']] = emit.make_data(p)
        np.savez(os.path.join(data, p['name'] + '.npz'), **arrays[p['name']])
    units = []
    for k in range(0, len(progs), per_unit):
        path = os.path.join(src, 'unit%03d.cpp' % (k // per_unit))
        text = emit.cpp_unit(progs[k:k + per_unit])
        if not os.path.exists(path) or open(path).read() != text:
            with open(path, 'w') as f:
                f.write(text)
        units.append(path)
    return units, arrays


def run_programs(progs, tc, work, jobs, per_unit, log=print, stats_out=None):
    """Builds and runs the programs; returns {name: (failures, report)}."""
    if os.path.exists(os.path.join(work, 'out')):
        shutil.rmtree(os.path.join(work, 'out'))
    os.makedirs(os.path.join(work, 'out'))
    # as many units as compilers run at once, or more when they would exceed per_unit programs
    n_units = max(jobs, -(-len(progs) // per_unit))
    per_unit = max(1, -(-len(progs) // n_units))
    units, arrays = write_program_files(progs, work, per_unit)
    t0 = time.time()
    exe, stats, failed = build(tc, work, units, jobs)
    unit_of = {p['name']: units[k // per_unit] for k, p in enumerate(progs)}
    t_build = time.time() - t0
    if stats_out is not None:
        stats_out.extend(stats)
    t0 = time.time()
    env = dict(os.environ, OPENBLAS_NUM_THREADS='1')
    out_dir = os.path.join(work, 'out')
    todo = [p['name'] for p in progs if unit_of[p['name']] not in failed]
    crashed = {}
    while todo:  # a program that crashes the runner is reported, and the others run on
        p = subprocess.run([exe, os.path.join(work, 'data'), out_dir] + todo, stdout=subprocess.PIPE,
                           stderr=subprocess.STDOUT, text=True, env=env)
        done = [n for n in todo if os.path.exists(os.path.join(out_dir, n + '.json'))]
        rest = [n for n in todo if n not in done]
        if p.returncode == 0 or not rest:
            break
        crashed[rest[0]] = 'the runner stopped (exit status %d) on this program:\n%s' % (p.returncode, p.stdout[-3000:])
        todo = rest[1:]
    t_run = time.time() - t0
    t0 = time.time()
    results = {}
    for prog in progs:
        if unit_of[prog['name']] in failed:
            results[prog['name']] = (['C++ compile: the unit holding this program does not compile:\n' +
                                      failed[unit_of[prog['name']]]], None)
            continue
        if prog['name'] in crashed:
            results[prog['name']] = (['C++ crash: ' + crashed[prog['name']]], None)
            continue
        results[prog['name']] = check_program(prog, arrays[prog['name']], out_dir)
    t_torch = time.time() - t0
    return results, (t_build, t_run, t_torch)


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument('--toolchain', required=True, help='toolchain.txt written by CMake in the build directory (tests/differential/)')
    ap.add_argument('--work', required=True, help='a directory for sources, objects, data and results')
    ap.add_argument('--seeds', help='A:B, the seeds A..B-1 (the fixed set of CI), or a list: 3,7,10:12')
    ap.add_argument('--count', type=int, help='this many programs from --seed on')
    ap.add_argument('--seed', type=int, help='the first seed (default: from the clock, printed)')
    ap.add_argument('--per-unit', type=int, default=25, help='programs per translation unit')
    ap.add_argument('--jobs', type=int, default=2, help='compilers run at once')
    ap.add_argument('--opt', default='-O1', help="the generated units' optimisation level ('' keeps the build's)")
    ap.add_argument('--reduce', action='store_true', help='shrink each failing program and print it')
    ap.add_argument('--batch', type=int, default=200, help='programs built and run at once (long runs)')
    ap.add_argument('--coverage', action='store_true', help='print the op and op-pair coverage')
    ap.add_argument('--save-coverage', help="append each program's (op, adjoint path) pairs to this file (JSON lines)")
    args = ap.parse_args(argv)

    t_start = time.time()
    if args.seeds:
        seeds = []
        for part in args.seeds.split(','):
            a, _, b = part.partition(':')
            seeds += list(range(int(a), int(b))) if b else [int(a)]
    else:
        first = args.seed if args.seed is not None else int(time.time()) % 1000000007
        print('difftest: seed %d (repeat with --seed %d --count %d)' % (first, first, args.count or 1), flush=True)
        seeds = list(range(first, first + (args.count or 1)))
    tc = Toolchain(args.toolchain, args.opt or None)
    os.makedirs(args.work, exist_ok=True)
    all_fail, reports, progs_all = {}, [], []
    stats = []
    times = [0.0, 0.0, 0.0, 0.0]
    for k in range(0, len(seeds), args.batch):
        t0 = time.time()
        progs = [gen.generate(s, wide=(s % 10 == 7)) for s in seeds[k:k + args.batch]]
        times[0] += time.time() - t0
        results, (tb, tr, tt) = run_programs(progs, tc, args.work, args.jobs, args.per_unit, stats_out=stats)
        times[1] += tb
        times[2] += tr
        times[3] += tt
        for p in progs:
            fails, rep = results[p['name']]
            reports.append(rep)
            if args.save_coverage:
                _, m, _ = coverage([rep], [p])
                with open(args.save_coverage, 'a') as f:
                    f.write(json.dumps({'seed': p['seed'], 'failed': bool(fails),
                                        'paths': sorted('%s/%s' % (op, k) for op, c in m.items() for k in c)}) + '\n')
            if fails:
                all_fail[p['name']] = (p, fails)
        progs_all += progs
        print('difftest: %d of %d programs checked, %d failed (%.0f s)' % (
            min(k + args.batch, len(seeds)), len(seeds), len(all_fail), time.time() - t_start), flush=True)
    units = [s for s in stats if s[0].startswith('unit')]
    if units:
        print('difftest: %d programs in %d units: compile %.1f-%.1f s (%.1f s CPU in all), peak %.0f MB; '
              'generation %.1f s, build %.1f s, C++ checks %.1f s, PyTorch %.1f s, total %.1f s' % (
                  len(seeds), len(units), min(u[1] for u in units), max(u[1] for u in units), sum(u[3] for u in units),
                  max(u[2] for u in units), times[0], times[1], times[2], times[3], time.time() - t_start))
    if args.coverage:
        print_coverage(*coverage(reports, progs_all))
    for name, (p, fails) in sorted(all_fail.items()):
        print('FAILED %s (seed %d, %d nodes):' % (name, p['seed'], len(p['nodes'])))
        for f in fails[:8]:
            print('    ' + f)
    if all_fail and args.reduce:
        import reduce
        for name, (p, fails) in sorted(all_fail.items()):
            reduce.reduce_and_print(p, fails, tc, os.path.join(args.work, 'reduce'), args.jobs)
    print('difftest: %s: %d programs, %d failed' % ('FAILED' if all_fail else 'passed', len(seeds), len(all_fail)))
    return 1 if all_fail else 0


if __name__ == '__main__':
    sys.exit(main())
