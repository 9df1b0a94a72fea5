#!/usr/bin/env python3
"""Reference GPT-2 for tests/test_gpt2.cpp: Hugging Face's GPT2LMHeadModel written out in PyTorch
(transformers is not a Debian package, and the tests run offline) with its exact parameter names,
Conv1D (in, out) weights, q/k/v packed in c_attn, GELU's tanh form, pre-norm blocks, layer-norm eps
1e-5, learned positions, the head tied to wte, and the mask buffers attn.bias / attn.masked_bias of
older checkpoints. Random weights from a seed, rounded to values that bfloat16 and float16 hold
exactly, so that the F32, BF16 and F16 files below hold the same numbers.

  gpt2_ref.py OUTDIR    writes
    OUTDIR/lmhead.safetensors   GPT2LMHeadModel.state_dict(): "transformer."-prefixed names,
                                lm_head.weight (= wte), the mask buffers; F32
    OUTDIR/bf16.safetensors     GPT2Model's names (no prefix, no buffers, no lm_head); BF16
    OUTDIR/f16.safetensors      the same in F16
    OUTDIR/expected.safetensors float64 results of the model: "tokens" (B, T) I64 and their
                                "logits" (B, T, V) F64; "prompt{i}" I64 and "greedy{i}" I64, the
                                prompt's greedy continuation of NEW tokens (full recompute each step)

  gpt2_ref.py grads OUTDIR   (after the above, into the same OUTDIR) writes
    OUTDIR/grads.safetensors        PyTorch's p.grad (F64) of GPT2Model's parameters (names without
                                    "transformer."; wte.weight's gradient takes the tied head's too)
                                    for the mean cross-entropy of the logits of "tokens" against
                                    random targets, the model in float64 with lmhead.safetensors' weights
    OUTDIR/grads_inputs.safetensors "targets" (B, T) I64

The sizes must match test_gpt2.cpp's `ref_model`. Files are written by tests/formats_ref.py's
writer (the format's specification, independent of ctgraph's).
"""
import math
import os
import sys

import numpy as np
import torch
from torch import nn

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from formats_ref import read_safetensors, write_safetensors  # noqa: E402

V, MAX_LEN, D, HEADS, LAYERS = 61, 24, 32, 4, 3
F = 4 * D
EPS = 1e-5
NEW = 8
PROMPTS = [[5, 17, 3, 42, 8, 60, 1], [33, 2], [0, 12, 12, 50]]
SEED = 20240


class Conv1D(nn.Module):
    """Hugging Face's Conv1D: weight (in, out), y = x @ weight + bias."""

    def __init__(self, nf, nx):
        super().__init__()
        self.weight = nn.Parameter(torch.empty(nx, nf))
        self.bias = nn.Parameter(torch.empty(nf))

    def forward(self, x):
        return torch.addmm(self.bias, x.reshape(-1, x.size(-1)), self.weight).view(*x.shape[:-1], -1)


def gelu_new(x):
    return 0.5 * x * (1.0 + torch.tanh(math.sqrt(2.0 / math.pi) * (x + 0.044715 * torch.pow(x, 3.0))))


