#!/usr/bin/env python3
"""Reference files for the file-format tests and the fuzz seeds, written and read by an
implementation independent of ctgraph's: safetensors by the specification (struct + json + numpy;
Debian has no `safetensors` package), .npz by numpy itself (numpy.savez, numpy.savez_compressed).

  formats_ref.py gen DIR           DIR/ref.safetensors (every dtype, metadata, tensors laid out in an
                                   order of their own, header padded), DIR/bare.safetensors (no
                                   metadata, no padding, tensors in name order), DIR/ref.npz
                                   (numpy.savez_compressed of the tensors numpy and ctg::npz share)
  formats_ref.py check FILE        FILE holds exactly the tensors and metadata of expected(), read by
                                   the reader below (which checks every rule of the format)
  formats_ref.py store FILE DTYPE  FILE holds test_safetensors.cpp's pattern store in DTYPE (F32/F64)
  formats_ref.py seeds DIR         small valid files for the fuzzers: DIR/npz/*.npz and *.npy,
                                   DIR/safetensors/*.safetensors

expected() must match expected_tensors() in tests/test_safetensors.cpp, byte for byte.
Exit status 1 with a message on a failed check.
"""
import io
import json
import os
import struct
import sys
import zipfile

import numpy as np

# dtype -> numpy dtype of the same bytes ('BF16' and the F8 types: raw unsigned integers).
NUMPY = {'BOOL': '|b1', 'U8': '|u1', 'I8': '|i1', 'F8_E5M2': '|u1', 'F8_E4M3': '|u1', 'I16': '<i2',
         'U16': '<u2', 'F16': '<f2', 'BF16': '<u2', 'I32': '<i4', 'U32': '<u4', 'F32': '<f4',
         'I64': '<i8', 'U64': '<u8', 'F64': '<f8'}

METADATA = {'format': 'pt', 'writer': 'tests/formats_ref.py'}


def bf16(values):
    """float32 values exactly representable in bfloat16 -> their bfloat16 bit patterns."""
    bits = np.array(values, dtype='<f4').view('<u4')
    assert np.all(bits & 0xFFFF == 0), 'not exact in bfloat16'
    return (bits >> 16).astype('<u2')


def expected():
    """name -> (dtype, numpy array holding the tensor's bytes)."""
    return {
        'f32': ('F32', (np.arange(6) * 0.25 - 1).astype('<f4').reshape(2, 3)),
        'f64': ('F64', np.arange(4, dtype='<f8') / 3.0),
        'f16': ('F16', np.array([0.5, -1.5, 65504, 2.0**-24, -0.0, np.inf, -np.inf, np.nan], dtype='<f2')),
        'bf16': ('BF16', bf16([1.0, -2.5, 2.0**100, 2.0**-130]).reshape(2, 2)),
        'i8': ('I8', np.array([-128, 0, 127], dtype='|i1')),
        'u8': ('U8', np.array([0, 200, 255], dtype='|u1')),
        'i16': ('I16', np.array([-32768, 32767], dtype='<i2')),
        'u16': ('U16', np.array([0, 65535], dtype='<u2')),
        'i32': ('I32', np.array([[1, -2], [3, -4]], dtype='<i4')),
        'u32': ('U32', np.array([0, 4294967295], dtype='<u4')),
        'i64': ('I64', np.array([-(2**40), 0, 2**62 + 1], dtype='<i8')),
        'u64': ('U64', np.array([0, 2**64 - 1], dtype='<u8')),
        'flags': ('BOOL', np.array([True, False, True])),
        'f8': ('F8_E4M3', np.array([0x38, 0xB8], dtype='|u1')),
        'scalar': ('F64', np.array(np.pi, dtype='<f8')),
        'empty': ('F32', np.zeros((0, 3), dtype='<f4')),
        'cube': ('F32', (np.arange(24) * 0.5 - 3).astype('<f4').reshape(2, 3, 4)),
    }


# ---- the format, by the specification ------------------------------------------------------------

