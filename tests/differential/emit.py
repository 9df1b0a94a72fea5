"""A program description (gen.py) written as ctgraph C++ and as PyTorch, and its data.

The PyTorch text is what difftest.py runs (exec), so the program printed for a person is exactly the
one that was compared.
"""
import copy
import math
import zlib

import numpy as np

# ---------------------------------------------------------------------------------------- C++

UNARY = {'neg', 'tanh', 'sigmoid', 'relu', 'gelu', 'exp', 'log'}
BINARY = {'add', 'sub', 'mul', 'div'}
ROWWISE = {'softmax', 'log_softmax', 'l2_normalize'}


def cdim(d):
    return d if isinstance(d, str) else str(d)


def cdims(shape):
    return ''.join(', ' + cdim(d) for d in shape)


def cnum(v):
    r = repr(float(v))
    return r


def c_mask(parts, ops):
    """The C++ mask expression; ops are the index operands' variable names, in order."""
    if not parts:
        return 'ctg::no_mask{}'
    it = iter(ops)
    out = []
    for p in parts:
        if p[0] == 'causal':
            out.append('ctg::causal{}')
        elif p[0] == 'window':
            out.append('ctg::local_window<%d%s>{}' % (p[1], ', ctg::window::past' if p[2] else ''))
        elif p[0] == 'pred':
            out.append('ctg::visible_if<ctgdiff::pred<%d, %d>>{}' % (p[1], p[2]))
        elif p[0] == 'kpad':
            out.append('ctg::key_padding(%s)' % next(it))
        elif p[0] == 'matrix':
            out.append('ctg::mask_matrix(%s)' % next(it))
    return ' && '.join(out)


def c_expr(n, v, scores, nodes):
    """C++ for node n of the graph `nodes`; v(i) names operand i's variable; scores collects
    namespace-scope score types."""
    op, a, args = n['op'], n['a'], [v(i) for i in n['args']]
    s = n['shape']
    if op == 'input':
        return 'ctg::input<"%s"%s>{}' % (n['name'], cdims(s))
    if op == 'param':
        return 'ctg::param<"%s"%s>{}' % (n['name'], cdims(s))
    if op == 'index':
        return 'ctg::index_input<"%s"%s>{}' % (n['name'], cdims(s))
    if op == 'const':
        return 'ctg::constant<%s>{}' % cnum(a['v'])
    if op == 'full':
        return 'ctg::full<%s%s>()' % (cnum(a['v']), cdims(s))
    if op in UNARY or op in ROWWISE:
        return 'ctg::%s(%s)' % (op, args[0])
    if op == 'scale':
        return 'ctg::scale<%s>(%s)' % (cnum(a['c']), args[0])
    if op in BINARY or op in ('matmul', 'mse_loss', 'embedding'):
        return 'ctg::%s(%s)' % (op, ', '.join(args))
    if op in ('affine', 'affine_gelu', 'layer_norm', 'concat'):
        return 'ctg::%s(%s)' % (op, ', '.join(args))
    if op == 'transpose':
        return 'ctg::transpose(%s)' % args[0]
    if op == 'permute':
        return 'ctg::permute<%s>(%s)' % (', '.join(map(str, a['p'])), args[0])
    if op == 'reshape':
        return 'ctg::reshape<%s>(%s)' % (', '.join(cdim(d) for d in a['to']), args[0])
    if op in ('sum', 'mean'):
        if a['axis'] is None:
            return 'ctg::%s(%s)' % (op, args[0])
        return 'ctg::%s<%d>(%s)' % (op, a['axis'], args[0])
    if op == 'slice':
        return 'ctg::slice<%d, %d>(%s)' % (a['b'], a['e'], args[0])
    if op == 'dropout':
        return 'ctg::dropout<%s>(%s)' % (cnum(a['p']), args[0])
    if op == 'cross_entropy':
        if a['ignore'] == -100:
            return 'ctg::softmax_cross_entropy(%s)' % ', '.join(args)
        return 'ctg::softmax_cross_entropy<%d>(%s)' % (a['ignore'], ', '.join(args))
    if op == 'masked_softmax':
        return 'ctg::masked_softmax(%s, %s)' % (args[0], c_mask(a['mask'], args[1:]))
    if op == 'attention':
        return c_attention(n, args, scores, nodes)
    if op == 'at_time':
        return 'ctg::at_time<%d>(%s)' % (a['t'], args[0])
    if op == 'reverse_time':
        return 'ctg::reverse_time(%s)' % ', '.join(args)
    raise ValueError('no C++ for op ' + op)


