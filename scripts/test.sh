#!/usr/bin/env bash
# The whole test suite: the release build's tests (on the real SmolLM2 checkpoint), then the
# parsers' hostile-input tests again under AddressSanitizer + UndefinedBehaviorSanitizer, then a
# 60-second run of each libFuzzer target (scripts/fuzz.sh). GPU tests are not registered with
# ctest; they run on the H200 through scripts/gpu_kernels.sh.
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/setup.sh --test
export PATH="$PWD/.venv/bin:$PATH"  # python3 with the reference packages, for the tests
eval "$(scripts/fetch_models.sh smollm2 gemma3)"
export FLASHNORM_SMOLLM2_GGUF FLASHNORM_GEMMA3_GGUF
scripts/build.sh release
ctest --preset release -j 2
# Sanitizer pass: only the binaries that parse hostile input (label "hostile").
cmake --preset asan >/dev/null
cmake --build --preset asan -j "$(nproc)" --target test_gguf_hostile test_safetensors_hostile \
  test_tokenizer_vocab test_spm_chain test_atomic_file test_mapped_file flashnorm_cli \
  test_cli_output_safety test_cli_hostile_corpus
ctest --preset asan -j 2 -L hostile
# Fuzzing smoke run: builds the libFuzzer targets and runs each for 60 s from its committed corpus
# (fuzz/corpus); any crash, sanitizer report, leak or timeout fails the suite (docs/fuzzing.md).
scripts/fuzz.sh 60
