"""Random well-typed ctgraph programs, as descriptions that emit.py writes in C++ and in PyTorch.

A description is a dict:
    name, seed          the program's name (a C++ namespace) and the seed that made it
    dims                runtime values of the dynamic dimension letters ({'B': 3, 'T': 4})
    nodes               list of nodes in topological order (operands before users), each a dict
                          id, op, args (operand ids), shape (ints and letters), a (op attributes),
                          and for leaves name and init (how the data is drawn)
    loss                id of the scalar loss
    extras              ids of further outputs of the inference program
    drops               ids of the dropout nodes (their masks are read back from ctgraph)
    threads_exact       whether 1 and 2 threads must agree bit for bit
Scan cells and repeat blocks hold their own node lists in a['cell'] (placeholders 'state', 'step',
'extra'; 'outer' reads an outer node, listed among the scan's args).

Every node carries what the generator knows about its values: `bound` (|v| below it, roughly),
`pos` and `lo` (v > lo > 0), so that exp, log and div get safe operands and values stay moderate.
"""
import math
import random

STATIC = [2, 3, 4, 5, 6]
STATIC_W = [3, 4, 4, 2, 2]


class Ctx:
    """A graph under construction: the program, or a scan cell / repeat block inside it."""

    def __init__(self, gen, kind, parent=None):
        self.gen = gen
        self.kind = kind  # 'program', 'scan', 'repeat'
        self.parent = parent
        self.nodes = []
        self.keys = {}
        self.consumers = []
        self.row_mixing = True  # ops that mix batch rows (a scan with lengths must not)
        self.outer_refs = {}  # outer id -> local 'outer' node id (scan cells)
        self.batch = None  # the batch letter of a cell

    def add(self, op, args, shape, a=None, **props):
        a = a or {}
        key = None
        if op not in ('input', 'param', 'index', 'state', 'step', 'extra', 'outer'):
            key = (op, tuple(args), repr(sorted(a.items())))
            if key in self.keys:
                return self.nodes[self.keys[key]]
        n = {'id': len(self.nodes), 'op': op, 'args': list(args), 'shape': list(shape), 'a': a,
             'bound': props.get('bound', 1.0), 'pos': props.get('pos', False), 'lo': props.get('lo', 0.0),
             'index': props.get('index', False)}
        for k in ('name', 'init'):
            if k in props:
                n[k] = props[k]
        n['zrow'] = props['zrow'] if 'zrow' in props else self.zero_rows(op, args, a)
        self.nodes.append(n)
        self.consumers.append(0)
        for x in args:
            self.consumers[x] += 1
        if key is not None:
            self.keys[key] = n['id']
        return n

    def zero_rows(self, op, args, a):
        """Whether a row of the value may be all zeros (l2_normalize's gradient is 1/eps there)."""
        z = [self.nodes[i]['zrow'] for i in args]
        if op in ('relu', 'dropout'):
            return True
        if op in ('masked_softmax', 'attention'):
            return bool(a.get('mask')) or any(z)
        if op in ('exp', 'sigmoid', 'softmax', 'log_softmax', 'layer_norm', 'affine', 'affine_gelu', 'l2_normalize', 'log',
                  'input', 'param', 'index', 'const', 'full', 'state', 'step'):
            return False
        if op == 'sub' and len(args) == 2 and args[0] == args[1]:
            return True
        if op in ('add', 'sub'):
            return all(z)
        if op == 'div':
            return z[0]
        if op in ('scan', 'repeat'):
            return a['cell']['nodes'][a['cell']['out']]['zrow'] if 'cell' in a else True
        return any(z)

    def floats(self, pred=lambda n: True):
        return [n for n in self.nodes if not n['index'] and pred(n)]


def rank(n):
    return len(n['shape'])


def prune(nodes, roots, keep_ops=()):
    """The nodes reachable from roots (and those whose op is in keep_ops), renumbered in order;
    returns (nodes, old id -> new id)."""
    live = set()
    todo = list(roots) + [n['id'] for n in nodes if n['op'] in keep_ops]
    while todo:
        i = todo.pop()
        if i in live:
            continue
        live.add(i)
        todo += nodes[i]['args']
    new = {}
    out = []
    for n in nodes:
        if n['id'] in live:
            new[n['id']] = len(out)
            m = dict(n)
            m['id'] = len(out)
            m['args'] = [new[x] for x in n['args']]
            if 'cell' in n['a']:  # a scan cell's reads of outer values follow the renumbering
                m['a'] = dict(n['a'])
                cell = dict(n['a']['cell'])
                cell['nodes'] = [dict(c, a=dict(c['a'], ref=new[c['a']['ref']])) if c['op'] == 'outer' else c
                                 for c in cell['nodes']]
                m['a']['cell'] = cell
            out.append(m)
    return out, new


def depends(ctx, n, op):
    """Whether node n of ctx reads (transitively) a node whose op is `op`."""
    seen, todo = set(), [n['id']]
    while todo:
        i = todo.pop()
        if i in seen:
            continue
        seen.add(i)
        if ctx.nodes[i]['op'] == op:
            return True
        todo += ctx.nodes[i]['args']
    return False


