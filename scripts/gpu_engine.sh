#!/usr/bin/env bash
# The CUDA engine on the H200, end to end (issue 4): GPU tests (random Llama / Gemma 3 against the
# CPU fp32 engine), the long-generation race test (2048 steps per mode and variant; and its negative
# control, LongGeneration.NoJoinProducesWrongSteps, which asserts that the run with the two-stream
# join removed goes wrong), compute-sanitizer on a short generation, the
# equivalence table (`flashnorm verify --device cuda`), generation in both modes, and the decode
# benchmark (`flashnorm bench --model`).
#
# Needs the bundle and the model parts made by scripts/gpu_stage.sh. One device call per part
# (SmolLM2: 2; Gemma 3 270M: 6), each within 30 s of the previous one (the machine must stay
# warm: /tmp/fn_model lives only that long; a later call on the same warm machine needs only the
# bundle):
#   carry [".cache/device/model1"]:  mkdir -p /tmp/fn_model && cp .cache/device/model1/* /tmp/fn_model/
#   carry [".cache/device/modelI"]:  cp .cache/device/modelI/* /tmp/fn_model/      (I = 2 .. K)
#   carry [".cache/device/bundle"]:  FN_COMMIT=... bash scripts/gpu_engine.sh
# (the last part and the bundle may share a call when together with the working tree they stay
# under 64 MiB).
# Outputs under $OUT (the device tool returns at most 8 files: choose STAGES accordingly):
# gpu_engine.log (everything, generated text and sanitizer summaries included), kernel_tests.log,
# engine_tests.log, race.log (with the --no-join run), verify_gpu_<dtype>.json, model_bench.json,
# sanitize.log, ncu_<norm>.csv / ncuk_<norm>.csv; stage `archs`: verify_gpu_llama3.json,
# verify_gpu_qwen3.json, race_qwen3.log; stage `torch` (needs _C.so in the bundle):
# torch_ops_cuda.log; stage `torchhf` (needs _C.so): torch_hf_agreement.json, torch_hf.json;
# stage `torchprof` (needs _C.so): torch_hf_profile.log.
# stage `qgemv`: quant_gemv_tests.log, quant_gemv_bench.jsonl (bench/probes/quant_gemv_bench.cpp);
# stage `attnlab` (needs FN_PROGRAMS with decode_attention_bench): attn_lab_pdl{1,0}.jsonl
# (bench/probes/decode_attention_bench.cpp).
# stage `cpusimd`: cpu_simd_tests.log; stage `native`: native_tests.log, verify_native_I.json,
# bench_native_I.json (I = 1, 2: the models in /tmp/fn_model and /tmp/fn_model2); stage
# `native8b`: bench_native_l8b.json; stage `l1b`: bench_l1b.json; stage `bucket`: bench_ctx0.json,
# bench_ctx4160.json; stage `racebatch`: race_batch.log; stage `racenative`: race_native.log;
# stage `ncuq`: ncuq_SHAPE.txt; stage `ncu8b`: ncu8b.csv, ncu8b.err; stage `abmodule`:
# ab_{smollm2,l8b}_{a,b}.json, ab_{a,b}.err; stage `batch`: bench_batch_I.json; stage `serve`:
# serve_cuda.json; stage `sanquant`: sanquant.log; stage `nsys` (nsys was not on the device machine in session 13):
# nsys_W_N_cuda_gpu_trace.csv (W f32 | native, N the norm mode).
# MODULE_B: the `abmodule` stage's other CUDA module (scripts/gpu_module_b.sh REF makes one);
# AB_LAYERS: its random model's layers; AB_TYPE: their format (random_quant_gguf's, default q4_k).
# TESTS_FILTER: the `tests` stage's GoogleTest filter (default: all).
# QGEMV_LABS: other builds of the lab (LABEL=PATH ...), run after the bundle's for each run, into
# quant_gemv_bench_LABEL.jsonl. NCU8B_COUNT (6000), NCU8B_TIMEOUT (300 s): the `ncu8b` stage's.
# QGEMV_RUNS: the `qgemv` stage's lab runs, M[:PDL] each (default "1 1:1 8"); NATIVE_VERIFY=0:
# the `native` stage without its verify runs.
# Stages not in the default list: archs, torch, torchhf, torchprof, qgemv, attnlab, native, native8b, l1b,
# bucket, cpusimd, ncu, ncuk, ncuq, ncu8b, abmodule, racebatch, racenative, batch, serve,
# sanquant, nsys.
# Exit status: 0 when every stage run passed, 1 when any failed (each is still run; the failing
# ones are listed at the end), 2-4 for a missing bundle, model or binary.
set -uo pipefail
OUT=${OUT:-/tmp/fn_out}
mkdir -p "$OUT"
exec > >(tee -a "$OUT/gpu_engine.log") 2>&1
STAGES=${STAGES:-"ktests tests race nojoin verify generate bench sanitize"}
STEPS=${STEPS:-2048}
PROMPTS=${PROMPTS:-512,4096}  # prompt lengths of the native, native8b and l1b benchmarks
COMMIT=${FN_COMMIT:-unknown}
has() { [[ " $STAGES " == *" $1 "* ]]; }
t0=$(date +%s)
stamp() { echo "=== [$(( $(date +%s) - t0 ))s] $*"; }
FAILED=()
# model_in DIR: prints the name of the model sent to DIR (gpu_stage.sh's parts joined and checked
# against its SHA-256); exit 1 when DIR has none, 2 when it is corrupt.
model_in() {
  [[ -f $1/model.sha256 ]] || return 1
  local name
  name=$(awk '{print $2}' "$1/model.sha256")
  [[ -f $1/$name ]] || cat "$1"/part.* > "$1/$name"  # the glob expands sorted
  ( cd "$1" && sha256sum -c model.sha256 > /dev/null ) || return 2
  echo "$name"
}
# check NAME RC [LOG]: prints the stage's exit status (also appended to LOG when given) and
# records a failure (RC != 0). Not to be piped: it must run in this shell.
check() {
  echo "$1 rc=$2"
  [[ -n ${3:-} ]] && echo "$1 rc=$2" >> "$3"
  [[ $2 == 0 ]] || FAILED+=("$1 (rc=$2)")
}
# san TOOL LOG LABEL PROGRAM [ARGS...]: PROGRAM under compute-sanitizer's TOOL (SAN_TIMEOUT s,
# default 240), its output appended to LOG, the result recorded by check as "sanitizer TOOL
# (LABEL)". Not to be piped, as check.
san() {
  local tool=$1 log=$2 label=$3
  shift 3
  timeout "${SAN_TIMEOUT:-240}" compute-sanitizer --tool "$tool" --error-exitcode 9 "$@" \
    >> "$log" 2>&1
  check "sanitizer $tool ($label)" $? "$log"
}

