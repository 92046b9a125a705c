#!/usr/bin/env python3
"""Writes a seed corpus for fuzz/fuzz_gguf.cpp: small GGUF files written by the `gguf` Python
package's GGUFWriter (every metadata value type, arrays, F32/F16/Q8_0/Q4_0/Q4_K tensors, a
64-byte alignment), plus the metadata head of a real model when one is given.

Usage: python3 gguf_fuzz_seeds.py OUT_DIR [MODEL.gguf]
"""
import os
import sys

import gguf
import numpy as np
from gguf import GGMLQuantizationType as QT


def write(path, alignment=None, tensors=True):
    w = gguf.GGUFWriter(path, "llama")
    if alignment:
        w.add_custom_alignment(alignment)
    w.add_uint8("t.u8", 7)
    w.add_int8("t.i8", -7)
    w.add_uint16("t.u16", 700)
    w.add_int16("t.i16", -700)
    w.add_uint32("t.u32", 70000)
    w.add_int32("t.i32", -70000)
    w.add_float32("t.f32", 0.5)
    w.add_uint64("t.u64", 1 << 40)
    w.add_int64("t.i64", -(1 << 40))
    w.add_float64("t.f64", 0.25)
    w.add_bool("t.bool", True)
    w.add_string("t.str", "hello")
    w.add_array("tokenizer.ggml.tokens", ["a", "bb", "<s>"])
    w.add_array("tokenizer.ggml.token_type", [1, 2, 3])
    w.add_array("tokenizer.ggml.scores", [0.5, -1.0, 2.0])
    if tensors:
        rng = np.random.default_rng(0)
        x = rng.normal(size=(2, 256)).astype(np.float32)
        w.add_tensor("f32", x[:, :64].copy())
        w.add_tensor("f16", x[:, :32].astype(np.float16))
        for qt in (QT.Q8_0, QT.Q4_0, QT.Q5_0):
            q = gguf.quants.quantize(x, qt)
            w.add_tensor(qt.name.lower(), q, raw_shape=q.shape, raw_dtype=qt)
        qk = rng.integers(0, 256, size=(2, 144), dtype=np.uint8)
        qk[:, 0:4] = np.frombuffer(np.array([0.01, 0.001], dtype=np.float16).tobytes(), np.uint8)
        w.add_tensor("q4_k", qk, raw_shape=qk.shape, raw_dtype=QT.Q4_K)
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()


def main():
    out = sys.argv[1]
    os.makedirs(out, exist_ok=True)
    write(os.path.join(out, "seed_full.gguf"))
    write(os.path.join(out, "seed_align64.gguf"), alignment=64)
    write(os.path.join(out, "seed_meta_only.gguf"), tensors=False)
    if len(sys.argv) > 2:
        with open(sys.argv[2], "rb") as f:
            head = f.read(4096)
        with open(os.path.join(out, "seed_model_head.gguf"), "wb") as f:
            f.write(head)


if __name__ == "__main__":
    main()
