#!/usr/bin/env bash
# The requantization table (issue 21): what `flashnorm fold` costs on each real model per output
# type. For SmolLM2-135M Q4_1 and Gemma 3 270M Q4_K_M: the unfolded file, then `fold --dtype f32`,
# `fold --requantize` (same types), `--requantize TYPE` for each of Q4_0 Q4_1 Q4_K Q5_K Q6_K Q8_0,
# and `--requantize --keep-tied-head`; for each: the stored types of the folded tensors, the file
# size, llama.cpp's perplexity of the file (llama-perplexity, an outside reader: first PPL_CHUNKS
# chunks of 512 tokens of the GPL-3 text, T threads), flashnorm verify's perplexity (the folded
# file in flashnorm mode against the unfolded one in standard mode, fp32 weights, the first
# PPL_CHUNKS * 512 tokens in chunks of 512, no greedy runs) and the added relative RMS error per
# tensor kind that fold prints. llama.cpp is the build scripts/cpu_bench.sh makes in the cache
# (only llama-perplexity is run; nothing is linked).
#
#   scripts/requant_bench.sh [FLASHNORM_BUILD_DIR] [OUT_JSON]
#     FLASHNORM_BUILD_DIR: default build/release; OUT_JSON: default
#     bench/results/requant-<flashnorm commit>-<date>.json (a markdown table is printed)
#   env: T=2 PPL_CHUNKS=2 NICE=19 LLAMA_CPP_PYTHON=0.3.36 FLASHNORM_CACHE (~/.cache/flashnorm)
#        MODELS="smollm2 gemma3" TYPES="Q4_0 Q4_1 Q4_K Q5_K Q6_K Q8_0" FLASHNORM_COMMIT
#        LLAMA_PERPLEXITY (default: the native build's; scripts/cpu_bench.sh passes the one it ran)
set -euo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"
build="$(cd "${1:-$root/build/release}" && pwd)"
T="${T:-2}" PPL_CHUNKS="${PPL_CHUNKS:-2}" NICE="${NICE:-19}"
LLAMA_CPP_PYTHON="${LLAMA_CPP_PYTHON:-0.3.36}"
MODELS="${MODELS:-smollm2 gemma3}" TYPES="${TYPES:-Q4_0 Q4_1 Q4_K Q5_K Q6_K Q8_0}"
cache="${FLASHNORM_CACHE:-$HOME/.cache/flashnorm}"
cli="$build/src/cli/flashnorm"
lppl="${LLAMA_PERPLEXITY:-$cache/llama.cpp-$LLAMA_CPP_PYTHON/build/bin/llama-perplexity}"
text=/usr/share/common-licenses/GPL-3
[ -x "$cli" ] || { echo "error: $cli not built" >&2; exit 1; }
[ -x "$lppl" ] || { echo "error: $lppl missing: run scripts/cpu_bench.sh once" >&2; exit 1; }
[ -r "$text" ] || { echo "error: $text missing (Debian base-files)" >&2; exit 1; }
fn_src="$(sed -n 's/^CMAKE_HOME_DIRECTORY:INTERNAL=//p' "$build/CMakeCache.txt")"
fn_commit="${FLASHNORM_COMMIT:-$(git -C "$fn_src" rev-parse --short HEAD)}"
out="${2:-$root/bench/results/requant-$fn_commit-$(date -u +%F).json}"
tmp="$(mktemp -d)"
trap 'rm -rf "$tmp"' EXIT
eval "$("$root/scripts/fetch_models.sh" $MODELS)"
export OPENBLAS_NUM_THREADS="$T"
runs="$tmp/runs.jsonl"
: > "$runs"