stamp "machine"
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.mem --format=csv
DRIVER=$(nvidia-smi --query-gpu=driver_version --format=csv,noheader | head -1)
CUDA_HOME=$(dirname "$(dirname "$(which nvcc)")")
# the bundle, or the one an earlier call on this warm machine unpacked (a call carrying a model
# part has no room for the bundle too)
if [[ -f .cache/device/bundle/fn_bundle.tar.xz ]]; then
  python3 -c "import tarfile; tarfile.open('.cache/device/bundle/fn_bundle.tar.xz').extractall('/tmp')" ||
    { echo "bundle unreadable: rebuild it (scripts/gpu_stage.sh)"; exit 2; }
elif [[ ! -x /tmp/fn/bin/flashnorm ]]; then
  echo "bundle missing: carry .cache/device/bundle (scripts/gpu_stage.sh)"; exit 2
fi
export LD_LIBRARY_PATH=/tmp/fn/lib:$CUDA_HOME/lib64:$CUDA_HOME/lib:${LD_LIBRARY_PATH:-}
BIN=/tmp/fn/bin
M=/tmp/fn_model/$(awk '{print $2}' /tmp/fn_model/model.sha256 2>/dev/null)
needs_model=0
for st in race nojoin ncu ncuk nsys verify generate bench sanitize bucket racebatch racenative serve; do has $st && needs_model=1; done
if [[ $needs_model == 1 ]]; then
  if [[ ! -f "$M" ]]; then
    cat /tmp/fn_model/part.* > "$M" 2>/dev/null || true
  fi
  ( cd /tmp/fn_model && sha256sum -c model.sha256 ) || { echo "MODEL MISSING OR CORRUPT: re-send every part"; exit 3; }
fi
# the CLI, except for the PyTorch-only stages (a bundle of _C.so alone serves those)
if [[ -n $(echo " $STAGES " | sed 's/ torch / /g; s/ torchhf / /g; s/ torchprof / /g' | tr -d ' ') ]]; then
  "$BIN/flashnorm" --help > /dev/null || { echo "flashnorm does not start here"; ldd "$BIN/flashnorm"; exit 4; }
  # the CUDA module the CLI loads for --device cuda (scripts/gpu_stage.sh puts it beside the binary)
  [[ -f "$BIN/libflashnorm_cuda.so" ]] ||
    { echo "the CUDA module $BIN/libflashnorm_cuda.so is missing: rebuild the bundle"; exit 4; }
  if ldd "$BIN/libflashnorm_cuda.so" | grep "not found"; then
    echo "the CUDA module's libraries are missing here"; exit 4
  fi
fi

if has ktests; then
  stamp "kernel GPU tests (small suites: RMSNorm, flashnorm_linear incl. the fused epilogues)"
  "$BIN/kernels_gpu_test" --gtest_filter='*Small*' 2>&1 | tee "$OUT/kernel_tests.log" | grep -E "OK|FAILED|PASSED|Failure|error" | head -40
  check kernels_gpu_test "${PIPESTATUS[0]}"
  "$BIN/engine_ops_gpu_test" 2>&1 | tee -a "$OUT/kernel_tests.log" | grep -E "OK|FAILED|PASSED|Failure|error" | head -40
  check engine_ops_gpu_test "${PIPESTATUS[0]}"
fi

