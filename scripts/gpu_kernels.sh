#!/usr/bin/env bash
# FlashNorm kernels, GPU side, end to end (issue 3): build for sm_90a with nvcc, GPU tests, the race
# test (with the join, and once without it: that run must fail), compute-sanitizer memcheck /
# racecheck / synccheck on the kernel tests, resource usage + SASS checks, the benchmark
# (`flashnorm bench`), ncu on the decode kernel, and the PyTorch peers in the same call.
#
# Usage (repository root, on the GPU machine; FN_COMMIT written out on the development machine:
# the device machine's copy of the tree carries older git metadata, so git there misreports it):
#   FN_COMMIT=<hash> FN_DIRTY=0 STAGES="build tests sanitize bench ncu ncuring peers" \
#     bash scripts/gpu_kernels.sh
# Everything goes under $OUT (default /tmp/fn_out): gpu_kernels.log, kernels.json, torch_peers.json,
# sanitize.log, nojoin.log, ncu.txt, res_usage.txt.
#
# FN_BUNDLE=1: no build here; the binaries come from the bundle that scripts/gpu_stage.sh makes on
# the development machine (carry .cache/device/bundle): kernels_gpu_test, kernels_race_test,
# kernels_c_api_test, lib/libflashnorm_capi.so (the PyTorch peers load it) and the `flashnorm` CLI
# as the benchmark. Saves the device-side compile of the CUTLASS kernels.
#
# Build: with CMake when the project's dependencies are installed (FN_BUILD=cmake), else (default on
# the device machine, whose image lacks fmt/CLI11/gtest/BLAS/PCRE2) a direct nvcc/g++ build of the
# kernel sources, with header-only fmt/nlohmann/CLI11 and a static gtest taken from an ignored folder
# .cache/gpudeps (made by scripts/prepare_gpudeps.sh from /usr/include/{fmt,nlohmann,CLI,gtest},
# libgtest.a) that the device call carries; the PyTorch peers are bench/torch_peers.py.
set -uo pipefail
OUT=${OUT:-/tmp/fn_out}
mkdir -p "$OUT"
exec > >(tee -a "$OUT/gpu_kernels.log") 2>&1
STAGES=${STAGES:-"build tests sanitize bench ncu peers"}
DEPS=${DEPS:-.cache/gpudeps}
B=${B:-build/gpu}
COMMIT=${FN_COMMIT:-$(git rev-parse HEAD 2>/dev/null || echo unknown)}
DIRTY=${FN_DIRTY:-1}
BENCH_ARGS=${BENCH_ARGS:-}
has() { [[ " $STAGES " == *" $1 "* ]]; }
t0=$(date +%s)
stamp() { echo "=== [$(( $(date +%s) - t0 ))s] $*"; }