# row MODEL NAME FILE FOLD_STDOUT_OR_EMPTY ORIGINAL: perplexities and size of one file
row() {
  local model="$1" name="$2" file="$3" foldout="$4" orig="$5"
  echo "$model $name: llama-perplexity (load $(cut -d' ' -f1 /proc/loadavg))" >&2
  nice -n "$NICE" "$lppl" -m "$file" -f "$text" -c 512 -b 512 --chunks "$PPL_CHUNKS" -t "$T" \
    > "$tmp/lppl.out" 2> "$tmp/lppl.err" || { tail -20 "$tmp/lppl.err" >&2; exit 1; }
  local vjson=""
  if [ "$file" != "$orig" ]; then
    echo "$model $name: flashnorm verify" >&2
    nice -n "$NICE" "$cli" verify "$orig" "$file" --text "$text" --ctx 512 \
      --max-text-tokens $((PPL_CHUNKS * 512)) --tokens 0 --json "$tmp/verify.json" \
      > "$tmp/verify.out" 2> "$tmp/verify.err" || { tail -20 "$tmp/verify.err" >&2; exit 1; }
    vjson="$tmp/verify.json"
  fi
  python3 - "$model" "$name" "$file" "$foldout" "$tmp/lppl.err" "$vjson" >> "$runs" <<'PY'
import json, os, re, sys
model, name, file, foldout, lerr, vjson = sys.argv[1:]
e = open(lerr).read()
m = re.search(r"Final estimate: PPL = ([\d.]+) \+/- ([\d.]+)", e)
if not m:
    sys.exit(f"error: no estimate from llama-perplexity:\n{e[-2000:]}")
d = dict(model=model, config=name, size_bytes=os.path.getsize(file),
         llama_ppl=float(m.group(1)), llama_ppl_err=float(m.group(2)))
if vjson:
    v = json.load(open(vjson))
    r = v["results"][0]
    d.update(flashnorm_ppl_original=r["ppl_original"], flashnorm_ppl=r["ppl_folded"],
             flashnorm_ppl_rel_diff=r["ppl_rel_diff"], top1_agreement=r.get("top1_agreement"),
             positions=r["positions"])
if foldout:
    lines = open(foldout).read().splitlines()
    kinds, fallback = {}, []
    if any(l.startswith("tensor kind") for l in lines):
        start = next(i for i, l in enumerate(lines) if l.startswith("tensor kind")) + 1
        for l in lines[start:]:
            p = l.split()
            if len(p) != 3 or not re.match(r"^[\d.e+-]+$", p[2]):
                break
            kinds[p[0]] = dict(type=p[1], added_rel_rms=float(p[2]))
    fallback = [l for l in lines if "are not a multiple of" in l]
    d.update(added_error_by_kind=kinds, fallback=fallback,
             fold_stdout=[l for l in lines if l.startswith("folded ") or l.startswith("projections")])
print(json.dumps(d))
PY
}

for model in $MODELS; do
  case "$model" in
    smollm2) orig="$FLASHNORM_SMOLLM2_GGUF" ;;
    gemma3) orig="$FLASHNORM_GEMMA3_GGUF" ;;
    *) echo "error: unknown model $model" >&2; exit 1 ;;
  esac
  row "$model" unfolded "$orig" "" "$orig"
  configs=("dtype-f32:--dtype f32" "requantize-same:--requantize"
           "requantize-same-keep-tied-head:--requantize --keep-tied-head")
  for t in $TYPES; do configs+=("requantize-$t:--requantize $t"); done
  for c in "${configs[@]}"; do
    name="${c%%:*}" args="${c#*:}"
    f="$tmp/$model-$name.gguf"
    echo "$model $name: fold $args" >&2
    # shellcheck disable=SC2086
    nice -n "$NICE" "$cli" fold "$orig" -o "$f" $args > "$tmp/fold.out" 2> "$tmp/fold.err" ||
      { cat "$tmp/fold.err" >&2; exit 1; }
    # A fold whose folded tensors all got the same non-k-quant types as an earlier one's holds
    # the same tensor bytes (e.g. Q6_K falling back to Q8_0 everywhere, and Q8_0): not rerun.
    key="$model $(sed -n '/^tensor kind/,/^[^a-z]/p' "$tmp/fold.out" | awk 'NF == 3 {print $1, $2}' |
      tr '\n' ' ')"
    prev=""
    if [ -n "${key#"$model "}" ] && ! grep -q '_K' <<< "$key"; then
      prev="$(awk -v k="$key" -F'\t' '$1 == k {print $2; exit}' "$tmp/seen.tsv" 2> /dev/null || true)"
    fi
    if [ -n "$prev" ]; then
      echo "$model $name: same folded tensors as $prev, not rerun" >&2
      python3 - "$runs" "$model" "$prev" "$name" "$f" "$tmp/fold.out" >> "$runs.new" <<'PY'
