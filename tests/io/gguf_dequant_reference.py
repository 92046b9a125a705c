#!/usr/bin/env python3
"""Writes reference (de)quantization records computed by the `gguf` Python package
(gguf.quants, pip `gguf`; numpy for F16) for flashnorm's dequantizer and quantizer tests.

Usage: python3 gguf_dequant_reference.py IN.gguf OUT.bin

Records written:
  * "real:<tensor>": for each tensor type present in IN.gguf, the first rows (about 8192
    elements) of the first tensor of that type: raw block bytes and gguf.quants.dequantize of them.
  * "quant:<type>:<source>": fp32 sources quantized with gguf.quants.quantize (numpy astype for
    F16) to F32, F16, BF16, Q8_0, Q4_0, Q4_1, Q5_0, Q5_1, with the fp32 source kept so the test can
    compare flashnorm's quantize byte for byte, plus gguf.quants.dequantize of the result. Sources:
    "weights" = dequantized rows of the first 2-D quantized tensor of IN.gguf (real weights);
    "edge" = synthetic blocks (zeros, constants, ties, tiny and large values).
  * "random:<type>": random blocks of Q4_0, Q4_1, Q5_0, Q5_1, Q8_0, Q4_K, Q5_K, Q6_K (finite
    fp16 scales) and gguf.quants.dequantize of them.
  * "f16:all": every binary16 code and numpy's fp32 value for it; "f16:edge"/"bf16:edge":
    special fp32 values (subnormals, rounding ties, overflow, inf) converted by numpy / gguf.

File layout (little-endian): b"FNDQREF1", u32 count, then per record:
  u32 name_len, name, u32 ggml_type, u64 n_elements, u64 raw_len, raw bytes,
  f32[n_elements] dequantized, u8 has_source, [f32[n_elements] source].
"""
import struct
import sys

import gguf
import numpy as np
from gguf import GGMLQuantizationType as QT
from gguf.quants import dequantize, quantize

TARGET_ELEMS = 8192


def as_bytes(a):
    return np.ascontiguousarray(a).view(np.uint8).tobytes()


class Out:
    def __init__(self):
        self.records = []

    def add(self, name, qtype, raw, deq, source=None):
        deq = np.asarray(deq, dtype=np.float32).ravel()
        blob = struct.pack("<I", len(name)) + name.encode()
        blob += struct.pack("<IQQ", int(qtype), deq.size, len(raw)) + raw + as_bytes(deq)
        if source is None:
            blob += b"\x00"
        else:
            src = np.asarray(source, dtype=np.float32).ravel()
            assert src.size == deq.size
            blob += b"\x01" + as_bytes(src)
        self.records.append(blob)

    def write(self, path):
        with open(path, "wb") as fh:
            fh.write(b"FNDQREF1" + struct.pack("<I", len(self.records)))
            for r in self.records:
                fh.write(r)