stamp "machine"
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.mem,temperature.gpu --format=csv
DRIVER=$(nvidia-smi --query-gpu=driver_version --format=csv,noheader | head -1)
nvcc --version | tail -1
CUDA_HOME=$(dirname "$(dirname "$(which nvcc)")")
KBENCH="$B/flashnorm_kbench"
if [[ "${FN_BUNDLE:-0}" == "1" ]]; then
  python3 -c "import tarfile; tarfile.open('.cache/device/bundle/fn_bundle.tar.xz').extractall('/tmp')" ||
    { echo "bundle missing: carry .cache/device/bundle (scripts/gpu_stage.sh)"; exit 2; }
  export LD_LIBRARY_PATH=/tmp/fn/lib:$CUDA_HOME/lib64:$CUDA_HOME/lib:${LD_LIBRARY_PATH:-}
  B=/tmp/fn/bin
  KBENCH="$B/flashnorm"
  STAGES=${STAGES//build/}
fi
mkdir -p "$B"

if has build; then
  stamp "build ($B)"
  # position-independent objects: they also make the C ABI's shared library (libflashnorm_capi.so)
  NV="nvcc -std=c++17 -O3 -gencode=arch=compute_90a,code=sm_90a -lineinfo -Xcompiler -fPIC -Iinclude -I$DEPS/include"
  CX="g++ -std=c++20 -O2 -fPIC -DNDEBUG -DFMT_HEADER_ONLY -DFLASHNORM_HAVE_CUDA=1 -Iinclude -I$DEPS/include -I$CUDA_HOME/include"
  pids=()
  $NV -Xptxas -v -c src/kernels/cuda/kernels.cu -o "$B/kernels.o" > "$B/ptxas.txt" 2>&1 & pids+=($!)
  for f in engine_ops decode_attention; do
    $NV -c src/kernels/cuda/$f.cu -o "$B/$f.o" & pids+=($!)
  done
  # the fused prefill needs the CUTLASS headers: carry .cache/cutlass/<wheel> (scripts/fetch_cutlass.sh)
  CUTLASS_INC=$(bash scripts/fetch_cutlass.sh 2>/dev/null) && CUTLASS_DEF="-DFLASHNORM_HAVE_CUTLASS=1 -DNDEBUG -isystem $CUTLASS_INC" ||
    { CUTLASS_DEF=""; echo "no CUTLASS here: fused prefill disabled"; }
  for f in prefill_sm90 prefill_sm90_pdl; do
    $NV --expt-relaxed-constexpr $CUTLASS_DEF -Isrc/kernels/cuda -c src/kernels/cuda/$f.cu \
      -o "$B/$f.o" & pids+=($!)
  done
  $CX -c src/kernels/cuda/context.cpp -o "$B/context.o" & pids+=($!)
  $CX -c src/kernels/cuda/bench.cpp -o "$B/bench.o" & pids+=($!)
  $CX -c src/kernels/cuda/device.cpp -o "$B/device.o" & pids+=($!)
  $CX -fvisibility=hidden -c src/kernels/cuda/c_api.cpp -o "$B/c_api.o" & pids+=($!)
  $CX -c src/kernels/cpu/reference.cpp -o "$B/reference.o" & pids+=($!)
  $CX -c src/cli/cmd_bench.cpp -o "$B/cmd_bench.o" & pids+=($!)
  $CX -c src/io/atomic_file.cpp -o "$B/atomic_file.o" & pids+=($!)
  $CX -c src/io/error.cpp -o "$B/error.o" & pids+=($!)
  $CX -c src/kernels/cuda/kbench_main.cpp -o "$B/kbench_main.o" & pids+=($!)
  for t in kernels_gpu_test kernels_race_test gpu_main c_api_test; do
    $CX -Itests/kernels -c tests/kernels/$t.cpp -o "$B/$t.o" & pids+=($!)
  done
  for p in "${pids[@]}"; do wait "$p" || { echo "BUILD FAILED (compile)"; cat "$B/ptxas.txt" | grep -i error; exit 1; }; done
  LIBS="-L$CUDA_HOME/lib64 -L$CUDA_HOME/lib -lcudart -lcublasLt -lpthread -ldl -lrt"
  OBJS="$B/kernels.o $B/engine_ops.o $B/decode_attention.o $B/prefill_sm90.o $B/prefill_sm90_pdl.o $B/context.o $B/bench.o $B/device.o $B/reference.o"
  g++ -o "$B/flashnorm_kbench" "$B/kbench_main.o" "$B/cmd_bench.o" "$B/atomic_file.o" "$B/error.o" \
    $OBJS $LIBS &&
  g++ -o "$B/kernels_gpu_test" "$B/kernels_gpu_test.o" "$B/gpu_main.o" $OBJS "$DEPS/lib/libgtest.a" $LIBS &&
  g++ -o "$B/kernels_race_test" "$B/kernels_race_test.o" "$B/gpu_main.o" $OBJS "$DEPS/lib/libgtest.a" $LIBS &&
  # the C ABI exports its fn_* only: the rest comes from an archive whose symbols stay local
  rm -f "$B/libfn_objs.a" && ar rcs "$B/libfn_objs.a" $OBJS &&
  g++ -shared -o "$B/libflashnorm_capi.so" "$B/c_api.o" "$B/libfn_objs.a" -Wl,--exclude-libs,ALL \
    $LIBS &&
  g++ -o "$B/kernels_c_api_test" "$B/c_api_test.o" -L"$B" -Wl,-rpath,"$(realpath "$B")" -lflashnorm_capi \
    "$DEPS/lib/libgtest.a" "$DEPS/lib/libgtest_main.a" $LIBS ||
    { echo "BUILD FAILED"; exit 1; }
  grep -E "Compiling entry|registers|spill" "$B/ptxas.txt" | sed 's/_ZN9flashnorm7kernels4cuda6detail[0-9A-Za-z_]*N__[0-9a-f_]*kernels_cu_[0-9a-f]*//' > "$OUT/res_usage.txt"
  if command -v cuobjdump > /dev/null; then
    cuobjdump -res-usage "$B/kernels.o" >> "$OUT/res_usage.txt" 2>&1
    cuobjdump -sass "$B/kernels.o" > "$B/sass.txt" 2>&1
    echo "SASS of decode_kernel<BF16,8>: HMMA=$(awk '/Function.*decode_kernel.*BF16ELi8/{f=1} /Function/ && !/BF16ELi8/{f=0} f' "$B/sass.txt" | grep -c HMMA)" \
      "LDG.128=$(awk '/Function.*decode_kernel.*BF16ELi8/{f=1} /Function/ && !/BF16ELi8/{f=0} f' "$B/sass.txt" | grep -c 'LDG.*128')" \
      "LDL/STL=$(awk '/Function.*decode_kernel/{f=1} /Function/ && !/decode_kernel/{f=0} f' "$B/sass.txt" | grep -cE 'LDL|STL')" | tee -a "$OUT/res_usage.txt"
  fi
fi

if has tests; then
  stamp "GPU tests"
  "$B/kernels_gpu_test" --gtest_brief=1 2>&1 | tail -40
  echo "kernels_gpu_test rc=${PIPESTATUS[0]}"
  stamp "C ABI test"
  "$B/kernels_c_api_test" --gtest_brief=1 2>&1 | tail -5
  echo "kernels_c_api_test rc=${PIPESTATUS[0]}"
  stamp "race test (with the join)"
  "$B/kernels_race_test" 2>&1 | tail -30
  echo "kernels_race_test rc=${PIPESTATUS[0]}"
  stamp "race test --no-join (must FAIL)"
  # the explicit joins removed (the two-stream event wait; the PDL prefill's two griddepcontrol.wait):
  # each of these tests, run alone, must fail
  : > "$OUT/nojoin.log"
  nojoin_ok=1
  for t in RaceTwoStream.DelayRstd RacePrefill.PdlRstdDelayed RacePrefill.PdlRstdDelayedRegisterA \
    RacePrefill.PdlAfterEarlyTriggeringProducer; do
    "$B/kernels_race_test" --no-join --gtest_filter="$t" >> "$OUT/nojoin.log" 2>&1
    rc=$?
    if [[ $rc -ne 0 ]]; then echo "--no-join $t: FAILED, as required"; else
      echo "--no-join $t: PASSED (the join is NOT shown to matter)"; nojoin_ok=0; fi
  done
  grep -E "steps wrong" "$OUT/nojoin.log"
  echo "race test --no-join: $([[ $nojoin_ok == 1 ]] && echo 'every test failed, as required' || echo 'NOT ALL FAILED')"
fi

if has bench; then
  stamp "bench"
  D=""; [[ "$DIRTY" == "1" ]] && D="--dirty"
  # the card's SM clock, power and temperature every 100 ms while the benchmark runs (read-only
  # query): how far compute-bound GEMMs pull the clocks down, i.e. why every variant is interleaved
  nvidia-smi --query-gpu=timestamp,clocks.sm,power.draw,temperature.gpu \
    --format=csv,noheader -lms 100 > "$OUT/clocks.csv" 2>/dev/null & SMI=$!
  "$KBENCH" bench --shapes bench/shapes.json --out "$OUT/kernels.json" --commit "$COMMIT" \
    --driver "$DRIVER" $D $BENCH_ARGS
  echo "bench rc=$?"
  kill $SMI 2>/dev/null
  awk -F', ' '{print $2 + 0}' "$OUT/clocks.csv" | sort -n |
    awk '{a[NR] = $1} END {if (NR) print "SM clock during the bench (MHz): min", a[1], "p10", a[int(NR / 10) + 1], "median", a[int((NR + 1) / 2)], "max", a[NR], "over", NR, "samples"}'
fi

if has ncu && command -v ncu > /dev/null; then
  stamp "ncu (decode kernel)"
  for M in 1 64; do
    timeout 120 ncu --clock-control none -k regex:decode_kernel -c 1 \
      --section SpeedOfLight --section MemoryWorkloadAnalysis --section LaunchStats --section Occupancy \
      "$KBENCH" bench --only llama3_8b_qkv --M $M --graph-reps 1 --eager-reps 1 --no-check \
      --out /tmp/ncu_bench.json >> "$OUT/ncu.txt" 2>&1
  done
  grep -E "Memory Throughput|DRAM Throughput|Duration|Achieved Occupancy|Registers Per|Block Limit" "$OUT/ncu.txt"
fi

if has ncuring && command -v ncu > /dev/null; then
  # the decode kernel's register path (stages 0) and cp.async ring (stages 4), first launch of each
  # with one row-warp per CTA while the tuner times llama3.2-1B gate/up (64 MB of W) and SmolLM2
  # q|k|v (1.1 MB) at M = 1
  stamp "ncu (decode kernel: register path vs cp.async ring)"
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
fi

if has sanitize; then
  stamp "compute-sanitizer"
  for tool in memcheck racecheck synccheck; do
    for t in "kernels_gpu_test --gtest_filter=*Small*" "kernels_race_test --gtest_filter=RaceDecode.*:RaceTwoStream.DelayRstd:RacePrefill.*"; do
      echo "--- $tool: $t" >> "$OUT/sanitize.log"
      timeout ${SAN_TIMEOUT:-100} compute-sanitizer --tool $tool --error-exitcode 9 $B/$t >> "$OUT/sanitize.log" 2>&1
      echo "sanitizer $tool $t rc=$?" | tee -a "$OUT/sanitize.log"
    done
  done
  grep -E "ERROR SUMMARY|RACECHECK SUMMARY" "$OUT/sanitize.log"
fi

if has peers; then
  stamp "PyTorch peers"
  # FlashNorm itself, through its C ABI, timed in the same process and sweeps as PyTorch
  CAPI="$B/libflashnorm_capi.so"; [[ "${FN_BUNDLE:-0}" == "1" ]] && CAPI=/tmp/fn/lib/libflashnorm_capi.so
  [[ -f "$CAPI" ]] || { echo "no $CAPI: the peers run without flashnorm"; CAPI=""; }
  PYTHONUNBUFFERED=1 FLASHNORM_CAPI="$CAPI" OUT="$OUT" timeout ${PEERS_TIMEOUT:-420} python3 bench/torch_peers.py bench/shapes.json > "$OUT/peers.log" 2>&1
  echo "peers rc=$?"
  tail -35 "$OUT/peers.log"
fi
stamp "done"
