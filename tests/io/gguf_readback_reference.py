#!/usr/bin/env python3
"""Reads back blocks that flashnorm wrote with gguf.quants.dequantize (pip `gguf`), so the block
layout of flashnorm's quantizers is checked by an outside reader.

Usage: python3 gguf_readback_reference.py TYPE_NAME IN.bin OUT.f32
IN.bin holds whole blocks of GGMLQuantizationType[TYPE_NAME]; OUT.f32 receives the dequantized
values as little-endian fp32.
"""
import sys

import gguf
import numpy as np
from gguf.quants import dequantize

type_name, src, dst = sys.argv[1:]
qt = gguf.GGMLQuantizationType[type_name]
_, type_size = gguf.GGML_QUANT_SIZES[qt]
raw = np.fromfile(src, dtype=np.uint8)
assert raw.size % type_size == 0, (raw.size, type_size)
deq = dequantize(raw.reshape(-1, type_size), qt)
np.asarray(deq, dtype="<f4").ravel().tofile(dst)
