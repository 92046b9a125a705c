"""Prefill and decode throughput of a Hugging Face model with and without flashnorm.hf, in one run.

Models are transformers' own classes at the real shapes of public checkpoints, with random weights
(matrices N(0, 1/K), embeddings N(0, 1), gains 1 + N(0, 0.1); Gemma-style 1 + w conventions do not
occur here), so no download is needed. Configurations:
  eager              the unmodified model
  compile            the unmodified model, forward under torch.compile (dynamic shapes)
  flashnorm          flashnorm.hf.fold_ + apply_ (on a GPU also tune_ for the decode and
                     prefill row counts, B and B x P)
  flashnorm_compile  the same, forward under torch.compile
  compile_ro         the unmodified model, forward under torch.compile(mode="reduce-overhead",
                     fullgraph=True): Inductor plus CUDA graphs (CUDA only)
  flashnorm_compile_ro  flashnorm.hf.fold_ + apply_ + tune_, the same mode
  flashnorm_mask_compile_ro  the same with apply_(cancel_columns=True): the q/k columns that
                     QK-norm renormalizes left unscaled by a per-column mask (Qwen3), which the
                     CUDA op runs on its two-stream path above 16 rows
Per model, configuration and batch size B: prefill tokens/s = B * P / (time of one forward over
B x P prompt tokens, no cache), decode tokens/s = B * D / (time of D one-token forwards with
transformers' DynamicCache after that prompt; under reduce-overhead a StaticCache, the prompt
prefilled eagerly, the D steps through the compiled forward, so each step replays a CUDA graph);
each the median of --reps timed runs after one warm-up (which compiles and records the graphs). Results as JSON (bench/results/torch_hf-<device>-<commit>-<date>.json unless --out).
The JSON's meta holds the load averages at the start and the end (a shared machine's other
processes). CPU table so far (SmolLM2-135M shapes, a loaded 2-core machine): docs/python.md,
measured with

  python3 bench/torch_hf.py --models smollm2-135m --device cpu --batch 1 8 --prompt 16 --decode 8 \
      --reps 3 --threads 1
"""
import argparse
import copy
import datetime
import inspect
import json
import os
import statistics
import subprocess
import time
from pathlib import Path

import torch
import transformers
from transformers import LlamaConfig, LlamaForCausalLM, Qwen3Config, Qwen3ForCausalLM

import flashnorm.hf as fh

# The shapes of public checkpoints (their config.json files), random weights.
MODELS = {
    "smollm2-135m": (LlamaForCausalLM, LlamaConfig, dict(
        hidden_size=576, intermediate_size=1536, num_hidden_layers=30, num_attention_heads=9,
        num_key_value_heads=3, vocab_size=49152, rms_norm_eps=1e-5, tie_word_embeddings=True,
        max_position_embeddings=8192, rope_theta=100000.0)),
    "llama-3.2-1b": (LlamaForCausalLM, LlamaConfig, dict(
        hidden_size=2048, intermediate_size=8192, num_hidden_layers=16, num_attention_heads=32,
        num_key_value_heads=8, head_dim=64, vocab_size=128256, rms_norm_eps=1e-5,
        tie_word_embeddings=True, max_position_embeddings=131072, rope_theta=500000.0)),
    "llama-3-8b": (LlamaForCausalLM, LlamaConfig, dict(
        hidden_size=4096, intermediate_size=14336, num_hidden_layers=32, num_attention_heads=32,
        num_key_value_heads=8, vocab_size=128256, rms_norm_eps=1e-5, tie_word_embeddings=False,
        max_position_embeddings=8192, rope_theta=500000.0)),
    "qwen3-0.6b": (Qwen3ForCausalLM, Qwen3Config, dict(
        hidden_size=1024, intermediate_size=3072, num_hidden_layers=28, num_attention_heads=16,
        num_key_value_heads=8, head_dim=128, vocab_size=151936, rms_norm_eps=1e-6,
        tie_word_embeddings=True, max_position_embeddings=40960, rope_theta=1000000.0)),
}
CONFIGS = ["eager", "compile", "flashnorm", "flashnorm_compile", "compile_ro",
           "flashnorm_compile_ro", "flashnorm_mask_compile_ro"]