def c_attention(n, args, scores, nodes):
    a = n['a']
    first_param = 2 + (a['form'] == 'attention') + a['n_mask']
    sp_nodes = [nodes[i] for i in n['args'][first_param:]]
    sc = a['score']
    has_v = a['form'] == 'attention'
    q, k = args[0], args[1]
    rest = args[2:]
    v = rest.pop(0) if has_v else None
    mops, sps = rest[:a['n_mask']], rest[a['n_mask']:]
    kind = sc['kind']
    if kind == 'dot':
        score = 'ctg::dot_score{}'
    elif kind == 'scaled_dot':
        score = 'ctg::scaled_dot_score{}'
    elif kind == 'bilinear':
        w = sp_nodes[0]
        score = 'ctg::bilinear_score<"%s"%s>{}' % (w['name'], cdims(w['shape']))
    elif kind == 'additive':
        ps = ['decltype(%s)' % p for p in sps]
        if not sc['bias']:
            ps.insert(2, 'void')
        score = 'ctg::additive_score_of<%s>{}' % ', '.join(ps)
    else:
        name = 'score_%d' % n['id']
        def f(kind, x):
            return {'id': x, 'tanh': 'ctg::tanh(%s)' % x, 'l2': 'ctg::l2_normalize(%s)' % x}[kind]
        body = 'ctg::matmul(%s, ctg::transpose(%s))' % (f(sc['fq'], 'q'), f(sc['fk'], 'k'))
        if sc['temp']:
            t = sp_nodes[0]
            body = 'ctg::mul(%s, ctg::exp(ctg::param<"%s">{}))' % (body, t['name'])
        scores.append('struct %s {  // a score of our own: its backward is generated\n'
                      '    static constexpr auto scores(auto q, auto k) { return %s; }\n};' % (name, body))
        score = name + '{}'
    mask = c_mask(a['mask'], mops)
    if has_v:
        return 'ctg::attention(%s, %s, %s, %s, %s)' % (q, k, v, score, mask)
    return 'ctg::attention_weights(%s, %s, %s, %s)' % (q, k, score, mask)


def c_cell(n, v, scores, indent):
    """The lambda of a scan cell or a repeat block."""
    a = n['a']
    cell = a['cell']
    names = {}
    params = ['s', 'x'] if n['op'] == 'scan' else ['h'] + ['e%d' % k for k in range(len(n['args']) - 1)]
    lines = []
    for c in cell['nodes']:
        if c['op'] == 'state':
            names[c['id']] = params[0]
            continue
        if c['op'] == 'step':
            names[c['id']] = 'x'
            continue
        if c['op'] == 'extra':
            names[c['id']] = 'e%d' % c['a']['k']
            continue
        if c['op'] == 'outer':
            names[c['id']] = 'decltype(%s){}' % v(c['a']['ref'])
            continue
        for x in c['args']:
            if cell['nodes'][x]['op'] in ('param', 'const', 'full', 'input', 'index'):
                pass
        expr = c_expr(c, lambda i: names[i], scores, cell['nodes'])
        names[c['id']] = 'c%d' % c['id']
        lines.append('%sauto c%d = %s;' % (indent + '    ', c['id'], expr))
    lines.append('%sreturn %s;' % (indent + '    ', names[cell['out']]))
    head = '[](%s) {' % ', '.join('auto ' + p for p in params)
    return head + '\n' + '\n'.join(lines) + '\n' + indent + '}'


