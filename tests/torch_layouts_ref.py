#!/usr/bin/env python3
"""Reference PyTorch modules for tests/test_torch_layouts.cpp (nn::load_torch / nn::save_torch):
each case a module of PyTorch's own layout, random weights from a seed, its state_dict written as
safetensors (F32, as PyTorch holds it) and its float64 outputs on random inputs.

  torch_layouts_ref.py gen OUTDIR
      OUTDIR/<case>.safetensors   the case's state_dict (F32; "small" is one file of three submodules)
      OUTDIR/expected.safetensors per case its inputs "<case>.x" (and "<case>.m", the memory, or
                                  "<case>.tokens" I64) and its output "<case>.y", all in float64
  torch_layouts_ref.py check OUTDIR CASE FILE
      FILE (written by ctgraph) loads into a new PyTorch module of CASE with load_state_dict(strict=True),
      has the names and shapes of the original state_dict, and gives the expected output (float64)
  torch_layouts_ref.py grads OUTDIR   (after gen, into the same OUTDIR)
      per gradient case G (GRADS below) of case C, PyTorch's gradients of sum(y * r), the module C
      loaded from OUTDIR/C.safetensors in float64, fed C's inputs of expected.safetensors, r random:
      OUTDIR/G.grads.safetensors           p.grad (F64) under the state_dict's names, for every p
                                           whose p.grad is not None
      OUTDIR/grads_inputs.safetensors      "G.r", r (F64, y's shape), per gradient case
  torch_layouts_ref.py padding OUTDIR
      the key_padding_mask cases (tests/test_key_padding.cpp; "gen"'s files are not touched):
      OUTDIR/<case>.safetensors its state_dict (F32), OUTDIR/expected_padding.safetensors per case
      "<case>.x" (and "<case>.m"), "<case>.pad" (I64 (B, keys), 1 = ignore the key: PyTorch's True)
      and "<case>.y", float64
  torch_layouts_ref.py tagger OUTDIR
      the Tagger below (docs/guide/fine-tuning.md; "gen"'s files are not touched), in float64:
      OUTDIR/tagger.safetensors         its state_dict (F64)
      OUTDIR/tagger_ref.safetensors     "tokens", "tags" (I64 (2, 6)), "logits" (F64 (2, 6, 5)) and
                                        "loss" (F64 (1)): cross_entropy(logits, tags), the mean over tokens
      OUTDIR/tagger.grads.safetensors   p.grad (F64) of that loss with the encoder frozen
                                        (model.encoder.requires_grad_(False)): emb.weight, head.weight,
                                        head.bias, nothing else

Cases (sizes must match test_torch_layouts.cpp):
  mha      nn.MultiheadAttention(16, 4, batch_first=True), queries x (2, 5, 16), keys/values m (2, 7, 16)
  small    emb = nn.Embedding(11, 8), lin = nn.Linear(8, 8) (square), ln = nn.LayerNorm(8): ln(lin(emb(tokens)))
  enc      nn.TransformerEncoderLayer(16, 4, 32, dropout=0, activation="gelu", batch_first=True, layer_norm_eps=1e-6)
  enc_pre  the same with norm_first=True
  stack    nn.TransformerEncoder of 2 nn.TransformerEncoderLayer(16, 4, 32, ...) (layers.{l}.*)
  dec      nn.TransformerDecoderLayer(16, 4, 32, dropout=0, activation="gelu", batch_first=True), causal tgt_mask
  gpt      bench/torch_ref.py's GPT(V=13, T=12, d=16, h=4, L=2), tokens (2, 12)
  gru      nn.GRU(5, 6), x (4, 2, 5) time-major, h0 = 0: the outputs (4, 2, 6)
  lstm     nn.LSTM(5, 6), the same
  bigru    nn.GRU(5, 6, bidirectional=True), the same x: the outputs (4, 2, 12), forward then backward
  bilstm   nn.LSTM(5, 6, bidirectional=True), the same
  gru2     nn.GRU(5, 6, num_layers=2) (*_l0, *_l1), the same x: the last layer's outputs (4, 2, 6)
  lstm3    nn.LSTM(5, 6, num_layers=3)
  bigru2   nn.GRU(5, 6, num_layers=2, bidirectional=True): (4, 2, 12)
  rnn      nn.RNN(5, 6) (tanh): two biases, bias_ih_l0 and bias_hh_l0
  birnn2   nn.RNN(5, 6, num_layers=2, nonlinearity='relu', bidirectional=True): (4, 2, 12)
  lstm3 and bigru2 also over a PackedSequence of lengths (4, 2): <case>_len.x, .lengths, .y (zeros
  after each length) in expected.safetensors, with no state_dict of their own
Cases of "padding" (padding not at the end of a row):
  mha_pad    nn.MultiheadAttention(16, 4, batch_first=True), x (2, 5, 16) attending to m (2, 7, 16) under
             key_padding_mask (2, 7): row 0 ignores keys 1 and 3, row 1 keys 0, 5 and 6
  enc_pad    the "enc" layer, src_mask causal and src_key_padding_mask (2, 5): row 0 ignores 1 and 3, row 1
             2 and 4 (every query keeps a key: PyTorch gives NaN for a query that sees none)
  stack_pad  the "stack" encoder (two layers), src_key_padding_mask (2, 5): row 0 ignores 1 and 3, row 1 0, 3, 4
  Their outputs are computed with gradients enabled, so PyTorch takes its reference path, not the
  inference fast path (the two agree to 1e-12, checked).
The "tagger" mode's module:
  Tagger   emb = nn.Embedding(13, 16); encoder = nn.TransformerEncoder of 2 nn.TransformerEncoderLayer(16,
           4, 32, dropout=0, activation="gelu", batch_first=True) (post-norm) with norm=nn.LayerNorm(16);
           head = nn.Linear(16, 5): head(encoder(emb(tokens))), tensors emb.weight,
           encoder.layers.{l}.*, encoder.norm.weight / .bias, head.weight / .bias
Files are written by tests/formats_ref.py's writer (the format's specification, independent of ctgraph's).
"""
import os
import sys