if has qgemv; then
  # quant_gemv (decode from Q4_K / Q6_K / Q8_0 blocks): its GPU tests against the fp64 reference,
  # then the kernel lab against the bf16 decode kernel at Llama-3-8B and SmolLM2 shapes (M = 1, 8)
  stamp "quant_gemv: tests and kernel lab"
  "$BIN/kernels_gpu_test" --gtest_filter='QuantGemv*' 2>&1 | tee "$OUT/quant_gemv_tests.log" | grep -E "OK|FAILED|PASSED|Failure|error" | head -20
  check "kernels_gpu_test QuantGemv" "${PIPESTATUS[0]}"
  # QGEMV_RUNS: M[:PDL] per lab run (PDL 1: both kernels launched with PDL, as the engine does)
  # QGEMV_LABS: other builds of the lab, LABEL=PATH each (kernel variants), run after the bundle's
  # one for every run, into quant_gemv_bench_LABEL.jsonl
  for run in ${QGEMV_RUNS:-1 1:1 8}; do
    # shellcheck disable=SC2046  # the PDL argument: absent, or one word
    "$BIN/quant_gemv_bench" ${run%%:*} $([[ $run == *:* ]] && echo ${run##*:}) \
      >> "$OUT/quant_gemv_bench.jsonl"
    check "quant_gemv_bench $run" $?
    for lab in ${QGEMV_LABS:-}; do
      if [[ $lab != ?*=?* ]]; then
        echo "QGEMV_LABS: '$lab' is not LABEL=PATH"
        FAILED+=("QGEMV_LABS ($lab)")
        continue
      fi
      # shellcheck disable=SC2046  # as above
      "${lab#*=}" ${run%%:*} $([[ $run == *:* ]] && echo ${run##*:}) \
        >> "$OUT/quant_gemv_bench_${lab%%=*}.jsonl"
      check "quant_gemv_bench ${lab%%=*} $run" $?
    done
  done
  cat "$OUT/quant_gemv_bench.jsonl"
fi

if has tests; then
  stamp "CUDA engine GPU tests"
  "$BIN/cuda_engine_gpu_test" --gtest_filter="${TESTS_FILTER:-*}" 2>&1 | tee "$OUT/engine_tests.log" | grep -E "^\[|OK|FAILED|PASSED" | grep -v "^\[ RUN" | head -80
  check cuda_engine_gpu_test "${PIPESTATUS[0]}"
fi

if has race; then
  stamp "long-generation race test ($STEPS steps, join kept)"
  "$BIN/engine_race_test" --gtest_filter='-*NoJoin*' --model "$M" --steps "$STEPS" \
    > "$OUT/race.log" 2>&1
  check engine_race_test $?
  grep -vE "^  text:" "$OUT/race.log"; grep -E "^  text:" "$OUT/race.log" | cut -c1-220
fi

if has bucket; then
  # Decode with the KV cache the run needs and with a 4160-position one: a captured decode step
  # launches the attention's key chunks up to the end of its 512-position bucket, not the whole
  # cache's (AttentionArgs::key_bound), so the two should decode at the same speed
  for c in 0 4160; do
    stamp "bench --model, --ctx $c (0: what the run needs)"
    "$BIN/flashnorm" bench --model "$M" --quick --runs 3 --prompt-tokens 512 --decode-tokens 128 \
      --ctx $c --out "$OUT/bench_ctx$c.json" --commit "$COMMIT" --driver "$DRIVER"
    check "bench --ctx $c" $?
  done
fi

if has nojoin; then
  stamp "long-generation race test, negative control (the run without the join must go wrong)"
  echo "=== negative control: LongGeneration.NoJoinProducesWrongSteps" >> "$OUT/race.log"
  "$BIN/engine_race_test" --gtest_filter='*NoJoin*' --model "$M" --steps "$STEPS" \
    > /tmp/nojoin.log 2>&1
  check "engine_race_test (negative control)" $? /tmp/nojoin.log
  cat /tmp/nojoin.log >> "$OUT/race.log"
  grep -vE "^  text:" /tmp/nojoin.log
fi

if has racebatch; then
  # Batched decode (issue "On the H200 (2)", item 1): BATCH sequences through forward_batch for
  # $STEPS steps, graph replay against an eager engine on every row, then its negative control
  # (two-stream with the join removed must go wrong); then the single-sequence race test on the
  # GGUF's own blocks (--native: the decode steps read them with quant_gemv).
  # DECODE_ROWS: CudaLaunch::decode_max_rows (default: the engine's, 32); with BATCH above 16 the
  # batched passes take the decode GEMV's 16- or 32-row tile and its fused residual add (above 32
  # rows, 32-row slices), and the LM head its choice made at load.
  stamp "batched race test ($STEPS steps, ${BATCH:-8} sequences, decode rows ${DECODE_ROWS:-default}) and its negative control"
  "$BIN/engine_race_test" --gtest_filter='*Batched*' --model "$M" --steps "$STEPS" \
    --batch "${BATCH:-8}" ${DECODE_ROWS:+--decode-rows "$DECODE_ROWS"} > "$OUT/race_batch.log" 2>&1
  check "engine_race_test batched" $? "$OUT/race_batch.log"
  if [[ -z ${NO_NATIVE_RACE:-} ]]; then
    "$BIN/engine_race_test" --gtest_filter='*GraphReplayMatchesEagerEveryStep*:-*Batched*:*two_stream*' \
      --model "$M" --steps "$STEPS" --native >> "$OUT/race_batch.log" 2>&1
    check "engine_race_test --native" $? "$OUT/race_batch.log"
  fi
  grep -vE "^  text:" "$OUT/race_batch.log" | grep -vE "^\[ RUN" | head -60
fi

if has racenative; then
  # The single-sequence race test on the GGUF's own blocks (--native: the decode steps read them
  # with quant_gemv, launched with PDL); RACE_ONLY: the configurations (default: all but two-stream,
  # which native weights do not take)
  stamp "race test on native weights ($STEPS steps)"
  "$BIN/engine_race_test" --gtest_filter='*GraphReplayMatchesEagerEveryStep*:-*Batched*:*two_stream*' \
    --model "$M" --steps "$STEPS" --native ${RACE_ONLY:+--only $RACE_ONLY} > "$OUT/race_native.log" 2>&1
  check "engine_race_test --native" $? "$OUT/race_native.log"
  grep -vE "^  text:" "$OUT/race_native.log" | grep -vE "^\[ RUN" | head -40
fi

if has batch; then
  # Batched decode throughput at 1, 8, 32, 64 sequences (standard, flashnorm, standard fused
  # add+norm, each also with the decode GEMV to 16 rows) and flashnorm's batch invariance, on
  # each model present (/tmp/fn_model, /tmp/fn_model2)
  i=0
  for mdir in ${BATCH_MODELS:-/tmp/fn_model /tmp/fn_model2}; do
    i=$((i + 1))
    name=$(model_in "$mdir") || { [[ $? == 2 ]] && check "model in $mdir (sha256)" 1; continue; }
    stamp "batched decode benchmark: $name"
    "$BIN/flashnorm" bench --model "$mdir/$name" --quick --runs ${BATCH_RUNS:-3} --prompt-tokens 512 \
      --decode-tokens ${BATCH_STEPS:-128} --batch 1,8,32,64 --out "$OUT/bench_batch_$i.json" \
      --commit "$COMMIT" --driver "$DRIVER" 2>&1 | grep -vE "GEMVs as tuned"
    check "bench --batch $name" "${PIPESTATUS[0]}"
  done
fi

if has serve; then
  # `flashnorm serve --device cuda` with two models on one GPU (the two files present, or the one
  # file in both modes): 1 and 32 concurrent streams per model, then both models at once
  stamp "serve --device cuda: two models, 1 and 32 streams"
  models=(--model "a=$M,norm=flashnorm")
  M2=/tmp/fn_model2/$(awk '{print $2}' /tmp/fn_model2/model.sha256 2>/dev/null)
  if [[ -f $M2 ]]; then models+=(--model "b=$M2,norm=flashnorm"); else models+=(--model "b=$M,norm=standard"); fi
  python3 bench/serve_cuda_load.py --cli "$BIN/flashnorm" "${models[@]}" --streams 1,32 \
    --seconds ${SERVE_SECONDS:-20} --commit "$COMMIT" --driver "$DRIVER" --out "$OUT/serve_cuda.json"
  check "serve --device cuda" $?
fi

if has ncu && command -v ncu > /dev/null; then
  # GPU time of every kernel of a 1-token prompt and 3 decode steps (all four passes take the
  # decode path), per normalization mode; summarized by bench/engine_profile.py.
  stamp "ncu: kernels of a decode step"
  for norm in standard flashnorm; do
    timeout 200 ncu --clock-control none --metrics gpu__time_duration.sum --csv --print-units base \
      "$BIN/flashnorm" generate -m "$M" --device cuda --norm $norm -p "Hi" -n 4 \
      > "$OUT/ncu_$norm.csv" 2>/dev/null
    rc=$?
    echo "($(grep -c gpu__time_duration "$OUT/ncu_$norm.csv") kernels)"
    check "ncu $norm" $rc
  done
fi

if has nsys; then
  # Where a graph-replayed decode step's time goes, bf16 against native weights (issue "On the
  # H200 (2)", item 2: native decode is 2-8% slower than bf16 although its kernels' eager sums are
  # not): an nsys timeline of 64 steps per configuration, then per kernel name the summed GPU time
  # and the idle time between consecutive kernels (bench/probes/nsys_gaps.py).
  if command -v nsys > /dev/null; then
    stamp "nsys: decode steps, bf16 and native weights"
    for w in f32 native; do
      for norm in standard flashnorm; do
        timeout 200 nsys profile --cuda-graph-trace=node --force-overwrite true \
          -o "/tmp/nsys_${w}_$norm" "$BIN/flashnorm" generate -m "$M" --device cuda \
          --weights $w --norm $norm -p "Hi" -n 64 > /dev/null 2>&1
        check "nsys $w $norm" $?
        nsys stats --report cuda_gpu_trace --format csv --force-export true \
          -o "$OUT/nsys_${w}_$norm" "/tmp/nsys_${w}_$norm.nsys-rep" > /dev/null 2>&1
        python3 bench/probes/nsys_gaps.py "$OUT/nsys_${w}_${norm}_cuda_gpu_trace.csv" \
          --label "$w $norm"
      done
    done
  else
    echo "nsys is not on this machine"; check "nsys present" 1
  fi
fi

if has ncuq && command -v ncu > /dev/null; then
  # quant_gemv under ncu (its first launch of each lab shape: the verification call), for where its
  # time goes: NCUQ_SHAPES (';'-separated parts of the lab's shape names, default "8b down;8b q|k|v")
  # and NCUQ_TYPES (default q4_k), M = 1 launched with PDL
  stamp "ncu: quant_gemv in the kernel lab"
  IFS=';' read -r -a ncuq_shapes <<< "${NCUQ_SHAPES:-8b down;8b q|k|v}"
  for sh in "${ncuq_shapes[@]}"; do
    f="$OUT/ncuq_$(echo "$sh" | tr -c 'a-z0-9\n' '_').txt"
    QGEMV_SHAPES="$sh" QGEMV_TYPES="${NCUQ_TYPES:-q4_k}" timeout 150 ncu --clock-control none \
      -k regex:quant_gemv_kernel --launch-count "${NCUQ_LAUNCHES:-1}" --section SpeedOfLight \
      --section MemoryWorkloadAnalysis --section Occupancy --section WarpStateStats \
      --section LaunchStats --section SchedulerStats --section ComputeWorkloadAnalysis \
      "$BIN/quant_gemv_bench" 1 1 > "$f" 2>&1
    check "ncu quant_gemv ($sh)" $?
    grep -E "Duration|DRAM Throughput|Memory Throughput|Registers Per|Achieved Occupancy|Theoretical Occupancy|Block Limit|Warp Cycles Per Issued|Issued Warp|L2 Hit|L1/TEX Hit|Stall|One or More|No Eligible" "$f" | head -40
  done
fi

if has ncuk && command -v ncu > /dev/null; then
  # GPU time of the non-GEMV kernels only (-k filter: the load-time GEMV tuning runs unprofiled, so
  # this is quick), over a 1-token prompt and 3 decode steps per mode; the GEMVs' times are the
  # tuner's (bench --model prints them).
  stamp "ncu: non-GEMV kernels of decode steps"
  for norm in standard flashnorm; do
    timeout 200 ncu --clock-control none --metrics gpu__time_duration.sum --csv --print-units base \
      -k regex:'decode_attention|sample|embed|glu|rms_norm|residual|rope|attention' \
      "$BIN/flashnorm" generate -m "$M" --device cuda --norm $norm -p "Hi" -n 4 \
      > "$OUT/ncuk_$norm.csv" 2>/dev/null
    check "ncu -k $norm" $?
    python3 - "$OUT/ncuk_$norm.csv" <<'PY'
import csv, sys, collections
rows = [r for r in csv.reader(open(sys.argv[1])) if len(r) > 10]
hdr = rows[0]; k = hdr.index("Kernel Name"); v = hdr.index("Metric Value")
t = collections.defaultdict(list)
for r in rows[1:]:
    t[r[k].split("(")[0].split("<")[0]].append(float(r[v]) / 1e3)
for name, xs in sorted(t.items()):
    xs.sort()
    print(f"  {name:<32} n={len(xs):4d} median {xs[len(xs)//2]:7.2f} us  max {xs[-1]:7.2f} us")
PY
  done
fi

if has verify; then
  for dt in ${VERIFY_DTYPES:-bf16}; do
    # VERIFY_TEXT_TOKENS: chunks of 513 (BOS + 512 scored positions each); default 1024 positions
    stamp "equivalence: verify --device cuda --dtype $dt (${VERIFY_TEXT_TOKENS:-1026} text tokens)"
    "$BIN/flashnorm" verify "$M" --device cuda --dtype $dt --text /tmp/fn/data/GPL-3 \
      --max-text-tokens ${VERIFY_TEXT_TOKENS:-1026} --ctx 513 --tokens 128 --commit "$COMMIT" \
      --driver "$DRIVER" --json "$OUT/verify_gpu_$dt.json" 2>&1 | grep -v $'\r'
    check "verify $dt" "${PIPESTATUS[0]}"
  done
fi

if has generate; then
  stamp "generate --device cuda"
  for norm in standard flashnorm; do
    "$BIN/flashnorm" generate -m "$M" --device cuda --norm $norm --chat -n 120 \
      -p "Explain in three sentences why the sky is blue." 2>&1
    check "generate $norm" $?
  done
fi

if has bench; then
  stamp "decode benchmark"
  "$BIN/flashnorm" bench --model "$M" --out "$OUT/model_bench.json" --commit "$COMMIT" \
    --driver "$DRIVER" ${FN_DIRTY:+--dirty} ${MODEL_BENCH_ARGS:-}
  check bench $?
fi
if has native; then
  # Quantized weights on the GPU (issue "On the H200 (2)", item 2): the GPU tests of quant_gemv /
  # quant_dequantize and of the engine on native weights; then, on each real model present (the
  # one in /tmp/fn_model and a second one in /tmp/fn_model2, sent the same way: gpu_stage.sh
  # --second), the CUDA engine on the file's own blocks against the CPU engine's native path
  # (verify --weights native: top-1 over 1024 text positions) and the decode benchmark of the bf16
  # and native engines side by side (bench --model --weights native --quick).
  stamp "native weights: kernel and engine GPU tests"
  "$BIN/kernels_gpu_test" --gtest_filter='Quant*' 2>&1 | tee "$OUT/native_tests.log" | grep -E "OK|FAILED|PASSED|Failure|error" | head -30
  check "kernels_gpu_test Quant*" "${PIPESTATUS[0]}"
  "$BIN/cuda_engine_gpu_test" --gtest_filter='*CudaNativeWeights*' 2>&1 | tee -a "$OUT/native_tests.log" | grep -E "^\[|OK|FAILED|PASSED|Failure" | grep -v "^\[ RUN" | head -30
  check "cuda_engine_gpu_test CudaNativeWeights" "${PIPESTATUS[0]}"
  i=0
  for mdir in /tmp/fn_model /tmp/fn_model2; do
    name=$(model_in "$mdir") || { [[ $? == 2 ]] && check "model in $mdir (sha256)" 1; continue; }
    i=$((i + 1))
    if [[ ${NATIVE_VERIFY:-1} == 1 ]]; then
    stamp "verify --device cuda --weights native: $name"
    "$BIN/flashnorm" verify "$mdir/$name" --device cuda --weights native --text /tmp/fn/data/GPL-3 \
      --max-text-tokens 1026 --ctx 513 --tokens 32 --commit "$COMMIT" --driver "$DRIVER" \
      --json "$OUT/verify_native_$i.json" 2>&1 | grep -v $'\r'
    check "verify native $name" "${PIPESTATUS[0]}"
    fi
    stamp "bench --model --weights native: $name"
    "$BIN/flashnorm" bench --model "$mdir/$name" --weights native --quick --runs 5 \
      --prompt-tokens "$PROMPTS" --out "$OUT/bench_native_$i.json" --commit "$COMMIT" \
      --driver "$DRIVER"
    check "bench native $name" $?
  done
fi
if has cpusimd; then
  # The CPU quantized matmuls on this machine's CPU (AVX-512 where it has it: CI's and the
  # development machine's CPUs lack it, so the AVX-512 tests skip there)
  stamp "CPU quant_matmul tests on this CPU"
  grep -o 'avx512[a-z_0-9]*' /proc/cpuinfo | sort -u | tr '\n' ' '; echo
  "$BIN/kernels_quant_matmul_test" 2>&1 | tee "$OUT/cpu_simd_tests.log" | grep -E "SKIP|OK|FAILED|PASSED|Failure|isa" | head -60
  check "kernels_quant_matmul_test" "${PIPESTATUS[0]}"
fi
if has native8b; then
  # A random Llama-3-8B-shaped model in Q4_K (flashnorm's quantizer; layers 4.. repeat the bytes of
  # layers 0-3, bench/probes/random_quant_gguf.cpp) decoded at batch 1 in bf16 and on its blocks.
  stamp "random Llama-3-8B-shaped Q4_K model"
  "$BIN/random_quant_gguf" /tmp/fn_l8b.gguf q4_k --distinct 4 2>&1 | tail -1
  check "random_quant_gguf" "${PIPESTATUS[0]}"
  stamp "bench --model --weights native: Llama-3-8B shapes, Q4_K"
  # PROMPTS_8B (default 512): with 4096-token prompts too the call ran past 500 s (f461df2);
  # CONFIGS_8B (default standard,flashnorm, each with its native twin): with all of --quick's
  # (8 engines of 8B, each tuned at load) 512-token prompts ran past 350 s too (6c3b2d1);
  # BENCH_8B_TIMEOUT (default 330 s) stops it so that the call still returns its log
  timeout "${BENCH_8B_TIMEOUT:-330}" \
    "$BIN/flashnorm" bench --model /tmp/fn_l8b.gguf --weights native --quick --runs 3 \
    --configs "${CONFIGS_8B:-standard,flashnorm}" \
    --prompt-tokens "${PROMPTS_8B:-512}" --decode-tokens 128 --out "$OUT/bench_native_l8b.json" \
    --commit "$COMMIT" --driver "$DRIVER"
  check "bench native l8b" $?
fi
if has attnlab; then
  # decode_attention alone (bench/probes/decode_attention_bench: the default launch, 3 CTAs per SM,
  # and the late PDL trigger, interleaved; verified against the separate kernels) at the Llama-3-8B,
  # SmolLM2 and Gemma 3 head shapes and positions 128-2048, with PDL and without
  stamp "decode_attention lab"
  if [[ ! -x $BIN/decode_attention_bench ]]; then
    echo "attnlab: the bundle has no decode_attention_bench (FN_PROGRAMS=\"... decode_attention_bench\" scripts/gpu_stage.sh)"
    FAILED+=("attnlab (no decode_attention_bench)")
  fi
  for p in 1 0; do
    [[ -x $BIN/decode_attention_bench ]] || break
    "$BIN/decode_attention_bench" $p > "$OUT/attn_lab_pdl$p.jsonl"
    check "decode_attention_bench pdl=$p" $?
    cut -c1-400 "$OUT/attn_lab_pdl$p.jsonl"
  done
fi
if has ncu8b && command -v ncu > /dev/null; then
  # GPU time of each kernel of decode steps at Llama-3-8B shapes (the random Q4_K model of stage
  # native8b; made here when that stage did not run), bf16 and native weights, standard norm:
  # the kernels matching -k (not the bf16 GEMVs, whose load-time tuning then runs unprofiled), the
  # first NCU8B_COUNT (default 6000) launches. ncu runs the kernels one at a time: durations
  # without launch gaps or PDL overlap. Summarized per kernel, grid and weights by the script
  # below; its weights label (a quant_gemv within 6 launches: native) is meant for decode steps,
  # and mislabels the native engine's prompt-pass kernels as bf16.
  if [[ ! -f /tmp/fn_l8b.gguf ]]; then
    "$BIN/random_quant_gguf" /tmp/fn_l8b.gguf q4_k --distinct 4 2>&1 | tail -1
  fi
  stamp "ncu: decode-step kernels at Llama-3-8B shapes"
  timeout "${NCU8B_TIMEOUT:-300}" ncu --clock-control none --metrics gpu__time_duration.sum \
    --csv --print-units base --launch-count "${NCU8B_COUNT:-6000}" \
    -k regex:'decode_attention|quant_gemv|rms_norm|residual|embed|sampl|argmax|glu|rope' \
    "$BIN/flashnorm" bench --model /tmp/fn_l8b.gguf --weights native --quick --runs 1 \
    --configs standard --prompt-tokens 512 --decode-tokens 16 > "$OUT/ncu8b.csv" \
    2> "$OUT/ncu8b.err"
  check "ncu8b" $?
  python3 - "$OUT/ncu8b.csv" <<'PY'
import csv, io, re, sys, collections
text = open(sys.argv[1], encoding="utf-8", errors="replace").read()
start = text.find('"ID"')
if start < 0:
    sys.exit("ncu8b: no CSV header in ncu's output (see ncu8b.err)")
rows = list(csv.DictReader(io.StringIO(text[start:])))
ks = [(r["Kernel Name"], r["Grid Size"], float(r["Metric Value"].replace(",", "")) / 1e3)
      for r in rows if r.get("Metric Name") == "gpu__time_duration.sum"]
# a kernel belongs to the native engine when a quant_gemv ran among the 6 kernels before or after
t = collections.defaultdict(list)
for i, (name, grid, us) in enumerate(ks):
    near = ks[max(0, i - 6):i + 7]
    w = "native" if any("quant_gemv" in n for n, _, _ in near) else "bf16"
    short = re.sub(r"\(anonymous namespace\)::|flashnorm::kernels::cuda::|detail::", "", name)
    short = short.split("(Params")[0].split("(flashnorm")[0][:70]
    t[(w, short, grid)].append(us)
print(f"{len(ks)} kernels profiled")
for (w, name, grid), xs in sorted(t.items()):
    xs.sort()
    print(f"  {w:6} {name:<70} grid {grid:<14} n={len(xs):5d} median {xs[len(xs)//2]:8.2f} us"
          f"  p10 {xs[len(xs)//10]:8.2f}  max {xs[-1]:8.2f}")
PY
fi
if has abmodule; then
  # The bundle's CUDA module (A) against another build's (B: MODULE_B, a libflashnorm_cuda.so or an
  # .xz of one, e.g. carried in an ignored folder), side by side in one call. The CLI loads the
  # module beside its binary, so a copy of the CLI beside B runs B. Decode benchmark, standard and
  # flashnorm on bf16 and native weights, A then B: on the SmolLM2 model when /tmp/fn_model has it
  # (ab_smollm2_{a,b}.json) and on a random model (AB_TYPE, default Q4_K) at Llama-3-8B widths with AB_LAYERS layers
  # (default 32, the whole model: stage native8b's file when it ran; ab_l8b_{a,b}.json). A then B,
  # once each; stderr to ab_B.err.
  # FLASHNORM_CUDA_MODULE is unset for both (it would make both load the same module).
  if [[ -z ${MODULE_B:-} || ! -f $MODULE_B ]]; then
    echo "abmodule: MODULE_B (the other build's libflashnorm_cuda.so) is missing"
    FAILED+=("abmodule (no MODULE_B)")
  else
    mkdir -p /tmp/fn_b && cp "$BIN/flashnorm" /tmp/fn_b/
    case $MODULE_B in
      *.xz) xz -dc "$MODULE_B" > /tmp/fn_b/libflashnorm_cuda.so ;;
      *) cp "$MODULE_B" /tmp/fn_b/libflashnorm_cuda.so ;;
    esac
    AB_MODEL=/tmp/fn_ab.gguf
    if [[ ${AB_LAYERS:-32} == 32 && ${AB_TYPE:-q4_k} == q4_k && -f /tmp/fn_l8b.gguf ]]; then
      AB_MODEL=/tmp/fn_l8b.gguf  # the same command made it (random_quant_gguf's default: 32)
    else
      stamp "random Llama-3-8B-width model, ${AB_LAYERS:-32} layers, ${AB_TYPE:-q4_k}"
      "$BIN/random_quant_gguf" $AB_MODEL "${AB_TYPE:-q4_k}" --layers "${AB_LAYERS:-32}" --distinct 4 2>&1 |
        tail -1
      check "random_quant_gguf (abmodule)" "${PIPESTATUS[0]}"
    fi
    SM=""
    name=$(model_in /tmp/fn_model)
    case $? in
      0) SM=/tmp/fn_model/$name ;;
      2) FAILED+=("abmodule (the SmolLM2 model is corrupt: re-send its parts)") ;;
    esac
    for v in a b; do
      B=$BIN
      [[ $v == b ]] && B=/tmp/fn_b
      if [[ -n $SM ]]; then
        stamp "abmodule $v: SmolLM2"
        env -u FLASHNORM_CUDA_MODULE "$B/flashnorm" bench --model "$SM" --weights native --quick \
          --configs standard,flashnorm --runs 5 --prompt-tokens 512 --decode-tokens 256 \
          --out "$OUT/ab_smollm2_$v.json" --commit "$COMMIT-$v" --driver "$DRIVER" \
          2>> "$OUT/ab_$v.err" | grep -E "^(standard|flashnorm)"
        check "abmodule $v smollm2" "${PIPESTATUS[0]}"
      fi
      stamp "abmodule $v: Llama-3-8B widths"
      env -u FLASHNORM_CUDA_MODULE "$B/flashnorm" bench --model "$AB_MODEL" --weights native \
        --quick --configs standard,flashnorm --runs 3 --prompt-tokens 512 --decode-tokens 128 \
        --out "$OUT/ab_l8b_$v.json" --commit "$COMMIT-$v" --driver "$DRIVER" 2>> "$OUT/ab_$v.err" |
        grep -E "^(standard|flashnorm)"
      check "abmodule $v l8b" "${PIPESTATUS[0]}"
    done
  fi
