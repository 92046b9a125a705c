"""/v1/embeddings throughput and latency on the CPU: `flashnorm serve` beside llama-server
--embedding and sentence-transformers, on the same weights, cores and inputs.

The model: a random GGUF at Qwen3-Embedding-0.6B's shape (28 layers, hidden 1024, 16 / 8 heads of
128, FFN 3072, QK-norm, last-token pooling, L2; Q8_0, SmolLM2's vocabulary so llama.cpp loads it;
written by bench/probes/random_quant_gguf), served by flashnorm (native blocks, both norm modes)
and by llama-server (an outside reference built by scripts/cpu_bench.sh into the ignored cache,
never part of the product: --embedding --pooling last, the same threads); sentence-transformers
runs the same weights dequantized to fp32 (a Qwen3Model written from the GGUF by gguf-py, with
Pooling lasttoken and Normalize) in this process.
Workloads: 1000 texts of about 32 tokens and 100 of about 512 (random words of the GPL), sent as
requests of --batch texts by --clients concurrent clients; per request latency (p50, p99) and
throughput (texts/s and tokens/s by each server's own usage counts) over the whole workload.
Systems alternate, --rounds rounds; medians. Writes JSON to
bench/results/embed_load-cpu-<commit>-<date>.json and prints a Markdown table.
Usage: bench/embed_load.py --cli build/release/src/cli/flashnorm --llama-server BIN
       [--probe build/release/bench/probes/random_quant_gguf] [--vocab SMOLLM2.gguf]
       [--rounds 2] [--batch 16] [--clients 4] [--threads 2]
"""
import argparse
import concurrent.futures as cf
import datetime
import http.client
import json
import os
import random
import socket
import statistics
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
GPL = Path("/usr/share/common-licenses/GPL-3")


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def workloads(seed=3):
    words = GPL.read_text().split()
    rng = random.Random(seed)

    def text(n):
        i = rng.randrange(len(words) - n)
        return " ".join(words[i:i + n])
    # about 1.3 tokens per word of the GPL with SmolLM2's tokenizer
    return {"short": [text(24) for _ in range(1000)], "long": [text(390) for _ in range(100)]}


def model_files(args, cache):
    gguf = cache / "qwen3_emb_0.6b.q8_0.gguf"
    if not gguf.exists():
        subprocess.run([args.probe, gguf, "q8_0", "--arch", "qwen3", "--layers", "28", "--hidden",
                        "1024", "--ffn", "3072", "--heads", "16", "--kv-heads", "8", "--head-dim",
                        "128", "--distinct", "4", "--pooling", "last", "--vocab-from", args.vocab],
                       check=True)
    st_dir = cache / "qwen3_emb_0.6b_st"
    if not (st_dir / "modules.json").exists():
        write_st(gguf, args.vocab, st_dir)
    return gguf, st_dir


def write_st(gguf_path, vocab, out):
    """The GGUF's weights dequantized into a Qwen3Model + Pooling(lasttoken) + Normalize."""
    import gguf
    import numpy as np
    import torch
    from sentence_transformers import SentenceTransformer, models
    from transformers import AutoTokenizer, Qwen3Config, Qwen3Model
    r = gguf.GGUFReader(str(gguf_path))
    names = {"token_embd": "embed_tokens", "output_norm": "norm", "attn_norm": "input_layernorm",
             "attn_q": "self_attn.q_proj", "attn_k": "self_attn.k_proj",
             "attn_v": "self_attn.v_proj", "attn_output": "self_attn.o_proj",
             "attn_q_norm": "self_attn.q_norm", "attn_k_norm": "self_attn.k_norm",
             "ffn_norm": "post_attention_layernorm", "ffn_gate": "mlp.gate_proj",
             "ffn_up": "mlp.up_proj", "ffn_down": "mlp.down_proj"}
    state = {}
    for t in r.tensors:
        parts = t.name.split(".")
        if parts[0] == "blk":
            key = f"layers.{parts[1]}.{names[parts[2]]}.{parts[3]}"
        else:
            key = f"{names[parts[0]]}.{parts[1]}"
        v = gguf.quants.dequantize(t.data, t.tensor_type)
        state[key] = torch.from_numpy(np.ascontiguousarray(v, dtype=np.float32)).reshape(
            [int(d) for d in reversed(t.shape)])
    vocab_rows = state["embed_tokens.weight"].shape[0]
    cfg = Qwen3Config(vocab_size=vocab_rows, hidden_size=1024, intermediate_size=3072,
                      num_hidden_layers=28, num_attention_heads=16, num_key_value_heads=8,
                      head_dim=128, rms_norm_eps=1e-6, max_position_embeddings=8192,
                      rope_parameters={"rope_type": "default", "rope_theta": 1e6},
                      tie_word_embeddings=True)
    model = Qwen3Model(cfg)
    model.load_state_dict(state)
    hf = out.parent / (out.name + "_transformer")
    model.save_pretrained(hf)
    tok = AutoTokenizer.from_pretrained(str(Path(vocab).parent), gguf_file=Path(vocab).name)
    tok.pad_token = tok.eos_token
    # without it: sentence-transformers 6 would format every text as a chat message (its
    # "message" modality), which neither server does
    tok.chat_template = None
    tok.save_pretrained(hf)
    st = SentenceTransformer(modules=[models.Transformer(str(hf)),
                                      models.Pooling(1024, pooling_mode="lasttoken"),
                                      models.Normalize()])
    st.save(str(out))


