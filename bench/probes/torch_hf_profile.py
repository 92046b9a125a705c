"""Where an eager forward of a transformers model spends its time, unmodified vs flashnorm.hf
(with and without the per-column QK-norm mask), on a GPU: torch.profiler over a few eager
forwards (prefill B x P tokens without cache, and one-token forwards), the top operators by
self CPU time and by self CUDA time, and the wall time per forward. The probe behind the
question "why is Qwen3-0.6B slower in eager mode with flashnorm" (docs/results_h200.md).
  python3 bench/probes/torch_hf_profile.py --model qwen3-0.6b [--batch 1] [--prompt 128]
"""
import argparse
import copy
import sys
import time
from pathlib import Path

import torch
from torch.profiler import ProfilerActivity, profile

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
import torch_hf  # noqa: E402

import flashnorm.hf as fh  # noqa: E402


def wall(fn, reps=5):
    fn()
    torch.cuda.synchronize()
    t = time.perf_counter()
    for _ in range(reps):
        fn()
    torch.cuda.synchronize()
    return (time.perf_counter() - t) / reps


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--model", default="qwen3-0.6b")
    ap.add_argument("--batch", type=int, default=1)
    ap.add_argument("--prompt", type=int, default=128)
    ap.add_argument("--rows", type=int, default=12, help="operators listed per table")
    a = ap.parse_args()
    base = torch_hf.build(a.model, "cuda", torch.bfloat16)
    vocab = base.config.vocab_size
    ids = torch.randint(3, vocab, (a.batch, a.prompt), device="cuda",
                        generator=torch.Generator("cuda").manual_seed(1))
    one = ids[:, :1]
    variants = {"unmodified": base}
    for name, cols in [("flashnorm", False), ("flashnorm_mask", True)]:
        m = fh.apply_(fh.fold_(copy.deepcopy(base)), cancel_columns=cols)
        fh.tune_(m, rows=(a.batch, a.batch * a.prompt))
        variants[name] = m
    for name, m in variants.items():
        with torch.no_grad():
            def pre(m=m):
                return m(ids, use_cache=False)

            def step(m=m):
                return m(one, use_cache=False)
            print(f"== {a.model} {name}: prefill {a.batch}x{a.prompt} {wall(pre) * 1e3:.2f} ms, "
                  f"one-token forward {wall(step) * 1e3:.2f} ms", flush=True)
            for what, fn in [("prefill", pre), ("one-token", step)]:
                with profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA]) as prof:
                    for _ in range(3):
                        fn()
                    torch.cuda.synchronize()
                ka = prof.key_averages()
                print(f"-- {name} {what}: by self CPU time (3 forwards)")
                print(ka.table(sort_by="self_cpu_time_total", row_limit=a.rows,
                               max_name_column_width=60))
                print(f"-- {name} {what}: by self CUDA time (3 forwards)")
                print(ka.table(sort_by="self_cuda_time_total", row_limit=a.rows,
                               max_name_column_width=60))


if __name__ == "__main__":
    main()