class Attention(nn.Module):
    def __init__(self):
        super().__init__()
        self.register_buffer('bias', torch.tril(torch.ones(MAX_LEN, MAX_LEN, dtype=torch.bool)).view(1, 1, MAX_LEN, MAX_LEN))
        self.register_buffer('masked_bias', torch.tensor(-1e4))
        self.c_attn = Conv1D(3 * D, D)
        self.c_proj = Conv1D(D, D)

    def forward(self, x):
        b, t, _ = x.shape
        q, k, v = self.c_attn(x).split(D, dim=2)
        split = lambda z: z.view(b, t, HEADS, D // HEADS).permute(0, 2, 1, 3)  # noqa: E731
        q, k, v = split(q), split(k), split(v)
        w = torch.matmul(q, k.transpose(-1, -2)) / math.sqrt(D // HEADS)
        w = torch.where(self.bias[:, :, :t, :t], w, torch.tensor(torch.finfo(w.dtype).min, dtype=w.dtype))
        a = torch.matmul(torch.softmax(w, dim=-1), v).permute(0, 2, 1, 3).reshape(b, t, D)
        return self.c_proj(a)


class MLP(nn.Module):
    def __init__(self):
        super().__init__()
        self.c_fc = Conv1D(F, D)
        self.c_proj = Conv1D(D, F)

    def forward(self, x):
        return self.c_proj(gelu_new(self.c_fc(x)))


class Block(nn.Module):
    def __init__(self):
        super().__init__()
        self.ln_1 = nn.LayerNorm(D, eps=EPS)
        self.attn = Attention()
        self.ln_2 = nn.LayerNorm(D, eps=EPS)
        self.mlp = MLP()

    def forward(self, x):
        x = x + self.attn(self.ln_1(x))
        return x + self.mlp(self.ln_2(x))


class GPT2Model(nn.Module):
    def __init__(self):
        super().__init__()
        self.wte = nn.Embedding(V, D)
        self.wpe = nn.Embedding(MAX_LEN, D)
        self.h = nn.ModuleList([Block() for _ in range(LAYERS)])
        self.ln_f = nn.LayerNorm(D, eps=EPS)

    def forward(self, ids):
        x = self.wte(ids) + self.wpe(torch.arange(ids.shape[1]))
        for block in self.h:
            x = block(x)
        return self.ln_f(x)


class GPT2LMHeadModel(nn.Module):
    def __init__(self):
        super().__init__()
        self.transformer = GPT2Model()
        self.lm_head = nn.Linear(D, V, bias=False)
        self.lm_head.weight = self.transformer.wte.weight  # tied

    def forward(self, ids):
        return self.lm_head(self.transformer(ids))


def exact_value(t):
    """Rounded to bfloat16, tiny values flushed to 0: exact in F32, BF16 and F16."""
    r = t.to(torch.bfloat16).to(torch.float32)
    return torch.where(r.abs() < 2.0**-14, torch.zeros_like(r), r)


def randomize(model, gen):
    with torch.no_grad():
        for name, p in model.named_parameters():
            if name.endswith('ln_1.weight') or name.endswith('ln_2.weight') or name.endswith('ln_f.weight'):
                v = 1.0 + 0.2 * torch.randn(p.shape, generator=gen)
            elif p.dim() == 1:
                v = 0.2 * torch.randn(p.shape, generator=gen)
            elif 'wte' in name or 'wpe' in name:
                v = 0.5 * torch.randn(p.shape, generator=gen)
            else:
                v = torch.randn(p.shape, generator=gen) / math.sqrt(p.shape[0])
            p.copy_(exact_value(v))


def main(out):
    torch.set_num_threads(1)
    gen = torch.Generator().manual_seed(SEED)
    model = GPT2LMHeadModel()
    randomize(model, gen)
    sd = model.state_dict()

    def as_np(t):
        return t.detach().cpu().numpy()

    lmhead = {}
    for name, t in sd.items():
        if t.dtype == torch.bool:
            lmhead[name] = ('BOOL', as_np(t))
        else:
            lmhead[name] = ('F32', as_np(t).astype('<f4'))
    assert 'lm_head.weight' in lmhead and 'transformer.h.0.attn.bias' in lmhead
    write_safetensors(os.path.join(out, 'lmhead.safetensors'), lmhead, metadata={'format': 'pt'})

    bare = {name[len('transformer.'):]: t for name, t in sd.items()
            if name.startswith('transformer.') and not name.endswith('.attn.bias') and not name.endswith('.attn.masked_bias')}
    bf = {}
    for name, t in bare.items():
        bits = as_np(t.to(torch.float32)).view('<u4')
        assert np.all(bits & 0xFFFF == 0), name
        bf[name] = ('BF16', (bits >> 16).astype('<u2'))
    write_safetensors(os.path.join(out, 'bf16.safetensors'), bf, metadata={'format': 'pt'})
    f16 = {}
    for name, t in bare.items():
        h = as_np(t).astype('<f2')
        assert np.array_equal(h.astype('<f4'), as_np(t)), name
        f16[name] = ('F16', h)
    write_safetensors(os.path.join(out, 'f16.safetensors'), f16)

    model = model.double().eval()
    expected = {}
    with torch.no_grad():
        tokens = torch.randint(0, V, (2, MAX_LEN), generator=gen)
        expected['tokens'] = ('I64', as_np(tokens).astype('<i8'))
        expected['logits'] = ('F64', as_np(model(tokens)).astype('<f8'))
        margin = float('inf')
        for i, prompt in enumerate(PROMPTS):
            seq = list(prompt)
            for _ in range(NEW):
                z = model(torch.tensor([seq]))[0, -1]
                top = torch.topk(z, 2).values
                margin = min(margin, float((top[0] - top[1]) / z.abs().max()))
                seq.append(int(torch.argmax(z)))
            expected['prompt%d' % i] = ('I64', np.array(prompt, dtype='<i8'))
            expected['greedy%d' % i] = ('I64', np.array(seq[len(prompt):], dtype='<i8'))
    # float32 programs must pick the same tokens: the runner-up stays well behind.
    assert margin > 1e-4, 'near tie in the greedy reference (relative margin %g): change SEED' % margin
    write_safetensors(os.path.join(out, 'expected.safetensors'), expected)


def grads(out):
    torch.set_num_threads(1)
    model = GPT2LMHeadModel().double()
    saved = read_safetensors(os.path.join(out, 'lmhead.safetensors'))[0]
    sd = {n: torch.from_numpy(np.array(t, dtype=np.float64)) for n, (dtype, t) in saved.items() if dtype != 'BOOL'}
    missing, unexpected = model.load_state_dict(sd, strict=False)
    assert not unexpected and all(n.endswith('.attn.bias') for n in missing), (missing, unexpected)
    tokens = torch.from_numpy(np.array(read_safetensors(os.path.join(out, 'expected.safetensors'))[0]['tokens'][1]))
    targets = torch.randint(0, V, tokens.shape, generator=torch.Generator().manual_seed(SEED + 1))
    logits = model(tokens)
    nn.functional.cross_entropy(logits.reshape(-1, V), targets.reshape(-1)).backward()
    g = {n: ('F64', p.grad.numpy().astype('<f8')) for n, p in model.transformer.named_parameters()}
    assert 'wte.weight' in g and len(g) == 2 + 12 * LAYERS + 2, sorted(g)
    write_safetensors(os.path.join(out, 'grads.safetensors'), g)
    write_safetensors(os.path.join(out, 'grads_inputs.safetensors'), {'targets': ('I64', targets.numpy().astype('<i8'))})


if __name__ == '__main__':
    if len(sys.argv) == 3 and sys.argv[1] == 'grads':
        grads(sys.argv[2])
    elif len(sys.argv) == 2:
        main(sys.argv[1])
    else:
        sys.exit(__doc__)