def post(port, body):
    c = http.client.HTTPConnection("127.0.0.1", port, timeout=3600)
    c.request("POST", "/v1/embeddings", json.dumps(body), {"Content-Type": "application/json"})
    r = c.getresponse()
    data = json.loads(r.read())
    c.close()
    if r.status != 200:
        raise RuntimeError(f"HTTP {r.status}: {data}")
    return data


def load(port, model, texts, batch, clients):
    """(wall seconds, tokens, request latencies) of `texts` in requests of `batch`."""
    reqs = [texts[i:i + batch] for i in range(0, len(texts), batch)]

    def one(inputs):
        t0 = time.time()
        d = post(port, {"model": model, "input": inputs})
        assert len(d["data"]) == len(inputs)
        return time.time() - t0, d["usage"]["prompt_tokens"]
    t0 = time.time()
    with cf.ThreadPoolExecutor(clients) as ex:
        out = list(ex.map(one, reqs))
    return time.time() - t0, sum(t for _, t in out), [lat for lat, _ in out]


def wait_health(port, proc, what):
    deadline = time.time() + 300
    while time.time() < deadline:
        if proc.poll() is not None:
            raise RuntimeError(f"{what} exited with {proc.returncode}")
        try:
            c = http.client.HTTPConnection("127.0.0.1", port, timeout=2)
            c.request("GET", "/health")
            if c.getresponse().status == 200:
                return
        except OSError:
            pass
        time.sleep(0.5)
    raise RuntimeError(f"{what} did not start")


def server(system, args, gguf):
    port = free_port()
    if system.startswith("flashnorm"):
        norm = system.split("-")[1]
        cmd = [args.cli, "serve", "--port", str(port), "--model", f"m={gguf},norm={norm}"]
    else:
        cmd = [args.llama_server, "-m", str(gguf), "--embedding", "--pooling", "last", "--port",
               str(port), "-t", str(args.threads), "-tb", str(args.threads), "-np",
               str(args.clients), "-c", str(args.clients * 1024), "-b", "4096", "-ub", "4096"]
    # the server's log to a file: an unread pipe fills and stops the server
    log = open(args.log_dir / f"{system}.log", "a")
    proc = subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT, text=True)
    wait_health(port, proc, system)
    return proc, port


