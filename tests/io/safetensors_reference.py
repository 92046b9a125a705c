#!/usr/bin/env python3
"""Cross-check of flashnorm's safetensors reader/writer against the reference implementation.

Outside references: the `safetensors` pip package (Hugging Face's Rust parser, numpy API),
numpy's float16 conversion (IEEE binary16, round to nearest even) and `ml_dtypes.bfloat16`
(round to nearest even) for the expected rounded values.

Usage (run by tests/io/test_safetensors.cpp, test SafetensorsReference.CrossCheck):
  python3 safetensors_reference.py check OURS_F.safetensors OURS_BF16.safetensors HF_DIR
      Reads files written by flashnorm's writer and checks every value and the metadata.
  python3 safetensors_reference.py write THEIRS.safetensors
      Writes a file with the package's save_file; the C++ test then reads it with our reader.
Requires: pip packages safetensors, numpy, ml-dtypes.
"""
import json
import os
import sys

import ml_dtypes
import numpy as np
import safetensors
from safetensors import safe_open
from safetensors.numpy import load_file, save_file

# The same deterministic values as values_for() in test_safetensors.cpp: exact in fp32
# (24-bit integers times a power of two), so both sides agree bit for bit.
def formula(n: int, scale_exp: int) -> np.ndarray:
    i = np.arange(n, dtype=np.uint64)
    u = (i * np.uint64(2654435761)) % np.uint64(2**32)
    m = (u >> np.uint64(8)).astype(np.float64)
    return ((m - 2.0**23) * 2.0 ** (scale_exp - 19)).astype(np.float32)


SPECIALS = np.array(
    [0.0, -0.0, np.inf, -np.inf, np.nan, float.fromhex("0x1.fffffep127"),
     -float.fromhex("0x1.fffffep127"), 65504.0, 65519.0, 65520.0, 2.0**-24, 2.0**-25,
     3 * 2.0**-25, 1 + 2.0**-11, 1 + 3 * 2.0**-11, 1 + 2.0**-8, 1 + 3 * 2.0**-8, 2.0**-149,
     -1.5, 6.0e-5],
    dtype=np.float32)

N = 256


def fail(msg: str) -> None:
    print("FAIL:", msg)
    sys.exit(1)


def same_bits(name: str, got: np.ndarray, want: np.ndarray) -> None:
    if got.shape != want.shape:
        fail(f"{name}: shape {got.shape} != {want.shape}")
    g = got.reshape(-1)
    w = want.reshape(-1)
    nan = np.isnan(w.astype(np.float32))
    if not np.array_equal(np.isnan(g.astype(np.float32)), nan):
        fail(f"{name}: NaN positions differ")
    gi = g[~nan].view(np.uint16 if g.itemsize == 2 else np.uint32)
    wi = w[~nan].view(np.uint16 if w.itemsize == 2 else np.uint32)
    bad = np.nonzero(gi != wi)[0]
    if bad.size:
        k = bad[0]
        fail(f"{name}: element {k}: got bits {gi[k]:#x}, want {wi[k]:#x}")


def check(ours_f: str, ours_bf16: str, hf_dir: str) -> None:
    x = formula(N, 0).reshape(N // 8, 8)
    small = formula(N, -20)
    big = formula(N, 12)
    t = load_file(ours_f)
    same_bits("x_f32", t["x_f32"], x)
    same_bits("x_f16", t["x_f16"], x.astype(np.float16))
    same_bits("small_f16", t["small_f16"], small.astype(np.float16))
    with np.errstate(over="ignore"):
        same_bits("big_f16", t["big_f16"], big.astype(np.float16))
        same_bits("specials_f16", t["specials_f16"], SPECIALS.astype(np.float16))
    same_bits("specials_f32", t["specials_f32"], SPECIALS)
    if t["scalar"].shape != () or t["scalar"][()] != np.float32(2.5):
        fail(f"scalar: {t['scalar']!r}")
    if t["empty"].shape != (0, 3):
        fail(f"empty: shape {t['empty'].shape}")
    with safe_open(ours_f, framework="np") as f:
        meta = f.metadata()
        if meta != {"format": "pt", "note": "gr\u00fc\u00dfe \u2713"}:
            fail(f"metadata {meta!r}")
        want = {"x_f32", "x_f16", "small_f16", "big_f16", "specials_f16", "specials_f32",
                "scalar", "empty"}
        if set(f.keys()) != want:
            fail(f"keys {sorted(f.keys())}")

    # BF16: numpy has no bfloat16, so read the raw tensors with the package's parser and
    # compare with ml_dtypes' rounding.
    with open(ours_bf16, "rb") as fh:
        raw = {name: v for name, v in safetensors.deserialize(fh.read())}
    def bf16(name):
        v = raw[name]
        if v["dtype"] != "BF16":
            fail(f"{name}: dtype {v['dtype']}")
        return np.frombuffer(bytes(v["data"]), dtype=ml_dtypes.bfloat16).reshape(v["shape"])
    same_bits("x_bf16", bf16("x_bf16"), x.astype(ml_dtypes.bfloat16))
    huge = formula(N, 123)
    with np.errstate(over="ignore"):
        same_bits("huge_bf16", bf16("huge_bf16"), huge.astype(ml_dtypes.bfloat16))
    same_bits("specials_bf16", bf16("specials_bf16"), SPECIALS.astype(ml_dtypes.bfloat16))

    # A sharded Hugging Face directory: every tensor of the index is in the shard it names.
    with open(os.path.join(hf_dir, "model.safetensors.index.json")) as fh:
        index = json.load(fh)
    wm = index["weight_map"]
    shards = {s: load_file(os.path.join(hf_dir, s)) for s in sorted(set(wm.values()))}
    if len(shards) != 2:
        fail(f"expected 2 shards, got {sorted(shards)}")
    total = 0
    for name, shard in wm.items():
        if name not in shards[shard]:
            fail(f"{name} not in {shard}")
        total += shards[shard][name].nbytes
    if sum(len(s) for s in shards.values()) != len(wm):
        fail("shards hold tensors that the index does not list")
    if index["metadata"]["total_size"] != total:
        fail(f"total_size {index['metadata']['total_size']} != {total}")
    for k in range(5):
        got = shards[wm[f"layer.{k}.weight"]][f"layer.{k}.weight"]
        same_bits(f"layer.{k}.weight", got, (formula(12, 0) + np.float32(k)).reshape(3, 4))
    print("OK check")


def write(path: str) -> None:
    tensors = {
        "f32": formula(64, 0).reshape(4, 16),
        "f16": (np.arange(128, dtype=np.float32) / 64 - 1).astype(np.float16).reshape(2, 64),
        "bf16": (np.arange(16, dtype=np.float32) / 8 - 1).astype(ml_dtypes.bfloat16),
        "i32": np.arange(-5, 5, dtype=np.int32),
        "u8": np.arange(10, dtype=np.uint8),
        "scalar": np.array(3.5, dtype=np.float32),
        "empty": np.zeros((0, 4), dtype=np.float32),
    }
    save_file(tensors, path, metadata={"origin": "numpy"})
    print("OK write")


if __name__ == "__main__":
    if len(sys.argv) == 5 and sys.argv[1] == "check":
        check(sys.argv[2], sys.argv[3], sys.argv[4])
    elif len(sys.argv) == 3 and sys.argv[1] == "write":
        write(sys.argv[2])
    else:
        print(__doc__)
        sys.exit(2)
