"""CPU throughput of `flashnorm serve` (continuous batching) at 1, 4, 16 and 32 concurrent streams,
flashnorm vs standard mode on the same GGUF (SmolLM2 by default).

One server holds the model in each configuration (`norm=flashnorm` and `norm=standard`, with
--weights f32 and/or native); for each concurrency c and configuration (interleaved), c clients (the
`openai` Python client, streaming, greedy, max_tokens fixed) send requests back to back for
--seconds; output tokens/s = the server's own completion-token counter (/metrics) over the wall
time from the first request to the last answer. With --llama-server BIN, llama.cpp's server (an
outside reference built by scripts/cpu_bench.sh into the ignored cache, never part of the product)
runs on the same GGUF, cores (--threads) and prompts with as many parallel slots as the highest
concurrency, measured the same way (its own counter, llamacpp:tokens_predicted_total) while
flashnorm's server is idle. Writes JSON to bench/results/serve_load-cpu-<commit>-<date>.json and
prints a Markdown table.
The JSON records the CPU's SIMD flags and the engine line each flashnorm model printed (its
instruction set); --isa avx2 runs flashnorm's kernels on AVX2 on an AVX-512 machine.
Usage: bench/serve_load.py --cli build/release/src/cli/flashnorm [--model GGUF] [--seconds 20]
       [--weights f32,native] [--isa avx2] [--llama-server ~/.cache/flashnorm/llama.cpp-*/build/bin/llama-server]
"""
import argparse
import concurrent.futures as cf
import datetime
import json
import os
import re
import signal
import socket
import statistics
import subprocess
import sys
import threading
import time
from pathlib import Path

import openai

ROOT = Path(__file__).resolve().parent.parent
from serve_cuda_load import PROMPTS  # noqa: E402  (the same prompts as the GPU server's load test


def metric(port, name):
    import urllib.request
    text = urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics").read().decode()
    m = re.search(r"^" + re.escape(name) + r" (\S+)$", text, re.M)
    return float(m.group(1))


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def run_level(client, port, model, c, seconds, max_tokens, key=None):
    key = key or f'flashnorm_completion_tokens_total{{model="{model}"}}'
    before = metric(port, key)
    deadline = time.time() + seconds
    latencies, ttfts, errors = [], [], [0]
    lock = threading.Lock()

    def worker(w):
        i = 0
        while time.time() < deadline:
            t0 = time.time()
            first = None
            try:
                s = client.chat.completions.create(
                    model=model, max_tokens=max_tokens, temperature=0, stream=True,
                    messages=[{"role": "user", "content": PROMPTS[(w + i) % len(PROMPTS)]}])
                for ch in s:
                    if first is None and ch.choices and ch.choices[0].delta.content:
                        first = time.time() - t0
            except openai.OpenAIError:
                with lock:
                    errors[0] += 1
                continue
            with lock:
                latencies.append(time.time() - t0)
                if first is not None:
                    ttfts.append(first)
            i += 1

    t0 = time.time()
    with cf.ThreadPoolExecutor(c) as ex:
        list(ex.map(worker, range(c)))
    wall = time.time() - t0
    tokens = metric(port, key) - before
    def q(xs, p):
        return statistics.quantiles(xs, n=100)[p - 1] if len(xs) > 1 else (xs or [0])[0]
    return {"streams": c, "requests": len(latencies), "errors": errors[0],
            "output_tokens": int(tokens), "wall_s": round(wall, 2),
            "output_tokens_per_s": round(tokens / wall, 2),
            "latency_p50_s": round(q(latencies, 50), 3), "latency_p99_s": round(q(latencies, 99), 3),
            "ttft_p50_s": round(q(ttfts, 50), 3)}


