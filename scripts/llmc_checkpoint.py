#!/usr/bin/python3
"""Input files for llm.c's CPU trainer (train_gpt2.c), written from its file formats: a GPT-2
checkpoint with random weights, train/val token files of random tokens, and a placeholder tokenizer.

  scripts/llmc_checkpoint.py DIR [--seed 0] [--layers 12 --heads 12 --channels 768 --vocab 50257 --max-t 1024]

Writes, under DIR, the relative paths train_gpt2.c opens (run it from DIR):
  gpt2_124M.bin                                        checkpoint
  dev/data/tinyshakespeare/tiny_shakespeare_train.bin  tokens (its loader prefers these names
  dev/data/tinyshakespeare/tiny_shakespeare_val.bin    to TinyStories')
  gpt2_tokenizer.bin                                   token i decodes to "<i>"

Formats (little-endian):
- checkpoint: 256 int32 (magic 20240326, version 3, maxT, V, L, NH, C, padded V, zeros), then float32
  tensors in this order: wte (Vp, C), wpe (maxT, C), ln1w (L, C), ln1b (L, C), qkvw (L, 3C, C),
  qkvb (L, 3C), attprojw (L, C, C), attprojb (L, C), ln2w (L, C), ln2b (L, C), fcw (L, 4C, C),
  fcb (L, 4C), fcprojw (L, C, 4C), fcprojb (L, C), lnfw (C), lnfb (C). The head is wte (tied).
- tokens: 256 int32 (magic 20240520, version 1, token count, zeros), then uint16 tokens.
- tokenizer: 256 uint32 (magic 20240328, version 2, vocab size, end-of-text id, zeros), then per
  token one uint8 length and that many bytes.

Weights follow GPT-2's initialisation: normal(0, 0.02), the two residual projections (attprojw,
fcprojw) normal(0, 0.02 / sqrt(2 L)), biases zero, layer-norm scales one and shifts zero; the
padding rows of wte (V to Vp) are zero. Timing does not depend on the values. The tokenizer is
needed only when train_gpt2.c samples text (steps 20 and 40): with no tokenizer file it goes on,
but fills its prompt with an end-of-text id it never set.
"""
import argparse
import math
import os

import numpy as np


def atomic(write):
    """write(path, ...) writes path + ".part" and renames it: an interrupted run leaves no file that
    looks complete."""
    def wrapper(path, *args):
        r = write(path + ".part", *args)
        os.replace(path + ".part", path)
        return r
    return wrapper


def header(values, dtype):
    h = np.zeros(256, dtype=dtype)
    h[:len(values)] = values
    return h


@atomic
def write_checkpoint(path, rng, V, maxT, L, NH, C):
    Vp = (V + 127) // 128 * 128  # llm.c pads the vocabulary to a multiple of 128 (50257 -> 50304)
    std, proj_std = 0.02, 0.02 / math.sqrt(2 * L)
    normal = lambda shape, s: (rng.standard_normal(shape, dtype=np.float32) * np.float32(s))
    zeros = lambda *shape: np.zeros(shape, dtype=np.float32)
    ones = lambda *shape: np.ones(shape, dtype=np.float32)
    n = 0
    with open(path, "wb") as f:
        header([20240326, 3, maxT, V, L, NH, C, Vp], "<i4").tofile(f)
        wte = normal((Vp, C), std)
        wte[V:] = 0
        # one tensor at a time, in train_gpt2.c's order (fill_in_parameter_sizes)
        for make in (lambda: wte,
                     lambda: normal((maxT, C), std),          # wpe
                     lambda: ones(L, C), lambda: zeros(L, C),   # ln1w, ln1b
                     lambda: normal((L, 3 * C, C), std),      # qkvw
                     lambda: zeros(L, 3 * C),                 # qkvb
                     lambda: normal((L, C, C), proj_std),     # attprojw
                     lambda: zeros(L, C),                     # attprojb
                     lambda: ones(L, C), lambda: zeros(L, C),   # ln2w, ln2b
                     lambda: normal((L, 4 * C, C), std),      # fcw
                     lambda: zeros(L, 4 * C),                 # fcb
                     lambda: normal((L, C, 4 * C), proj_std), # fcprojw
                     lambda: zeros(L, C),                     # fcprojb
                     lambda: ones(C), lambda: zeros(C)):      # lnfw, lnfb
            t = make()
            n += t.size
            t.astype("<f4", copy=False).tofile(f)
            del t
    return n


@atomic
def write_tokens(path, rng, V, count):
    os.makedirs(os.path.dirname(path), exist_ok=True)
    with open(path, "wb") as f:
        header([20240520, 1, count], "<i4").tofile(f)
        rng.integers(0, V, size=count, dtype=np.uint16).astype("<u2").tofile(f)


@atomic
def write_tokenizer(path, V):
    eot = V - 1
    with open(path, "wb") as f:
        header([20240328, 2, V, eot], "<u4").tofile(f)
        for i in range(V):
            b = b"<|endoftext|>" if i == eot else b"<%d>" % i
            f.write(bytes([len(b)]) + b)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("dir")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--layers", type=int, default=12)
    ap.add_argument("--heads", type=int, default=12)
    ap.add_argument("--channels", type=int, default=768)
    ap.add_argument("--vocab", type=int, default=50257)
    ap.add_argument("--max-t", type=int, default=1024)
    ap.add_argument("--tokens", type=int, default=65536, help="train tokens (val: a quarter)")
    a = ap.parse_args()
    assert a.channels % a.heads == 0 and a.vocab <= 65536  # tokens are uint16
    rng = np.random.default_rng(a.seed)
    os.makedirs(a.dir, exist_ok=True)
    n = write_checkpoint(os.path.join(a.dir, "gpt2_124M.bin"), rng, a.vocab, a.max_t, a.layers,
                         a.heads, a.channels)
    data = os.path.join(a.dir, "dev", "data", "tinyshakespeare")
    write_tokens(os.path.join(data, "tiny_shakespeare_train.bin"), rng, a.vocab, a.tokens)
    write_tokens(os.path.join(data, "tiny_shakespeare_val.bin"), rng, a.vocab, max(a.tokens // 4, 4097))
    write_tokenizer(os.path.join(a.dir, "gpt2_tokenizer.bin"), a.vocab)
    print(f"llm.c inputs in {a.dir}: {n:,} parameters (L={a.layers} NH={a.heads} C={a.channels} "
          f"V={a.vocab} maxT={a.max_t}), random tokens, placeholder tokenizer")


if __name__ == "__main__":
    main()
