#!/usr/bin/env bash
# flashnorm's CUDA engine beside llama.cpp's CUDA backend on the same GGUF files and the same GPU.
# llama.cpp is an outside reference: its source comes from the pinned llama-cpp-python source
# package (the one scripts/cpu_bench.sh uses) into an ignored folder, is trimmed to what
# llama-bench and llama-batched-bench need, and is built on the device machine (CUDA, sm_90);
# none of it is committed or linked into flashnorm.
#
# Here (a machine with this project's build and network):
#   scripts/gpu_peers.sh stage
#     -> .cache/peers/src/llama_src.tar.xz (trimmed source), .cache/peers/bundle (flashnorm's CLI,
#        its CUDA module and random_quant_gguf: scripts/gpu_stage.sh), .cache/peers/partN (the
#        SmolLM2 Q4_1 and Gemma 3 Q4_K_M files in parts of at most 48 MiB, with their SHA-256)
# On the device machine, one call per part (each within 30 s of the last: /tmp lives only while
# the machine is warm), then the run:
#   carry [".cache/peers/partN"]:  scripts/gpu_peers.sh receive
#   carry [".cache/peers/src", ".cache/peers/bundle"]:  FN_COMMIT=... scripts/gpu_peers.sh run
# `run` starts the llama.cpp build in the background (setsid: it outlives the call), runs
# flashnorm's benchmarks meanwhile (bench --model --configs flashnorm, bf16 and --weights native:
# prompts of 512 and 4096 tokens and batch-1 decode; then batched decode at 8, 32 and 64
# sequences after a 128-token prompt) on the three files (the
# third, a random Llama-3-8B-shaped Q4_K file with SmolLM2's tokenizer, written there by
# random_quant_gguf --vocab-from), then waits for the build and runs llama-bench (-ngl 99 -fa 1
# -p 512,4096 -n 128) and llama-batched-bench (-npl 1,8,32,64) on the same files. A call that
# ends before all of it is done can be repeated on the warm machine: finished steps are kept in
# /tmp/peers and skipped. In $OUT: peers.json (both engines' results with the GPU, driver, date,
# flashnorm's commit and llama.cpp's; bench/peers_table.py), peers.md (the table), peers_raw.tar.gz
# (every result file and log), peers_build.log.
set -euo pipefail
cd "$(dirname "$0")/.."
LLAMA_CPP_PYTHON="${LLAMA_CPP_PYTHON:-0.3.36}"
cache="${FLASHNORM_CACHE:-$HOME/.cache/flashnorm}"
P=.cache/peers
W=/tmp/peers

