"""One rank of the tensor-parallel flashnorm.hf test (test_hf_tp.py), under
`torchrun --nproc-per-node 2` (gloo on the CPU):
  hf_tp_run.py OUT.json MODE DIR [DIR ...]
Each DIR (a random checkpoint) is loaded with transformers' tp_plan="auto" in fp32; MODE
"flashnorm": flashnorm.hf.fold_ + apply_; "negative": the same, then the LM head replaced by a
FlashNormLinear on this rank's shard of its weight (the hooked Linear and its output gather
lost); "plain": unmodified. Rank 0 writes {DIR: {"logits": [[...] per prompt position],
"tokens": 32 greedy tokens} | {"error": str}} for the prompt PROMPT.
"""
import json
import sys

import torch
import torch.distributed as dist
from transformers import AutoModelForCausalLM

import flashnorm.hf

PROMPT = [5, 6, 7, 8, 9, 10, 11, 12, 40, 41, 300, 7]
N_GREEDY = 32


@torch.no_grad()
def run(path, mode):
    model = AutoModelForCausalLM.from_pretrained(path, tp_plan="auto", dtype=torch.float32)
    model.eval()
    if mode in ("flashnorm", "negative"):
        flashnorm.hf.fold_(model)
        flashnorm.hf.apply_(model)
    if mode == "negative":
        head = model.lm_head
        inner = head.inner if isinstance(head, flashnorm.hf.RowScaled) else head
        w = inner.weight.to_local() if hasattr(inner.weight, "to_local") else inner.weight
        model.lm_head = flashnorm.hf.FlashNormLinear(torch.nn.Parameter(w.detach().clone()),
                                                     head.eps if hasattr(head, "eps") else 1e-6)
    ids = torch.tensor([PROMPT])
    logits = model(ids).logits[0]
    out = model.generate(ids, max_new_tokens=N_GREEDY, do_sample=False, min_new_tokens=N_GREEDY)
    return {"logits": logits.tolist(), "tokens": out[0, len(PROMPT):].tolist()}


def main():
    out_path, mode, dirs = sys.argv[1], sys.argv[2], sys.argv[3:]
    results = {}
    for d in dirs:
        try:
            results[d] = run(d, mode)
        except Exception as e:  # noqa: BLE001 - reported per model, the others still run
            results[d] = {"error": f"{type(e).__name__}: {e}"}
    if dist.is_initialized() and dist.get_rank() != 0:
        return
    with open(out_path, "w") as f:
        json.dump(results, f)


if __name__ == "__main__":
    main()
