#!/usr/bin/env bash
# FlashNorm kernels, GPU side, end to end (issue 3): the CMake build (preset `gpu`), the GPU tests
# (ctest label `gpu`: kernels_gpu_test, engine_ops_gpu_test, kernels_race_test with its asserted
# no-join negative controls) and the C ABI test, compute-sanitizer memcheck / racecheck / synccheck
# on the kernel tests, resource usage + SASS checks, the benchmark (`flashnorm bench`), ncu on the
# decode kernel, and the PyTorch peers in the same call. Exits non-zero when any stage failed (the
# later stages still run, so that one call collects every log); the failed stages are listed last.
#
# Usage (repository root, on the GPU machine; FN_COMMIT written out on the development machine:
# the device machine's copy of the tree carries older git metadata, so git there misreports it):
#   FN_COMMIT=<hash> FN_DIRTY=0 STAGES="build tests sanitize bench ncu ncuring peers" \
#     bash scripts/gpu_kernels.sh
# Everything goes under $OUT (default /tmp/fn_out): gpu_kernels.log, kernels.json, torch_peers.json,
# sanitize.log, ncu.txt, res_usage.txt.
#
# Build: `cmake --preset gpu` (Release, CUDA, CUTLASS from .cache/cutlass: scripts/fetch_cutlass.sh)
# needs the project's dependencies (fmt, CLI11, nlohmann JSON, GoogleTest, BLAS, PCRE2). The device
# machine's image lacks them: there use FN_BUNDLE=1, whose binaries come from the bundle that
# scripts/gpu_stage.sh builds with CMake on the development machine (carry .cache/device/bundle):
# kernels_gpu_test, kernels_race_test, engine_ops_gpu_test, kernels_c_api_test,
# lib/libflashnorm_capi.so (the PyTorch peers load it) and the `flashnorm` CLI as the benchmark
# (with its CUDA module, bin/libflashnorm_cuda.so, which holds the benchmark and is loaded from the
# CLI's directory).
set -euo pipefail
OUT=${OUT:-/tmp/fn_out}
mkdir -p "$OUT"
exec > >(tee -a "$OUT/gpu_kernels.log") 2>&1
STAGES=${STAGES:-"build tests sanitize bench ncu peers"}
B=${B:-build/gpu}
COMMIT=${FN_COMMIT:-$(git rev-parse HEAD 2>/dev/null || echo unknown)}
DIRTY=${FN_DIRTY:-1}
BENCH_ARGS=${BENCH_ARGS:-}
has() { [[ " $STAGES " == *" $1 "* ]]; }
t0=$(date +%s)
stamp() { echo "=== [$(( $(date +%s) - t0 ))s] $*"; }
failed=()
# run_stage NAME FUNCTION: runs it in a subshell with errexit; a failure is recorded, not ignored
run_stage() {
  stamp "$1"
  if ! ( set -euo pipefail; "$2" ); then
    echo "STAGE FAILED: $1"
    failed+=("$1")
  fi
}

