#!/usr/bin/env bash
# Runs the libFuzzer targets, one process at a time, each for SECONDS (wall clock, single worker):
#   scripts/fuzz.sh SECONDS [TARGET...]     (default: every target of fuzz/CMakeLists.txt)
# Builds the "fuzz" preset (clang, ASan + UBSan + libFuzzer) first. Each target starts from a
# scratch copy of its committed corpus fuzz/corpus/TARGET (under build/fuzz/run/TARGET/corpus), so
# the committed corpus changes only when it is merged deliberately (docs/fuzzing.md). Prints per
# target: CPU seconds, executions, exec/s, coverage (cov: edges, ft: features) and corpus size.
# Exits 1 when any target reports a finding (crash, sanitizer report, leak, timeout, out of
# memory); the input that caused it stays in build/fuzz/run/TARGET/artifacts/.
# Environment: FUZZ_RESUME=1 continues from the scratch corpus of an earlier run instead of a
# fresh copy; FUZZ_NICE (default 10) is the nice level; FUZZ_RSS_MB (default 2048) the memory
# limit; FUZZ_TIMEOUT (default 20) the seconds one input may take; FUZZ_BUILD=0 skips the build.
set -euo pipefail
cd "$(dirname "$0")/.."

if [[ $# -lt 1 || ! $1 =~ ^[0-9]+$ || $1 -lt 1 ]]; then
  echo "usage: scripts/fuzz.sh SECONDS [TARGET...]" >&2
  exit 2
fi
seconds=$1
shift
targets=("$@")
[[ ${#targets[@]} -gt 0 ]] || targets=(fuzz_gguf fuzz_safetensors fuzz_hf_dir fuzz_tokenizer)

if [[ ${FUZZ_BUILD:-1} != 0 ]]; then
  cmake --preset fuzz >/dev/null
  cmake --build --preset fuzz -j "$(nproc)" >/dev/null
fi

run_root=build/fuzz/run
# fuzz_hf_dir writes each input's files to $TMPDIR: a tmpfs keeps that off the disk.
if [[ -d /dev/shm && -w /dev/shm ]]; then export TMPDIR=/dev/shm; fi
found=0
printf '%-17s %8s %10s %8s %7s %7s %9s  %s\n' target cpu_s execs exec/s cov ft corpus result
for t in "${targets[@]}"; do
  bin=build/fuzz/fuzz/$t
  if [[ ! -x $bin ]]; then
    echo "error: no fuzz target $t in build/fuzz/fuzz" >&2
    exit 2
  fi
  dir=$run_root/$t
  if [[ ${FUZZ_RESUME:-0} != 1 || ! -d $dir/corpus ]]; then
    rm -rf "$dir/corpus"
    mkdir -p "$dir/corpus"
    if [[ -d fuzz/corpus/$t ]]; then cp -r "fuzz/corpus/$t/." "$dir/corpus/"; fi
  fi
  mkdir -p "$dir/artifacts"
  log=$dir/fuzz.log
  set +e
  /usr/bin/time -f '%U %S' -o "$dir/cpu" nice -n "${FUZZ_NICE:-10}" "$bin" \
    -max_total_time="$seconds" -rss_limit_mb="${FUZZ_RSS_MB:-2048}" \
    -timeout="${FUZZ_TIMEOUT:-20}" -print_final_stats=1 -artifact_prefix="$dir/artifacts/" \
    "$dir/corpus" >"$log" 2>&1
  rc=$?
  set -e
  cpu=$(awk 'NF == 2 {printf "%.0f", $1 + $2}' "$dir/cpu" 2>/dev/null || echo "?")
  execs=$(sed -n 's/^stat::number_of_executed_units: *//p' "$log" | tail -1)
  rate=$(sed -n 's/^stat::average_exec_per_sec: *//p' "$log" | tail -1)
  last=$(grep -E '^#[0-9]+' "$log" | tail -1)
  cov=$(sed -n 's/.* cov: \([0-9]*\).*/\1/p' <<<"$last")
  ft=$(sed -n 's/.* ft: \([0-9]*\).*/\1/p' <<<"$last")
  corp=$(sed -n 's/.* corp: \([0-9]*\/[0-9]*[a-zA-Z]*\).*/\1/p' <<<"$last")
  result=ok
  if [[ $rc -ne 0 ]]; then
    found=1
    result="FINDING (rc $rc): $(find "$dir/artifacts" -type f -printf '%p ')log $log"
  fi
  printf '%-17s %8s %10s %8s %7s %7s %9s  %s\n' "$t" "$cpu" "${execs:-?}" "${rate:-?}" \
    "${cov:-?}" "${ft:-?}" "${corp:-?}" "$result"
  printf '%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\n' "$(date -u +%FT%TZ)" "$t" "$seconds" "$cpu" \
    "${execs:-?}" "${cov:-?}" "${ft:-?}" "${corp:-?}" "$rc" >>"$run_root/summary.tsv"
done
exit $found