def cpp(prog):
    """The C++ of one program: a namespace with its build() and its registration."""
    scores = []
    lines = []
    v = lambda i: 'n%d' % i
    for n in prog['nodes']:
        if n['op'] == 'scan':
            a = n['a']
            args = [v(i) for i in n['args'][:a['n_pre']]]
            if a['h0'] is None and a['lengths']:
                args.insert(1, 'ctg::zero_state{}')
            expr = 'ctg::scan<%d>(%s, %s)' % (a['H'], c_cell(n, v, scores, '    '), ', '.join(args))
        elif n['op'] == 'repeat':
            a = n['a']
            expr = 'ctg::repeat<%d, "%s">(%s, %s)' % (a['L'], a['prefix'], c_cell(n, v, scores, '    '),
                                                      ', '.join(v(i) for i in n['args']))
        else:
            expr = c_expr(n, v, scores, prog['nodes'])
        lines.append('    auto n%d = %s;' % (n['id'], expr))
    ret = '    return ctgdiff::make(n%d, std::tuple{%s}, std::tuple{%s});' % (
        prog['loss'], ', '.join(v(i) for i in prog['extras']), ', '.join(v(i) for i in prog['drops']))
    out = ['namespace %s {' % prog['name'],
           'using namespace ctg;',
           "inline constexpr dim B = dyn('B'), T = dyn('T'), S = dyn('S');"]
    out += scores
    out += ['std::unique_ptr<ctgdiff::model> build() {'] + lines + [ret, '}',
            'const ctgdiff::registration reg("%s", build);' % prog['name'], '}  // namespace ' + prog['name'], '']
    return '\n'.join(out)


def cpp_unit(progs):
    return '// generated by tests/differential/difftest.py: do not edit\n#include "harness.hpp"\n\n' + \
        '\n'.join(cpp(p) for p in progs)


# ---------------------------------------------------------------------------------------- PyTorch

TORCH_PRELUDE = '''import math
import torch
import torch.nn.functional as F


def masked_softmax(s, vis):
    """softmax over the last axis among the visible entries; a row with none visible is zero."""
    if vis is None:
        return torch.softmax(s, -1)
    vis = vis.expand(s.shape)
    s2 = s.masked_fill(~vis, float('-inf'))
    mx = s2.amax(-1, keepdim=True).detach()
    mx = torch.where(torch.isfinite(mx), mx, torch.zeros_like(mx))
    e = torch.exp(s2 - mx)
    tot = e.sum(-1, keepdim=True)
    return e / torch.where(tot > 0, tot, torch.ones_like(tot))


def positions(n, m):
    """query i sits at key position i + m - n"""
    i = torch.arange(n).unsqueeze(1) + (m - n)
    j = torch.arange(m).unsqueeze(0)
    return i, j


def causal(n, m):
    i, j = positions(n, m)
    return j <= i


def window(n, m, w, past):
    i, j = positions(n, m)
    return (j >= i - w) & (j <= i) if past else (j - i).abs() <= w


def pred(n, m, k, r):  # ctgdiff::pred<k, r>
    i, j = positions(n, m)
    return (i >= 0) & ((i + 2 * j) % k != r)


def key_padding(lengths, m, rank):
    v = torch.arange(m).unsqueeze(0) < lengths.unsqueeze(1)
    return v.reshape([v.shape[0]] + [1] * (rank - 2) + [m])


def mask_matrix(mat, rank):
    v = mat != 0
    if v.dim() == 3:
        v = v.reshape([v.shape[0]] + [1] * (rank - 3) + list(v.shape[1:]))
    return v


def reverse_time(xs, lengths=None):
    if lengths is None:
        return xs.flip(0)
    steps, batch = xs.shape[0], xs.shape[1]
    t = torch.arange(steps).unsqueeze(1)
    src = torch.where(t < lengths.unsqueeze(0), lengths.unsqueeze(0) - 1 - t, t)
    return xs[src, torch.arange(batch).unsqueeze(0)]
'''


def tdim(d):
    return d if isinstance(d, str) else str(d)


def tshape(shape):
    return '(' + ''.join(tdim(d) + ', ' for d in shape) + ')'


def t_mask(parts, ops, n_dim, m_dim, rank):
    if not parts:
        return 'None'
    it = iter(ops)
    out = []
    for p in parts:
        if p[0] == 'causal':
            out.append('causal(%s, %s)' % (tdim(n_dim), tdim(m_dim)))
        elif p[0] == 'window':
            out.append('window(%s, %s, %d, %s)' % (tdim(n_dim), tdim(m_dim), p[1], p[2]))
        elif p[0] == 'pred':
            out.append('pred(%s, %s, %d, %d)' % (tdim(n_dim), tdim(m_dim), p[1], p[2]))
        elif p[0] == 'kpad':
            out.append('key_padding(%s, %s, %d)' % (next(it), tdim(m_dim), rank))
        elif p[0] == 'matrix':
            out.append('mask_matrix(%s, %d)' % (next(it), rank))
    return ' & '.join(out)