fi
if has l1b; then
  # Prompt passes at Llama-3.2-1B shapes (16 layers, hidden 2048, 32 / 8 heads of 64, FFN 8192,
  # vocabulary 128256; a random Q8_0 file run in bf16): flashnorm against standard and standard
  # fused add+norm (issue "On the H200 (2)", item 3)
  stamp "random Llama-3.2-1B-shaped model"
  "$BIN/random_quant_gguf" /tmp/fn_l1b.gguf q8_0 --layers 16 --hidden 2048 --ffn 8192 \
    --heads 32 --kv-heads 8 --distinct 4 2>&1 | tail -1
  check "random_quant_gguf l1b" "${PIPESTATUS[0]}"
  stamp "bench --model: Llama-3.2-1B shapes, bf16"
  "$BIN/flashnorm" bench --model /tmp/fn_l1b.gguf --quick --runs 5 --prompt-tokens "$PROMPTS" \
    --decode-tokens 64 --out "$OUT/bench_l1b.json" --commit "$COMMIT" --driver "$DRIVER"
  check "bench l1b" $?
fi
if has archs; then
  # The new architectures (issue "On the H200 (1)", item 3): random Llama 3- and Qwen 3-shaped
  # checkpoints made here by transformers (bench/random_hf_models.py, tokenizer.json trained on
  # GPL-3), the CUDA engine in both modes against the CPU fp32 engine over 1024 text positions
  # (verify --device cuda), and the 2048-step race test on the Qwen 3 one.
  stamp "new architectures: random Llama 3 and Qwen 3 checkpoints"
  python3 bench/random_hf_models.py /tmp/fn_arch /tmp/fn/data/GPL-3 2>&1 | grep -v "shards\|weights"
  for a in llama3 qwen3; do
    stamp "verify --device cuda: $a"
    "$BIN/flashnorm" verify /tmp/fn_arch/$a --device cuda --dtype bf16 --text /tmp/fn/data/GPL-3 \
      --max-text-tokens 1026 --ctx 513 --tokens 64 --commit "$COMMIT" --driver "$DRIVER" \
      --json "$OUT/verify_gpu_$a.json" 2>&1 | grep -v $'\r'
    check "verify $a" "${PIPESTATUS[0]}"
  done
  stamp "race test ($STEPS steps) on the Qwen 3 checkpoint"
  "$BIN/engine_race_test" --gtest_filter='-*NoJoin*' --model /tmp/fn_arch/qwen3 --steps "$STEPS" \
    --prompt "The licenses for most software" > "$OUT/race_qwen3.log" 2>&1
  check "engine_race_test qwen3" $?
  grep -vE "^  text:" "$OUT/race_qwen3.log"
