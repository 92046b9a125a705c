#!/usr/bin/env bash
# Configures and builds a preset (default: release) into build/<preset>; further arguments are
# targets to build instead of all (e.g. `scripts/build.sh release flashnorm_cli`).
set -euo pipefail
cd "$(dirname "$0")/.."
preset="${1:-release}"
shift || true
cmake --preset "$preset" >/dev/null
targets=()
for t in "$@"; do targets+=(--target "$t"); done
if [[ ! -f "build/$preset/src/kernels/cuda/CMakeFiles/flashnorm_cuda.dir/prefill_sm90.cu.o" ]] &&
  command -v nvcc > /dev/null && [[ -f .cache/cutlass/include/cute/tensor.hpp ]]; then
  echo "build.sh: first build with CUDA: the two CUTLASS prefill units (prefill_sm90*.cu) take" \
    "10-15 minutes on 2 cores with no output meanwhile" >&2
fi
cmake --build --preset "$preset" -j "$(nproc)" "${targets[@]}"
