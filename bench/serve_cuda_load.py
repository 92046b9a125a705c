"""`flashnorm serve --device cuda` under load: one server holding several models on one GPU
(`--model NAME=PATH,device=cuda,...`, each with its own CUDA engine and KV cache slots); for each
model and each concurrency (default 1 and 32 streams), that many clients send greedy
/v1/completions requests back to back for --seconds; output tokens/s = the server's own
completion-token counter (/metrics) over the wall time. Then every model at the highest
concurrency at once (the GPU shared). Standard library only (urllib: the device machine has no
PyPI packages). Writes JSON (--out) and prints a Markdown table.
Usage: bench/serve_cuda_load.py --cli BIN/flashnorm --model NAME=GGUF[,key=value...] ...
       [--streams 1,32] [--seconds 20] [--max-tokens 64] [--out FILE]
"""
import argparse
import concurrent.futures as cf
import datetime
import json
import re
import subprocess
import sys
import threading
import time
import urllib.error
import urllib.request

PROMPTS = ["Write a story about a lighthouse keeper.", "Explain how rain forms.",
           "List some facts about the Moon.", "Describe a walk through a forest.",
           "What makes a good cup of tea?", "Tell me about the history of bicycles."]


def metric(port, name):
    text = urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics").read().decode()
    m = re.search(r"^" + re.escape(name) + r" (\S+)$", text, re.M)
    if not m:
        sys.exit(f"/metrics has no {name}")
    return float(m.group(1))


def complete(port, model, prompt, max_tokens):
    body = json.dumps({"model": model, "prompt": prompt, "max_tokens": max_tokens,
                       "temperature": 0}).encode()
    req = urllib.request.Request(f"http://127.0.0.1:{port}/v1/completions", data=body,
                                 headers={"Content-Type": "application/json"})
    with urllib.request.urlopen(req, timeout=300) as r:
        return json.loads(r.read())


def run_level(port, models, c, seconds, max_tokens):
    """c clients per model in `models`, all at once, for `seconds`."""
    keys = {m: f'flashnorm_completion_tokens_total{{model="{m}"}}' for m in models}
    before = {m: metric(port, k) for m, k in keys.items()}
    deadline = time.time() + seconds
    counts = {m: [0, 0] for m in models}  # requests, errors
    messages = {m: [] for m in models}  # the first few errors' texts
    lock = threading.Lock()

    def worker(arg):
        m, w = arg
        i = 0
        while time.time() < deadline:
            try:
                complete(port, m, PROMPTS[(w + i) % len(PROMPTS)], max_tokens)
                with lock:
                    counts[m][0] += 1
            except (urllib.error.URLError, OSError) as e:
                text = str(e)
                if isinstance(e, urllib.error.HTTPError):
                    text += ": " + e.read().decode(errors="replace")[:300]
                with lock:
                    counts[m][1] += 1
                    if len(messages[m]) < 3:
                        messages[m].append(text)
            i += 1

    t0 = time.time()
    with cf.ThreadPoolExecutor(c * len(models)) as ex:
        list(ex.map(worker, [(m, w) for m in models for w in range(c)]))
    wall = time.time() - t0
    out = []
    for m in models:
        tokens = metric(port, keys[m]) - before[m]
        out.append({"model": m, "streams": c, "models_at_once": len(models),
                    "requests": counts[m][0], "errors": counts[m][1],
                    "output_tokens": int(tokens), "wall_s": round(wall, 2),
                    "output_tokens_per_s": round(tokens / wall, 2), "error_texts": messages[m]})
    return out


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--cli", required=True)
    ap.add_argument("--model", action="append", required=True,
                    help="NAME=PATH[,key=value...] as `serve --model` takes (device=cuda added)")
    ap.add_argument("--streams", default="1,32")
    ap.add_argument("--seconds", type=float, default=20)
    ap.add_argument("--max-tokens", type=int, default=64)
    ap.add_argument("--ctx", type=int, default=512)
    ap.add_argument("--commit", default="unknown")
    ap.add_argument("--driver", default="unknown")
    ap.add_argument("--out", default=None)
    a = ap.parse_args()
    levels = [int(x) for x in a.streams.split(",")]
    names = [m.split("=", 1)[0] for m in a.model]
    cmd = [a.cli, "serve", "--port", "0", "--ctx", str(a.ctx), "--max-concurrent",
           str(max(levels))]
    for m in a.model:
        cmd += ["--model", m + ",device=cuda"]
    proc = subprocess.Popen(cmd, stderr=subprocess.PIPE, text=True)
    port = None
    for line in proc.stderr:
        sys.stderr.write(line)
        hit = re.search(r"listening on http://[^:]+:(\d+)", line)
        if hit:
            port = int(hit.group(1))
            break
    if port is None:
        sys.exit(f"serve did not start (exit {proc.wait()})")
    threading.Thread(target=lambda: [sys.stderr.write(x) for x in proc.stderr], daemon=True).start()
    rows = []
    try:
        sample = complete(port, names[0], PROMPTS[0], a.max_tokens)
        print("sample completion:", json.dumps(sample["choices"][0]["text"])[:300])
        for m in names:
            for c in levels:
                rows += run_level(port, [m], c, a.seconds, a.max_tokens)
                print(json.dumps(rows[-1]), flush=True)
        if len(names) > 1:
            rows += run_level(port, names, max(levels), a.seconds, a.max_tokens)
            for r in rows[-len(names):]:
                print(json.dumps(r), flush=True)
    finally:
        proc.terminate()
        proc.wait(timeout=120)
    gpu = subprocess.run(["nvidia-smi", "--query-gpu=name", "--format=csv,noheader"],
                         capture_output=True, text=True).stdout.strip()
    doc = {"gpu": gpu, "driver": a.driver, "commit": a.commit,
           "date": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
           "server": " ".join(cmd), "max_tokens": a.max_tokens, "seconds": a.seconds,
           "method": "greedy /v1/completions requests back to back per client (urllib); output "
                     "tokens/s = the server's completion-token counter over the wall time",
           "rows": rows}
    print("| model | streams | models at once | output tok/s | requests | errors |")
    print("|---|---|---|---|---|---|")
    for r in rows:
        print(f"| {r['model']} | {r['streams']} | {r['models_at_once']} | "
              f"{r['output_tokens_per_s']:.0f} | {r['requests']} | {r['errors']} |")
    for m in names:
        one = [r for r in rows if r["model"] == m and r["streams"] == 1 and r["models_at_once"] == 1]
        top = [r for r in rows if r["model"] == m and r["streams"] == max(levels)
               and r["models_at_once"] == 1]
        if one and top and one[0]["output_tokens_per_s"] > 0:
            ratio = top[0]["output_tokens_per_s"] / one[0]["output_tokens_per_s"]
            doc.setdefault("scaling", {})[m] = ratio
            print(f"{m}: {max(levels)} streams / 1 stream = {ratio:.2f}x")
    if a.out:
        with open(a.out, "w") as f:
            json.dump(doc, f, indent=1)
    errors = sum(r["errors"] for r in rows)
    sys.exit(1 if errors else 0)


if __name__ == "__main__":
    main()
