#!/usr/bin/env bash
# The main job: install, build, fetch SmolLM2-135M, fold it, and generate with both norm modes.
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/setup.sh
scripts/build.sh release flashnorm_cli  # the CLI only (the tests: scripts/test.sh)
eval "$(scripts/fetch_models.sh smollm2)"
fn=build/release/src/cli/flashnorm
out="${FLASHNORM_CACHE:-$HOME/.cache/flashnorm}/folded"
mkdir -p "$out"
folded="$out/SmolLM2-135M-Instruct.folded-f32.gguf"
rm -f "$folded"
$fn inspect "$FLASHNORM_SMOLLM2_GGUF" | sed -n 1,26p  # layer 0; sed reads it all: no SIGPIPE
$fn fold "$FLASHNORM_SMOLLM2_GGUF" -o "$folded"
for mode in standard flashnorm; do
  echo "== --norm $mode on the folded model"
  $fn generate -m "$folded" --norm "$mode" --chat -n 64 \
    -p "Write two sentences about the ocean."
done