def start_llama_server(binary, model, slots, ctx, threads):
    """llama-server on a free loopback port with `slots` parallel sequences of `ctx` positions
    each and its /metrics on; returns (process, port)."""
    port = free_port()
    proc = subprocess.Popen(
        [binary, "-m", model, "--host", "127.0.0.1", "--port", str(port), "-t", str(threads),
         "-tb", str(threads), "-np", str(slots), "-c", str(slots * ctx), "--metrics",
         "--no-webui"], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    import urllib.request
    deadline = time.time() + 120
    while time.time() < deadline:
        try:
            if urllib.request.urlopen(f"http://127.0.0.1:{port}/health").status == 200:
                return proc, port
        except OSError:
            pass
        if proc.poll() is not None:
            sys.exit(f"llama-server exited with {proc.returncode}")
        time.sleep(0.5)
    proc.kill()
    sys.exit("llama-server did not become healthy in 120 s")


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--cli", required=True)
    ap.add_argument("--model", default=os.environ.get("FLASHNORM_SMOLLM2_GGUF"))
    ap.add_argument("--seconds", type=float, default=20)
    ap.add_argument("--max-tokens", type=int, default=32)
    ap.add_argument("--streams", default="1,4,16,32")
    ap.add_argument("--weights", default="f32", help="f32 and/or native, comma-separated")
    ap.add_argument("--threads", type=int, default=os.cpu_count())
    ap.add_argument("--llama-server", default=None, help="llama.cpp's llama-server binary")
    ap.add_argument("--isa", default=None, choices=["scalar", "avx2", "avx512"],
                    help="flashnorm's CPU kernels on this instruction set (FLASHNORM_CPU_ISA; "
                         "default: the widest the CPU has)")
    ap.add_argument("--out", default=None)
    a = ap.parse_args()
    if not a.model:
        sys.exit("give --model or set FLASHNORM_SMOLLM2_GGUF (scripts/fetch_models.sh)")
    levels = [int(x) for x in a.streams.split(",")]
    configs = [(w, mode) for w in a.weights.split(",") for mode in ["standard", "flashnorm"]]
    cmd = [a.cli, "serve", "--port", "0", "--ctx", "512", "--max-concurrent", str(max(levels))]
    for w, mode in configs:
        cmd += ["--model", f"{mode}-{w}={a.model},norm={mode},weights={w}"]
    env = dict(os.environ, OPENBLAS_NUM_THREADS=str(a.threads))
    env.pop("FLASHNORM_CPU_ISA", None)
    if a.isa:
        env["FLASHNORM_CPU_ISA"] = a.isa
    proc = subprocess.Popen(cmd, stderr=subprocess.PIPE, text=True, env=env)
    port = None
    engines = {}  # "NAME: cpu, native weights (avx512, 2 threads), norm ...": the path that ran
    for line in proc.stderr:
        m = re.search(r"listening on http://127\.0\.0\.1:(\d+)", line)
        if m:
            port = int(m.group(1))
            break
        m = re.match(r"([\w-]+): (cpu.*)$", line.strip())
        if m:
            engines[m.group(1)] = m.group(2)
    if port is None:
        sys.exit("the server did not start")
    threading.Thread(target=lambda: [None for _ in proc.stderr], daemon=True).start()
    client = openai.OpenAI(base_url=f"http://127.0.0.1:{port}/v1", api_key="none", max_retries=0,
                           timeout=600)
    llama = None
    if a.llama_server:
        llama = start_llama_server(a.llama_server, a.model, max(levels), 512, a.threads)
        lclient = openai.OpenAI(base_url=f"http://127.0.0.1:{llama[1]}/v1", api_key="none",
                                max_retries=0, timeout=600)
    rows = []
    try:
        for c in levels:
            for w, mode in configs:  # interleaved: load drifts hit every configuration
                r = run_level(client, port, f"{mode}-{w}", c, a.seconds, a.max_tokens)
                r.update(server="flashnorm", mode=mode, weights=w, load_avg_1m=os.getloadavg()[0])
                rows.append(r)
                print(json.dumps(r), flush=True)
            if llama:
                r = run_level(lclient, llama[1], "default", c, a.seconds, a.max_tokens,
                              key="llamacpp:tokens_predicted_total")
                r.update(server="llama-server", mode="standard", weights="native",
                         load_avg_1m=os.getloadavg()[0])
                rows.append(r)
                print(json.dumps(r), flush=True)
    finally:
        proc.send_signal(signal.SIGTERM)
        proc.wait(timeout=120)
        if llama:
            llama[0].terminate()
            llama[0].wait(timeout=60)
    commit = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=ROOT,
                            capture_output=True, text=True).stdout.strip()
    date = datetime.date.today().isoformat()
    llama_version = "not measured"
    if a.llama_server:
        llama_version = subprocess.run([a.llama_server, "--version"], capture_output=True,
                                       text=True).stderr.strip().splitlines()[:2]
    out = {"what": "flashnorm serve (CPU engine, continuous batching) and llama-server; output "
                   "tokens/s at N concurrent streaming chat clients (greedy, max_tokens fixed)",
           "model": Path(a.model).name, "max_tokens": a.max_tokens, "seconds_per_level": a.seconds,
           "threads": a.threads, "cpus": os.cpu_count(), "cpu": cpu_model(),
           "cpu_simd_flags": cpu_simd_flags(), "flashnorm_isa": a.isa or "default (avx2 where available)",
           "flashnorm_engines": engines,
           "load_average_at_end": os.getloadavg(), "commit": commit, "date": date,
           "llama_server": llama_version, "rows": rows}
    path = Path(a.out) if a.out else ROOT / "bench/results" / f"serve_load-cpu-{commit}-{date}.json"
    path.write_text(json.dumps(out, indent=1) + "\n")
    print(f"wrote {path}")
    names = [f"{m} {w}" for w, m in configs] + (["llama-server"] if llama else [])
    for key, unit in (("output_tokens_per_s", "tokens/s"), ("ttft_p50_s", "TTFT p50 s")):
        print("| streams | " + " | ".join(f"{n} {unit}" for n in names) + " |")
        print("|---" * (len(names) + 1) + "|")
        for c in levels:
            cells = [next(r[key] for r in rows if r["streams"] == c and
                          r["server"] == "flashnorm" and r["mode"] == m and r["weights"] == w)
                     for w, m in configs]
            if llama:
                cells.append(next(r[key] for r in rows
                                  if r["streams"] == c and r["server"] == "llama-server"))
            print(f"| {c} | " + " | ".join(str(x) for x in cells) + " |")
        print()


def cpu_model():
    for line in Path("/proc/cpuinfo").read_text().splitlines():
        if line.startswith("model name"):
            return line.split(":", 1)[1].strip()
    return "unknown"


SIMD = ("avx2", "fma", "f16c", "avx512f", "avx512bw", "avx512vl", "avx512dq", "avx512_vnni",
        "avx_vnni")


def cpu_simd_flags():
    """The SIMD extensions /proc/cpuinfo lists that the CPU kernels (or llama.cpp's) can use."""
    for line in Path("/proc/cpuinfo").read_text().splitlines():
        if line.startswith("flags"):
            have = set(line.split(":", 1)[1].split())
            return [f for f in SIMD if f in have]
    return []


if __name__ == "__main__":
    main()