stage() {
  local sdist="$cache/pip/llama_cpp_python-$LLAMA_CPP_PYTHON.tar.gz" top s
  if [[ ! -f $sdist ]]; then
    python3 -m pip download -q --no-binary :all: --no-deps -d "$cache/pip" \
      "llama-cpp-python==$LLAMA_CPP_PYTHON"
  fi
  rm -rf "$P" && mkdir -p "$P/src"
  s=$(mktemp -d)
  top="llama_cpp_python-$LLAMA_CPP_PYTHON"
  tar -xzf "$sdist" -C "$s" --strip-components=3 "$top/vendor/llama.cpp"
  tar -xzOf "$sdist" "$top/.git/modules/vendor/llama.cpp/HEAD" > "$s/llama.cpp-commit"
  # what the two tools' CUDA build does not need: other backends, models, docs, tests, examples
  (cd "$s" && rm -rf models docs tests examples benches scripts gguf-py conversion media app \
    pocs skills grammars requirements ./*.py)
  find "$s/ggml/src" -maxdepth 1 -type d -name 'ggml-*' ! -name ggml-cuda ! -name ggml-cpu \
    -exec rm -rf {} +
  find "$s/tools" -mindepth 1 -maxdepth 1 -type d ! -name llama-bench ! -name batched-bench \
    -exec rm -rf {} +
  cat > "$s/tools/CMakeLists.txt" << 'EOF'
# trimmed by flashnorm's scripts/gpu_peers.sh: the two benchmark tools only
find_package(Threads REQUIRED)
llama_add_compile_flags()
add_subdirectory(batched-bench)
add_subdirectory(llama-bench)
EOF
  tar -C "$s" -cf - . | xz -6 -T2 > "$P/src/llama_src.tar.xz"
  rm -rf "$s"
  FN_PROGRAMS="random_quant_gguf" scripts/gpu_stage.sh > /dev/null
  mv .cache/device/bundle "$P/bundle"
  eval "$(scripts/fetch_models.sh smollm2 gemma3)"
  local i=1 f part sum
  for f in "$FLASHNORM_SMOLLM2_GGUF" "$FLASHNORM_GEMMA3_GGUF"; do
    s=$(mktemp -d)
    sum="$s/$(basename "$f").sha256"  # beside every part: run checks the joined file
    (cd "$(dirname "$f")" && sha256sum "$(basename "$f")") > "$sum"
    split -b $((48 * 1024 * 1024)) -d -a 2 "$f" "$s/$(basename "$f").part."
    for part in "$s"/*.part.*; do
      mkdir -p "$P/part$i" && mv "$part" "$P/part$i/" && cp "$sum" "$P/part$i/"
      i=$((i + 1))
    done
    rm -rf "$s"
  done
  du -sh "$P"/*
  echo "gpu_peers.sh: $((i - 1)) model parts; send each with 'receive', then 'run'"
}

receive() {
  mkdir -p "$W/models"
  local d  # one part per folder, each with the same checksum file: copied folder by folder
  for d in "$P"/part*; do if [[ -d $d ]]; then cp -f "$d"/* "$W/models/"; fi; done
  ls -la "$W/models"
  # the llama.cpp build starts with the first call that carries its source
  if [[ -f $P/src/llama_src.tar.xz ]]; then start_build; fi
}

# llama.cpp's build, in the background (setsid: it outlives the call), once per machine.
start_build() {
  [[ -f $W/llama/built || -f $W/llama/building ]] && return 0
  mkdir -p "$W/llama/src" && touch "$W/llama/building"
  tar -xJf "$P/src/llama_src.tar.xz" -C "$W/llama/src"
  setsid bash -c "cd $W/llama && cmake -S src -B build -DCMAKE_BUILD_TYPE=Release \
    -DGGML_CUDA=ON -DCMAKE_CUDA_ARCHITECTURES=90 -DGGML_NATIVE=ON -DBUILD_SHARED_LIBS=OFF \
    -DLLAMA_BUILD_TESTS=OFF -DLLAMA_BUILD_EXAMPLES=OFF -DLLAMA_BUILD_SERVER=OFF \
    -DLLAMA_BUILD_APP=OFF -DLLAMA_OPENSSL=OFF > configure.log 2>&1 && \
    cmake --build build -j \$(nproc) --target llama-bench llama-batched-bench > build.log 2>&1 \
    && touch built; rm -f building" < /dev/null > /dev/null 2>&1 &
  echo "gpu_peers.sh: llama.cpp build started in $W/llama"
}

# FILE.gguf from its parts in $W/models, checked against its SHA-256.
join_model() {
  local name=$1
  if [[ ! -f $W/models/$name ]]; then
    cat "$W/models/$name".part.* > "$W/models/$name.tmp"
    mv "$W/models/$name.tmp" "$W/models/$name"
  fi
  (cd "$W/models" && sha256sum -c "$name.sha256" > /dev/null) ||
    { echo "gpu_peers.sh: $name: parts missing or corrupt, send them again" >&2; exit 3; }
}

run() {
  : "${OUT:?OUT must name the folder the results go to}"
  mkdir -p "$W/out"
  local gpu driver commit date
  gpu=$(nvidia-smi --query-gpu=name --format=csv,noheader | head -1)
  driver=$(nvidia-smi --query-gpu=driver_version --format=csv,noheader | head -1)
  commit=${FN_COMMIT:-unknown}
  date=$(date -u +%Y-%m-%dT%H:%M:%SZ)
  if [[ ! -d $P/llama_out ]]; then start_build; fi
  # flashnorm's bundle and the models
  python3 -c "import tarfile; tarfile.open('$P/bundle/fn_bundle.tar.xz').extractall('/tmp')"
  export LD_LIBRARY_PATH="/tmp/fn/lib:${LD_LIBRARY_PATH:-}"
  local fn=/tmp/fn/bin/flashnorm smol gemma big=$W/models/llama3-8b-shape-q4_k.gguf
  smol=$(basename "$(ls "$W"/models/SmolLM2*.sha256)" .sha256)
  gemma=$(basename "$(ls "$W"/models/gemma*.sha256)" .sha256)
  join_model "$smol"
  join_model "$gemma"
  if [[ ! -f $big ]]; then
    /tmp/fn/bin/random_quant_gguf "$big.tmp" q4_k --distinct 4 \
      --vocab-from "$W/models/$smol" && mv "$big.tmp" "$big"
  fi
  local m name
  for m in "$W/models/$smol" "$W/models/$gemma" "$big"; do
    name=$(basename "$m" .gguf)
    # flashnorm mode on bf16 and native weights (--configs flashnorm: the bf16 engine and its
    # native twins; every configuration at once held 70 GB of KV cache slots on the 8B shape):
    # prompts and batch-1 decode, then the batched decode after a 128-token prompt (as
    # llama-batched-bench -npp 128), whose 64 slots then stay small
    if [[ ! -f $W/out/fn_$name.json ]]; then
      "$fn" bench --model "$m" --weights native --quick --configs flashnorm \
        --prompt-tokens 512,4096 --runs 3 --commit "$commit" --driver "$driver" \
        --out "$W/out/fn_$name.json.tmp" > "$W/out/fn_$name.log" 2>&1 &&
        mv "$W/out/fn_$name.json.tmp" "$W/out/fn_$name.json"
    fi
    if [[ ! -f $W/out/fnb_$name.json ]]; then
      "$fn" bench --model "$m" --weights native --quick --configs flashnorm \
        --prompt-tokens 128 --decode-tokens 128 --batch 8,32,64 --runs 3 --commit "$commit" \
        --driver "$driver" --out "$W/out/fnb_$name.json.tmp" > "$W/out/fnb_$name.log" 2>&1 &&
        mv "$W/out/fnb_$name.json.tmp" "$W/out/fnb_$name.json"
    fi
  done
  # llama.cpp, once built (at most the rest of this call; repeat the call to wait longer); not
  # needed when its results came in the carried folder .cache/peers/llama_out (an earlier run's)
  if [[ -d $P/llama_out ]]; then cp -n "$P"/llama_out/llama_* "$W/out/"; fi
  have_llama() {
    local n
    for n in "$smol" "$gemma" "$big"; do
      [[ -f $W/out/llama_batched_$(basename "$n" .gguf).jsonl ]] || return 1
    done
  }
  while [[ ! -f $W/llama/built ]] && ! have_llama; do
    if [[ ! -f $W/llama/building ]]; then
      echo "gpu_peers.sh: the llama.cpp build failed:" >&2
      tail -20 "$W/llama/build.log" "$W/llama/configure.log" >&2 || true
      exit 4
    fi
    sleep 10
  done
  local bin=$W/llama/build/bin
  for m in "$W/models/$smol" "$W/models/$gemma" "$big"; do
    name=$(basename "$m" .gguf)
    [[ -f $W/out/llama_bench_$name.jsonl ]] ||
      "$bin/llama-bench" -m "$m" -ngl 99 -fa 1 -p 512,4096 -n 128 -r 5 -o jsonl \
        > "$W/out/llama_bench_$name.jsonl" 2> "$W/out/llama_bench_$name.log"
    [[ -f $W/out/llama_batched_$name.jsonl ]] ||
      "$bin/llama-batched-bench" -m "$m" -ngl 99 -fa 1 -c 20480 -b 2048 -ub 512 -npp 128 \
        -ntg 128 -npl 1,8,32,64 --output-format jsonl \
        > "$W/out/llama_batched_$name.jsonl" 2> "$W/out/llama_batched_$name.log"
  done
  python3 bench/peers_table.py --out "$OUT/peers.json" --gpu "$gpu" --driver "$driver" \
    --commit "$commit" --date "$date" \
    --llama-commit "$(cat "$W/llama/src/llama.cpp-commit" 2> /dev/null ||
      tar -xJOf "$P/src/llama_src.tar.xz" ./llama.cpp-commit)" \
    --llama-cpp-python "$LLAMA_CPP_PYTHON" "$W/out" | tee "$OUT/peers.md"
  # the device tool returns at most 8 files: the raw results and logs in one archive
  tar -C "$W/out" -czf "$OUT/peers_raw.tar.gz" .
  tail -n 5 "$W"/llama/*.log > "$OUT/peers_build.log" 2>&1 || true
}

case "${1:-}" in
  stage) stage ;;
  receive) receive ;;
  run) run ;;
  *)
    echo "usage: scripts/gpu_peers.sh stage | receive | run (see the header)" >&2
    exit 2
    ;;
esac
