#!/usr/bin/env bash
# The CPU engine's fp32 and native weights (--weights) side by side on the real quantized models:
# `flashnorm generate` under /usr/bin/time -v for SmolLM2-135M Q4_1 and Gemma 3 270M Q4_K_M,
# --weights f32 and native, --norm standard and flashnorm, greedy, a prompt of the first 600
# bytes of the GPL-3 text (prompt tokens/s) and up to N decoded tokens (decode tokens/s), each
# configuration run R times (medians reported), and peak RSS. Writes JSON (every run, plus the
# machine's load average before each) and prints a Markdown table.
#   scripts/cpu_weights_bench.sh [BUILD_DIR] [OUT_JSON]   (env: N=128 R=3 CTX=512 NICE=10)
set -euo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"
build="${1:-$root/build/dev}"
out="${2:-$root/bench/results/cpu_weights-$(git -C "$root" rev-parse --short HEAD)-$(date -u +%F).json}"
cli="$build/src/cli/flashnorm"
N="${N:-128}" R="${R:-3}" CTX="${CTX:-512}" NICE="${NICE:-10}"
text=/usr/share/common-licenses/GPL-3
[ -x "$cli" ] || { echo "error: $cli not built" >&2; exit 1; }
[ -r "$text" ] || { echo "error: $text missing (Debian base-files)" >&2; exit 1; }
eval "$("$root/scripts/fetch_models.sh" smollm2 gemma3)"
tmp="$(mktemp -d)"
trap 'rm -rf "$tmp"' EXIT
head -c 600 "$text" > "$tmp/prompt.txt"
runs="$tmp/runs.jsonl"
: > "$runs"
for model in "smollm2:$FLASHNORM_SMOLLM2_GGUF" "gemma3:$FLASHNORM_GEMMA3_GGUF"; do
  name="${model%%:*}" file="${model#*:}"
  for weights in f32 native; do
    for norm in standard flashnorm; do
      for _ in $(seq "$R"); do
        load="$(cut -d' ' -f1 /proc/loadavg)"
        /usr/bin/time -v -o "$tmp/time.txt" nice -n "$NICE" "$cli" generate -m "$file" \
          -f "$tmp/prompt.txt" -n "$N" --ctx "$CTX" --device cpu --weights "$weights" \
          --norm "$norm" > /dev/null 2> "$tmp/err.txt"
        python3 - "$tmp/err.txt" "$tmp/time.txt" "$name" "$file" "$weights" "$norm" "$load" \
          >> "$runs" <<'PY'
import json, os, re, sys
err, tim, name, f, weights, norm, load = sys.argv[1:]
e = open(err).read()
m = re.search(r"prompt: (\d+) tokens, ([\d.]+) tokens/s \| decode: (\d+) tokens, ([\d.]+) tokens/s", e)
dev = re.search(r"device: (.*) \|", e)
rss = int(re.search(r"Maximum resident set size \(kbytes\): (\d+)", open(tim).read()).group(1))
print(json.dumps({"model": name, "file": os.path.basename(f), "file_mb": os.path.getsize(f) / 1e6,
                  "weights": weights, "norm": norm, "engine": dev.group(1) if dev else "",
                  "prompt_tokens": int(m.group(1)), "prompt_tps": float(m.group(2)),
                  "decode_tokens": int(m.group(3)), "decode_tps": float(m.group(4)),
                  "peak_rss_mb": rss / 1024, "loadavg_1min_before": float(load)}))
PY
      done
    done
  done
done
python3 - "$runs" "$out" "$N" "$CTX" "$(git -C "$root" rev-parse --short HEAD)" <<'PY'
import json, statistics, sys, time
runs_path, out, n, ctx, commit = sys.argv[1:]
runs = [json.loads(l) for l in open(runs_path)]
keys = []
for r in runs:
    k = (r["model"], r["weights"], r["norm"])
    if k not in keys: keys.append(k)
summary = []
for k in keys:
    rs = [r for r in runs if (r["model"], r["weights"], r["norm"]) == k]
    summary.append({"model": k[0], "weights": k[1], "norm": k[2], "file_mb": rs[0]["file_mb"],
                    "prompt_tokens": rs[0]["prompt_tokens"],
                    "prompt_tps_median": statistics.median(r["prompt_tps"] for r in rs),
                    "decode_tokens": rs[0]["decode_tokens"],
                    "decode_tps_median": statistics.median(r["decode_tps"] for r in rs),
                    "peak_rss_mb_max": max(r["peak_rss_mb"] for r in rs),
                    "loadavg_1min_before": [r["loadavg_1min_before"] for r in rs]})
doc = {"what": "flashnorm generate, CPU engine, --weights f32 vs native", "commit": commit,
       "date": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()), "n_predict": int(n),
       "ctx": int(ctx), "cpus": __import__("os").cpu_count(), "summary": summary, "runs": runs}
with open(out, "w") as f:
    json.dump(doc, f, indent=2)
print(f"| model | weights | norm | prompt tok/s ({summary[0]['prompt_tokens']}) | decode tok/s | peak RSS MB | file MB |")
print("|---|---|---|---|---|---|---|")
for s in summary:
    print(f"| {s['model']} | {s['weights']} | {s['norm']} | {s['prompt_tps_median']:.1f} | "
          f"{s['decode_tps_median']:.1f} ({s['decode_tokens']}) | {s['peak_rss_mb_max']:.0f} | {s['file_mb']:.0f} |")
print(f"wrote {out}", file=sys.stderr)
PY
