#!/usr/bin/env bash
# io::quantize against llama.cpp's quantizer on the same tensors: every tensor of each model is
# dequantized to F32 (bench/probes/quant_compare --to-f32), llama.cpp's llama-quantize --pure
# (built in the cache tree scripts/cpu_bench.sh makes; only run, never linked) writes each TYPE
# from that file, and quant_compare quantizes the same F32 values with io::quantize and reports
# both added relative RMS errors per tensor and per stored type (tensors whose rows are not a
# multiple of 256 get llama.cpp's fallback type in its file, and are compared in that type).
#
#   scripts/quant_compare.sh [FLASHNORM_BUILD_DIR] [OUT_JSON]
#     default OUT_JSON: bench/results/quant_compare-<commit>-<date>.json
#   env: MODELS="smollm2 gemma3" TYPES="Q4_K Q5_K Q6_K Q4_0 Q4_1 Q5_0 Q8_0" NICE=19 T=2
#        LLAMA_CPP_PYTHON=0.3.36 FLASHNORM_CACHE (~/.cache/flashnorm) FLASHNORM_COMMIT
set -euo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"
build="$(cd "${1:-$root/build/release}" && pwd)"
MODELS="${MODELS:-smollm2 gemma3}" TYPES="${TYPES:-Q4_K Q5_K Q6_K Q4_0 Q4_1 Q5_0 Q8_0}"
NICE="${NICE:-19}" T="${T:-2}" LLAMA_CPP_PYTHON="${LLAMA_CPP_PYTHON:-0.3.36}"
cache="${FLASHNORM_CACHE:-$HOME/.cache/flashnorm}"
llama="$cache/llama.cpp-$LLAMA_CPP_PYTHON/build"
[ -d "$llama" ] || { echo "error: $llama missing: run scripts/cpu_bench.sh once" >&2; exit 1; }
if [ ! -x "$llama/bin/llama-quantize" ]; then
  nice -n 19 cmake --build "$llama" -j 2 --target llama-quantize > "$llama/quantize-build.log"
fi
nice -n 19 cmake --build "$build" -j 2 --target quant_compare >&2
probe="$build/bench/probes/quant_compare"
fn_src="$(sed -n 's/^CMAKE_HOME_DIRECTORY:INTERNAL=//p' "$build/CMakeCache.txt")"
fn_commit="${FLASHNORM_COMMIT:-$(git -C "$fn_src" rev-parse --short HEAD)}"
out="${2:-$root/bench/results/quant_compare-$fn_commit-$(date -u +%F).json}"
tmp="$(mktemp -d)"
trap 'rm -rf "$tmp"' EXIT
eval "$("$root/scripts/fetch_models.sh" $MODELS)"
: > "$tmp/lines.jsonl"
for model in $MODELS; do
  case "$model" in
    smollm2) src="$FLASHNORM_SMOLLM2_GGUF" ;;
    gemma3) src="$FLASHNORM_GEMMA3_GGUF" ;;
    *) echo "error: unknown model $model" >&2; exit 1 ;;
  esac
  nice -n "$NICE" "$probe" --to-f32 "$src" "$tmp/f32.gguf"
  for t in $TYPES; do
    echo "$model $t: llama-quantize --pure, then quant_compare" >&2
    nice -n "$NICE" "$llama/bin/llama-quantize" --pure "$tmp/f32.gguf" "$tmp/q.gguf" "$t" "$T" \
      > "$tmp/lq.log" 2>&1 || { tail -20 "$tmp/lq.log" >&2; exit 1; }
    nice -n "$NICE" "$probe" "$tmp/f32.gguf" "$tmp/q.gguf" |
      python3 -c 'import json, sys
for l in sys.stdin:
    d = json.loads(l); d.update(model=sys.argv[1], requested=sys.argv[2]); print(json.dumps(d))' \
        "$model" "$t" >> "$tmp/lines.jsonl"
    rm -f "$tmp/q.gguf"
  done
  rm -f "$tmp/f32.gguf"
done
python3 - "$tmp/lines.jsonl" "$out" <<PY
import json, os, sys, time
lines = [json.loads(l) for l in open(sys.argv[1])]
doc = dict(what="added relative RMS error: flashnorm io::quantize vs llama.cpp llama-quantize "
                "--pure (no imatrix) on the same F32 tensors (each model dequantized)",
           date=time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()), flashnorm_commit="$fn_commit",
           llama_cpp_python="$LLAMA_CPP_PYTHON",
           summaries=[l for l in lines if "summary" in l],
           tensors=[l for l in lines if "tensor" in l])
json.dump(doc, open(sys.argv[2], "w"), indent=1)
print(f"wrote {sys.argv[2]}", file=sys.stderr)
print("| model | --pure type | stored type | tensors | llama.cpp rel. RMS | ours | ours / llama.cpp | ours no worse (tensors) |")
print("|---|---|---|---|---|---|---|---|")
for s in doc["summaries"]:
    print(f"| {s['model']} | {s['requested']} | {s['summary']} | {s['tensors']} | "
          f"{s['other_rel_rms']:.5f} | {s['ours_rel_rms']:.5f} | {s['ours_over_other']:.4f} | "
          f"{s['ours_no_worse']} |")
PY
