"""Idle time between the kernels of graph-replayed decode steps, from an nsys cuda_gpu_trace CSV.

Steps are split at each launch of the embedding kernel (a decode step's first kernel); the first
8 steps (prompt, warm-up) are dropped. Per step: the span from one embedding kernel to the next,
the summed kernel time, and the gaps (a kernel's start after the previous kernel's end; overlaps
count as 0). Per kernel name: the median time per step and the median gap before it. Medians over
the steps. Used by the `nsys` stage of scripts/gpu_engine.sh.

  python3 bench/probes/nsys_gaps.py TRACE.csv [--label TEXT]
"""
import argparse
import collections
import csv
import statistics
import sys


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("trace")
    ap.add_argument("--label", default="")
    args = ap.parse_args()
    rows = list(csv.DictReader(open(args.trace)))
    if not rows:
        sys.exit(f"{args.trace}: no rows")
    start_key = next(k for k in rows[0] if k.startswith("Start"))
    dur_key = next(k for k in rows[0] if k.startswith("Duration"))
    kernels = sorted(
        (int(r[start_key]), int(r[dur_key]), r["Name"].split("(")[0].split("<")[0].replace("void ", "").strip())
        for r in rows if "memcpy" not in r["Name"].lower() and "memset" not in r["Name"].lower())
    firsts = [i for i, k in enumerate(kernels) if "embed" in k[2]]
    if len(firsts) < 12:
        sys.exit(f"{args.trace}: {len(firsts)} steps (embedding kernels), too few")
    spans, busy, idle = [], [], []
    per_name_time = collections.defaultdict(list)
    per_name_gap = collections.defaultdict(list)
    for a, b in zip(firsts[8:], firsts[9:]):
        step = kernels[a:b]
        spans.append(kernels[b][0] - step[0][0])
        busy.append(sum(d for _, d, _ in step))
        gaps = 0
        t_name = collections.defaultdict(int)
        g_name = collections.defaultdict(int)
        end = step[0][0]
        for s, d, n in step:
            gap = max(0, s - end)
            gaps += gap
            t_name[n] += d
            g_name[n] += gap
            end = max(end, s + d)
        idle.append(gaps)
        for n in t_name:
            per_name_time[n].append(t_name[n])
            per_name_gap[n].append(g_name[n])
    med = statistics.median
    print(f"== {args.label}: {len(spans)} steps, step {med(spans) / 1e3:.1f} us, kernels "
          f"{med(busy) / 1e3:.1f} us, idle between kernels {med(idle) / 1e3:.1f} us")
    for n in sorted(per_name_time, key=lambda n: -med(per_name_time[n])):
        print(f"   {n[:60]:<60} {med(per_name_time[n]) / 1e3:8.1f} us  gap before "
              f"{med(per_name_gap[n]) / 1e3:7.1f} us")


if __name__ == "__main__":
    main()
