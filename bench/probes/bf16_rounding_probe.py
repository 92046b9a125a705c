#!/usr/bin/env python3
"""Which folded tensors' bf16 rounding moves a model's top-1 (docs/results_h200.md, "a tied LM head
stays tied").

Copies an F32 fold (`flashnorm fold ORIGINAL -o f32.gguf --dtype f32`) and rounds, in the copy, a
chosen set of its 2-D F32 tensors to the nearest bf16 value (ties to even), kept in F32 storage so
that the CPU fp32 engine runs everything else unrounded:

  head  only `output.weight` (the LM head that the fold untied from the embedding)
  body  the folded projections: attn_q/k/v and ffn_gate/up of every block
  all   both

The fold rounded fp64 products to fp32 and this rounds those to bf16 (two roundings where the
engine's bf16 fold rounds once); on SmolLM2 both give the same 1013/1024 positions.

Then `flashnorm verify ORIGINAL COPY --max-text-tokens 1026 --ctx 513 --tokens 0` gives the top-1
agreement that rounding costs. Usage: bf16_rounding_probe.py F32_FOLD OUT {head,body,all}
Needs the `gguf` and `numpy` packages (scripts/requirements-test.txt).
"""
import shutil
import sys

import numpy as np
from gguf import GGUFReader


FOLDED = (".attn_q.weight", ".attn_k.weight", ".attn_v.weight", ".ffn_gate.weight",
          ".ffn_up.weight")


def round_to_bf16_in_place(bits: np.ndarray) -> None:
    """bits: the uint32 view of finite float32 values (a fold refuses non-finite ones); rounds each
    to the nearest bf16 (ties to even). NaN payloads would not survive."""
    bits[...] = (bits + 0x7FFF + ((bits >> 16) & 1)) & 0xFFFF0000


def main() -> int:
    if len(sys.argv) != 4 or sys.argv[3] not in ("head", "body", "all"):
        print(__doc__, file=sys.stderr)
        return 2
    src, dst, which = sys.argv[1:4]
    if src == dst:
        print("OUT must differ from F32_FOLD (the input is never overwritten)", file=sys.stderr)
        return 2
    shutil.copyfile(src, dst)
    reader = GGUFReader(dst, "r+")
    n = 0
    for t in reader.tensors:
        if t.tensor_type.name != "F32":
            continue
        is_head = t.name == "output.weight"
        is_body = t.name.startswith("blk.") and t.name.endswith(FOLDED)
        if (which in ("head", "all") and is_head) or (which in ("body", "all") and is_body):
            round_to_bf16_in_place(t.data.view(np.uint32))
            n += 1
    reader.data.flush()
    print(f"{dst}: {n} tensors rounded to bf16 values ({which})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