fi

if has torch || has torchhf || has torchprof; then
  # python/flashnorm with the CUDA build of _C.so from the bundle
  rm -rf /tmp/fn_py && cp -r python /tmp/fn_py && cp /tmp/fn/lib/_C.so /tmp/fn_py/flashnorm/
  python3 -c "import torch, transformers; print('torch', torch.__version__, 'transformers', transformers.__version__)"
fi
if has torch; then
  # The PyTorch ops on the GPU: opcheck and values of the CUDA ops (tests/python/test_ops_cuda.py).
  stamp "PyTorch ops on the GPU"
  PYTHONPATH=/tmp/fn_py python3 -m pytest -q -p no:cacheprovider tests/python/test_ops_cuda.py \
    2>&1 | tee "$OUT/torch_ops_cuda.log" | tail -30
  check "pytest test_ops_cuda" "${PIPESTATUS[0]}"
fi
if has torchhf; then
  # flashnorm.hf on transformers models at real shapes (issue "On the H200 (1)", item 2): bf16
  # teacher-forced top-1 agreement with the unmodified model over 1024 GPL-3 positions, then
  # bench/torch_hf.py (TORCH_HF_MODELS, TORCH_HF_CONFIGS; reduce-overhead = CUDA graphs).
  # TORCH_AGREE_MODELS="" skips the agreement
  if [[ -n ${TORCH_AGREE_MODELS-all} ]]; then
    stamp "flashnorm.hf: top-1 agreement at real shapes"
    PYTHONPATH=/tmp/fn_py python3 bench/torch_hf_agreement.py --text /tmp/fn/data/GPL-3 \
      --models "${TORCH_AGREE_MODELS:-smollm2-135m,qwen3-0.6b,llama-3.2-1b,llama-3-8b}" \
      --out "$OUT/torch_hf_agreement.json" 2>&1 | grep -v "Warning\|warn("
    check "torch_hf_agreement" "${PIPESTATUS[0]}"
  fi
  stamp "bench/torch_hf.py"
  PYTHONPATH=/tmp/fn_py python3 bench/torch_hf.py --device cuda \
    --models "${TORCH_HF_MODELS:-smollm2-135m,qwen3-0.6b}" \
    --configs "${TORCH_HF_CONFIGS:-eager,flashnorm,compile_ro,flashnorm_compile_ro}" \
    --batch 1 8 32 --out "$OUT/torch_hf.json" 2>&1 | grep -v "Warning\|warn("
  check "torch_hf" "${PIPESTATUS[0]}"