import json, os, sys
runs, model, prev, name, f, foldout = sys.argv[1:]
r = next(json.loads(l) for l in open(runs) if json.loads(l)["model"] == model and json.loads(l)["config"] == prev)
lines = open(foldout).read().splitlines()
r.update(config=name, size_bytes=os.path.getsize(f), same_folded_tensors_as=prev,
         fallback=[l for l in lines if "are not a multiple of" in l],
         fold_stdout=[l for l in lines if l.startswith("folded ") or l.startswith("projections")])
print(json.dumps(r))
PY
      cat "$runs.new" >> "$runs" && rm -f "$runs.new"
    else
      row "$model" "$name" "$f" "$tmp/fold.out" "$orig"
      printf '%s\t%s\n' "$key" "$name" >> "$tmp/seen.tsv"
    fi
    rm -f "$f"
  done
done

python3 - "$runs" "$out" <<PY
import json, os, sys, time
runs = [json.loads(l) for l in open(sys.argv[1])]
doc = dict(
    what="fold output types: size, llama.cpp perplexity, flashnorm verify perplexity, added error",
    date=time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()), flashnorm_commit="$fn_commit",
    llama_cpp_python="$LLAMA_CPP_PYTHON", threads=$T, nice=$NICE, ppl_chunks=$PPL_CHUNKS,
    ppl_ctx=512, text="$text",
    llama_perplexity="-c 512 -b 512 --chunks $PPL_CHUNKS -t $T (scores the second half of each chunk)",
    flashnorm_verify="--ctx 512 --max-text-tokens $((PPL_CHUNKS * 512)) --tokens 0 (every position; "
                     "folded file in flashnorm mode vs the unfolded file in standard mode, fp32 weights)",
    model_files={"smollm2": os.path.basename("${FLASHNORM_SMOLLM2_GGUF:-}"),
                 "gemma3": os.path.basename("${FLASHNORM_GEMMA3_GGUF:-}")},
    loadavg_at_end=open("/proc/loadavg").read().split()[:3], runs=runs)
os.makedirs(os.path.dirname(sys.argv[2]) or ".", exist_ok=True)
json.dump(doc, open(sys.argv[2], "w"), indent=1)
print(f"wrote {sys.argv[2]}", file=sys.stderr)
# markdown table
print("| model | fold | folded tensors stored as | size MB | llama.cpp ppl | vs unfolded | "
      "flashnorm ppl | vs unfolded | added rel. RMS error (q, k, v, gate, up, head) |")
print("|---|---|---|---|---|---|---|---|---|")
base = {r["model"]: r for r in runs if r["config"] == "unfolded"}
for r in runs:
    b = base[r["model"]]
    k = r.get("added_error_by_kind", {})
    types = sorted({v["type"] for v in k.values()}) or (["F32"] if r["config"] == "dtype-f32" else [])
    err = ", ".join(f"{k[x]['added_rel_rms']:.3f}" for x in
                    ("attn_q", "attn_k", "attn_v", "ffn_gate", "ffn_up", "output") if x in k)
    fppl = r.get("flashnorm_ppl", r.get("flashnorm_ppl_original"))
    forig = next((x.get("flashnorm_ppl_original") for x in runs
                  if x["model"] == r["model"] and "flashnorm_ppl_original" in x), None)
    fp = f"{fppl:.4f}" if fppl else (f"{forig:.4f}" if forig else "")
    frel = f"{r['flashnorm_ppl'] / forig - 1:+.2%}" if fppl and forig else ""
    print(f"| {r['model']} | {r['config']} | {', '.join(t.replace(',', '+') for t in types)} | "
          f"{r['size_bytes'] / 1e6:.0f} | {r['llama_ppl']:.4f} | "
          f"{r['llama_ppl'] / b['llama_ppl'] - 1:+.2%} | {fp} | {frel} | {err} |")
PY