def t_expr(n, v, P, L=None):
    """PyTorch for node n. P(name) reads a parameter (a repeat block reads its layer's row)."""
    op, a, args = n['op'], n['a'], [v(i) for i in n['args']]
    s = n['shape']
    if op == 'input':
        return "I['%s']" % n['name']
    if op == 'param':
        return P(n['name'])
    if op == 'index':
        return "I['%s']" % n['name']
    if op == 'const':
        return cnum(a['v'])
    if op == 'full':
        return 'torch.full(%s, %s, dtype=torch.float64)' % (tshape(s), cnum(a['v']))
    if op == 'neg':
        return '-' + args[0]
    if op in ('tanh', 'sigmoid', 'relu', 'exp', 'log'):
        return 'torch.%s(%s)' % (op, args[0])
    if op == 'gelu':
        return "F.gelu(%s, approximate='tanh')" % args[0]
    if op == 'scale':
        return '%s * %s' % (args[0], cnum(a['c']))
    if op in BINARY:
        return '%s %s %s' % (args[0], {'add': '+', 'sub': '-', 'mul': '*', 'div': '/'}[op], args[1])
    if op == 'softmax':
        return 'torch.softmax(%s, -1)' % args[0]
    if op == 'log_softmax':
        return 'torch.log_softmax(%s, -1)' % args[0]
    if op == 'l2_normalize':
        return 'F.normalize(%s, dim=-1, eps=1e-12)' % args[0]
    if op == 'matmul':
        return 'torch.matmul(%s, %s)' % tuple(args)
    if op == 'affine':
        return 'torch.matmul(%s, %s) + %s' % tuple(args)
    if op == 'affine_gelu':
        return "F.gelu(torch.matmul(%s, %s) + %s, approximate='tanh')" % tuple(args)
    if op == 'transpose':
        return '%s.transpose(-1, -2)' % args[0]
    if op == 'permute':
        return '%s.permute(%s)' % (args[0], ', '.join(map(str, a['p'])))
    if op == 'reshape':
        return '%s.reshape(%s)' % (args[0], ', '.join(tdim(d) for d in a['to']))
    if op in ('sum', 'mean'):
        if a['axis'] is None:
            return '%s.%s()' % (args[0], op)
        return '%s.%s(%d)' % (args[0], op, a['axis'])
    if op == 'concat':
        return 'torch.cat([%s], -1)' % ', '.join(args)
    if op == 'slice':
        return '%s[..., %d:%d]' % (args[0], a['b'], a['e'])
    if op == 'embedding':
        return '%s[%s]' % (args[0], args[1])
    if op == 'layer_norm':
        return 'F.layer_norm(%s, (%d,), %s, %s, eps=1e-5)' % (args[0], s[-1], args[1], args[2])
    if op == 'dropout':
        k = n['_drop']
        return '(%s * M[%d] * %s if train else %s)' % (args[0], k, cnum(1.0 / (1.0 - a['p'])), args[0])
    if op == 'mse_loss':
        return 'F.mse_loss(%s, %s)' % tuple(args)
    if op == 'cross_entropy':
        return 'F.cross_entropy(%s.reshape(-1, %d), %s.reshape(-1), ignore_index=%d)' % (
            args[0], n['_V'], args[1], a['ignore'])
    if op == 'masked_softmax':
        S = n['shape']
        return 'masked_softmax(%s, %s)' % (args[0], t_mask(a['mask'], args[1:], S[-2], S[-1], len(S)))
    if op == 'at_time':
        return '%s[%d]' % (args[0], a['t'])
    if op == 'reverse_time':
        return 'reverse_time(%s)' % ', '.join(args)
    raise ValueError('no PyTorch for op ' + op)