fi
if has torchprof; then
  # Where eager forwards spend their time, unmodified vs flashnorm (with and without the q/k
  # column mask): bench/probes/torch_hf_profile.py on TORCH_PROF_MODEL (default Qwen3-0.6B shapes).
  stamp "torch.profiler: eager forwards"
  PYTHONPATH=/tmp/fn_py python3 bench/probes/torch_hf_profile.py \
    --model "${TORCH_PROF_MODEL:-qwen3-0.6b}" > "$OUT/torch_hf_profile.log" 2>&1
  check "torch_hf_profile" $?
  grep "^==" "$OUT/torch_hf_profile.log"
fi

if has sanquant; then
  # compute-sanitizer over quant_gemv / quant_dequantize (the device layout, PDL with early loads)
  # and the engine on native weights
  stamp "compute-sanitizer: quantized weights"
  for tool in memcheck racecheck synccheck; do
    echo "--- $tool" >> /tmp/sanquant.log
    san $tool /tmp/sanquant.log "quant_gemv, quant_dequantize" "$BIN/kernels_gpu_test" \
      --gtest_filter='QuantGemv.Q4_0Q4_1Q5_0:QuantGemv.Q4_K:QuantGemv.Fused*:QuantDequantize*'
    san $tool /tmp/sanquant.log "engine, native weights" "$BIN/cuda_engine_gpu_test" \
      --gtest_filter='*CudaNativeWeights.*llama_flashnorm*'
  done
  grep -E "ERROR SUMMARY|RACECHECK SUMMARY|Program hit|Invalid|Race" /tmp/sanquant.log | sort | uniq -c
  cp /tmp/sanquant.log "$OUT/sanquant.log"
