"""Shrinks a failing program to a minimal one (delta debugging over its nodes) and prints it as a C++
program and a PyTorch program a person can read and run.

Each round makes every one-step simplification of the current program:
  * bypass: a node replaced by one of its operands of the same shape (outer nodes, and nodes inside
    a scan cell or a repeat block);
  * cut: a node replaced by a new input of its shape (in a cell, a new parameter), which drops
    everything only it read;
  * fewer outputs: an extra output of the inference program dropped;
then prunes what the loss no longer reads. All of a round's candidates are compiled together (many
per translation unit) and run; the smallest one that still fails the same way (the same kind of
check) becomes the current program. It stops when no candidate fails: every node that is left is
needed for the failure, as far as one step can tell.

Leaf data are drawn from the program's seed and the leaf's name (emit.make_data), so the leaves
that stay keep their values from round to round.
"""
import copy
import json
import os

import numpy as np

import difftest
import emit
import gen


def kinds(fails):
    """The kinds of check a failure list fails: the loss, gradients (against PyTorch or finite
    differences), eval-mode outputs, inference, threads, the fused step, an error."""
    out = set()
    for f in fails:
        if f.startswith('C++: inference'):
            out.add('inference')
        elif f.startswith('C++: threads'):
            out.add('threads')
        elif f.startswith('C++: train_step'):
            out.add('train_step')
        elif f.startswith('C++ compile') or f.startswith('PyTorch program failed'):
            out.add('broken')  # the generator's or the emitter's fault: never what a reduction keeps
        elif f.startswith('C++'):
            out.add('error')
        elif f.startswith('finite differences') or f.startswith('PyTorch: gradient'):
            out.add('gradient')
        elif f.startswith('PyTorch: loss') or f.startswith('PyTorch: eval loss'):
            out.add('loss')
        elif f.startswith('PyTorch'):
            out.add('outputs')
    return out


def keeps(candidate_fails, want):
    """Whether a candidate still fails the way the original did: some of the same kinds, and no
    kind the original passed (a reduction drifting to another failure is a new bug to reduce on its
    own, not this one)."""
    k = kinds(candidate_fails)
    return bool(k & want) and k <= want


def size(prog):
    return len(prog['nodes']) + sum(len(n['a']['cell']['nodes']) for n in prog['nodes'] if 'cell' in n['a'])


def finish(prog):
    """Prunes what the loss does not read; keeps the extra outputs and dropouts that are still op nodes."""
    nodes, new = gen.prune(prog['nodes'], [prog['loss']])
    prog['nodes'] = nodes
    prog['loss'] = new[prog['loss']]
    extras = [new[e] for e in prog['extras'] if e in new]
    prog['extras'] = list(dict.fromkeys(e for e in extras if e != prog['loss'] and nodes[e]['op'] not in LEAVES
                                        and not nodes[e]['index']))
    prog['drops'] = [new[d] for d in prog['drops'] if d in new and nodes[new[d]]['op'] == 'dropout']
    return prog


def replace(prog, i, j):
    """Every read of outer node i reads node j instead."""
    p = copy.deepcopy(prog)
    for n in p['nodes']:
        n['args'] = [j if x == i else x for x in n['args']]
        if 'cell' in n['a']:
            for c in n['a']['cell']['nodes']:
                if c['op'] == 'outer' and c['a']['ref'] == i:
                    c['a']['ref'] = j
    if p['loss'] == i:
        p['loss'] = j
    p['extras'] = [j if x == i else x for x in p['extras']]
    p['drops'] = [x for x in p['drops'] if x != i]
    return p


def cell_replace(prog, owner, i, j):
    p = copy.deepcopy(prog)
    cell = p['nodes'][owner]['a']['cell']
    for c in cell['nodes']:
        c['args'] = [j if x == i else x for x in c['args']]
    if cell['out'] == i:
        cell['out'] = j
    nodes, new = gen.prune(cell['nodes'], [cell['out']], ('state', 'step', 'extra'))
    cell['nodes'], cell['out'] = nodes, new[cell['out']]
    n = p['nodes'][owner]
    if n['op'] == 'scan':  # outer values the cell no longer reads are no longer operands
        pre = n['args'][:n['a']['n_pre']]
        refs = [x for x in n['args'][n['a']['n_pre']:] if any(c['op'] == 'outer' and c['a']['ref'] == x for c in nodes)]
        n['args'] = pre + refs
    return p