def row_slice(t):
    """First rows of tensor t (raw uint8 rows) holding about TARGET_ELEMS elements."""
    bs, ts = gguf.GGML_QUANT_SIZES[t.tensor_type]
    row_elems = int(t.shape[0])
    n_rows = int(t.n_elements) // row_elems
    rows = max(1, min(n_rows, TARGET_ELEMS // row_elems))
    row_bytes = row_elems // bs * ts
    raw = np.asarray(t.data).view(np.uint8).reshape(-1)[: rows * row_bytes]
    return raw.reshape(rows, row_bytes), rows, row_elems


def edge_blocks():
    rng = np.random.default_rng(1234)
    blocks = [
        np.zeros(32),
        np.full(32, 0.75),
        np.full(32, -3.0),
        np.arange(32) * 0.5 - 8.0,           # many exact ties after scaling
        np.arange(32) - 16.0,
        rng.normal(size=32) * 1e-30,         # d underflows in fp16
        rng.normal(size=32) * 1e-6,
        rng.normal(size=32) * 1000.0,
        np.concatenate([[5.0, -5.0], rng.uniform(-1, 1, 30)]),  # |max| tie: first wins
        np.concatenate([[-5.0, 5.0], rng.uniform(-1, 1, 30)]),
    ]
    return np.concatenate(blocks).astype(np.float32)


def special_floats():
    vals = [0.0, -0.0, 1.0, -1.0, 65504.0, 65519.0, 65519.996, 65520.0, -65520.0, 1e6, np.inf,
            -np.inf, 2.0**-14, 2.0**-24, 2.0**-25, 2.0**-25 * 3, 2.0**-26, 6.1e-5, 5.96e-8,
            1.0009765625, 1.00048828125, 1.00146484375, 3.0e38, 1.0e-40, -1.0e-45, 1.17549435e-38]
    bits = [0x3F808000, 0x3F818000, 0x3F80C000, 0x3F804000, 0x7F7FFFFF, 0x477FEFFF, 0x477FF000,
            0x33000000, 0x33000001, 0x387FE000, 0x387FF000, 0x38800000]
    a = np.array(vals, dtype=np.float32)
    b = np.array(bits, dtype=np.uint32).view(np.float32)
    x = np.concatenate([a, b])
    pad = (-x.size) % 32
    return np.concatenate([x, np.zeros(pad, dtype=np.float32)])


def main():
    path, out_path = sys.argv[1], sys.argv[2]
    r = gguf.GGUFReader(path)
    out = Out()

    seen = set()
    weights = None
    for t in r.tensors:
        qt = t.tensor_type
        if qt not in seen:
            seen.add(qt)
            raw, rows, row_elems = row_slice(t)
            deq = dequantize(raw, qt)
            assert deq.shape == (rows, row_elems)
            out.add(f"real:{t.name}", qt, raw.tobytes(), deq)
        if weights is None and len(t.shape) == 2 and qt not in (QT.F32, QT.F16, QT.BF16):
            raw, rows, row_elems = row_slice(t)
            weights = dequantize(raw, qt)[: max(1, 4096 // row_elems)].astype(np.float32)

    sources = {"edge": edge_blocks()}
    if weights is not None:
        sources["weights"] = weights.ravel()
    for sname, src in sources.items():
        for qt in (QT.F32, QT.F16, QT.BF16, QT.Q8_0, QT.Q4_0, QT.Q4_1, QT.Q5_0, QT.Q5_1):
            with np.errstate(over="ignore"):
                q = quantize(src.reshape(-1, 32), qt)
            raw = as_bytes(q)
            deq = dequantize(np.frombuffer(raw, dtype=np.uint8).reshape(q.shape[0], -1)
                             if qt not in (QT.F32, QT.F16) else q, qt)
            out.add(f"quant:{qt.name}:{sname}", qt, raw, deq, src)

    # Random blocks (every bit pattern of the quant fields; fp16 scales kept finite) for all block
    # types gguf.quants can dequantize, including Q5_1 and Q5_K which the models lack.
    # (gguf.quants has no Q8_K dequantizer, so Q8_K is not covered.)
    rng = np.random.default_rng(99)
    scale_fields = {QT.Q4_0: [0], QT.Q4_1: [0, 2], QT.Q5_0: [0], QT.Q5_1: [0, 2], QT.Q8_0: [0],
                    QT.Q4_K: [0, 2], QT.Q5_K: [0, 2], QT.Q6_K: [208]}
    for qt, fields in scale_fields.items():
        bs, ts = gguf.GGML_QUANT_SIZES[qt]
        n_blocks = max(2, 4096 // bs)
        raw = rng.integers(0, 256, size=(n_blocks, ts), dtype=np.uint8)
        for off in fields:
            scales = (rng.normal(size=n_blocks) * 0.01).astype(np.float16)
            raw[:, off:off + 2] = scales.view(np.uint8).reshape(n_blocks, 2)
        out.add(f"random:{qt.name}", qt, raw.tobytes(), dequantize(raw, qt))

    codes = np.arange(65536, dtype=np.uint32).astype(np.uint16)
    out.add("f16:all", QT.F16, as_bytes(codes), codes.view(np.float16).astype(np.float32))
    sp = special_floats()
    with np.errstate(over="ignore"):
        h = sp.astype(np.float16)
    out.add("f16:edge", QT.F16, as_bytes(h), h.astype(np.float32), sp)
    bq = quantize(sp.reshape(-1, 32), QT.BF16)
    out.add("bf16:edge", QT.BF16, as_bytes(bq),
            dequantize(np.frombuffer(as_bytes(bq), dtype=np.uint8).reshape(bq.shape[0], -1), QT.BF16), sp)
    out.write(out_path)


if __name__ == "__main__":
    main()