def t_attention(n, v, nodes):
    a = n['a']
    sc = a['score']
    args = [v(i) for i in n['args']]
    has_v = a['form'] == 'attention'
    q, k = args[0], args[1]
    rest = args[2:]
    vv = rest.pop(0) if has_v else None
    mops, sps = rest[:a['n_mask']], rest[a['n_mask']:]
    qn, kn = nodes[n['args'][0]], nodes[n['args'][1]]
    dk = kn['shape'][-1]
    kind = sc['kind']
    kt = '%s.transpose(-1, -2)' % k
    if kind == 'dot':
        s = 'torch.matmul(%s, %s)' % (q, kt)
    elif kind == 'scaled_dot':
        s = 'torch.matmul(%s, %s) * %s' % (q, kt, cnum(1.0 / math.sqrt(qn['shape'][-1])))
    elif kind == 'bilinear':
        s = 'torch.matmul(torch.matmul(%s, %s), %s)' % (q, sps[0], kt)
    elif kind == 'additive':
        if sc['bias']:
            kp = '(torch.matmul(%s, %s) + %s)' % (k, sps[1], sps[2])
        else:
            kp = 'torch.matmul(%s, %s)' % (k, sps[1])
        s = '(torch.tanh(torch.matmul(%s, %s).unsqueeze(-2) + %s.unsqueeze(-3)) * %s).sum(-1)' % (q, sps[0], kp, sps[-1])
    else:
        f = lambda kind, x: {'id': x, 'tanh': 'torch.tanh(%s)' % x, 'l2': 'F.normalize(%s, dim=-1, eps=1e-12)' % x}[kind]
        s = 'torch.matmul(%s, %s.transpose(-1, -2))' % (f(sc['fq'], q), f(sc['fk'], k))
        if sc['temp']:
            s = '%s * torch.exp(%s)' % (s, sps[0])
    lead, n_dim, m_dim = qn['shape'][:-2], qn['shape'][-2], kn['shape'][-2]
    mask = t_mask(a['mask'], mops, n_dim, m_dim, len(lead) + 2)
    p = 'masked_softmax(%s, %s)' % (s, mask)
    if has_v:
        return 'torch.matmul(%s, %s)' % (p, vv)
    return p


def t_cell(n, v, prog, indent):
    """A nested def for a scan cell or a repeat block; returns (lines, function name)."""
    a = n['a']
    cell = a['cell']
    fname = ('cell_%d' if n['op'] == 'scan' else 'block_%d') % n['id']
    names = {}
    if n['op'] == 'scan':
        head = 'def %s(s, x):' % fname
        P = lambda name: "P['%s']" % name
    else:
        head = 'def %s(h, l%s):' % (fname, ''.join(', e%d' % k for k in range(len(n['args']) - 1)))
        P = lambda name: "P['%s%s'][l]" % (a['prefix'], name)
    lines = [indent + head]
    for c in cell['nodes']:
        if c['op'] == 'state':
            names[c['id']] = 's' if n['op'] == 'scan' else 'h'
            continue
        if c['op'] == 'step':
            names[c['id']] = 'x'
            continue
        if c['op'] == 'extra':
            names[c['id']] = 'e%d' % c['a']['k']
            continue
        if c['op'] == 'outer':
            names[c['id']] = v(c['a']['ref'])
            continue
        if c['op'] == 'attention':
            expr = t_attention(c, lambda i: names[i], cell['nodes'])
        else:
            expr = t_expr(c, lambda i: names[i], P)
        names[c['id']] = 'c%d' % c['id']
        lines.append('%s    c%d = %s' % (indent, c['id'], expr))
    lines.append('%s    return %s' % (indent, names[cell['out']]))
    return lines, fname