LEAVES = ('input', 'param', 'index', 'const', 'full', 'state', 'step', 'extra', 'outer')


class Reducer:
    def __init__(self, tc, work, jobs, log=print, batch=16):
        self.tc, self.work, self.jobs, self.log, self.batch = tc, work, jobs, log, batch
        self.counter = 0

    def leaf_name(self, prefix):
        self.counter += 1
        return '%s%d' % (prefix, self.counter)

    def candidates(self, prog):
        out = []
        nodes = prog['nodes']
        for n in nodes:
            if n['op'] in LEAVES or n['index']:
                continue
            for j in dict.fromkeys(n['args']):
                m = nodes[j]
                if m['shape'] == n['shape'] and not m['index']:
                    out.append(('bypass %%%d (%s) by %%%d' % (n['id'], n['op'], j), replace(prog, n['id'], j)))
            if n['id'] != prog['loss']:
                p = copy.deepcopy(prog)
                leaf = {'id': len(p['nodes']), 'op': 'input', 'args': [], 'shape': n['shape'], 'a': {},
                        'bound': 1.5, 'pos': n['pos'], 'lo': 0.5 if n['pos'] else 0.0, 'index': False,
                        'name': self.leaf_name('cut'), 'init': ['u', 0.5, 1.5] if n['pos'] else ['u', -1.0, 1.0]}
                p['nodes'].append(leaf)
                p = replace(p, n['id'], leaf['id'])
                p = move_leaf_first(p, leaf['id'])
                out.append(('cut %%%d (%s)' % (n['id'], n['op']), p))
            if 'cell' in n['a']:
                cell = n['a']['cell']
                for c in cell['nodes']:
                    if c['op'] in LEAVES:
                        continue
                    for j in dict.fromkeys(c['args']):
                        if cell['nodes'][j]['shape'] == c['shape']:
                            out.append(('bypass %%%d.c%d (%s) by c%d' % (n['id'], c['id'], c['op'], j),
                                        cell_replace(prog, n['id'], c['id'], j)))
                    if all(isinstance(d, int) for d in c['shape']) and c['id'] != cell['out']:
                        p = copy.deepcopy(prog)
                        cn = p['nodes'][n['id']]['a']['cell']['nodes']
                        leaf = {'id': len(cn), 'op': 'param', 'args': [], 'shape': c['shape'], 'a': {}, 'bound': 0.6,
                                'pos': False, 'lo': 0.0, 'index': False, 'name': self.leaf_name('cw'),
                                'init': ['u', 0.5, 1.5] if c['pos'] else ['u', -0.6, 0.6]}
                        cn.append(leaf)
                        p = cell_replace(p, n['id'], c['id'], leaf['id'])
                        p = move_cell_leaf_first(p, n['id'], leaf['name'])
                        out.append(('cut %%%d.c%d (%s)' % (n['id'], c['id'], c['op']), p))
        for k in range(len(prog['extras'])):
            p = copy.deepcopy(prog)
            del p['extras'][k]
            out.append(('drop extra output %d' % k, p))
        # the loss as one of its terms, or half of them (big steps first)
        terms = loss_terms(prog)
        if len(terms) > 1:
            for t in terms:
                p = copy.deepcopy(prog)
                p['loss'] = t
                out.append(('the loss as its term %%%d alone' % t, p))
            for half in (terms[:len(terms) // 2], terms[len(terms) // 2:]):
                if len(half) > 1:
                    p = copy.deepcopy(prog)
                    p['loss'] = sum_terms(p, half)
                    out.append(('the loss as %d of its %d terms' % (len(half), len(terms)), p))
        res = []
        for what, p in out:
            p = finish(p)
            if size(p) < size(prog) or len(p['extras']) < len(prog['extras']):
                res.append((what, p))
        return res

    def run(self, progs, tag):
        """Builds and runs candidate programs; returns {name: failures}."""
        for k, p in enumerate(progs):
            p['name'] = '%s_%s_%d' % (self.base, tag, k)
        results, _ = difftest.run_programs(progs, self.tc, os.path.join(self.work, self.base), self.jobs,
                                           per_unit=self.batch)
        return {p['name']: results[p['name']][0] for p in progs}

    def reduce_terms(self, prog, fails, want):
        """Delta debugging (ddmin) over the loss's terms: a smallest set of terms that still fails."""
        terms = loss_terms(prog)
        n = 2
        cur_fails = fails
        rnd = 0
        while len(terms) >= 2:
            rnd += 1
            chunks = [terms[k * len(terms) // n:(k + 1) * len(terms) // n] for k in range(n)]
            subsets = [c for c in chunks if c] + ([[t for t in terms if t not in c] for c in chunks] if n > 2 else [])
            cands = []
            for sub in subsets:
                p = copy.deepcopy(prog)
                p['loss'] = sum_terms(p, sub)
                cands.append((sub, finish(p)))
            res = self.run([p for _, p in cands], 't%d' % rnd)
            hit = next(((sub, p) for sub, p in cands if keeps(res[p['name']], want)), None)
            if hit is not None:
                terms = hit[0]
                cur_fails = res[hit[1]['name']]
                n = 2 if hit[0] in chunks else max(n - 1, 2)
                self.log('reduce: %s terms: %d of the loss\'s terms still fail (%d nodes)' % (
                    self.base, len(terms), size(hit[1])))
            elif n < len(terms):
                n = min(len(terms), 2 * n)
            else:
                break
        p = copy.deepcopy(prog)
        p['loss'] = sum_terms(p, terms)
        p = finish(p)
        p['name'] = prog['name']
        return p, cur_fails

    def reduce(self, prog, fails):
        self.base = prog['name']
        want = kinds(fails) - {'broken'}
        if not want:
            self.log('reduce: %s fails only in its own PyTorch program or build (a generator issue): not reduced' %
                     prog['name'])
            return prog, fails
        cur, cur_fails = self.reduce_terms(prog, fails, want)
        rnd = 0
        while True:
            rnd += 1
            # smallest first, in batches: the first batch holding a candidate that still fails
            # decides the round
            cands = sorted(self.candidates(cur), key=lambda c: (size(c[1]), len(c[1]['extras'])))
            best = None
            tried = 0
            for b in range(0, len(cands), self.batch):
                named = []
                for k, (what, p) in enumerate(cands[b:b + self.batch]):
                    p = copy.deepcopy(p)
                    p['name'] = '%s_r%d_%d' % (prog['name'], rnd, b + k)
                    named.append((what, p))
                tried += len(named)
                results, _ = difftest.run_programs([p for _, p in named], self.tc,
                                                   os.path.join(self.work, prog['name']), self.jobs, per_unit=self.batch)
                good = [(size(p), len(p['extras']), what, p) for what, p in named if keeps(results[p['name']][0], want)]
                if good:
                    good.sort(key=lambda g: (g[0], g[1]))
                    _, _, what, best = good[0]
                    best_fails = results[best['name']][0]
                    break
            if best is None:
                self.log('reduce: %s round %d: none of %d candidates fails: minimal' % (prog['name'], rnd, tried))
                break
            self.log('reduce: %s round %d: %s: %d nodes (%d of %d candidates tried)' % (
                prog['name'], rnd, what, size(best), tried, len(cands)))
            cur, cur_fails = best, best_fails
        return cur, cur_fails


def loss_terms(prog):
    """The scalar terms the loss adds up (the leaves of its tree of scalar adds)."""
    out = []
    def walk(i):
        n = prog['nodes'][i]
        if n['op'] == 'add' and n['shape'] == [] and all(prog['nodes'][j]['shape'] == [] for j in n['args']):
            for j in n['args']:
                walk(j)
        elif i not in out:
            out.append(i)
    walk(prog['loss'])
    return out


def sum_terms(prog, terms):
    """Appends the sum of scalar nodes `terms` to prog's nodes; returns its id."""
    cur = terms[0]
    for t in terms[1:]:
        n = {'id': len(prog['nodes']), 'op': 'add', 'args': [cur, t], 'shape': [], 'a': {}, 'bound': 1.0,
             'pos': False, 'lo': 0.0, 'index': False}
        prog['nodes'].append(n)
        cur = n['id']
    return cur


def move_leaf_first(prog, leaf_id):
    """Keeps the node list topological after a new leaf was appended at the end: the leaf goes first."""
    nodes = prog['nodes']
    order = [leaf_id] + [n['id'] for n in nodes if n['id'] != leaf_id]
    new = {old: k for k, old in enumerate(order)}
    out = []
    for old in order:
        n = dict(nodes[old])
        n['id'] = new[old]
        n['args'] = [new[x] for x in n['args']]
        if 'cell' in n['a']:
            n['a'] = copy.deepcopy(n['a'])
            for c in n['a']['cell']['nodes']:
                if c['op'] == 'outer':
                    c['a']['ref'] = new[c['a']['ref']]
        out.append(n)
    prog['nodes'] = out
    prog['loss'] = new[prog['loss']]
    prog['extras'] = [new[x] for x in prog['extras']]
    prog['drops'] = [new[x] for x in prog['drops']]
    return prog


def move_cell_leaf_first(prog, owner, name):
    cell = prog['nodes'][owner]['a']['cell']
    nodes = cell['nodes']
    leaf = next(c['id'] for c in nodes if c.get('name') == name)
    order = [leaf] + [c['id'] for c in nodes if c['id'] != leaf]
    new = {old: k for k, old in enumerate(order)}
    out = []
    for old in order:
        c = dict(nodes[old])
        c['id'] = new[old]
        c['args'] = [new[x] for x in c['args']]
        out.append(c)
    cell['nodes'] = out
    cell['out'] = new[cell['out']]
    return prog


# ---------------------------------------------------------------------------------------- printing

def c_array(values, ctype):
    if ctype == 'double':
        return ', '.join('%.17g' % v for v in values)
    return ', '.join(str(int(v)) for v in values)


def standalone_cpp(prog, data, fails):
    """A C++ program that runs the minimal program with its data and prints the loss and gradients."""
    scores = []
    text = emit.cpp(copy.deepcopy(prog))
    body = text[text.index('std::unique_ptr<ctgdiff::model> build() {') + len('std::unique_ptr<ctgdiff::model> build() {'):
                text.index('    return ctgdiff::make(')]
    head = text[text.index("inline constexpr dim"):text.index('std::unique_ptr<ctgdiff::model> build()')]
    lines = ['// A minimal program on which a check of the differential tests fails (seed %d):' % prog['seed']]
    lines += ['//   ' + l for f in fails[:6] for l in f.splitlines()[:3]]
    lines += ['#include <cstdio>', '#include <iterator>', '#include <vector>', '', '#include <ctgraph/ctgraph.hpp>', '#include <ctgraph/xtensor.hpp>']
    if 'train_step' in kinds(fails):
        lines.append('#include <ctgraph/train.hpp>')
    lines += ['', 'using namespace ctg;']
    if any('ctgdiff::pred' in l for l in text.splitlines()):
        lines += ['namespace ctgdiff {', 'template <int K, int R>', 'struct pred {',
                  '    static constexpr bool visible(std::size_t i, std::size_t j) { return (i + 2 * j) % K != std::size_t(R); }',
                  '};', '}  // namespace ctgdiff']
    lines += head.rstrip().splitlines()
    lines += ['', 'int main() {'] + body.strip('\n').splitlines()
    lines.append('    auto prog = compile<double, options{.input_grads = true}>(n%d);' % prog['loss'])
    dims = prog['dims']
    for key in sorted(data):
        kind, name = key.split('/', 1)
        a = data[key]
        if kind == 'param':
            lines.append('    { const double v[] = {%s};' % c_array(a.reshape(-1), 'double'))
            lines.append('      std::copy(std::begin(v), std::end(v), prog.params().value(prog.params().slot("%s"))); }' % name)
        elif kind in ('input', 'index'):
            t = 'double' if kind == 'input' else 'index_t'
            lines.append('    { const %s v[] = {%s};' % (t, c_array(a.reshape(-1), t)))
            lines.append('      prog.feed("%s", v, rshape{%d, {%s}}); }' % (name, a.ndim, ', '.join(str(d) for d in a.shape)))
    seed = prog['dropout_seed']
    lines.append('    prog.dropout_seed(%d);  // the dropout masks of the run that failed' % seed)
    lines.append('    std::printf("loss %.17g\\n", prog.forward());')
    lines.append('    prog.backward();')
    for key in sorted(data):
        kind, name = key.split('/', 1)
        if kind == 'param':
            lines.append('    for (double g : prog.grad<"%s">()) std::printf("dL/d%s %%.17g\\n", g);' % (name, name))
        elif kind == 'input':
            lines.append('    for (double g : prog.input_grad<"%s">()) std::printf("dL/d%s %%.17g\\n", g);' % (name, name))
    k = kinds(fails)
    if 'train_step' in k:
        lines += ['    // the check that fails: ctg::train_step (the update fused into backward) against the plain step',
                  '    const std::vector<double> start(prog.params().values().begin(), prog.params().values().end());',
                  '    optim::sgd<double> plain_opt({.lr = 0.1, .momentum = 0.9}), fused_opt({.lr = 0.1, .momentum = 0.9});',
                  '    prog.zero_grad();',
                  '    prog.dropout_seed(%d);' % seed,
                  '    prog.forward();',
                  '    prog.backward();',
                  '    plain_opt.step(prog.params());',
                  '    const std::vector<double> plain(prog.params().values().begin(), prog.params().values().end());',
                  '    std::copy(start.begin(), start.end(), prog.params().values().begin());',
                  '    prog.dropout_seed(%d);' % seed,
                  '    train_step(prog, fused_opt);',
                  '    const auto& fused = prog.params().values();',
                  '    for (std::size_t i = 0; i < plain.size(); ++i)',
                  '        if (plain[i] != fused[i]) std::printf("weight %zu: plain step %.17g, fused step %.17g\\n", i, plain[i], fused[i]);']
    if 'inference' in k:
        outs = ', '.join('decltype(n%d)' % i for i in [prog['loss']] + prog['extras'])
        lines += ['    // the check that fails: the inference program against the training program in eval mode',
                  '    prog.training(false);',
                  '    const double eval_loss = prog.forward();',
                  '    auto inf = program_for<double, options{.inference = true}, %s>(prog.shared_params());' % outs]
        for key in sorted(data):
            kind, name = key.split('/', 1)
            if kind in ('input', 'index'):
                a = data[key]
                t = 'double' if kind == 'input' else 'index_t'
                lines.append('    { const %s v[] = {%s};' % (t, c_array(a.reshape(-1), t)))
                lines.append('      inf.feed("%s", v, rshape{%d, {%s}}); }' % (name, a.ndim, ', '.join(str(d) for d in a.shape)))
        lines.append('    std::printf("loss: inference %.17g, training program in eval mode %.17g\\n", inf.forward(), eval_loss);')
        for k2, e in enumerate(prog['extras']):
            lines += ['    { auto a = inf.output<%d>(); auto b = prog.value_of(n%d);' % (k2 + 1, e),
                      '      for (std::size_t i = 0; i < a.size(); ++i)',
                      '          if (a.data()[i] != b.data()[i]) std::printf("output %d [%%zu]: inference %%.17g, training %%.17g\\n", i, a.data()[i], b.data()[i]); }' % (k2 + 1)]
    if 'threads' in k:
        lines += ['    // the check that fails: one thread against two',
                  '    prog.training(true);',
                  '    for (int threads : {1, 2}) {',
                  '        set_num_threads(threads);',
                  '        prog.zero_grad();',
                  '        prog.dropout_seed(%d);' % seed,
                  '        std::printf("%d threads: loss %.17g\\n", threads, prog.forward());',
                  '        prog.backward();',
                  '        for (double g : prog.params().grads()) std::printf("  %.17g\\n", g);',
                  '    }']
    lines.append('}')
    return '\n'.join(lines) + '\n'


def standalone_torch(prog, data, drops, fails):
    lines = ['# A minimal program on which a check of the differential tests fails (seed %d):' % prog['seed']]
    lines += ['#   ' + l for f in fails[:6] for l in f.splitlines()[:3]]
    lines.append(emit.TORCH_PRELUDE)
    lines.append(emit.torch_source(copy.deepcopy(prog)))
    lines.append('torch.set_default_dtype(torch.float64)')
    lines.append('P, I = {}, {}')
    for key in sorted(data):
        kind, name = key.split('/', 1)
        a = data[key]
        if kind == 'param':
            lines.append("P['%s'] = torch.tensor(%s, requires_grad=True)" % (name, np.array2string(
                a, separator=', ', precision=17, floatmode='unique', threshold=1 << 30)))
        elif kind == 'input':
            lines.append("I['%s'] = torch.tensor(%s, requires_grad=True)" % (name, np.array2string(
                a, separator=', ', precision=17, floatmode='unique', threshold=1 << 30)))
        elif kind == 'index':
            lines.append("I['%s'] = torch.tensor(%s)" % (name, np.array2string(a.astype(np.int64), separator=', ',
                                                                               threshold=1 << 30)))
    lines.append('# dropout masks as ctgraph drew them (its dropout values != 0)')
    lines.append('M = [%s]' % ', '.join('torch.tensor(%s, dtype=torch.float64)' % np.array2string(
        (d != 0).astype(np.float64), separator=', ', threshold=1 << 30) for d in drops))
    lines.append('loss, extras = model(P, I, M, True)')
    lines.append('loss.backward()')
    lines.append("print('loss %.17g' % loss.item())")
    lines.append('for k, t in list(P.items()) + list(I.items()):')
    lines.append('    if t.is_floating_point() and t.grad is not None:')
    lines.append("        print('dL/d%s' % k, t.grad.reshape(-1).tolist())")
    return '\n'.join(lines) + '\n'


def reduce_and_print(prog, fails, tc, work, jobs, log=print):
    r = Reducer(tc, work, jobs, log)
    best, best_fails = r.reduce(prog, fails)
    out = os.path.join(work, best['name'])
    os.makedirs(out, exist_ok=True)
    data = emit.make_data(best)
    run_dir = os.path.join(work, prog['name'])
    drops = []
    try:
        res = dict(np.load(os.path.join(run_dir, 'out', best['name'] + '.npz')))
        drops = [res['drop/dropout%d' % k] for k in range(len(best['drops']))]
    except OSError:
        pass
    cpp = standalone_cpp(best, data, best_fails)
    py = standalone_torch(best, data, drops, best_fails)
    with open(os.path.join(out, 'minimal.cpp'), 'w') as f:
        f.write(cpp)
    with open(os.path.join(out, 'minimal.py'), 'w') as f:
        f.write(py)
    with open(os.path.join(out, 'minimal.json'), 'w') as f:
        json.dump(best, f, indent=1)
    log('reduce: %s shrunk from %d to %d nodes; it fails:' % (prog['name'], size(prog), size(best)))
    for f in best_fails[:6]:
        log('    ' + f)
    log('---- C++ (%s) ----' % os.path.join(out, 'minimal.cpp'))
    log(cpp)
    log('---- PyTorch (%s) ----' % os.path.join(out, 'minimal.py'))
    log(py)
    return best
