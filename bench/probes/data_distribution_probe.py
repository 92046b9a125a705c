#!/usr/bin/env python3
"""Does the input data's distribution change cuBLAS GEMM speed on a power-limited GPU?

Times torch.matmul (bf16, CUDA graph over W copies rotated past the L2) sustained for `secs` per
case, with the inputs drawn three ways: normal (W * 0.02, x * 3: bench/torch_peers.py's data),
uniform (W in [-0.05, 0.05), x in [-3, 3): `flashnorm bench`'s scales) and normal with the uniform
case's variance; two rounds, two compute-bound prefill shapes (M = 4096). Prints the median
microseconds per call of each case and samples the SM clock and power (nvidia-smi) into a CSV.

Usage (GPU machine): python3 bench/probes/data_distribution_probe.py clocks.csv
Result of 2026-12-01 (H200): bench/results/h200_2026-12-01_data_distribution_probe.txt
"""
import subprocess
import sys
import time

import torch

dev = "cuda"
torch.manual_seed(0)


def mk(kind, shape, scale):
    if kind == "normal":
        return (torch.randn(*shape, device=dev) * scale).to(torch.bfloat16)
    return ((torch.rand(*shape, device=dev) * 2 - 1) * scale).to(torch.bfloat16)


def run(name, M, K, N, kind, wscale, xscale, secs=3.0):
    n = max(2, (256 << 20) // (N * K * 2) + 1)
    Ws = [mk(kind, (N, K), wscale) for _ in range(n)]
    xs = [mk(kind, (M, K), xscale) for _ in range(n)]
    ys = [torch.empty(M, N, device=dev, dtype=torch.bfloat16) for _ in range(n)]
    s = torch.cuda.Stream()
    with torch.cuda.stream(s):
        for i in range(n):
            torch.matmul(xs[i], Ws[i].t(), out=ys[i])
    torch.cuda.synchronize()
    g = torch.cuda.CUDAGraph()
    with torch.cuda.graph(g):
        for i in range(n):
            torch.matmul(xs[i], Ws[i].t(), out=ys[i])
    t_end = time.time() + secs
    times = []
    t0 = time.time()
    while time.time() < t_end:
        e0 = torch.cuda.Event(enable_timing=True)
        e1 = torch.cuda.Event(enable_timing=True)
        e0.record()
        g.replay()
        e1.record()
        e1.synchronize()
        times.append(e0.elapsed_time(e1) * 1e3 / n)
    times.sort()
    print(f"{time.time():.1f} {name} M={M} {kind:7s} w*{wscale:.4f} x*{xscale:.4f}: median "
          f"{times[len(times) // 2]:.2f} us/call over {len(times)} replays "
          f"({t0:.1f}..{time.time():.1f})", flush=True)


def main():
    smi = subprocess.Popen(["nvidia-smi", "--query-gpu=timestamp,clocks.sm,power.draw",
                            "--format=csv,noheader", "-lms", "200"], stdout=open(sys.argv[1], "w"))
    for _ in range(2):
        for (name, M, K, N) in [("gateup", 4096, 2048, 16384), ("l8b_qkv", 4096, 4096, 6144)]:
            run(name, M, K, N, "normal", 0.02, 3.0)
            run(name, M, K, N, "uniform", 0.05, 3.0)
            run(name, M, K, N, "normal", 0.05 / 3 ** 0.5, 3.0 / 3 ** 0.5)
    smi.terminate()


main()