def write_safetensors(path, tensors, metadata=None, order=None, pad=True):
    """tensors: name -> (dtype, array). `order`: the names in the order their bytes are laid out."""
    header, chunks, at = {}, [], 0
    if metadata is not None:
        header['__metadata__'] = metadata
    for name in order or tensors:
        dtype, arr = tensors[name]
        raw = np.ascontiguousarray(arr).astype(NUMPY[dtype], copy=False).tobytes()
        header[name] = {'dtype': dtype, 'shape': list(arr.shape), 'data_offsets': [at, at + len(raw)]}
        chunks.append(raw)
        at += len(raw)
    text = json.dumps(header, separators=(',', ':')).encode('utf-8')
    if pad:
        text += b' ' * (-len(text) % 8)
    with open(path, 'wb') as f:
        f.write(struct.pack('<Q', len(text)) + text + b''.join(chunks))


def no_duplicates(pairs):
    keys = [k for k, _ in pairs]
    assert len(keys) == len(set(keys)), 'duplicate key in ' + repr(keys)
    return dict(pairs)


def read_safetensors(path):
    """-> (name -> (dtype, array), metadata, header length); asserts every rule of the format."""
    data = open(path, 'rb').read()
    assert len(data) >= 8, 'shorter than 8 bytes'
    (n,) = struct.unpack('<Q', data[:8])
    assert 2 <= n <= min(len(data) - 8, 100_000_000), 'header length %d' % n
    text = data[8:8 + n]
    assert text[:1] == b'{', 'header does not start with {'
    header = json.loads(text.decode('utf-8'), object_pairs_hook=no_duplicates)
    assert isinstance(header, dict), 'header is not an object'
    metadata = header.pop('__metadata__', {})
    assert isinstance(metadata, dict) and all(isinstance(v, str) for v in metadata.values()), 'metadata'
    buf = data[8 + n:]
    tensors, spans = {}, []
    for name, e in header.items():
        assert name and isinstance(e, dict) and set(e) == {'dtype', 'shape', 'data_offsets'}, name
        dtype, shape, (begin, end) = e['dtype'], e['shape'], e['data_offsets']
        assert dtype in NUMPY, (name, dtype)
        assert all(isinstance(d, int) and not isinstance(d, bool) and d >= 0 for d in shape), (name, shape)
        nbytes = int(np.prod(shape, dtype=object)) * np.dtype(NUMPY[dtype]).itemsize
        assert 0 <= begin <= end <= len(buf) and end - begin == nbytes, (name, begin, end, nbytes)
        tensors[name] = (dtype, np.frombuffer(buf[begin:end], dtype=NUMPY[dtype]).reshape(shape))
        spans.append((begin, end, name))
    at = 0
    for begin, end, name in sorted(spans):
        assert begin == at, 'tensor %s: gap or overlap at %d (expected %d)' % (name, begin, at)
        at = end
    assert at == len(buf), 'bytes after the last tensor'
    return tensors, metadata, n


def same(got, want):
    assert sorted(got) == sorted(want), (sorted(got), sorted(want))
    for name, (dtype, arr) in want.items():
        gdtype, garr = got[name]
        assert gdtype == dtype, (name, gdtype, dtype)
        assert garr.shape == arr.shape, (name, garr.shape, arr.shape)
        assert garr.tobytes() == np.ascontiguousarray(arr).astype(NUMPY[dtype]).tobytes(), name


# ---- commands --------------------------------------------------------------------------------------

def gen(d):
    e = expected()
    write_safetensors(d + '/ref.safetensors', e, METADATA, order=list(reversed(list(e))))
    write_safetensors(d + '/bare.safetensors', e, None, order=sorted(e), pad=False)
    shared = {k: arr for k, (dtype, arr) in e.items()
              if dtype in ('F32', 'F64', 'I32', 'I64', 'BOOL')}
    np.savez_compressed(d + '/ref.npz', **shared)
    # The reader accepts what it writes (a self-check of the script).
    for f in ('ref', 'bare'):
        got, meta, _ = read_safetensors(d + '/' + f + '.safetensors')
        same(got, e)


def check(path):
    got, meta, n = read_safetensors(path)
    same(got, expected())
    assert meta == METADATA, meta
    assert (8 + n) % 8 == 0, 'data does not start at a multiple of 8'