fi

# last: the slowest stage (a sanitizer timeout must not cost the other results)
if has sanitize; then
  # compute-sanitizer slows every launch ~100x: a small random model (3 layers) generating through
  # the graph-replayed decode loop in each mode (biases on every projection included; Gemma 3 with
  # final logit soft-capping), plus 2 steps of SmolLM2 in flashnorm mode.
  stamp "compute-sanitizer (short generations)"
  F='Modes/CudaEngineVsCpu.GpuGreedyGenerationMatchesHostArgmax/llama_*_bf16'
  F+=':Modes/CudaEngineVsCpu.GpuGreedyGenerationMatchesHostArgmax/gemma3_softcap_*'
  for tool in memcheck racecheck synccheck; do
    echo "--- $tool" >> /tmp/sanitize.log
    san $tool /tmp/sanitize.log "decode GEMV: GLU input, fused residual add" \
      "$BIN/kernels_gpu_test" --gtest_filter='LinearSmall.DecodeGluInput:LinearSmall.DecodeAccumulate'
    san $tool /tmp/sanitize.log "decode_attention" "$BIN/engine_ops_gpu_test" \
      --gtest_filter='DecodeAttentionSmall.ManyChunks*:DecodeAttentionSmall.CacheShorter*'
    san $tool /tmp/sanitize.log "GPU tests, $F" "$BIN/cuda_engine_gpu_test" --gtest_filter="$F"
    san $tool /tmp/sanitize.log "SmolLM2, 2 steps" "$BIN/engine_race_test" \
      --gtest_filter='-*NoJoin*' --model "$M" --steps 2 --check-every 2 --no-tune \
      --only flashnorm two-stream
  done
  grep -E "ERROR SUMMARY|RACECHECK SUMMARY|Program hit|Invalid|Race" /tmp/sanitize.log | sort | uniq -c
  cp /tmp/sanitize.log "$OUT/sanitize.log"
fi

stamp "done"
if (( ${#FAILED[@]} )); then
  echo "FAILED stages:"; printf '  %s\n' "${FAILED[@]}"
  exit 1
fi
echo "all stages passed"