import numpy as np
import torch
from torch import nn

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
sys.path.insert(0, os.path.join(HERE, '..', 'bench'))
from formats_ref import read_safetensors, write_safetensors  # noqa: E402
import torch_ref  # noqa: E402  (the project's reference GPT)

SEED = 4242


class Small(nn.Module):
    def __init__(self):
        super().__init__()
        self.emb = nn.Embedding(11, 8)
        self.lin = nn.Linear(8, 8)
        self.ln = nn.LayerNorm(8)

    def forward(self, tokens):
        return self.ln(self.lin(self.emb(tokens)))


def build(case):
    if case == 'mha':
        return nn.MultiheadAttention(16, 4, batch_first=True)
    if case == 'small':
        return Small()
    if case == 'enc':
        return nn.TransformerEncoderLayer(16, 4, 32, dropout=0.0, activation='gelu', batch_first=True, layer_norm_eps=1e-6)
    if case == 'enc_pre':
        return nn.TransformerEncoderLayer(16, 4, 32, dropout=0.0, activation='gelu', batch_first=True, norm_first=True)
    if case == 'stack':
        layer = nn.TransformerEncoderLayer(16, 4, 32, dropout=0.0, activation='gelu', batch_first=True)
        return nn.TransformerEncoder(layer, 2, enable_nested_tensor=False)
    if case == 'dec':
        return nn.TransformerDecoderLayer(16, 4, 32, dropout=0.0, activation='gelu', batch_first=True)
    if case == 'gpt':
        return torch_ref.GPT(V=13, T=12, d=16, h=4, L=2)
    if case == 'gru':
        return nn.GRU(5, 6)
    if case == 'lstm':
        return nn.LSTM(5, 6)
    if case == 'bigru':
        return nn.GRU(5, 6, bidirectional=True)
    if case == 'bilstm':
        return nn.LSTM(5, 6, bidirectional=True)
    if case == 'gru2':
        return nn.GRU(5, 6, num_layers=2)
    if case == 'lstm3':
        return nn.LSTM(5, 6, num_layers=3)
    if case == 'bigru2':
        return nn.GRU(5, 6, num_layers=2, bidirectional=True)
    if case == 'rnn':
        return nn.RNN(5, 6)
    if case == 'birnn2':
        return nn.RNN(5, 6, num_layers=2, nonlinearity='relu', bidirectional=True)
    raise SystemExit('unknown case ' + case)


CASES = ['mha', 'small', 'enc', 'enc_pre', 'stack', 'dec', 'gpt', 'gru', 'lstm', 'bigru', 'bilstm', 'gru2', 'lstm3',
         'bigru2', 'rnn', 'birnn2']