def store(path, dtype):
    got, meta, _ = read_safetensors(path)
    shapes = {'W': (3, 4), 'b': (4,), 's': (), 'k': (2, 2, 2)}
    assert list(got) == list(shapes) or sorted(got) == sorted(shapes), list(got)
    for slot, (k, shape) in enumerate(shapes.items()):
        n = int(np.prod(shape))
        want = ((np.arange(n) - 3) / 8 + slot).astype(NUMPY[dtype]).reshape(shape)
        gdtype, a = got[k]
        assert gdtype == dtype and a.shape == want.shape and a.tobytes() == want.tobytes(), k


def npy(arr, version=None):
    b = io.BytesIO()
    np.lib.format.write_array(b, arr, version=version)
    return b.getvalue()


def seeds(d):
    os.makedirs(d + '/npz', exist_ok=True)
    os.makedirs(d + '/safetensors', exist_ok=True)
    small = {'w': np.arange(6, dtype='<f4').reshape(2, 3), 'b': np.array([1.5, -2.0]),
             'i': np.array([7, -8], dtype='<i8'), 'm': np.array([True, False]),
             's': np.array(3.0, dtype='<f4'), 'z': np.zeros((0, 2), dtype='<i4')}
    np.savez(d + '/npz/savez.npz', **small)
    np.savez_compressed(d + '/npz/compressed.npz', **small)
    class Sink(io.RawIOBase):  # not seekable: zipfile writes data descriptors
        def __init__(self): self.data = bytearray()
        def writable(self): return True
        def write(self, b): self.data += b; return len(b)
    sink = Sink()
    with zipfile.ZipFile(sink, 'w', zipfile.ZIP_DEFLATED) as z:
        for k, v in small.items():
            with z.open(k + '.npy', 'w') as f:
                f.write(npy(v))
    open(d + '/npz/stream.npz', 'wb').write(bytes(sink.data))
    # ZIP64 extra fields in the central directory and ZIP64 end records (zipfile writes them above
    # 4 GiB or 65535 entries: lower its thresholds), and an archive comment.
    limits = zipfile.ZIP64_LIMIT, zipfile.ZIP_FILECOUNT_LIMIT
    zipfile.ZIP64_LIMIT, zipfile.ZIP_FILECOUNT_LIMIT = 64, 1
    try:
        for name, method in (('zip64', zipfile.ZIP_STORED), ('zip64_deflated', zipfile.ZIP_DEFLATED)):
            with zipfile.ZipFile(d + '/npz/' + name + '.npz', 'w', method) as z:
                z.comment = b'ZIP64'
                for k in ('w', 'b', 'm'):
                    with z.open(k + '.npy', 'w', force_zip64=True) as f:
                        f.write(npy(small[k]))
    finally:
        zipfile.ZIP64_LIMIT, zipfile.ZIP_FILECOUNT_LIMIT = limits
    for i, (k, v) in enumerate(small.items()):
        open(d + '/npz/%s.npy' % k, 'wb').write(npy(v, [(1, 0), (2, 0), (3, 0)][i % 3]))
    e = expected()
    tiny = {k: e[k] for k in ('f32', 'f16', 'bf16', 'i64', 'flags', 'scalar', 'empty')}
    write_safetensors(d + '/safetensors/tiny.safetensors', tiny, METADATA, order=list(reversed(list(tiny))))
    write_safetensors(d + '/safetensors/one.safetensors', {'x': e['f64']}, None, pad=False)
    write_safetensors(d + '/safetensors/all.safetensors', e, {'k': 'v'})
    write_safetensors(d + '/safetensors/none.safetensors', {}, None)
    # Tensors of one size (swapping or copying offsets keeps the sizes right) and empty ones.
    pair = {'a': ('F32', np.ones(2, dtype='<f4')), 'b': ('F32', np.zeros(2, dtype='<f4')),
            'e': ('F64', np.zeros((0,), dtype='<f8')), 'z': ('I8', np.zeros((2, 0), dtype='|i1'))}
    write_safetensors(d + '/safetensors/pair.safetensors', pair, {'a': 'b', 'c': 'd'})


if __name__ == '__main__':
    try:
        {'gen': gen, 'check': check, 'store': store, 'seeds': seeds}[sys.argv[1]](*sys.argv[2:])
    except AssertionError as err:
        print('formats_ref.py: check failed:', err)
        sys.exit(1)