def summary(runs):
    return {"tokens_per_s": statistics.median(r["tokens"] / r["seconds"] for r in runs),
            "texts_per_s": statistics.median(r["texts"] / r["seconds"] for r in runs),
            "p50_s": statistics.median(statistics.median(r["latencies"]) for r in runs),
            "p99_s": statistics.median(sorted(r["latencies"])[int(0.99 * (len(r["latencies"]) - 1))]
                                       for r in runs)}


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--cli", required=True)
    ap.add_argument("--llama-server", required=True)
    ap.add_argument("--probe", default=str(ROOT / "build/release/bench/probes/random_quant_gguf"))
    ap.add_argument("--vocab", default=os.environ.get("FLASHNORM_SMOLLM2_GGUF"))
    ap.add_argument("--rounds", type=int, default=2)
    ap.add_argument("--batch", type=int, default=16)
    ap.add_argument("--clients", type=int, default=4)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--no-st", action="store_true", help="skip sentence-transformers")
    ap.add_argument("--systems", default="flashnorm-flashnorm,llama-server,flashnorm-standard",
                    help="servers to alternate (flashnorm-flashnorm, flashnorm-standard, "
                         "llama-server)")
    ap.add_argument("--out")
    args = ap.parse_args()
    cache = Path(os.environ.get("FLASHNORM_CACHE", Path.home() / ".cache/flashnorm")) / "embed_load"
    cache.mkdir(parents=True, exist_ok=True)
    gguf, st_dir = model_files(args, cache)
    args.log_dir = cache
    work = workloads()
    systems = [s for s in args.systems.split(",") if s]
    runs = {s: {w: [] for w in work} for s in systems}
    for rnd in range(args.rounds):
        for s in systems if rnd % 2 == 0 else list(reversed(systems)):
            proc, port = server(s, args, gguf)
            try:
                post(port, {"model": "m", "input": work["short"][:4]})  # warm-up
                for w, texts in work.items():
                    sec, tokens, lat = load(port, "m", texts, args.batch, args.clients)
                    runs[s][w].append({"seconds": sec, "tokens": tokens, "texts": len(texts),
                                       "latencies": lat})
                    print(f"round {rnd} {s} {w}: {tokens / sec:.0f} tokens/s, "
                          f"p50 {statistics.median(lat):.2f} s", flush=True)
            finally:
                proc.terminate()
                proc.wait(timeout=60)
    if not args.no_st:
        import torch
        from sentence_transformers import SentenceTransformer
        torch.set_num_threads(args.threads)
        st = SentenceTransformer(str(st_dir), device="cpu")
        runs["sentence-transformers"] = {}
        for w, texts in work.items():
            tokens = sum(len(st.tokenize([t])["input_ids"][0]) for t in texts)
            t0 = time.time()
            lat = []
            for i in range(0, len(texts), args.batch):
                b0 = time.time()
                st.encode(texts[i:i + args.batch], batch_size=args.batch)
                lat.append(time.time() - b0)
            sec = time.time() - t0
            runs["sentence-transformers"][w] = [{"seconds": sec, "tokens": tokens,
                                                "texts": len(texts), "latencies": lat}]
            print(f"sentence-transformers {w}: {tokens / sec:.0f} tokens/s", flush=True)
    commit = subprocess.run(["git", "-C", str(ROOT), "rev-parse", "--short", "HEAD"],
                            capture_output=True, text=True).stdout.strip()
    flags = Path("/proc/cpuinfo").read_text().split("flags")[1].split("\n")[0]
    result = {
        "commit": commit, "date": datetime.date.today().isoformat(),
        "cpu": Path("/proc/cpuinfo").read_text().split("model name")[1].split("\n")[0].strip(" \t:"),
        "simd": [f for f in ("avx2", "avx512f", "avx512_vnni") if f in flags.split()],
        "threads": args.threads, "batch": args.batch, "clients": args.clients,
        "model": "random Qwen3-Embedding-0.6B shape, Q8_0, last-token pooling, L2",
        "llama_server": args.llama_server,
        "summary": {s: {w: summary(r) for w, r in per.items()} for s, per in runs.items()},
        "runs": runs,
    }
    out = Path(args.out or ROOT / f"bench/results/embed_load-cpu-{commit}-{result['date']}.json")
    out.write_text(json.dumps(result, indent=1))
    ref = result["summary"].get("llama-server")
    print("\n| system | workload | tokens/s | texts/s | p50 s | p99 s | vs llama-server |")
    print("|---|---|---:|---:|---:|---:|---:|")
    for s, per in result["summary"].items():
        for w, m in per.items():
            print(f"| {s} | {w} | {m['tokens_per_s']:.0f} | {m['texts_per_s']:.1f} | "
                  f"{m['p50_s']:.2f} | {m['p99_s']:.2f} | "
                  + (f"{m['tokens_per_s'] / ref[w]['tokens_per_s']:.2f}x |" if ref else "- |"))
    print(f"\n{out}")


if __name__ == "__main__":
    sys.exit(main())