def build(name, device, dtype):
    cls, cfg_cls, kw = MODELS[name]
    torch.manual_seed(0)
    with torch.device(device):
        model = cls(cfg_cls(**kw)).eval()
    with torch.no_grad():
        for pname, p in model.named_parameters():
            if p.dim() == 2:
                p.normal_(0.0, 1.0 if "embed" in pname else p.shape[1] ** -0.5)
            else:
                p.normal_(1.0, 0.1)
    return model.to(dtype)


def sync(device):
    if device == "cuda":
        torch.cuda.synchronize()


def timed(fn, device, reps):
    """Median seconds of `reps` calls of fn after one warm-up call."""
    fn()
    out = []
    for _ in range(reps):
        sync(device)
        t = time.perf_counter()
        fn()
        sync(device)
        out.append(time.perf_counter() - t)
    return statistics.median(out)


def measure(model, device, batch, prompt, decode, reps, vocab):
    ids = torch.randint(3, vocab, (batch, prompt), device=device,
                        generator=torch.Generator(device).manual_seed(1))
    if getattr(model, "graphed_forward", None) is not None:
        return measure_graphed(model, device, ids, decode, reps)

    def prefill():
        with torch.no_grad():
            model(ids, use_cache=False)

    # transformers renames the cache argument (past_key_values -> cache, deprecated in 5.24)
    params = inspect.signature(type(model).forward).parameters
    cache_kw = "cache" if "cache" in params else "past_key_values"

    def decode_steps():
        with torch.no_grad():
            cache = transformers.DynamicCache(config=model.config)
            out = model(ids, use_cache=True, **{cache_kw: cache})
            nxt = out.logits[:, -1:].argmax(-1)
            sync(device)
            t = time.perf_counter()
            for _ in range(decode):
                out = model(nxt, use_cache=True, **{cache_kw: cache})
                nxt = out.logits[:, -1:].argmax(-1)
            sync(device)
            decode_steps.seconds = time.perf_counter() - t

    t_prefill = timed(prefill, device, reps)
    decode_times = []
    decode_steps()  # warm-up
    for _ in range(reps):
        decode_steps()
        decode_times.append(decode_steps.seconds)
    return batch * prompt / t_prefill, batch * decode / statistics.median(decode_times)


def measure_graphed(model, device, ids, decode, reps):
    """measure() under torch.compile(mode="reduce-overhead"): model.graphed_forward is the compiled
    forward; prefill runs it over the prompt with no cache, decode prefills a StaticCache eagerly
    (model.forward) and then runs `decode` one-token steps through it (each a CUDA graph replay;
    torch.compiler.cudagraph_mark_step_begin() marks every step a new one)."""
    step = model.graphed_forward
    batch, prompt = ids.shape
    params = inspect.signature(type(model).forward).parameters
    cache_kw = "cache" if "cache" in params else "past_key_values"

    def prefill():
        with torch.no_grad():
            torch.compiler.cudagraph_mark_step_begin()
            step(ids, use_cache=False)

    cache = transformers.StaticCache(config=model.config, max_cache_len=prompt + decode + 1)

    def decode_steps():
        with torch.no_grad():
            cache.reset()
            out = model.forward(ids, use_cache=True, cache_position=torch.arange(prompt, device=device),
                                **{cache_kw: cache})
            nxt = out.logits[:, -1:].argmax(-1)
            pos = torch.tensor([prompt], device=device)
            sync(device)
            t = time.perf_counter()
            for i in range(decode):
                torch.compiler.cudagraph_mark_step_begin()
                out = step(nxt, use_cache=True, cache_position=pos + i, **{cache_kw: cache})
                nxt = out.logits[:, -1:].argmax(-1)
            sync(device)
            decode_steps.seconds = time.perf_counter() - t

    t_prefill = timed(prefill, device, reps)
    decode_times = []
    decode_steps()  # warm-up: compiles and records the step's graph
    for _ in range(reps):
        decode_steps()
        decode_times.append(decode_steps.seconds)
    return batch * prompt / t_prefill, batch * decode / statistics.median(decode_times)