def inputs(case, gen):
    """The case's inputs (float64 tensors, or int64 tokens), by name."""
    r = lambda *s: torch.randn(*s, generator=gen, dtype=torch.float64)  # noqa: E731
    if case == 'mha':
        return {'x': r(2, 5, 16), 'm': r(2, 7, 16)}
    if case == 'small':
        return {'tokens': torch.randint(0, 11, (2, 6), generator=gen)}
    if case in ('enc', 'enc_pre', 'stack'):
        return {'x': r(2, 5, 16)}
    if case == 'dec':
        return {'x': r(2, 5, 16), 'm': r(2, 7, 16)}
    if case == 'gpt':
        return {'tokens': torch.randint(0, 13, (2, 12), generator=gen)}
    return {'x': r(4, 2, 5)}


def forward(case, model, a):
    if case == 'mha':
        return model(a['x'], a['m'], a['m'], need_weights=False)[0]
    if case in ('small', 'gpt'):
        return model(a['tokens'])
    if case in ('enc', 'enc_pre', 'stack'):
        return model(a['x'])
    if case == 'dec':
        t = a['x'].shape[1]
        mask = torch.triu(torch.full((t, t), float('-inf'), dtype=torch.float64), diagonal=1)
        return model(a['x'], a['m'], tgt_mask=mask)
    return model(a['x'])[0]


def run(case, model, a):
    with torch.no_grad():
        return forward(case, model, a)


# Cases also run over padded sequences: <case>_len.x, <case>_len.lengths, <case>_len.y in expected.
PACKED = ['lstm3', 'bigru2']


def run_packed(model, x, lengths):
    """model over x (T, B, X) packed with these lengths; the outputs padded with zeros again."""
    with torch.no_grad():
        packed = nn.utils.rnn.pack_padded_sequence(x, lengths, enforce_sorted=False)
        return nn.utils.rnn.pad_packed_sequence(model(packed)[0], total_length=x.shape[0])[0]


def randomize(model, gen):
    """Every parameter random (layer norms around 1), rounded to float32 as a state_dict holds it."""
    with torch.no_grad():
        for name, p in model.named_parameters():
            v = torch.randn(p.shape, generator=gen)
            if p.dim() == 1 and 'norm' in name or name.endswith('ln.weight') or name.endswith('ln1.weight') \
                    or name.endswith('ln2.weight') or name.endswith('ln_f.weight'):
                v = 1.0 + 0.2 * v if name.endswith('weight') else 0.2 * v
            elif p.dim() == 1:
                v = 0.3 * v
            elif 'emb' in name:
                v = 0.5 * v
            else:
                v = v / np.sqrt(p.shape[-1])
            p.copy_(v)


def gen(out):
    torch.set_num_threads(1)
    torch.manual_seed(SEED)
    g = torch.Generator().manual_seed(SEED)
    expected = {}
    for case in CASES:
        model = build(case)
        randomize(model, g)
        sd = model.state_dict()
        write_safetensors(os.path.join(out, case + '.safetensors'),
                          {n: ('F32', t.detach().numpy().astype('<f4')) for n, t in sd.items()}, metadata={'format': 'pt'})
        model = model.double().eval()
        a = inputs(case, g)
        for n, t in a.items():
            expected[case + '.' + n] = ('I64', t.numpy().astype('<i8')) if n == 'tokens' else ('F64', t.numpy().astype('<f8'))
        expected[case + '.y'] = ('F64', run(case, model, a).numpy().astype('<f8'))
        if case in PACKED:
            # The same module over a PackedSequence of these lengths (padding after each).
            lengths = torch.tensor([4, 2], dtype=torch.int64)
            expected[case + '_len.x'] = expected[case + '.x']
            expected[case + '_len.lengths'] = ('I64', lengths.numpy().astype('<i8'))
            expected[case + '_len.y'] = ('F64', run_packed(model, a['x'], lengths).numpy().astype('<f8'))
    write_safetensors(os.path.join(out, 'expected.safetensors'), expected)


