#!/usr/bin/env bash
# The CUDA engine on the H200, end to end (issue 4): GPU tests (random Llama / Gemma 3 against the
# CPU fp32 engine), the long-generation race test (2048 steps per mode and variant, and once with
# the two-stream join removed: that run must fail), compute-sanitizer on a short generation, the
# equivalence table (`flashnorm verify --device cuda`), generation in both modes, and the decode
# benchmark (`flashnorm bench --model`).
#
# Needs the bundle and the model halves made by scripts/gpu_stage.sh. Two device calls:
#   1. carry [".cache/device/model1"]:
#        mkdir -p /tmp/fn_model && cp .cache/device/model1/* /tmp/fn_model/
#   2. carry [".cache/device/model2", ".cache/device/bundle"]:
#        cp .cache/device/model2/* /tmp/fn_model/ && FN_COMMIT=... bash scripts/gpu_engine.sh
# (call 2 must find the machine still warm, i.e. within 30 s: /tmp/fn_model lives only that long;
# a later call on the same warm machine needs only the bundle).
# Outputs under $OUT: gpu_engine.log (everything, generated text included), engine_tests.log,
# race.log, nojoin.log, sanitize.log, verify_gpu_<dtype>.json, model_bench.json.
set -uo pipefail
OUT=${OUT:-/tmp/fn_out}
mkdir -p "$OUT"
exec > >(tee -a "$OUT/gpu_engine.log") 2>&1
STAGES=${STAGES:-"tests race nojoin sanitize verify generate bench"}
STEPS=${STEPS:-2048}
COMMIT=${FN_COMMIT:-unknown}
has() { [[ " $STAGES " == *" $1 "* ]]; }
t0=$(date +%s)
stamp() { echo "=== [$(( $(date +%s) - t0 ))s] $*"; }

stamp "machine"
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.mem --format=csv
DRIVER=$(nvidia-smi --query-gpu=driver_version --format=csv,noheader | head -1)
CUDA_HOME=$(dirname "$(dirname "$(which nvcc)")")
python3 -c "import tarfile; tarfile.open('.cache/device/bundle/fn_bundle.tar.xz').extractall('/tmp')" ||
  { echo "bundle missing: carry .cache/device/bundle (scripts/gpu_stage.sh)"; exit 2; }
export LD_LIBRARY_PATH=/tmp/fn/lib:$CUDA_HOME/lib64:$CUDA_HOME/lib:${LD_LIBRARY_PATH:-}
BIN=/tmp/fn/bin
M=/tmp/fn_model/$(awk '{print $2}' /tmp/fn_model/model.sha256 2>/dev/null)
if [[ ! -f "$M" ]]; then
  cat /tmp/fn_model/part.0 /tmp/fn_model/part.1 > "$M" 2>/dev/null || true
fi
( cd /tmp/fn_model && sha256sum -c model.sha256 ) || { echo "MODEL MISSING OR CORRUPT: re-send both halves"; exit 3; }
"$BIN/flashnorm" --help > /dev/null || { echo "flashnorm does not start here"; ldd "$BIN/flashnorm"; exit 4; }

if has tests; then
  stamp "CUDA engine GPU tests"
  "$BIN/cuda_engine_gpu_test" 2>&1 | tee "$OUT/engine_tests.log" | grep -E "^\[|OK|FAILED|PASSED" | grep -v "^\[ RUN" | head -80
  echo "cuda_engine_gpu_test rc=${PIPESTATUS[0]}"
fi

if has race; then
  stamp "long-generation race test ($STEPS steps, join kept)"
  "$BIN/engine_race_test" --model "$M" --steps "$STEPS" > "$OUT/race.log" 2>&1
  echo "engine_race_test rc=$?"
  grep -vE "^  text:" "$OUT/race.log"; grep -E "^  text:" "$OUT/race.log" | cut -c1-220
fi

if has nojoin; then
  stamp "long-generation race test --no-join (must FAIL)"
  "$BIN/engine_race_test" --model "$M" --steps "$STEPS" --no-join > "$OUT/nojoin.log" 2>&1
  echo "engine_race_test --no-join rc=$? (1 expected)"
  grep -vE "^  text:" "$OUT/nojoin.log"
fi

if has sanitize; then
  stamp "compute-sanitizer (short generation)"
  for tool in memcheck racecheck synccheck; do
    echo "--- $tool" >> "$OUT/sanitize.log"
    timeout ${SAN_TIMEOUT:-150} compute-sanitizer --tool $tool --error-exitcode 9 \
      "$BIN/engine_race_test" --model "$M" --steps 6 --check-every 3 --only flashnorm \
      --only two-stream >> "$OUT/sanitize.log" 2>&1
    echo "sanitizer $tool rc=$?" | tee -a "$OUT/sanitize.log"
  done
  grep -E "ERROR SUMMARY|RACECHECK SUMMARY|rc=" "$OUT/sanitize.log"
fi

if has verify; then
  for dt in ${VERIFY_DTYPES:-bf16}; do
    stamp "equivalence: verify --device cuda --dtype $dt (1024 teacher-forced positions)"
    "$BIN/flashnorm" verify "$M" --device cuda --dtype $dt --text /tmp/fn/data/GPL-3 \
      --max-text-tokens 1026 --ctx 513 --tokens 128 --json "$OUT/verify_gpu_$dt.json" 2>&1 | grep -v $'\r'
    echo "verify $dt rc=${PIPESTATUS[0]}"
  done
fi

if has generate; then
  stamp "generate --device cuda"
  for norm in standard flashnorm; do
    "$BIN/flashnorm" generate -m "$M" --device cuda --norm $norm --chat -n 120 \
      -p "Explain in three sentences why the sky is blue." 2>&1
    echo "generate $norm rc=$?"
  done
fi

if has bench; then
  stamp "decode benchmark"
  "$BIN/flashnorm" bench --model "$M" --out "$OUT/model_bench.json" --commit "$COMMIT" \
    --driver "$DRIVER" ${FN_DIRTY:+--dirty} ${MODEL_BENCH_ARGS:-}
  echo "bench rc=$?"
fi
stamp "done"