def variant(base, config, device, batches, prompt):
    model = copy.deepcopy(base)
    if config.startswith("flashnorm"):
        fh.apply_(fh.fold_(model), cancel_columns="mask" in config)
        if device == "cuda":  # every M the run uses: decode (B rows) and prefill (B x prompt)
            fh.tune_(model, rows=tuple(batches) + tuple(b * prompt for b in batches))
    if config.endswith("compile"):
        torch._dynamo.reset()
        model.forward = torch.compile(model.forward, dynamic=True)
    if config.endswith("compile_ro"):
        if device != "cuda":
            raise SystemExit(f"{config}: CUDA graphs need --device cuda")
        torch._dynamo.reset()
        # dynamic=None: the first batch size compiles static shapes, a second one recompiles with
        # the batch dimension symbolic; every distinct shape records its own CUDA graph
        model.graphed_forward = torch.compile(model.forward, mode="reduce-overhead",
                                              fullgraph=True)
    return model


def commit():
    r = subprocess.run(["git", "rev-parse", "--short", "HEAD"], capture_output=True, text=True,
                       cwd=Path(__file__).parent)
    return r.stdout.strip() or "unknown"


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--models", default="smollm2-135m",
                    help=f"comma-separated: {', '.join(MODELS)}")
    ap.add_argument("--configs", default=",".join(CONFIGS), help=", ".join(CONFIGS))
    ap.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    ap.add_argument("--dtype", default=None, help="float32 (CPU default) or bfloat16 (GPU default)")
    ap.add_argument("--batch", type=int, nargs="+", default=[1, 8, 32])
    ap.add_argument("--prompt", type=int, default=128, help="prompt tokens per sequence")
    ap.add_argument("--decode", type=int, default=32, help="decode steps timed")
    ap.add_argument("--reps", type=int, default=3)
    ap.add_argument("--threads", type=int, default=None,
                    help="torch CPU threads (default torch's; on a loaded machine 1 avoids OpenMP "
                         "spinning against other processes)")
    ap.add_argument("--out", default=None)
    a = ap.parse_args()
    if a.threads:
        torch.set_num_threads(a.threads)
    dtype = getattr(torch, a.dtype or ("bfloat16" if a.device == "cuda" else "float32"))
    configs = a.configs.split(",")
    for c in configs:
        if c not in CONFIGS:
            ap.error(f"unknown configuration {c!r} (known: {', '.join(CONFIGS)})")
    rows = []
    load_start = os.getloadavg()
    out = Path(a.out or Path(__file__).parent / "results" /
               f"torch_hf-{a.device}-{commit()}-{datetime.date.today().isoformat()}.json")
    for name in a.models.split(","):
        if name not in MODELS:
            ap.error(f"unknown model {name!r} (known: {', '.join(MODELS)})")
        base = build(name, a.device, dtype)
        for config in configs:
            model = variant(base, config, a.device, a.batch, a.prompt)
            torch._dynamo.utils.counters.clear()
            for b in a.batch:
                pre, dec = measure(model, a.device, b, a.prompt, a.decode, a.reps,
                                   base.config.vocab_size)
                row = dict(model=name, config=config, batch=b, prompt=a.prompt,
                           decode_steps=a.decode, prefill_tok_s=round(pre, 2),
                           decode_tok_s=round(dec, 2),
                           # dynamo's count so far for this configuration (fullgraph: raises instead)
                           graph_breaks=sum(torch._dynamo.utils.counters["graph_break"].values()))
                rows.append(row)
                print(json.dumps(row), flush=True)
                write(out, a, dtype, load_start, rows)  # after every row: a cut-off run keeps them
            del model
            if a.device == "cuda":
                torch.cuda.empty_cache()
    print(f"wrote {out}")


def write(out, a, dtype, load_start, rows):
    date = datetime.date.today().isoformat()
    meta = dict(torch=torch.__version__, transformers=transformers.__version__,
                device=torch.cuda.get_device_name() if a.device == "cuda" else "cpu",
                threads=torch.get_num_threads(), dtype=str(dtype), commit=commit(), date=date,
                reps=a.reps, cpu_count=os.cpu_count(),
                # 1/5/15-minute load averages: other processes on a shared machine
                load_avg_start=[round(x, 2) for x in load_start],
                load_avg_end=[round(x, 2) for x in os.getloadavg()])
    out.write_text(json.dumps(dict(meta=meta, rows=rows), indent=1) + "\n")


if __name__ == "__main__":
    main()