def load_case(out, case, path=None):
    """Case's module in float64 with the weights of `path` (default OUTDIR/<case>.safetensors), loaded
    with strict=True; its inputs; expected.safetensors."""
    model = build(case).double().eval()
    saved = read_safetensors(path or os.path.join(out, case + '.safetensors'))[0]
    model.load_state_dict({n: torch.from_numpy(np.array(t, dtype=np.float64)) for n, (_, t) in saved.items()}, strict=True)
    exp = read_safetensors(os.path.join(out, 'expected.safetensors'))[0]
    a = {}
    for n in ('x', 'm', 'tokens'):
        if case + '.' + n in exp:
            a[n] = torch.from_numpy(np.array(exp[case + '.' + n][1]))
    return model, a, exp


# Gradient cases: (name, case, parameters frozen (requires_grad=False: p.grad is None), the row block
# of in_proj_weight zeroed by a hook on its gradient (a frozen part of a packed tensor) or None).
GRADS = [('small', 'small', [], None), ('mha', 'mha', [], None), ('gpt', 'gpt', [], None), ('rnn', 'rnn', [], None),
         ('small_frozen', 'small', ['emb.weight'], None), ('mha_kfrozen', 'mha', [], 1)]


def grads(out):
    torch.set_num_threads(1)
    g = torch.Generator().manual_seed(SEED + 1)
    r_file = {}
    for name, case, frozen, zero_block in GRADS:
        model, a, _ = load_case(out, case)
        for n, p in model.named_parameters():
            p.requires_grad_(n not in frozen)
        if zero_block is not None:
            w = model.in_proj_weight
            d = w.shape[1]
            mask = torch.ones_like(w)
            mask[zero_block * d:(zero_block + 1) * d] = 0
            w.register_hook(lambda grad, mask=mask: grad * mask)
        y = forward(case, model, a)
        r = torch.randn(y.shape, generator=g, dtype=torch.float64)
        (y * r).sum().backward()
        g_file = {n: ('F64', p.grad.numpy().astype('<f8')) for n, p in model.named_parameters() if p.grad is not None}
        assert sorted(n for n in g_file) == sorted(n for n, _ in model.named_parameters() if n not in frozen), name
        write_safetensors(os.path.join(out, name + '.grads.safetensors'), g_file)
        r_file[name + '.r'] = ('F64', r.numpy().astype('<f8'))
    write_safetensors(os.path.join(out, 'grads_inputs.safetensors'), r_file)


def check(out, case, path):
    original = read_safetensors(os.path.join(out, case + '.safetensors'))[0]
    saved, meta, _ = read_safetensors(path)
    assert meta == {'format': 'pt'}, meta
    assert sorted(saved) == sorted(original), (sorted(saved), sorted(original))
    if case in ('rnn', 'birnn2'):
        # ctgraph's one bias saves whole into bias_ih, zeros into bias_hh: not the original tensors,
        # but the same sums, so the same outputs (checked below).
        for n in original:
            if 'bias_hh' in n:
                assert not np.any(saved[n][1]), n
    for n, (_, t) in original.items():
        assert saved[n][1].shape == t.shape, (n, saved[n][1].shape, t.shape)
    model, a, exp = load_case(out, case, path)
    y = run(case, model, a).numpy()
    want = exp[case + '.y'][1]
    err = np.abs(y - want).max() / np.abs(want).max()
    assert err <= 1e-12, '%s: relative error %g after the round trip' % (case, err)


PAD_CASES = {'mha_pad': 'mha', 'enc_pad': 'enc', 'stack_pad': 'stack'}
PAD_ROWS = {'mha_pad': [[0, 1, 0, 1, 0, 0, 0], [1, 0, 0, 0, 0, 1, 1]],
            'enc_pad': [[0, 1, 0, 1, 0], [0, 0, 1, 0, 1]],
            'stack_pad': [[0, 1, 0, 1, 0], [1, 0, 0, 1, 1]]}


def run_padded(case, model, a, pad):
    """The case's module over its inputs under key padding mask pad (bool, True = ignore)."""
    if case == 'mha_pad':
        return model(a['x'], a['m'], a['m'], key_padding_mask=pad, need_weights=False)[0]
    if case == 'enc_pad':
        t = a['x'].shape[1]
        causal = torch.triu(torch.full((t, t), float('-inf'), dtype=torch.float64), diagonal=1)
        return model(a['x'], src_mask=causal, src_key_padding_mask=pad)
    return model(a['x'], src_key_padding_mask=pad)