class Generator:
    def __init__(self, seed, target=None, wide=False):
        self.seed = seed
        self.r = random.Random(seed)
        r = self.r
        self.dims = {'B': r.choice([1, 2, 2, 3, 3]), 'T': r.choice([2, 3, 4]), 'S': r.choice([2, 3, 4])}
        if wide:  # large enough for a scan's batch parts and for attention's products and rows to be split
            self.dims.update({'B': 16, 'T': 48, 'S': 40})
        self.wide = wide
        self.target = target or r.randint(5, 40)
        self.counter = 0
        self.params = []  # (ctx-independent) outer params by shape, for reuse
        self.drops = []
        self.prog = Ctx(self, 'program')

    # ------------------------------------------------------------------ helpers
    def fresh(self, prefix):
        self.counter += 1
        return '%s%d' % (prefix, self.counter)

    def sdim(self):
        return self.r.choices(STATIC, STATIC_W)[0]

    def size(self, d):
        return d if isinstance(d, int) else self.dims[d]

    def numel(self, shape):
        return math.prod(self.size(d) for d in shape)

    def lead(self):
        """Leading dimensions of a new input: batch-like letters and small static sizes."""
        return self.r.choice([[], ['B'], ['B'], ['B', 'T'], ['B', 'T'], ['T', 'B'], ['B', 'S'], [2], ['B', 2], [3, 'B']])

    def new_input(self, ctx, shape, pos=False, lo=-1.0, hi=1.0):
        if pos:
            lo, hi = 0.5, 1.5
        return ctx.add('input', [], shape, name=self.fresh('x'), init=['u', lo, hi],
                       bound=max(abs(lo), abs(hi)), pos=lo > 0, lo=lo if lo > 0 else 0.0)

    def new_param(self, ctx, shape, scale=None, pos=False, reuse=0.35):
        """A parameter of this shape: an existing one (used again) or a new one."""
        if not pos and self.r.random() < reuse:
            if ctx.kind == 'repeat':  # a block's own parameter read twice
                same = [n for n in ctx.nodes if n['op'] == 'param' and n['shape'] == list(shape) and not n['pos']]
                if same:
                    return self.r.choice(same)
            else:
                same = [p for p in self.params if p['shape'] == list(shape) and not p.get('pos_init')]
                if same:
                    return self.param_in(ctx, self.r.choice(same))
        if scale is None:
            scale = 0.6 if len(shape) != 2 else 1.2 / math.sqrt(shape[0])
        lo, hi = (0.5, 1.5) if pos else (-scale, scale)
        name = self.fresh('w')
        n = ctx.add('param', [], shape, name=name, init=['u', lo, hi], bound=max(abs(lo), abs(hi)), pos=pos,
                    lo=lo if pos else 0.0)
        if ctx.kind != 'repeat':
            self.params.append({'name': name, 'shape': list(shape), 'init': n['init'], 'bound': n['bound'],
                                'pos_init': pos})
        return n

    def param_in(self, ctx, p):
        for n in ctx.nodes:
            if n['op'] == 'param' and n['name'] == p['name']:
                return n
        return ctx.add('param', [], p['shape'], name=p['name'], init=p['init'], bound=p['bound'])

    def new_index(self, ctx, shape, init):
        return ctx.add('index', [], shape, name=self.fresh('i'), init=init, index=True)

    def pick(self, ctx, pred=lambda n: True, new=None, p_new=0.15):
        """An existing float node satisfying pred (recent ones and ones already read favoured, so
        values get several readers), or new() when given and drawn or nothing fits."""
        c = [n for n in ctx.floats(pred) if n['op'] not in ('const', 'full')]
        if new is not None and (not c or self.r.random() < p_new):
            return new()
        if not c:
            return None
        # unread values first (the graph grows deep rather than wide), then values read once (a
        # second reader), recent ones before old ones
        w = [(1.0 + k) * (8.0 if ctx.consumers[n['id']] == 0 else 2.5 if ctx.consumers[n['id']] == 1 else 1.0) *
             (0.3 if ctx.kind != 'program' and n['op'] == 'param' else 1.0) for k, n in enumerate(c)]
        return self.r.choices(c, w)[0]

    def any_shape(self):
        return self.lead() + [self.sdim()]

    def operand(self, ctx, pred=lambda n: True, shape=None, pos=False):
        """A float operand: existing, or a new input (or, in a cell, a new param) of a fresh shape."""
        def new():
            s = shape if shape is not None else self.any_shape()
            if ctx.kind == 'program':
                return self.new_input(ctx, s, pos=pos)
            if ctx.kind == 'scan' and not any(isinstance(d, str) for d in s):
                return self.new_param(ctx, s, pos=pos)
            return None
        ok = (lambda n: pred(n) and (not pos or n['pos'] and n['lo'] >= 0.1) and n['bound'] < 40)
        n = self.pick(ctx, ok, new)
        if n is None and ctx.kind == 'program':
            n = new()
        return n

    # ------------------------------------------------------------------ element-wise
    def unary(self, ctx):
        op = self.r.choice(['neg', 'tanh', 'sigmoid', 'relu', 'gelu', 'exp', 'log', 'scale'])
        if op == 'log':
            x = self.operand(ctx, lambda n: n['pos'] and n['lo'] >= 0.05, pos=True)
        elif op == 'exp':
            x = self.operand(ctx, lambda n: n['bound'] <= 3)
        else:
            x = self.operand(ctx)
        if x is None:
            return None
        b, pos, lo = x['bound'], False, 0.0
        a = {}
        if op == 'neg':
            pass
        elif op == 'tanh':
            b = min(b, 1.0)
        elif op == 'sigmoid':
            b, pos, lo = 1.0, True, 1 / (1 + math.exp(min(b, 30)))
        elif op == 'relu':
            pass
        elif op == 'gelu':
            b = b + 0.2
        elif op == 'exp':
            b, pos, lo = math.exp(b), True, math.exp(-b)
        elif op == 'log':
            b = max(abs(math.log(x['lo'])), abs(math.log(max(b, 1.0))))
        elif op == 'scale':
            c = self.r.choice([0.5, -1.5, 2.0, 0.25, -0.75])
            a['c'] = c
            b = abs(c) * b
            pos, lo = x['pos'] and c > 0, x['lo'] * c if x['pos'] and c > 0 else 0.0
        return ctx.add(op, [x['id']], x['shape'], a, bound=b, pos=pos, lo=lo)

    def binary(self, ctx):
        op = self.r.choice(['add', 'sub', 'mul', 'div', 'add', 'mul'])
        x = self.operand(ctx)
        if x is None:
            return None
        r = self.r.random()
        shape = x['shape']
        if op == 'div':
            if r < 0.15 and x['pos'] and x['lo'] >= 0.1:
                y = x
            elif r < 0.25:
                y = ctx.add('const', [], [], {'v': self.r.choice([0.5, 2.0, 1.25])}, bound=2.0, pos=True, lo=0.5)
            else:
                sub = shape[self.r.randint(0, len(shape)):] if shape else []
                y = self.operand(ctx, lambda n: n['shape'] == sub, shape=sub, pos=True)
                if y is None:
                    return None
        elif r < 0.12:
            y = x  # op(x, x): one operand read twice by one node
        elif r < 0.22:
            v = self.r.choice([0.5, -1.0, 2.0, 1.5])
            y = ctx.add('const', [], [], {'v': v}, bound=abs(v), pos=v > 0, lo=v if v > 0 else 0.0)
        elif r < 0.3:  # a tensor of one value (ctg::full), of the shape or a trailing part of it
            v = self.r.choice([0.5, -0.25, 1.0])
            sub = shape[self.r.randint(0, len(shape)):] if shape else []
            y = ctx.add('full', [], sub, {'v': v}, bound=abs(v), pos=v > 0, lo=v if v > 0 else 0.0)
        else:
            # same shape, or a trailing part of it (broadcast), either side
            k = self.r.randint(0, len(shape))
            sub = shape[k:] if self.r.random() < 0.6 else shape
            y = self.operand(ctx, lambda n: n['shape'] == sub, shape=sub)
            if y is None:
                return None
        if op != 'div' and y is not x and self.r.random() < 0.5:
            x, y = y, x
        out = x['shape'] if len(x['shape']) >= len(y['shape']) else y['shape']
        bx, by = x['bound'], y['bound']
        pos, lo = False, 0.0
        if op in ('add', 'sub'):
            b = bx + by
            if op == 'add' and x['pos'] and y['pos']:
                pos, lo = True, x['lo'] + y['lo']
        elif op == 'mul':
            b = bx * by
            if x['pos'] and y['pos']:
                pos, lo = True, x['lo'] * y['lo']
        else:
            b = bx / max(y['lo'], 1e-3)
            if x['pos']:
                pos, lo = True, x['lo'] / max(y['bound'], 1e-3)
        if b > 200:
            return None
        return ctx.add(op, [x['id'], y['id']], out, bound=b, pos=pos, lo=lo)

    def rowwise(self, ctx):
        op = self.r.choice(['softmax', 'log_softmax', 'l2_normalize', 'softmax'])
        x = self.operand(ctx, lambda n: rank(n) >= 1 and n['bound'] < 30 and not (op == 'l2_normalize' and n['zrow']))
        if x is None or rank(x) == 0:
            return None
        n_last = self.size(x['shape'][-1])
        if op == 'softmax':
            lo = math.exp(-2 * x['bound']) / n_last
            return ctx.add(op, [x['id']], x['shape'], bound=1.0, pos=True, lo=lo)
        if op == 'log_softmax':
            return ctx.add(op, [x['id']], x['shape'], bound=2 * x['bound'] + math.log(n_last) + 1)
        return ctx.add(op, [x['id']], x['shape'], bound=1.0)

    # ------------------------------------------------------------------ products and shapes
    def matmul(self, ctx):
        r = self.r.random()
        x = self.operand(ctx, lambda n: rank(n) >= 1 and isinstance(n['shape'][-1], int) and n['bound'] < 20)
        if x is None or rank(x) == 0 or not isinstance(x['shape'][-1], int):
            return None
        k = x['shape'][-1]
        if r < 0.55:  # a weight (k, n): a parameter (perhaps one used elsewhere) or a computed matrix
            nout = self.sdim()
            if self.r.random() < 0.2:
                w = self.pick(ctx, lambda n: rank(n) == 2 and n['shape'][0] == k and isinstance(n['shape'][1], int)
                              and n['bound'] < 10)
            else:
                w = None
            if w is None:
                w = self.new_param(ctx, [k, nout])
            shape = x['shape'][:-1] + [w['shape'][1]]
        elif r < 0.7:  # a vector (k)
            w = self.pick(ctx, lambda n: n['shape'] == [k] and n['bound'] < 10) if self.r.random() < 0.3 else None
            if w is None:
                w = self.new_param(ctx, [k])
            shape = x['shape'][:-1]
        else:  # batched: (..., m, k) x (..., k, n)
            if rank(x) < 3:
                return None
            lead = x['shape'][:-2]
            nout = self.sdim()
            w = self.pick(ctx, lambda n: rank(n) == rank(x) and n['shape'][:-2] == lead and n['shape'][-2] == k
                          and n['bound'] < 10)
            if w is None:
                t = self.pick(ctx, lambda n: rank(n) == rank(x) and n['shape'][:-2] == lead and n['shape'][-1] == k
                              and isinstance(n['shape'][-2], int) and n['bound'] < 10)
                if t is not None:
                    w = ctx.add('transpose', [t['id']], lead + [k, t['shape'][-2]], bound=t['bound'])
                elif ctx.kind == 'program':
                    w = self.new_input(ctx, lead + [k, nout])
                else:
                    return None
            shape = x['shape'][:-1] + [w['shape'][-1]]
        b = x['bound'] * w['bound'] * k
        if b > 200:
            return None
        return ctx.add('matmul', [x['id'], w['id']], shape, bound=b)

    def affine(self, ctx):
        x = self.operand(ctx, lambda n: rank(n) >= 1 and isinstance(n['shape'][-1], int) and n['bound'] < 20)
        if x is None or rank(x) == 0 or not isinstance(x['shape'][-1], int):
            return None
        k, nout = x['shape'][-1], self.sdim()
        w = self.new_param(ctx, [k, nout])
        b = self.new_param(ctx, [nout])
        bound = x['bound'] * w['bound'] * k + b['bound']
        if bound > 200:
            return None
        # a third of them with GELU in the same node (affine_gelu: |gelu(z)| <= |z|, the same bound)
        op = 'affine_gelu' if self.r.random() < 0.3 else 'affine'
        return ctx.add(op, [x['id'], w['id'], b['id']], x['shape'][:-1] + [nout], bound=bound)

    def transpose(self, ctx):
        x = self.operand(ctx, lambda n: rank(n) >= 2)
        if x is None or rank(x) < 2:
            return None
        s = x['shape'][:-2] + [x['shape'][-1], x['shape'][-2]]
        return ctx.add('transpose', [x['id']], s, bound=x['bound'], pos=x['pos'], lo=x['lo'])

    def permute(self, ctx):
        x = self.operand(ctx, lambda n: rank(n) >= 2)
        if x is None or rank(x) < 2:
            return None
        p = list(range(rank(x)))
        while p == sorted(p):
            self.r.shuffle(p)
        s = [x['shape'][i] for i in p]
        return ctx.add('permute', [x['id']], s, {'p': p}, bound=x['bound'], pos=x['pos'], lo=x['lo'])

    def reshape(self, ctx):
        x = self.operand(ctx, lambda n: rank(n) >= 1)
        if x is None or rank(x) == 0:
            return None
        letters = [d for d in x['shape'] if isinstance(d, str)]
        prod = math.prod(d for d in x['shape'] if isinstance(d, int))
        # factor the static product into at most 4 - len(letters) factors
        room = 4 - len(letters)
        if room < 1:
            return None
        fs = []
        rest = prod
        while rest > 1 and len(fs) < room - 1:
            divs = [d for d in range(2, rest + 1) if rest % d == 0]
            f = self.r.choice(divs)
            if self.r.random() < 0.3:
                f = rest
            fs.append(f)
            rest //= f
        if rest > 1 or not fs:
            fs.append(rest)
        fs = [f for f in fs if f > 1] or ([1] if not letters else [])
        if len(fs) + len(letters) > 4:
            return None
        s = letters + fs
        self.r.shuffle(s)
        if not s:
            return None
        if s == x['shape']:
            return None
        return ctx.add('reshape', [x['id']], s, {'to': s}, bound=x['bound'], pos=x['pos'], lo=x['lo'])

    def reduce(self, ctx):
        op = self.r.choice(['sum', 'mean'])
        x = self.operand(ctx, lambda n: rank(n) >= 1)
        if x is None or rank(x) == 0:
            return None
        if self.r.random() < 0.25 and ctx.row_mixing:
            n = self.numel(x['shape'])
            return ctx.add(op, [x['id']], [], {'axis': None}, bound=x['bound'] * (n if op == 'sum' else 1),
                           pos=x['pos'], lo=x['lo'])
        r = rank(x)
        axis = self.r.randint(0, r - 1)
        if not ctx.row_mixing and axis == 0:
            if r == 1:
                return None
            axis = self.r.randint(1, r - 1)
        if ctx.kind != 'program' and r >= 1 and axis == 0 and ctx.batch is not None:
            return None
        if self.r.random() < 0.4:
            axis = axis - r
        n = self.size(x['shape'][axis])
        s = [d for i, d in enumerate(x['shape']) if i != axis % r]
        b = x['bound'] * (n if op == 'sum' else 1)
        if b > 200:
            return None
        return ctx.add(op, [x['id']], s, {'axis': axis}, bound=b, pos=x['pos'],
                       lo=x['lo'] * (n if op == 'sum' else 1))

    def concat(self, ctx):
        x = self.operand(ctx, lambda n: rank(n) >= 1 and isinstance(n['shape'][-1], int))
        if x is None or rank(x) == 0 or not isinstance(x['shape'][-1], int):
            return None
        lead = x['shape'][:-1]
        parts = [x]
        for _ in range(self.r.choice([1, 1, 2])):
            if self.r.random() < 0.15:
                y = x
            else:
                y = self.operand(ctx, lambda n: rank(n) == rank(x) and n['shape'][:-1] == lead
                                 and isinstance(n['shape'][-1], int), shape=lead + [self.sdim()])
            if y is None:
                return None
            parts.append(y)
        if self.r.random() < 0.5:
            self.r.shuffle(parts)
        s = lead + [sum(p['shape'][-1] for p in parts)]
        return ctx.add('concat', [p['id'] for p in parts], s, bound=max(p['bound'] for p in parts),
                       pos=all(p['pos'] for p in parts), lo=min(p['lo'] for p in parts))

    def slice(self, ctx):
        x = self.operand(ctx, lambda n: rank(n) >= 1 and isinstance(n['shape'][-1], int) and n['shape'][-1] >= 2)
        if x is None or rank(x) == 0 or not isinstance(x['shape'][-1], int) or x['shape'][-1] < 2:
            return None
        n = x['shape'][-1]
        b = self.r.randint(0, n - 1)
        e = self.r.randint(b + 1, n)
        if (b, e) == (0, n):
            e = n - 1 if n - 1 > b else n
            if (b, e) == (0, n):
                return None
        return ctx.add('slice', [x['id']], x['shape'][:-1] + [e - b], {'b': b, 'e': e}, bound=x['bound'],
                       pos=x['pos'], lo=x['lo'])

    # ------------------------------------------------------------------ the rest of the public ops
    def embedding(self, ctx):
        if ctx.kind != 'program':
            return None
        V, E = self.r.randint(3, 7), self.sdim()
        table = None
        if self.r.random() < 0.3:
            same = [p for p in self.params if len(p['shape']) == 2]
            if same:
                table = self.param_in(ctx, self.r.choice(same))
                V, E = table['shape']
        if table is None:
            table = self.new_param(ctx, [V, E], scale=0.8, reuse=0)
        ids = self.new_index(ctx, self.r.choice([['B'], ['B', 'T'], ['T', 'B'], [3]]), ['ids', V])
        return ctx.add('embedding', [table['id'], ids['id']], ids['shape'] + [E], bound=table['bound'])

    def layer_norm(self, ctx):
        x = self.operand(ctx, lambda n: rank(n) >= 1 and isinstance(n['shape'][-1], int) and n['shape'][-1] >= 2)
        if x is None or rank(x) == 0 or not isinstance(x['shape'][-1], int) or x['shape'][-1] < 2:
            return None
        D = x['shape'][-1]
        g = self.pick(ctx, lambda n: n['shape'] == [D] and n['bound'] < 5) if self.r.random() < 0.25 else None
        if g is None:
            g = self.new_param(ctx, [D], pos=self.r.random() < 0.5)
        b = self.new_param(ctx, [D])
        return ctx.add('layer_norm', [x['id'], g['id'], b['id']], x['shape'],
                       bound=math.sqrt(D) * g['bound'] + b['bound'])

    def dropout(self, ctx):
        if ctx.kind != 'program':
            return None
        x = self.operand(ctx, lambda n: rank(n) >= 1)
        if x is None:
            return None
        p = self.r.choice([0.1, 0.25, 0.5])
        n = ctx.add('dropout', [x['id']], x['shape'], {'p': p}, bound=x['bound'] / (1 - p))
        if n['id'] not in self.drops:
            self.drops.append(n['id'])
        return n

    # ------------------------------------------------------------------ attention
    def mask(self, ctx, S_lead, n_dim, m_dim):
        """A random mask for scores (*S_lead, n, m): a list of parts (combined with &&) and the
        index operands it needs."""
        def one():
            k = self.r.choice(['causal', 'window', 'past', 'pred', 'kpad', 'matrix', 'matrix_b'])
            if k == 'causal':
                return ['causal'], []
            if k in ('window', 'past'):
                return ['window', self.r.randint(0, 2), k == 'past'], []
            if k == 'pred':
                return ['pred', self.r.choice([2, 3]), self.r.randint(0, 1)], []
            if k == 'kpad':
                if len(S_lead) < 1:
                    return None
                L = self.new_index(ctx, [S_lead[0]], ['lengths', m_dim])
                return ['kpad'], [L]
            if k == 'matrix':
                M = self.new_index(ctx, [n_dim, m_dim], ['mask01', 0.7])
                return ['matrix'], [M]
            if len(S_lead) < 1:
                return None
            M = self.new_index(ctx, [S_lead[0], n_dim, m_dim], ['mask01', 0.7])
            return ['matrix'], [M]
        r = self.r.random()
        if r < 0.2:
            return [], []
        parts, ops = [], []
        for _ in range(1 if r < 0.75 else 2):
            o = one()
            if o is None:
                continue
            parts.append(o[0])
            ops += o[1]
        return parts, ops

    def attention(self, ctx):
        if ctx.kind == 'scan':  # (a cell's rows are the batch: attention would mix them)
            return None
        q = self.operand(ctx, lambda n: rank(n) >= 2 and isinstance(n['shape'][-1], int) and n['bound'] < 10)
        if q is None or rank(q) < 2 or not isinstance(q['shape'][-1], int):
            return None
        lead, n_dim, dq = q['shape'][:-2], q['shape'][-2], q['shape'][-1]
        kind = self.r.choice(['dot', 'scaled_dot', 'bilinear', 'additive', 'custom', 'custom'])
        m_dim = self.r.choice([n_dim, n_dim, self.r.choice(['S', 'T', 3])])
        dk = dq if kind in ('dot', 'scaled_dot', 'custom') else self.r.choice([dq, self.sdim()])
        k = self.operand(ctx, lambda n: n['shape'] == lead + [m_dim, dk] and n['bound'] < 10, shape=lead + [m_dim, dk])
        if k is None:
            return None
        form = self.r.choice(['attention', 'attention', 'weights'])
        v = None
        if form == 'attention':
            dv = self.sdim()
            v = self.operand(ctx, lambda n: rank(n) == rank(q) and n['shape'][:-1] == lead + [m_dim]
                             and isinstance(n['shape'][-1], int), shape=lead + [m_dim, dv])
            if v is None:
                return None
        parts, mops = self.mask(ctx, lead, n_dim, m_dim)
        score = {'kind': kind}
        sparams = []
        if kind == 'bilinear':
            sparams = [self.new_param(ctx, [dq, dk])]
        elif kind == 'additive':
            A = self.sdim()
            bias = self.r.random() < 0.6
            sparams = [self.new_param(ctx, [dq, A]), self.new_param(ctx, [dk, A])]
            if bias:
                sparams.append(self.new_param(ctx, [A]))
            sparams.append(self.new_param(ctx, [A]))
            score['bias'] = bias
        elif kind == 'custom':
            score['fq'] = self.r.choice(['id', 'tanh'] if q['zrow'] else ['id', 'tanh', 'l2'])
            score['fk'] = self.r.choice(['id', 'tanh'] if k['zrow'] else ['id', 'tanh', 'l2'])
            score['temp'] = self.r.random() < 0.5
            if score['temp']:
                sparams = [self.new_param(ctx, [], scale=0.5)]
        a = {'score': score, 'mask': parts, 'form': form, 'n_mask': len(mops), 'n_score': len(sparams)}
        args = [q['id'], k['id']] + ([v['id']] if v is not None else []) + [m['id'] for m in mops] + \
               [p['id'] for p in sparams]
        shape = lead + [n_dim, v['shape'][-1] if v is not None else m_dim]
        bound = v['bound'] if v is not None else 1.0
        att = ctx.add('attention', args, shape, a, bound=bound)
        if kind == 'custom' and self.r.random() < 0.5:
            # the score's own expression written again outside: the same ctgraph node, so the
            # scores have a second reader besides the masked softmax
            f = {'id': lambda x: x, 'tanh': lambda x: ctx.add('tanh', [x['id']], x['shape'], bound=1.0),
                 'l2': lambda x: ctx.add('l2_normalize', [x['id']], x['shape'], bound=1.0)}
            fq, fk = f[score['fq']](q), f[score['fk']](k)
            kt = ctx.add('transpose', [fk['id']], lead + [dk, m_dim], bound=fk['bound'])
            sc = ctx.add('matmul', [fq['id'], kt['id']], lead + [n_dim, m_dim], bound=fq['bound'] * kt['bound'] * dk)
            if score['temp']:
                e = ctx.add('exp', [sparams[0]['id']], [], bound=2.0, pos=True, lo=0.5)
                sc = ctx.add('mul', [sc['id'], e['id']], sc['shape'], bound=sc['bound'] * 2)
        return att

    def masked_softmax(self, ctx):
        if ctx.kind == 'scan':  # (a cell's rows are the batch: attention would mix them)
            return None
        s = self.operand(ctx, lambda n: rank(n) >= 2 and n['bound'] < 30)
        if s is None or rank(s) < 2:
            return None
        parts, mops = self.mask(ctx, s['shape'][:-2], s['shape'][-2], s['shape'][-1])
        return ctx.add('masked_softmax', [s['id']] + [m['id'] for m in mops], s['shape'], {'mask': parts},
                       bound=1.0)

    # ------------------------------------------------------------------ losses
    def mse(self, ctx):
        if ctx.kind != 'program':
            return None
        p = self.operand(ctx, lambda n: rank(n) >= 1 and n['bound'] < 30)
        if p is None:
            return None
        t = self.operand(ctx, lambda n: n['shape'] == p['shape'] and n is not p, shape=p['shape'])
        if t is None:
            return None
        return ctx.add('mse_loss', [p['id'], t['id']], [], bound=(p['bound'] + t['bound']) ** 2)

    def cross_entropy(self, ctx, z=None):
        if ctx.kind != 'program':
            return None
        if z is None:
            z = self.operand(ctx, lambda n: rank(n) >= 1 and isinstance(n['shape'][-1], int) and n['shape'][-1] >= 2
                             and n['bound'] < 30)
        if z is None or rank(z) == 0 or not isinstance(z['shape'][-1], int) or z['shape'][-1] < 2:
            return None
        V = z['shape'][-1]
        ignore = self.r.choice([-100, -100, -1])
        t = self.new_index(ctx, z['shape'][:-1], ['targets', V, ignore])
        return ctx.add('cross_entropy', [z['id'], t['id']], [], {'ignore': ignore}, bound=2 * z['bound'] + 3)

    # ------------------------------------------------------------------ recurrence and depth
    def cell_ops(self, ctx, steps):
        ops = [self.unary, self.binary, self.binary, self.matmul, self.affine, self.rowwise, self.concat,
               self.slice, self.layer_norm, self.reduce]
        if ctx.kind == 'repeat':  # a Transformer block's attention, its parameters per layer
            ops += [self.attention, self.masked_softmax]
        made = 0
        tries = 0
        seen = set()
        while made < steps and tries < steps * 6:
            tries += 1
            n = self.r.choice(ops)(ctx)
            if n is not None and n['id'] not in seen:
                seen.add(n['id'])
                made += 1
                # a second reader of a computed operand after this node, joined to it (so that
                # this node's backward adds to that operand's adjoint; cells have both paths too)
                xs = [ctx.nodes[i] for i in n['args'] if not ctx.nodes[i]['index']
                      and ctx.nodes[i]['op'] not in ('param', 'const', 'full', 'state', 'step', 'extra', 'outer')]
                if xs and self.r.random() < 0.5:
                    x = self.r.choice(xs)
                    s = ctx.add(self.r.choice(['tanh', 'sigmoid']), [x['id']], x['shape'], bound=1.0)
                    if x['shape'] == n['shape']:
                        ctx.add('add', [n['id'], s['id']], n['shape'], bound=n['bound'] + 1.0)

    def finish_cell(self, ctx, want):
        """Makes the cell's result: a node of shape `want` read from what the cell computed."""
        cands = [n for n in ctx.floats(lambda n: n['shape'] == want and n['op'] not in ('param', 'const', 'full'))
                 if n['op'] not in ('state', 'extra', 'step')]
        if cands and self.r.random() < 0.6:
            out = cands[-1]
        else:
            src = [n for n in ctx.floats(lambda n: rank(n) == len(want) and n['shape'][:-1] == want[:-1]
                                         and isinstance(n['shape'][-1], int))]
            x = self.r.choice(src[-3:])
            w = self.new_param(ctx, [x['shape'][-1], want[-1]])
            b = self.new_param(ctx, [want[-1]])
            out = ctx.add('affine', [x['id'], w['id'], b['id']], want, bound=x['bound'] * w['bound'] * x['shape'][-1])
        # what else the cell computed in the result's shape joins it (no work is thrown away, and
        # values get several readers inside the cell too)
        for n in list(ctx.nodes):
            if (ctx.consumers[n['id']] or n['id'] == out['id'] or n['index'] or n['bound'] >= 10 or n['op'] in
                    ('param', 'const', 'full', 'state', 'step', 'extra', 'outer')):
                continue
            if n['shape'] == want:
                out = ctx.add('add', [out['id'], n['id']], want, bound=out['bound'] + n['bound'])
            elif rank(n) == len(want) and n['shape'][:-1] == want[:-1] and isinstance(n['shape'][-1], int):
                w = self.new_param(ctx, [n['shape'][-1], want[-1]])
                p = ctx.add('matmul', [n['id'], w['id']], want, bound=n['bound'] * w['bound'] * n['shape'][-1])
                out = ctx.add('add', [out['id'], p['id']], want, bound=out['bound'] + p['bound'])
        st = next(n for n in ctx.nodes if n['op'] == 'state')
        if not depends(ctx, out, 'state'):
            out = ctx.add('add', [out['id'], st['id']], want, bound=out['bound'] + st['bound'])
        step = [n for n in ctx.nodes if n['op'] == 'step']
        if step and not depends(ctx, out, 'step'):
            w = self.new_param(ctx, [step[0]['shape'][-1], want[-1]])
            p = ctx.add('matmul', [step[0]['id'], w['id']], want, bound=step[0]['bound'] * w['bound'] * step[0]['shape'][-1])
            out = ctx.add('add', [p['id'], out['id']], want, bound=out['bound'] + p['bound'])
        if out['bound'] > 3 or self.r.random() < 0.5:
            out = ctx.add(self.r.choice(['tanh', 'sigmoid']), [out['id']], want, bound=1.0)
        return out

    def scan(self, ctx):
        if ctx.kind != 'program':
            return None
        X, H = self.sdim(), self.sdim()
        bl = 'B'
        xs = self.operand(ctx, lambda n: rank(n) == 3 and n['shape'][0] == 'T' and n['shape'][1] == bl
                          and isinstance(n['shape'][2], int) and n['bound'] < 10, shape=['T', bl, X])
        if xs is None:
            return None
        X = xs['shape'][2]
        cell = Ctx(self, 'scan', ctx)
        cell.batch = bl
        has_len = self.r.random() < 0.35
        cell.row_mixing = not has_len and self.r.random() < 0.3
        st = cell.add('state', [], [bl, H], bound=1.0, zrow=True)  # zeros at the first step
        x = cell.add('step', [], [bl, X], bound=xs['bound'])
        # invariants from outside: a (B, H) or (H) value, read as a closure
        outer = []
        if self.r.random() < 0.4:
            o = self.pick(ctx, lambda n: n['shape'] in ([bl, H], [H]) and n['bound'] < 10 and n['op'] != 'index')
            if o is not None:
                ref = cell.add('outer', [], o['shape'], {'ref': o['id']}, bound=o['bound'], pos=o['pos'], lo=o['lo'],
                               zrow=o['zrow'])
                outer.append(o['id'])
        if self.r.random() < 0.05:  # a cell returning its state or its step input unchanged
            out = x if X == H and self.r.random() < 0.5 else st
        else:
            self.cell_ops(cell, self.r.randint(2, 6))
            out = self.finish_cell(cell, [bl, H])
        nodes, new = prune(cell.nodes, [out['id']], ('state', 'step'))
        cell_desc = {'nodes': nodes, 'out': new[out['id']]}
        outer = [o for o in outer if any(c['op'] == 'outer' and c['a']['ref'] == o for c in nodes)]
        args = [xs['id']]
        a = {'H': H, 'cell': cell_desc, 'h0': None, 'lengths': False}
        r = self.r.random()
        if r < 0.25:
            h0 = self.operand(ctx, lambda n: n['shape'] == [bl, H] and n['bound'] < 3, shape=[bl, H])
            if h0 is not None:
                args.append(h0['id'])
                a['h0'] = 'rows'
        elif r < 0.4:
            h0 = self.new_param(ctx, [H])
            args.append(h0['id'])
            a['h0'] = 'one'
        if has_len:
            L = self.new_index(ctx, [bl], ['lengths', 'T'])
            args.append(L['id'])
            a['lengths'] = True
        a['n_pre'] = len(args)
        args += outer
        hs = ctx.add('scan', args, ['T', bl, H], a, bound=1.0)
        r = self.r.random()
        if r < 0.25:
            return ctx.add('at_time', [hs['id']], [bl, H], {'t': self.r.choice([-1, 0, 1])}, bound=1.0)
        if r < 0.55:
            if self.r.random() < 0.5 and a['lengths']:
                return ctx.add('reverse_time', [hs['id'], args[a['n_pre'] - 1]], hs['shape'], bound=1.0)
            return ctx.add('reverse_time', [hs['id']], hs['shape'], bound=1.0)
        return hs

    def repeat(self, ctx):
        if ctx.kind != 'program':
            return None
        x = self.operand(ctx, lambda n: rank(n) >= 1 and isinstance(n['shape'][-1], int) and n['bound'] < 5)
        if x is None or rank(x) == 0 or not isinstance(x['shape'][-1], int):
            return None
        L = self.r.choice([1, 2, 3])
        prefix = self.fresh('r') + '.'
        cell = Ctx(self, 'repeat', ctx)
        cell.batch = None
        st = cell.add('state', [], x['shape'], bound=x['bound'], zrow=x['zrow'])
        extras = []
        if self.r.random() < 0.4:
            e = self.pick(ctx, lambda n: (n['shape'] == x['shape'] or n['shape'] == x['shape'][-1:]) and n['bound'] < 5
                          and n['id'] != x['id'])
            if e is not None:
                cell.add('extra', [], e['shape'], {'k': 0}, bound=e['bound'], pos=e['pos'], lo=e['lo'], zrow=e['zrow'])
                extras.append(e['id'])
        if self.r.random() < 0.05:  # a block returning its input or its other argument unchanged
            ex = [n for n in cell.nodes if n['op'] == 'extra' and n['shape'] == x['shape']]
            out = ex[0] if ex and self.r.random() < 0.5 else st
        else:
            self.cell_ops(cell, self.r.randint(2, 5))
            out = self.finish_cell(cell, x['shape'])
            if self.r.random() < 0.5:  # a residual block
                out = cell.add('add', [st['id'], out['id']], x['shape'], bound=x['bound'] + 1)
            if out['bound'] > 4:
                out = cell.add('tanh', [out['id']], x['shape'], bound=1.0)
        nodes, new = prune(cell.nodes, [out['id']], ('state', 'extra'))
        a = {'L': L, 'prefix': prefix, 'cell': {'nodes': nodes, 'out': new[out['id']]}}
        return ctx.add('repeat', [x['id']] + extras, x['shape'], a, bound=max(out['bound'], x['bound']))

    def sibling(self, ctx, n):
        """Another reader of one of n's operands, made after n: n's backward then adds to that
        operand's adjoint instead of writing it first (ctgraph's two adjoint paths)."""
        xs = [ctx.nodes[i] for i in n['args'] if not ctx.nodes[i]['index']
              and ctx.nodes[i]['op'] not in ('const', 'full', 'index')]
        if not xs:
            return None
        x = self.r.choice(xs)
        k = self.r.random()
        if k < 0.3:
            return ctx.add('tanh', [x['id']], x['shape'], bound=1.0)
        if k < 0.5:
            c = self.r.choice([0.5, -2.0, 1.5])
            return ctx.add('scale', [x['id']], x['shape'], {'c': c}, bound=abs(c) * x['bound'])
        if k < 0.7 and x['shape'] and x['bound'] < 30:
            return ctx.add('softmax', [x['id']], x['shape'], bound=1.0, pos=True,
                           lo=math.exp(-2 * x['bound']) / self.size(x['shape'][-1]))
        g = self.new_input(ctx, x['shape'])
        return ctx.add('mul', [x['id'], g['id']], x['shape'], bound=x['bound'])

    # ------------------------------------------------------------------ the program
    def build(self):
        ctx = self.prog
        r = self.r
        ops = [(self.unary, 12), (self.binary, 12), (self.rowwise, 4), (self.matmul, 8), (self.affine, 3),
               (self.transpose, 2), (self.permute, 2), (self.reshape, 3), (self.reduce, 4), (self.concat, 3),
               (self.slice, 3), (self.embedding, 2), (self.layer_norm, 3), (self.dropout, 4), (self.attention, 5),
               (self.masked_softmax, 4), (self.mse, 1), (self.cross_entropy, 1), (self.scan, 2), (self.repeat, 2)]
        fns, ws = zip(*ops)
        tries = 0
        made = set()
        def sinks():
            return sum(1 for n in ctx.nodes if not ctx.consumers[n['id']] and not n['index']
                       and n['op'] not in ('const', 'full'))
        while len(ctx.nodes) + 2 * sinks() < self.target and tries < 400:
            tries += 1
            fn = r.choices(fns, ws)[0]
            n = fn(ctx)
            if n is not None and n['id'] not in made:
                made.add(n['id'])
                if r.random() < (0.6 if n['op'] in ('dropout', 'masked_softmax', 'attention', 'neg', 'relu', 'gelu', 'log',
                                                    'exp', 'reverse_time', 'at_time', 'l2_normalize') else 0.45):
                    self.sibling(ctx, n)
        if not ctx.floats(lambda n: n['op'] not in ('const', 'full')):
            self.new_input(ctx, self.any_shape())
        # every value nothing reads becomes a term of the loss, weighted so that no gradient
        # vanishes by symmetry (sum(softmax(x)) has none)
        terms = []
        for n in list(ctx.nodes):
            if ctx.consumers[n['id']] or n['index'] or n['op'] in ('const', 'full', 'index'):
                continue
            if n['shape'] == []:
                terms.append(n)
                continue
            k = r.random()
            if k < 0.15 and isinstance(n['shape'][-1], int) and n['shape'][-1] >= 2 and n['bound'] < 30:
                terms.append(self.cross_entropy(ctx, n))
            elif k < 0.3 and n['bound'] < 30:
                t = self.new_input(ctx, n['shape'])
                terms.append(ctx.add('mse_loss', [n['id'], t['id']], [], bound=(n['bound'] + 1) ** 2))
            else:
                g = self.new_input(ctx, n['shape'])
                m = ctx.add('mul', [n['id'], g['id']], n['shape'], bound=n['bound'])
                terms.append(ctx.add(r.choice(['sum', 'mean']), [m['id']], [], {'axis': None}, bound=n['bound']))
        loss = terms[0]
        for t in terms[1:]:
            loss = ctx.add('add', [loss['id'], t['id']], [], bound=loss['bound'] + t['bound'])
        cands = [n for n in ctx.nodes if n['op'] not in ('input', 'param', 'index', 'const', 'full')
                 and not n['index'] and n['id'] != loss['id']]
        extras = r.sample(cands, min(len(cands), r.randint(1, 3)))
        nodes, new = prune(ctx.nodes, [loss['id']])
        return {
            'name': 'g_%d' % self.seed if self.seed >= 0 else 'g_m%d' % -self.seed,
            'seed': self.seed,
            'dims': dict(self.dims),
            'nodes': nodes,
            'loss': new[loss['id']],
            'extras': [new[e['id']] for e in extras],
            'drops': [new[d] for d in self.drops if d in new],
            'threads_exact': not self.wide,
            'dropout_seed': r.randint(1, 1 << 30),
        }


def generate(seed, wide=False):
    return Generator(seed, wide=wide).build()
