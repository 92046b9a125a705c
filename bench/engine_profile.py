#!/usr/bin/env python3
"""Summarize ncu CSVs of `flashnorm generate -p Hi -n 4` (scripts/gpu_engine.sh, stage ncu) into
GPU time per forward pass by kernel class, one column per normalization mode.

Usage: bench/engine_profile.py ncu_standard.csv ncu_flashnorm.csv [--passes 4] [--json out.json]
Every pass of that run takes the decode path (1 prompt token, then 3 one-token steps). ncu runs
the kernels one at a time, so the sum excludes the launch gaps a CUDA-graph replay has."""
import argparse
import csv
import io
import json
import re
import sys

CLASSES = [
    ("norm (rms_norm)", re.compile(r"rms_norm_kernel")),
    ("GEMV/GEMM (decode kernel, cuBLASLt, rstd, post-scale)",
     re.compile(r"decode_kernel|gemm|Kernel2|sm90|cutlass|rstd_kernel|postscale")),
    ("attention (RoPE/KV write, attention, combine)", re.compile(r"rope_kv|attention")),
    ("other (embedding, residual add, GLU, sampling)", re.compile(r".")),
]


def load(path):
    text = open(path, encoding="utf-8", errors="replace").read()
    start = text.find('"ID"')
    rows = list(csv.DictReader(io.StringIO(text[start:])))
    out = []
    for r in rows:
        if r.get("Metric Name") != "gpu__time_duration.sum":
            continue
        out.append((r["Kernel Name"], float(r["Metric Value"].replace(",", "")) / 1000.0))  # ns->us
    # The engine's load-time autotuning launches come first; the forward passes start at the first
    # embedding kernel.
    first = next((i for i, (k, _) in enumerate(out) if "embed_kernel" in k), 0)
    return out[first:]


def classify(kernels, passes):
    sums = {name: 0.0 for name, _ in CLASSES}
    counts = {name: 0 for name, _ in CLASSES}
    for kname, us in kernels:
        for cname, pat in CLASSES:
            if pat.search(kname):
                sums[cname] += us / passes
                counts[cname] += 1
                break
    return sums, {k: v / passes for k, v in counts.items()}


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("csvs", nargs="+")
    ap.add_argument("--passes", type=int, default=4)
    ap.add_argument("--json")
    a = ap.parse_args()
    res = {}
    for path in a.csvs:
        mode = re.sub(r".*ncu_(\w+)\.csv$", r"\1", path)
        sums, counts = classify(load(path), a.passes)
        res[mode] = {"us_per_pass": sums, "kernels_per_pass": counts,
                     "total_us": sum(sums.values())}
    modes = list(res)
    print("| kernel class | " + " | ".join(f"{m}: us (kernels) per pass" for m in modes) + " |")
    print("|---|" + "---:|" * len(modes))
    for cname, _ in CLASSES:
        cells = [f"{res[m]['us_per_pass'][cname]:.1f} ({res[m]['kernels_per_pass'][cname]:.0f})"
                 for m in modes]
        print(f"| {cname} | " + " | ".join(cells) + " |")
    print("| **sum of kernel times** | " +
          " | ".join(f"**{res[m]['total_us']:.1f}**" for m in modes) + " |")
    for m in modes:
        share = res[m]["us_per_pass"][CLASSES[0][0]] / res[m]["total_us"]
        print(f"{m}: norm kernels {100 * share:.1f}% of the summed kernel time")
    if a.json:
        json.dump(res, open(a.json, "w"), indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
