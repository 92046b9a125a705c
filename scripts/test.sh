#!/usr/bin/env bash
# The whole test suite: the release build's tests (on the real SmolLM2 and Gemma 3 checkpoints, and
# the CPU engine against PyTorch + transformers on random checkpoints), then the parsers'
# hostile-input tests again under AddressSanitizer + UndefinedBehaviorSanitizer, then a 60-second
# run of each libFuzzer target (scripts/fuzz.sh). The GPU tests (ctest label `gpu`) build wherever
# nvcc exists and report "skipped" on a machine without a GPU; on the H200 they run through
# scripts/gpu_kernels.sh and scripts/gpu_engine.sh.
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/setup.sh --test
export PATH="$PWD/.venv/bin:$PATH"  # python3 with the reference packages, for the tests
# PyTorch and transformers (~3 GB of wheels with PyTorch's CUDA libraries) install while the
# release build compiles; the build is CPU-bound, the install mostly network.
mkdir -p .cache
.venv/bin/python3 -m pip install -q --disable-pip-version-check \
  -r scripts/requirements-torch.txt > .cache/torch-install.log 2>&1 &
torch_pid=$!
eval "$(scripts/fetch_models.sh smollm2 gemma3)"
export FLASHNORM_SMOLLM2_GGUF FLASHNORM_GEMMA3_GGUF
scripts/build.sh release
wait "$torch_pid" || { cat .cache/torch-install.log >&2; echo "test.sh: installing PyTorch failed" >&2; exit 1; }
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
