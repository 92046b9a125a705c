#!/usr/bin/env bash
# Builds the CUDA module (libflashnorm_cuda.so) of another git ref for gpu_engine.sh's `abmodule`
# stage, which runs it against the bundle's module in one device call. The files that differ
# between HEAD and REF are taken from REF for the build and restored afterwards (the release build
# directory is shared, so only what changed recompiles); the tree must be clean.
# Usage: scripts/gpu_module_b.sh REF
# Output: .cache/device_b/libflashnorm_cuda.so.xz (carry [".cache/device_b"] beside the bundle,
# then MODULE_B=.cache/device_b/libflashnorm_cuda.so.xz STAGES=abmodule bash scripts/gpu_engine.sh).
# Build the bundle (scripts/gpu_stage.sh) after this script, not before: it leaves the build
# directory at HEAD's sources, but the bundle is packed from what was last built.
set -euo pipefail
cd "$(dirname "$0")/.."
REF=${1:?usage: scripts/gpu_module_b.sh REF}
git rev-parse --verify --quiet "$REF^{commit}" > /dev/null || { echo "unknown ref: $REF" >&2; exit 1; }
if [[ -n $(git status --porcelain --untracked-files=no) ]]; then
  echo "the tree has uncommitted changes: commit or stash them first" >&2
  exit 1
fi
mapfile -t FILES < <(git diff --name-only HEAD "$REF")
[[ ${#FILES[@]} -gt 0 ]] || { echo "$REF has the same files as HEAD" >&2; exit 1; }
restore() { git checkout -q HEAD -- . && git clean -q -fd -- "${FILES[@]}" 2> /dev/null || true; }
trap restore EXIT
echo "from $REF: ${FILES[*]}"
for f in "${FILES[@]}"; do
  if git cat-file -e "$REF:$f" 2> /dev/null; then
    git checkout -q "$REF" -- "$f"
  else
    rm -f "$f"  # absent in REF
  fi
done
B=build/release
cmake --preset release > /dev/null
cmake --build $B --target flashnorm_cuda_module -j "$(nproc)"
mkdir -p .cache/device_b
cp $B/src/cli/libflashnorm_cuda.so /tmp/fn_module_b.so
strip /tmp/fn_module_b.so
xz -T2 -6 -c /tmp/fn_module_b.so > .cache/device_b/libflashnorm_cuda.so.xz
rm -f /tmp/fn_module_b.so
echo "$(git rev-parse --short "$REF")" > .cache/device_b/REF
restore
trap - EXIT
cmake --build $B --target flashnorm_cuda_module -j "$(nproc)" > /dev/null
du -sh .cache/device_b