def torch_source(prog):
    """The PyTorch program: model(P, I, M, train) -> (loss, [extra outputs])."""
    prog = copy.deepcopy(prog)
    v = lambda i: 'n%d' % i
    for k, d in enumerate(prog['drops']):
        prog['nodes'][d]['_drop'] = k
    for n in prog['nodes']:
        if n['op'] == 'cross_entropy':
            n['_V'] = prog['nodes'][n['args'][0]]['shape'][-1]
    lines = ['def model(P, I, M, train):',
             '    B, T, S = %d, %d, %d' % (prog['dims']['B'], prog['dims']['T'], prog['dims']['S'])]
    P = lambda name: "P['%s']" % name
    for n in prog['nodes']:
        if n['op'] == 'scan':
            a = n['a']
            cl, fname = t_cell(n, v, prog, '    ')
            lines += cl
            xs = v(n['args'][0])
            pre = n['args'][:a['n_pre']]
            H = a['H']
            if a['h0'] == 'rows':
                h0 = v(pre[1])
            elif a['h0'] == 'one':
                h0 = '%s.expand(%s.shape[1], %d)' % (v(pre[1]), xs, H)
            else:
                h0 = 'torch.zeros(%s.shape[1], %d, dtype=torch.float64)' % (xs, H)
            lines.append('    h, hs = %s, []' % h0)
            lines.append('    for t in range(%s.shape[0]):' % xs)
            if a['lengths']:
                lines.append('        h = torch.where((t < %s).unsqueeze(1), %s(h, %s[t]), h)' % (v(pre[-1]), fname, xs))
            else:
                lines.append('        h = %s(h, %s[t])' % (fname, xs))
            lines.append('        hs.append(h)')
            lines.append('    n%d = torch.stack(hs)' % n['id'])
        elif n['op'] == 'repeat':
            a = n['a']
            cl, fname = t_cell(n, v, prog, '    ')
            lines += cl
            lines.append('    h = %s' % v(n['args'][0]))
            lines.append('    for l in range(%d):' % a['L'])
            lines.append('        h = %s(h, l%s)' % (fname, ''.join(', ' + v(i) for i in n['args'][1:])))
            lines.append('    n%d = h' % n['id'])
        elif n['op'] == 'attention':
            lines.append('    n%d = %s' % (n['id'], t_attention(n, v, prog['nodes'])))
        else:
            lines.append('    n%d = %s' % (n['id'], t_expr(n, v, P)))
    lines.append('    return n%d, [%s]' % (prog['loss'], ', '.join(v(i) for i in prog['extras'])))
    return '\n'.join(lines) + '\n'


# ---------------------------------------------------------------------------------------- data

def leaves(prog):
    """Every leaf with data: (kind, stored name, stored shape, init, layers) over the program and its cells."""
    out = {}
    def visit(nodes, prefix=None, L=None):
        for n in nodes:
            if n['op'] in ('input', 'param', 'index'):
                kind = {'input': 'input', 'param': 'param', 'index': 'index'}[n['op']]
                if prefix is not None and kind == 'param':
                    name, shape = prefix + n['name'], [L] + n['shape']
                else:
                    name, shape = n['name'], n['shape']
                out[(kind, name)] = (shape, n['init'])
            if n['op'] in ('scan', 'repeat'):
                if n['op'] == 'repeat':
                    visit(n['a']['cell']['nodes'], n['a']['prefix'], n['a']['L'])
                else:
                    visit(n['a']['cell']['nodes'], prefix, L)
    visit(prog['nodes'])
    return out


def make_data(prog):
    """The arrays of a program's leaves, each drawn from (program seed, leaf name) alone: removing
    nodes (the reducer) leaves the other leaves' data unchanged."""
    dims = prog['dims']
    size = lambda d: d if isinstance(d, int) else dims[d]
    arrays = {}
    for (kind, name), (shape, init) in sorted(leaves(prog).items()):
        shp = [size(d) for d in shape]
        rng = np.random.default_rng([prog['seed'] & 0xFFFFFFFF, zlib.crc32(name.encode())])
        if init[0] == 'u':
            x = rng.uniform(init[1], init[2], shp)
        elif init[0] == 'ids':
            x = rng.integers(0, init[1], shp).astype(np.int32)
        elif init[0] == 'targets':
            x = rng.integers(0, init[1], shp).astype(np.int32)
            flat = x.reshape(-1)
            drop = rng.random(flat.size) < 0.2
            drop[0] = False
            flat[drop] = init[2]
        elif init[0] == 'lengths':
            x = rng.integers(1, size(init[1]) + 1, shp).astype(np.int32)
        elif init[0] == 'mask01':
            x = (rng.random(shp) < init[1]).astype(np.int32)
        else:
            raise ValueError(init)
        arrays['%s/%s' % (kind, name)] = np.asarray(x, dtype=np.float64 if kind != 'index' else np.int32)
    arrays['meta/dropout_seed'] = np.array([float(prog['dropout_seed'])])
    arrays['meta/threads_exact'] = np.array([1.0 if prog['threads_exact'] else 0.0])
    arrays['meta/fd_samples'] = np.array([float(prog.get('fd_samples', 12))])
    return arrays