def padding(out):
    torch.set_num_threads(1)
    torch.manual_seed(SEED + 1)
    g = torch.Generator().manual_seed(SEED + 1)
    expected = {}
    for case, like in PAD_CASES.items():
        model = build(like)
        randomize(model, g)
        write_safetensors(os.path.join(out, case + '.safetensors'),
                          {n: ('F32', t.detach().numpy().astype('<f4')) for n, t in model.state_dict().items()},
                          metadata={'format': 'pt'})
        model = model.double().eval()
        a = inputs(like, g)
        pad = torch.tensor(PAD_ROWS[case], dtype=torch.bool)
        y = run_padded(case, model, a, pad).detach()  # gradients on: the reference path
        with torch.no_grad():
            fast = run_padded(case, model, a, pad)
        assert torch.isfinite(y).all(), case
        assert (y - fast).abs().max() <= 1e-12 * y.abs().max(), case
        for n, t in a.items():
            expected[case + '.' + n] = ('F64', t.numpy().astype('<f8'))
        expected[case + '.pad'] = ('I64', pad.numpy().astype('<i8'))
        expected[case + '.y'] = ('F64', y.numpy().astype('<f8'))
    write_safetensors(os.path.join(out, 'expected_padding.safetensors'), expected)


class Tagger(nn.Module):
    """A token tagger over an nn.TransformerEncoder with its final norm (docs/guide/fine-tuning.md)."""

    def __init__(self, V=13, D=16, H=4, F=32, L=2, C=5):
        super().__init__()
        self.emb = nn.Embedding(V, D)
        layer = nn.TransformerEncoderLayer(D, H, F, dropout=0.0, activation='gelu', batch_first=True)  # post-norm
        self.encoder = nn.TransformerEncoder(layer, num_layers=L, norm=nn.LayerNorm(D), enable_nested_tensor=False)
        self.head = nn.Linear(D, C)

    def forward(self, tokens):
        return self.head(self.encoder(self.emb(tokens)))


def tagger(out):
    torch.set_num_threads(1)
    torch.manual_seed(SEED + 2)
    g = torch.Generator().manual_seed(SEED + 2)
    model = Tagger()
    randomize(model, g)
    model = model.double().eval()
    write_safetensors(os.path.join(out, 'tagger.safetensors'),
                      {n: ('F64', t.detach().numpy().astype('<f8')) for n, t in model.state_dict().items()},
                      metadata={'format': 'pt'})
    tokens = torch.randint(0, 13, (2, 6), generator=g)
    tags = torch.randint(0, 5, (2, 6), generator=g)
    # One fine-tuning step's gradients with the encoder frozen: the embedding and the head train.
    model.encoder.requires_grad_(False)
    logits = model(tokens)  # the embedding requires gradients: PyTorch's reference path, not the fast one
    loss = nn.functional.cross_entropy(logits.reshape(-1, 5), tags.reshape(-1))
    loss.backward()
    with torch.no_grad():
        fast = model(tokens)
    assert (logits - fast).abs().max() <= 1e-12 * logits.abs().max()
    g_file = {n: ('F64', p.grad.numpy().astype('<f8')) for n, p in model.named_parameters() if p.grad is not None}
    assert sorted(g_file) == ['emb.weight', 'head.bias', 'head.weight'], sorted(g_file)
    write_safetensors(os.path.join(out, 'tagger.grads.safetensors'), g_file)
    write_safetensors(os.path.join(out, 'tagger_ref.safetensors'),
                      {'tokens': ('I64', tokens.numpy().astype('<i8')), 'tags': ('I64', tags.numpy().astype('<i8')),
                       'logits': ('F64', logits.detach().numpy().astype('<f8')),
                       'loss': ('F64', loss.detach().reshape(1).numpy().astype('<f8'))})


if __name__ == '__main__':
    if len(sys.argv) == 3 and sys.argv[1] == 'gen':
        gen(sys.argv[2])
    elif len(sys.argv) == 3 and sys.argv[1] == 'grads':
        grads(sys.argv[2])
    elif len(sys.argv) == 5 and sys.argv[1] == 'check':
        check(sys.argv[2], sys.argv[3], sys.argv[4])
    elif len(sys.argv) == 3 and sys.argv[1] == 'padding':
        padding(sys.argv[2])
    elif len(sys.argv) == 3 and sys.argv[1] == 'tagger':
        tagger(sys.argv[2])
    else:
        sys.exit(__doc__)
