"""CPU throughput of `flashnorm serve` (continuous batching) at 1, 4, 16 and 32 concurrent streams,
flashnorm vs standard mode on the same GGUF (SmolLM2 by default).

One server holds the model twice (`NAME=PATH,norm=flashnorm` and `,norm=standard`); for each mode and
concurrency c, c clients (the `openai` Python client, streaming, greedy, max_tokens fixed) send
requests back to back for --seconds; output tokens/s = the server's own completion-token counter
(/metrics) over the wall time from the first request to the last answer. Writes JSON to
bench/results/serve_load-cpu-<commit>-<date>.json and prints a Markdown table.
llama-server is not compared here (no reference build in this tree yet).
Usage: bench/serve_load.py --cli build/release/src/cli/flashnorm [--model GGUF] [--seconds 20]
"""
import argparse
import concurrent.futures as cf
import datetime
import json
import os
import re
import signal
import statistics
import subprocess
import sys
import threading
import time
from pathlib import Path

import openai

ROOT = Path(__file__).resolve().parent.parent
PROMPTS = ["Write a story about a lighthouse keeper.", "Explain how rain forms.",
           "List some facts about the Moon.", "Describe a walk through a forest.",
           "What makes a good cup of tea?", "Tell me about the history of bicycles."]


def metric(port, name):
    import urllib.request
    text = urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics").read().decode()
    m = re.search(r"^" + re.escape(name) + r" (\S+)$", text, re.M)
    return float(m.group(1))


def run_level(client, port, model, c, seconds, max_tokens):
    key = f'flashnorm_completion_tokens_total{{model="{model}"}}'
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
    q = lambda xs, p: statistics.quantiles(xs, n=100)[p - 1] if len(xs) > 1 else (xs or [0])[0]
    return {"streams": c, "requests": len(latencies), "errors": errors[0],
            "output_tokens": int(tokens), "wall_s": round(wall, 2),
            "output_tokens_per_s": round(tokens / wall, 2),
            "latency_p50_s": round(q(latencies, 50), 3), "latency_p99_s": round(q(latencies, 99), 3),
            "ttft_p50_s": round(q(ttfts, 50), 3)}


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--cli", required=True)
    ap.add_argument("--model", default=os.environ.get("FLASHNORM_SMOLLM2_GGUF"))
    ap.add_argument("--seconds", type=float, default=20)
    ap.add_argument("--max-tokens", type=int, default=32)
    ap.add_argument("--streams", default="1,4,16,32")
    ap.add_argument("--out", default=None)
    a = ap.parse_args()
    if not a.model:
        sys.exit("give --model or set FLASHNORM_SMOLLM2_GGUF (scripts/fetch_models.sh)")
    levels = [int(x) for x in a.streams.split(",")]
    proc = subprocess.Popen(
        [a.cli, "serve", "--port", "0", "--ctx", "512", "--max-concurrent", str(max(levels)),
         "--model", f"flashnorm={a.model},norm=flashnorm",
         "--model", f"standard={a.model},norm=standard"], stderr=subprocess.PIPE, text=True)
    port = None
    for line in proc.stderr:
        m = re.search(r"listening on http://127\.0\.0\.1:(\d+)", line)
        if m:
            port = int(m.group(1))
            break
    if port is None:
        sys.exit("the server did not start")
    threading.Thread(target=lambda: [None for _ in proc.stderr], daemon=True).start()
    client = openai.OpenAI(base_url=f"http://127.0.0.1:{port}/v1", api_key="none", max_retries=0,
                           timeout=600)
    rows = []
    try:
        for c in levels:
            for mode in ["standard", "flashnorm"]:  # interleaved: load drifts hit both
                r = run_level(client, port, mode, c, a.seconds, a.max_tokens)
                r["mode"] = mode
                rows.append(r)
                print(json.dumps(r), flush=True)
    finally:
        proc.send_signal(signal.SIGTERM)
        proc.wait(timeout=120)
    commit = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=ROOT,
                            capture_output=True, text=True).stdout.strip()
    date = datetime.date.today().isoformat()
    out = {"what": "flashnorm serve, CPU fp32 engine, continuous batching; output tokens/s "
                   "at N concurrent streaming chat clients (greedy, max_tokens fixed)",
           "model": Path(a.model).name, "max_tokens": a.max_tokens, "seconds_per_level": a.seconds,
           "cpus": os.cpu_count(), "load_average_at_end": os.getloadavg(), "commit": commit,
           "date": date, "llama_server": "not measured", "rows": rows}
    path = Path(a.out) if a.out else ROOT / "bench/results" / f"serve_load-cpu-{commit}-{date}.json"
    path.write_text(json.dumps(out, indent=1) + "\n")
    print(f"wrote {path}")
    print("| streams | standard tokens/s | flashnorm tokens/s | flashnorm / standard |")
    print("|---|---|---|---|")
    for c in levels:
        s = next(r for r in rows if r["streams"] == c and r["mode"] == "standard")
        f = next(r for r in rows if r["streams"] == c and r["mode"] == "flashnorm")
        ratio = f["output_tokens_per_s"] / s["output_tokens_per_s"] if s["output_tokens_per_s"] else 0
        print(f"| {c} | {s['output_tokens_per_s']} | {f['output_tokens_per_s']} | {ratio:.3f} |")


if __name__ == "__main__":
    main()
