"""flashnorm's CUDA engine beside llama.cpp's CUDA backend (scripts/gpu_peers.sh run): reads a
folder of results and writes one JSON file and a Markdown table.

  python3 bench/peers_table.py DIR --out peers.json --gpu NAME --driver V --commit C --date D
                               --llama-commit C --llama-cpp-python V

DIR holds, per model NAME: fn_NAME.json (flashnorm bench --model --weights native: prompts and
batch 1), fnb_NAME.json (the same with --batch ...: batched decode),
llama_bench_NAME.jsonl (llama-bench -o jsonl: pp512, pp4096, tg128) and llama_batched_NAME.jsonl
(llama-batched-bench --output-format jsonl: one line per -npl). Rows: decode tokens/s at batch 1
(flashnorm: its flashnorm configuration on bf16 and on native weights), output tokens/s at 8, 32
and 64 sequences, prompt tokens/s at 512 and 4096 tokens; each flashnorm figure with its ratio to
llama.cpp's. A file that is missing or holds no result gives "n/a", never an invented number.
"""
import argparse
import json
from pathlib import Path


def _jsonl(path: Path) -> list[dict]:
    if not path.exists():
        return []
    out = []
    for line in path.read_text().splitlines():
        line = line.strip()
        if line.startswith("{"):
            try:
                out.append(json.loads(line))
            except json.JSONDecodeError:
                pass
    return out


def flashnorm_rows(path: Path, batched: Path) -> dict:
    """{'decode_bf16': tok/s, 'decode_native': ..., 'batch_N_bf16': output tok/s, ...,
    'prompt_N_bf16': tok/s, ...} of the flashnorm configurations (bf16 and native): prompts and
    batch-1 decode from `path`, batched decode from `batched` (or `path` when it has them)."""
    out = {}
    if not path.exists():
        return out
    d = json.loads(path.read_text())
    if batched.exists():
        d["batched_decode"] = d.get("batched_decode", []) + \
            json.loads(batched.read_text()).get("batched_decode", [])
    for c in d.get("configs", []):
        kind = {"flashnorm": "bf16", "flashnorm, native": "native"}.get(c.get("name"))
        if kind is None:
            continue
        out[f"decode_{kind}"] = c.get("decode_tokens_per_s")
        for p in c.get("prompts", []):
            out[f"prompt_{p['tokens']}_{kind}"] = p.get("tokens_per_s")
    for b in d.get("batched_decode", []):
        kind = {"flashnorm": "bf16", "flashnorm, native": "native"}.get(b.get("config"))
        if kind is not None:
            out[f"batch_{b['batch']}_{kind}"] = b.get("output_tokens_per_s")
    return out


def llama_rows(bench: Path, batched: Path) -> dict:
    out = {}
    for t in _jsonl(bench):
        if t.get("n_gen", 0) == 0 and t.get("n_prompt"):
            out[f"prompt_{t['n_prompt']}"] = t.get("avg_ts")
        elif t.get("n_prompt", 0) == 0 and t.get("n_gen"):
            out["decode"] = t.get("avg_ts")
    for t in _jsonl(batched):
        out[f"batch_{t['pl']}"] = t.get("speed_tg")
    return out


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("dir", type=Path)
    ap.add_argument("--out", type=Path, required=True)
    for k in ("gpu", "driver", "commit", "date", "llama-commit", "llama-cpp-python"):
        ap.add_argument(f"--{k}", default="unknown")
    a = ap.parse_args()
    models = sorted(p.name[3:-5] for p in a.dir.glob("fn_*.json"))
    models += sorted({p.name[12:-6] for p in a.dir.glob("llama_bench_*.jsonl")} - set(models))
    result = {"gpu": a.gpu, "driver": a.driver, "date": a.date, "flashnorm_commit": a.commit,
              "llama_cpp_commit": a.llama_commit, "llama_cpp_python": a.llama_cpp_python,
              "method": "flashnorm bench --model --weights native --quick --configs flashnorm "
                        "(medians of --runs; batched decode after a 128-token prompt); "
                        "llama-bench -ngl 99 -fa 1 -r 5 (avg_ts); llama-batched-bench -ngl 99 "
                        "-fa 1 -npp 128 -ntg 128 (speed_tg)",
              "models": {}}
    print(f"GPU {a.gpu}, driver {a.driver}, flashnorm {a.commit}, llama.cpp {a.llama_commit}\n")
    print("| model | measure | llama.cpp | flashnorm bf16 | x | flashnorm native | x |")
    print("|---|---|---|---|---|---|---|")
    for m in models:
        fn = flashnorm_rows(a.dir / f"fn_{m}.json", a.dir / f"fnb_{m}.json")
        ll = llama_rows(a.dir / f"llama_bench_{m}.jsonl", a.dir / f"llama_batched_{m}.jsonl")
        result["models"][m] = {"flashnorm": fn, "llama_cpp": ll}
        for key, label in (("decode", "decode tok/s, batch 1"), ("batch_8", "output tok/s, 8"),
                           ("batch_32", "output tok/s, 32"), ("batch_64", "output tok/s, 64"),
                           ("prompt_512", "prompt tok/s, 512"),
                           ("prompt_4096", "prompt tok/s, 4096")):
            ref = ll.get(key)
            cells = []
            for kind in ("bf16", "native"):
                v = fn.get(f"{key}_{kind}")
                cells.append(f"{v:.0f}" if v else "n/a")
                cells.append(f"{v / ref:.2f}x" if v and ref else "n/a")
            print(f"| {m} | {label} | {f'{ref:.0f}' if ref else 'n/a'} | " + " | ".join(cells)
                  + " |")
    a.out.write_text(json.dumps(result, indent=1) + "\n")


if __name__ == "__main__":
    main()