stamp "machine"
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.mem,temperature.gpu --format=csv
DRIVER=$(nvidia-smi --query-gpu=driver_version --format=csv,noheader | head -1)
nvcc --version | tail -1
CUDA_HOME=$(dirname "$(dirname "$(which nvcc)")")
# the binaries: the CMake build's, or the bundle's
BIN_TESTS="$B/tests/kernels"
KBENCH="$B/src/cli/flashnorm"
CAPI="$B/src/kernels/cuda/libflashnorm_capi.so"
if [[ "${FN_BUNDLE:-0}" == "1" ]]; then
  python3 -c "import tarfile; tarfile.open('.cache/device/bundle/fn_bundle.tar.xz').extractall('/tmp')" ||
    { echo "bundle missing: carry .cache/device/bundle (scripts/gpu_stage.sh)"; exit 2; }
  export LD_LIBRARY_PATH=/tmp/fn/lib:$CUDA_HOME/lib64:$CUDA_HOME/lib:${LD_LIBRARY_PATH:-}
  BIN_TESTS=/tmp/fn/bin
  KBENCH=/tmp/fn/bin/flashnorm
  CAPI=/tmp/fn/lib/libflashnorm_capi.so
  STAGES=${STAGES//build/}
fi

build() {
  bash scripts/fetch_cutlass.sh > /dev/null || echo "no CUTLASS here: fused prefill disabled"
  cmake --preset gpu
  cmake --build --preset gpu -j "$(nproc)"
  local obj="$B/src/kernels/cuda/CMakeFiles/flashnorm_cuda.dir/decode_gemv.cu.o"
  if command -v cuobjdump > /dev/null; then
    cuobjdump -res-usage "$obj" > "$OUT/res_usage.txt" 2>&1
    cuobjdump -sass "$obj" > "$B/sass.txt" 2>&1
    echo "SASS of decode_kernel<BF16,8>: HMMA=$(awk '/Function.*decode_kernel.*BF16ELi8/{f=1} /Function/ && !/BF16ELi8/{f=0} f' "$B/sass.txt" | grep -c HMMA)" \
      "LDG.128=$(awk '/Function.*decode_kernel.*BF16ELi8/{f=1} /Function/ && !/BF16ELi8/{f=0} f' "$B/sass.txt" | grep -c 'LDG.*128')" \
      "LDL/STL=$(awk '/Function.*decode_kernel/{f=1} /Function/ && !/decode_kernel/{f=0} f' "$B/sass.txt" | grep -cE 'LDL|STL' || true)" | tee -a "$OUT/res_usage.txt"
  fi
}

gpu_tests() {
  local rc=0
  for t in kernels_gpu_test engine_ops_gpu_test kernels_race_test kernels_c_api_test; do
    stamp "$t"
    "$BIN_TESTS/$t" --gtest_brief=1 2>&1 | tail -40 || rc=1
  done
  return $rc
}

sanitize() {
  local rc=0
  # the negative controls (*NoJoin*) race on purpose: not under the sanitizers
  for tool in memcheck racecheck synccheck; do
    for t in "kernels_gpu_test --gtest_filter=*Small*" \
      "kernels_race_test --gtest_filter=RaceDecode.*:RaceTwoStream.DelayRstd:RacePrefill.*-*NoJoin*"; do
      echo "--- $tool: $t" >> "$OUT/sanitize.log"
      local r=0
      # shellcheck disable=SC2086
      timeout "${SAN_TIMEOUT:-100}" compute-sanitizer --tool $tool --error-exitcode 9 \
        $BIN_TESTS/$t >> "$OUT/sanitize.log" 2>&1 || r=$?
      echo "sanitizer $tool $t rc=$r" | tee -a "$OUT/sanitize.log"
      (( r == 0 )) || rc=1
    done
  done
  grep -E "ERROR SUMMARY|RACECHECK SUMMARY" "$OUT/sanitize.log" || true  # a summary, not a stage
  return $rc
}

bench() {
  D=""; [[ "$DIRTY" == "1" ]] && D="--dirty"
  # the card's SM clock, power and temperature every 100 ms while the benchmark runs (read-only
  # query): how far compute-bound GEMMs pull the clocks down, i.e. why every variant is interleaved
  nvidia-smi --query-gpu=timestamp,clocks.sm,power.draw,temperature.gpu \
    --format=csv,noheader -lms 100 > "$OUT/clocks.csv" 2>/dev/null & SMI=$!
  local rc=0
  # shellcheck disable=SC2086
  "$KBENCH" bench --shapes bench/shapes.json --out "$OUT/kernels.json" --commit "$COMMIT" \
    --driver "$DRIVER" $D $BENCH_ARGS || rc=1
  kill $SMI 2> /dev/null || true  # the sampler may have exited already
  awk -F', ' '{print $2 + 0}' "$OUT/clocks.csv" | sort -n |
    awk '{a[NR] = $1} END {if (NR) print "SM clock during the bench (MHz): min", a[1], "p10", a[int(NR / 10) + 1], "median", a[int((NR + 1) / 2)], "max", a[NR], "over", NR, "samples"}'
  return $rc
}

ncu_decode() {
  for M in 1 64; do
    timeout 120 ncu --clock-control none -k regex:decode_kernel -c 1 \
      --section SpeedOfLight --section MemoryWorkloadAnalysis --section LaunchStats --section Occupancy \
      "$KBENCH" bench --only llama3_8b_qkv --M $M --graph-reps 1 --eager-reps 1 --no-check \
      --out /tmp/ncu_bench.json >> "$OUT/ncu.txt" 2>&1
  done
  grep -E "Memory Throughput|DRAM Throughput|Duration|Achieved Occupancy|Registers Per|Block Limit" "$OUT/ncu.txt"
}

# the decode kernel's register path (stages 0) and cp.async ring (stages 4), first launch of each
# with one row-warp per CTA while the tuner times llama3.2-1B gate/up (64 MB of W) and SmolLM2
# q|k|v (1.1 MB) at M = 1
ncu_ring() {
  for shape in llama32_1b_gateup smollm2_135m_qkv; do for S in 0 4; do
    echo "### $shape stages $S" >> "$OUT/ncu_ring.txt"
    timeout 120 ncu --clock-control none --kernel-name-base mangled \
      -k "regex:decode_kernel.*BF16ELi1ELi1ELi0ELi${S}E" -c 1 \
      --section SpeedOfLight --section MemoryWorkloadAnalysis --section LaunchStats \
      --section Occupancy --section WarpStateStats \
      "$KBENCH" bench --only $shape --M 1 --graph-reps 1 --eager-reps 1 --no-check \
      --out /tmp/ncu_bench.json >> "$OUT/ncu_ring.txt" 2>&1
  done; done
  grep -E "### |Duration|DRAM Throughput|Memory Throughput|Block Size|Grid Size|Registers Per|Dynamic Shared|Achieved Occupancy|Theoretical Occupancy|Block Limit" "$OUT/ncu_ring.txt"
}

peers() {
  # FlashNorm itself, through its C ABI, timed in the same process and sweeps as PyTorch
  local capi="$CAPI" rc=0
  [[ -f "$capi" ]] || { echo "no $capi: the peers run without flashnorm"; capi=""; }
  PYTHONUNBUFFERED=1 FLASHNORM_CAPI="$capi" OUT="$OUT" timeout "${PEERS_TIMEOUT:-420}" \
    python3 bench/torch_peers.py bench/shapes.json > "$OUT/peers.log" 2>&1 || rc=1
  tail -35 "$OUT/peers.log"
  return $rc
}

if has build; then run_stage "build ($B)" build; fi
if has tests; then run_stage "GPU tests" gpu_tests; fi
if has sanitize; then run_stage "compute-sanitizer" sanitize; fi
if has bench; then run_stage "bench" bench; fi
if has ncu && command -v ncu > /dev/null; then run_stage "ncu (decode kernel)" ncu_decode; fi
if has ncuring && command -v ncu > /dev/null; then
  run_stage "ncu (decode kernel: register path vs cp.async ring)" ncu_ring
fi
if has peers; then run_stage "PyTorch peers" peers; fi
stamp "done"
if (( ${#failed[@]} )); then
  echo "FAILED STAGES: ${failed[*]}"
  exit 1
fi
echo "every stage passed"
