#!/usr/bin/env bash
# CPU decode speed of SmolLM2-135M in both norm modes (greedy, fixed prompt, 128 new tokens),
# on the original Q4_1 file and on the F32-folded file; 3 runs each, alternating, and the median.
#   scripts/cpu_decode_bench.sh [build/release/src/cli/flashnorm]
set -euo pipefail
cd "$(dirname "$0")/.."
fn="${1:-build/release/src/cli/flashnorm}"
eval "$(scripts/fetch_models.sh smollm2)"
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
"$fn" fold "$FLASHNORM_SMOLLM2_GGUF" -o "$tmp/folded.gguf" >/dev/null
prompt="Explain in a few sentences why the sky is blue."
echo "cpu: $(nproc) cores, $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | sed 's/^ //')"
echo "| file | mode | prompt tokens/s (median) | decode tokens/s (median) | runs (decode) |"
echo "|---|---|---:|---:|---|"
for file in "$FLASHNORM_SMOLLM2_GGUF" "$tmp/folded.gguf"; do
  name=$(basename "$file")
  declare -A P D
  for mode in standard flashnorm; do P[$mode]=""; D[$mode]=""; done
  for _ in 1 2 3; do
    for mode in standard flashnorm; do
      line=$("$fn" generate -m "$file" --norm "$mode" --chat -n 128 --ctx 512 -p "$prompt" \
             2>&1 >/dev/null | grep '^prompt:')
      P[$mode]+="$(echo "$line" | sed -E 's/.*tokens, ([0-9.]+) tokens\/s \|.*/\1/') "
      D[$mode]+="$(echo "$line" | sed -E 's/.*decode: [0-9]+ tokens, ([0-9.]+) tokens\/s/\1/') "
    done
  done
  for mode in standard flashnorm; do
    med() { echo "$1" | tr ' ' '\n' | grep . | sort -g | sed -n 2p; }
    echo "| $name | $mode | $(med "${P[$mode]}") | $(med "${D[$mode]}") | ${D[$mode]}|"
  done
done
