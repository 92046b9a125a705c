#!/usr/bin/env bash
# flashnorm's CPU engine beside llama.cpp on the same GGUF files, the same cores and threads, in
# one invocation (issue 21, item 4). llama.cpp is an outside reference: its source comes from the
# pinned llama-cpp-python source package (vendor/llama.cpp) into the cache, never the repository,
# and only its llama-bench, llama-perplexity and llama-server tools are built (Release, CPU only,
# GGML_NATIVE, or AVX2 only with LLAMA_ISA=avx2; llama-server for bench/serve_load.py
# --llama-server).
#
# For each model (SmolLM2-135M-Instruct Q4_1, Gemma 3 270M Q4_K_M) and each flashnorm
# configuration (--weights native/f32 x --norm standard/flashnorm), R rounds of, back to back:
#   A  llama-bench -t T: pp128 and pp512 (-p 128,512 -n 0), then tg N after a prompt of 128
#      (-p 0 -n N -d 128), one timed repetition each after llama-bench's untimed warm-up run;
#   B  flashnorm generate (greedy) on a GPL-3 prefix of exactly 128 tokens, -n N (prompt tok/s at
#      128, decode tok/s), then on a prefix of exactly 512 tokens, -n 1 (prompt tok/s at 512).
# Every run goes under /usr/bin/time -v (peak RSS) with the 1-minute load average read before it.
# Then once per model (both are deterministic): llama-perplexity and `flashnorm verify
# --weights native --chunks llama-perplexity` on the first PPL_CHUNKS chunks of 512 tokens of the
# GPL-3 text: the same chunks and scored positions (the second half of each chunk).
# Writes JSON (every run) and prints a Markdown table of medians with flashnorm/llama.cpp ratios,
# then each configuration's peak RSS against issue 21's budget (the GGUF file's size + the KV cache
# at --ctx CTX, from the file's metadata read by the script itself, + 150 MB; in the JSON's
# summary as rss_budget_mb / rss_within_budget, the budget's parts under rss_budget);
# the runs so far are also in $FLASHNORM_CACHE/cpu_bench/runs-<OUT_JSON's name>.jsonl (kept if a
# run fails).
#
#   scripts/cpu_bench.sh [FLASHNORM_BUILD_DIR] [OUT_JSON]
#     default build dir: $root/build/release; default JSON:
#     bench/results/cpu_bench-<flashnorm commit>-<date>.json
# Then scripts/requant_bench.sh (the fold requantization table) into OUT_JSON's name with
# -requant.json, unless REQUANT=0.
#   env: R=3 (rounds) T=2 (threads) N=128 (decode tokens) PPL_CHUNKS=4 NICE=19 REQUANT=1
#        LLAMA_CPP_PYTHON=0.3.36 (the pinned source package) FLASHNORM_CACHE (~/.cache/flashnorm)
#        FLASHNORM_COMMIT (the commit the binary was built from; default: its source tree's HEAD)
#        FLASHNORM_CPU_ISA=avx2 (flashnorm's kernels on AVX2 on an AVX-512 machine; recorded in the
#        JSON as flashnorm_isa)
#        LLAMA_ISA=native|avx2 (llama.cpp built for the machine, GGML_NATIVE, in build/, or for AVX2
#        without AVX-512 or VNNI, in build-avx2/; default avx2 when FLASHNORM_CPU_ISA=avx2, so both
#        engines run the same instruction set; recorded in the JSON as llama_cpp_isa)
set -euo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"
build="$(cd "${1:-$root/build/release}" && pwd)"
R="${R:-3}" T="${T:-2}" N="${N:-128}" PPL_CHUNKS="${PPL_CHUNKS:-4}" NICE="${NICE:-19}"
LLAMA_CPP_PYTHON="${LLAMA_CPP_PYTHON:-0.3.36}"
cache="${FLASHNORM_CACHE:-$HOME/.cache/flashnorm}"
cli="$build/src/cli/flashnorm"
text=/usr/share/common-licenses/GPL-3
CTX=640  # flashnorm's KV cache: the 512-token prompt plus one token, or 128 + N
[ -x "$cli" ] || { echo "error: $cli not built" >&2; exit 1; }
[ -r "$text" ] || { echo "error: $text missing (Debian base-files)" >&2; exit 1; }
[ -x /usr/bin/time ] || { echo "error: /usr/bin/time missing (apt-get install time)" >&2; exit 1; }
[ "$N" -le $((CTX - 128)) ] || { echo "error: N=$N: at most $((CTX - 128))" >&2; exit 1; }
# The commit of the sources the flashnorm build was configured from (not this checkout's): their
# HEAD now, which the binary need not have been built from (no commit is compiled in), so the
# JSON keeps the binary's time and HEAD's, and FLASHNORM_COMMIT names the commit instead.
fn_src="$(sed -n 's/^CMAKE_HOME_DIRECTORY:INTERNAL=//p' "$build/CMakeCache.txt")"
fn_commit="${FLASHNORM_COMMIT:-$(git -C "$fn_src" rev-parse --short HEAD)}"
fn_dirty="$(git -C "$fn_src" status --porcelain --untracked-files=no | head -c1 | wc -c)"
fn_bin_time="$(stat -c %Y "$cli")" fn_head_time="$(git -C "$fn_src" log -1 --format=%ct HEAD)"
if [ -z "${FLASHNORM_COMMIT:-}" ] && [ "$fn_head_time" -gt "$fn_bin_time" ]; then
  echo "warning: $fn_src's HEAD ($fn_commit) is newer than $cli: set FLASHNORM_COMMIT" >&2
fi
out="${2:-$root/bench/results/cpu_bench-$fn_commit-$(date -u +%F).json}"
tmp="$(mktemp -d)"
trap 'rm -rf "$tmp"' EXIT

# --- llama.cpp: source from the pinned sdist, its tools built once -------------------------------
llama="$cache/llama.cpp-$LLAMA_CPP_PYTHON"
default_isa=native
[ "${FLASHNORM_CPU_ISA:-}" = avx2 ] && default_isa=avx2
LLAMA_ISA="${LLAMA_ISA:-$default_isa}"
case "$LLAMA_ISA" in
  native) lbuild="$llama/build" isa_flags=(-DGGML_NATIVE=ON) ;;
  # AVX2 + FMA + F16C + BMI2, as a machine without AVX-512 has them
  avx2) lbuild="$llama/build-avx2" isa_flags=(-DGGML_NATIVE=OFF -DGGML_AVX=ON -DGGML_AVX2=ON
    -DGGML_FMA=ON -DGGML_F16C=ON -DGGML_BMI2=ON -DGGML_AVX_VNNI=OFF -DGGML_AVX512=OFF) ;;
  *) echo "error: LLAMA_ISA=$LLAMA_ISA: native or avx2" >&2; exit 1 ;;
esac
lbench="$lbuild/bin/llama-bench" lppl="$lbuild/bin/llama-perplexity"
if [ ! -x "$lbench" ] || [ ! -x "$lppl" ] || [ ! -x "$lbuild/bin/llama-server" ]; then
  sdist="$cache/pip/llama_cpp_python-$LLAMA_CPP_PYTHON.tar.gz"
  if [ ! -s "$sdist" ]; then
    mkdir -p "$cache/pip"
    python3 -m pip download -q --no-binary :all: --no-deps -d "$cache/pip" \
      "llama-cpp-python==$LLAMA_CPP_PYTHON" >&2
  fi
  if [ ! -f "$llama/src/CMakeLists.txt" ]; then
    rm -rf "$llama/src.part" && mkdir -p "$llama/src.part"
    top="llama_cpp_python-$LLAMA_CPP_PYTHON"
    tar -xzf "$sdist" -C "$llama/src.part" --strip-components=3 "$top/vendor/llama.cpp"
    # the vendored submodule's commit (the sdist keeps its git metadata, not a usable repo)
    tar -xzOf "$sdist" "$top/.git/modules/vendor/llama.cpp/HEAD" > "$llama/llama.cpp-commit"
    mv "$llama/src.part" "$llama/src"
  fi
  echo "building llama.cpp (llama-cpp-python $LLAMA_CPP_PYTHON, $LLAMA_ISA) in $lbuild" >&2
  # LLAMA_CURL is deprecated in this llama.cpp (no CURL is used); LLAMA_OPENSSL=OFF: no HTTPS.
  nice -n 19 cmake -S "$llama/src" -B "$lbuild" -DCMAKE_BUILD_TYPE=Release \
    "${isa_flags[@]}" -DGGML_CUDA=OFF -DLLAMA_OPENSSL=OFF -DBUILD_SHARED_LIBS=OFF \
    -DLLAMA_BUILD_TESTS=OFF -DLLAMA_BUILD_EXAMPLES=OFF -DLLAMA_BUILD_SERVER=ON \
    -DLLAMA_BUILD_APP=OFF > "$lbuild.configure.log"
  # llama-server: the reference of bench/serve_load.py --llama-server
  nice -n 19 cmake --build "$lbuild" -j 2 --target llama-bench llama-perplexity llama-server \
    > "$lbuild.build.log"
fi
llama_commit="$(cat "$llama/llama.cpp-commit" 2> /dev/null || echo unknown)"

eval "$("$root/scripts/fetch_models.sh" smollm2 gemma3)"
models=("smollm2:$FLASHNORM_SMOLLM2_GGUF" "gemma3:$FLASHNORM_GEMMA3_GGUF")
export OPENBLAS_NUM_THREADS="$T"  # flashnorm's prefill sgemm; its own pool takes every core
py="$tmp/cpu_bench.py"
cat > "$py" <<'PY'
"""Helpers of scripts/cpu_bench.sh: prompt calibration, parsing of each run, the summary."""
import json, os, re, statistics, subprocess, sys


def prompt_tokens(cli, model, path):
    """The prompt length `flashnorm generate` prints for the text in `path` (BOS included); the
    process is stopped once it has printed it, before any forward pass."""
    p = subprocess.Popen([cli, "generate", "-m", model, "-f", path, "-n", "1", "--ctx", "2048",
                          "--device", "cpu", "--weights", "native"],
                         stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    lines = []
    for line in p.stderr:
        m = re.search(r"prompt: (\d+) tokens", line)
        if m:
            p.kill()
            p.wait()
            return int(m.group(1))
        lines.append(line)
    p.wait()
    sys.exit(f"error: no prompt length from flashnorm generate on {model} (exit {p.returncode}):"
             f"\n{''.join(lines[-5:])}")


def calibrate(cli, model, text, target, out):
    """Writes to `out` the shortest prefix of `text` that encodes to `target` tokens (binary
    search on its length in bytes); exits when no prefix has exactly that many."""
    data = open(text, "rb").read()
    tmp = out + ".try"

    def count(n):
        open(tmp, "wb").write(data[:n])
        return prompt_tokens(cli, model, tmp)

    # the smallest n with count(n) >= target lies in [lo, hi]: 8 bytes a token (the text averages
    # about 4.4) keeps the longest prompt tried within the --ctx of 2048
    lo, hi = 1, min(len(data), 8 * target)
    if count(hi) < target:
        sys.exit(f"error: the first {hi} bytes of {text} encode to fewer than {target} tokens")
    while lo < hi:
        mid = (lo + hi) // 2
        if count(mid) >= target:
            hi = mid
        else:
            lo = mid + 1
    for n in range(lo, min(lo + 16, len(data)) + 1):  # a merge can skip a count: look further
        if count(n) == target:
            os.replace(tmp, out)
            return
    sys.exit(f"error: no prefix of {text} encodes to exactly {target} tokens on {model}")


def gguf_metadata(path):
    """The key/value metadata of a GGUF file (scalars and strings; arrays as lists), read here so
    that the memory budget below does not come from flashnorm's own reader."""
    import struct
    f = open(path, "rb")
    rd = lambda fmt: struct.unpack("<" + fmt, f.read(struct.calcsize("<" + fmt)))[0]
    if f.read(4) != b"GGUF":
        sys.exit(f"error: {path}: not a GGUF file")
    version, _, n_kv = rd("I"), rd("Q"), rd("Q")
    if version < 2:
        sys.exit(f"error: {path}: GGUF v{version} is not read here")
    scalar = {0: "B", 1: "b", 2: "H", 3: "h", 4: "I", 5: "i", 6: "f", 7: "?", 10: "Q", 11: "q",
              12: "d"}
    string = lambda: f.read(rd("Q")).decode("utf-8", "replace")

    def value(t):
        if t in scalar:
            return rd(scalar[t])
        if t == 8:
            return string()
        if t == 9:
            et, n = rd("I"), rd("Q")
            return [value(et) for _ in range(n)]
        sys.exit(f"error: {path}: unknown GGUF value type {t}")
    kv = {}
    for _ in range(n_kv):
        k = string()
        kv[k] = value(rd("I"))
    return kv


def memory_budget(path, ctx):
    """Issue 21's bound on generate's peak RSS for `path` at a KV cache of `ctx` positions: the
    file's size + the CPU engine's KV cache (fp32 K and V of every layer: block_count x ctx x
    head_count_kv x key_length, and the same with value_length) + 150 MB (10^6 bytes)."""
    kv = gguf_metadata(path)
    a = kv["general.architecture"]
    g = lambda k, d=None: kv.get(f"{a}.{k}", d)
    layers, heads = g("block_count"), g("attention.head_count")
    kv_heads = g("attention.head_count_kv", heads)
    kv_heads = max(kv_heads) if isinstance(kv_heads, list) else kv_heads
    head_dim = g("embedding_length") // heads
    k_len, v_len = g("attention.key_length", head_dim), g("attention.value_length", head_dim)
    kv_bytes = layers * ctx * kv_heads * (k_len + v_len) * 4
    file_bytes = os.path.getsize(path)
    return dict(file_bytes=file_bytes, kv_cache_bytes=kv_bytes, ctx=ctx, overhead_bytes=150 * 10**6,
                budget_bytes=file_bytes + kv_bytes + 150 * 10**6,
                kv_cache_from=f"{layers} layers x {ctx} positions x {kv_heads} KV heads x "
                              f"({k_len} + {v_len}) x 4 bytes")


def rss_mb(path):
    return int(re.search(r"Maximum resident set size \(kbytes\): (\d+)",
                         open(path).read()).group(1)) / 1024


def wall_s(path):
    t = re.search(r"Elapsed \(wall clock\) time \(h:mm:ss or m:ss\): ([\d:.]+)",
                  open(path).read()).group(1)
    s = 0.0
    for part in t.split(":"):
        s = s * 60 + float(part)
    return s


def llama_bench(stdout, timef, base):
    """One JSON line per test of a `llama-bench -o json` run."""
    for t in json.load(open(stdout)):
        shape = f"pp{t['n_prompt']}" if t["n_gen"] == 0 else f"tg{t['n_gen']}"
        print(json.dumps(dict(base, shape=shape, tokens=t["n_prompt"] or t["n_gen"],
                              depth=t["n_depth"], tps=t["avg_ts"], samples_tps=t["samples_ts"],
                              threads=t["n_threads"], build_commit=t["build_commit"],
                              build_number=t["build_number"], cpu_info=t["cpu_info"],
                              peak_rss_mb=rss_mb(timef), wall_s=wall_s(timef))))


def generate(stderr, timef, base, decode):
    """The prompt line (and with `decode`, the decode line) of a `flashnorm generate` run. The
    decode figure printed counts N tokens over N - 1 forward passes (the first token comes from
    the prompt pass); tps is forward passes per second, as llama-bench's tg counts them."""
    e = open(stderr).read()
    m = re.search(r"prompt: (\d+) tokens, ([\d.]+) tokens/s \| decode: (\d+) tokens, ([\d.]+)", e)
    if not m:
        sys.exit(f"error: no timing line from flashnorm generate:\n{e[-2000:]}")
    dev = re.search(r"device: (.*) \|", e)
    common = dict(base, engine_describe=dev.group(1) if dev else "", peak_rss_mb=rss_mb(timef),
                  wall_s=wall_s(timef))
    pn, ptps, dn, dtps = int(m.group(1)), float(m.group(2)), int(m.group(3)), float(m.group(4))
    print(json.dumps(dict(common, shape=f"pp{base['target']}", tokens=pn, tps=ptps)))
    if decode:
        print(json.dumps(dict(common, shape=f"tg{base['n']}", tokens=dn - 1, depth=pn,
                              tps=dtps * (dn - 1) / dn if dn > 1 else 0.0,
                              printed_tokens=dn, printed_tps=dtps)))


def perplexity(stdout, stderr, timef, base):
    """llama-perplexity's final estimate, or flashnorm verify's JSON (four engines)."""
    common = dict(base, peak_rss_mb=rss_mb(timef), wall_s=wall_s(timef))
    if base["engine"] == "llama.cpp":
        e = open(stderr).read()
        m = re.search(r"Final estimate: PPL = ([\d.]+) \+/- ([\d.]+)", e)
        c = re.search(r"calculating perplexity over (\d+) chunks, n_ctx=(\d+)", e)
        if not m or not c:
            sys.exit(f"error: no estimate from llama-perplexity:\n{e[-2000:]}")
        chunks, ctx = int(c.group(1)), int(c.group(2))
        # each chunk's second half is scored: positions ctx/2 .. ctx-2 predict the next token
        print(json.dumps(dict(common, shape="ppl", weights="native", norm="standard",
                              ppl=float(m.group(1)), ppl_err=float(m.group(2)), chunks=chunks,
                              ctx=ctx, scored_positions=chunks * (ctx - 1 - ctx // 2))))
        return
    j = json.load(open(stdout))
    rows = [("f32", "standard", j["ppl_reference"], None)]
    for e in j["engines"]:
        w = "native" if e["engine"].startswith("native") else "f32"
        rows.append((w, e["engine"].rsplit(", ", 1)[1], e["ppl"], e["top1_vs_reference"]))
    modes = j.get("native_flashnorm_vs_native_standard", {}).get("top1")
    for w, norm, ppl, top1 in rows:
        extra = {"top1_native_flashnorm_vs_native_standard": modes} if w == "native" else {}
        print(json.dumps(dict(common, shape="ppl", weights=w, norm=norm, ppl=ppl,
                              top1_vs_f32_standard=top1, scored_positions=j["positions"],
                              **extra)))


def summarize(runs_path, meta_path, out):
    runs = [json.loads(l) for l in open(runs_path)]
    meta = json.load(open(meta_path))
    med = lambda xs: statistics.median(xs) if xs else None
    configs = [("native", "standard"), ("native", "flashnorm"), ("f32", "standard"),
               ("f32", "flashnorm")]
    shapes = ["pp128", "pp512", f"tg{meta['n_decode']}"]
    summary = []
    for model in meta["models"]:
        mr = [r for r in runs if r["model"] == model]
        ll = [r for r in mr if r["engine"] == "llama.cpp" and r["shape"] != "ppl"]
        lp = [r for r in mr if r["engine"] == "llama.cpp" and r["shape"] == "ppl"]
        summary.append(dict(model=model, engine="llama.cpp", weights="native", norm="",
                            **{s: med([r["tps"] for r in ll if r["shape"] == s]) for s in shapes},
                            peak_rss_mb=max([r["peak_rss_mb"] for r in ll], default=None),
                            ppl=lp[0]["ppl"] if lp else None, runs_per_shape=len(
                                [r for r in ll if r["shape"] == "pp128"])))
        for w, norm in configs:
            fl = [r for r in mr if r["engine"] == "flashnorm" and r["shape"] != "ppl"
                  and r["weights"] == w and r["norm"] == norm]
            fp = [r for r in mr if r["engine"] == "flashnorm" and r["shape"] == "ppl"
                  and r["weights"] == w and r["norm"] == norm]
            # the llama.cpp runs made right before this configuration's, in the same rounds
            pair = [r for r in ll if r["paired_with"] == f"{w}/{norm}"]
            row = dict(model=model, engine="flashnorm", weights=w, norm=norm,
                       peak_rss_mb=max([r["peak_rss_mb"] for r in fl], default=None),
                       ppl=fp[0]["ppl"] if fp else None, runs_per_shape=len(
                           [r for r in fl if r["shape"] == "pp128"]))
            for s in shapes:
                f = med([r["tps"] for r in fl if r["shape"] == s])
                l = med([r["tps"] for r in pair if r["shape"] == s])
                row[s] = f
                row[f"{s}_llama_paired"] = l
                row[f"{s}_ratio"] = f / l if f is not None and l else None
            row["decode_tokens"] = sorted({r["tokens"] for r in fl if r["shape"] == shapes[2]})
            # issue 21: peak RSS of generate on the quantized weights as they are (the larger of
            # its two runs) within the budget; --weights f32 holds fp32 copies by design
            b = meta["rss_budget"][model]
            if w == "native" and row["peak_rss_mb"] is not None:
                row["rss_budget_mb"] = b["budget_bytes"] / 2**20
                row["rss_within_budget"] = row["peak_rss_mb"] * 2**20 <= b["budget_bytes"]
            summary.append(row)
    doc = dict(meta, summary=summary, runs=runs)
    with open(out, "w") as f:
        json.dump(doc, f, indent=1)
        f.write("\n")
    fmt = lambda x, p=1: "" if x is None else f"{x:.{p}f}"
    tg = shapes[2]
    print(f"| model | engine | weights | norm | pp128 tok/s | pp512 tok/s | {tg} tok/s | "
          f"pp128 ratio | pp512 ratio | {tg} ratio | peak RSS MB | perplexity |")
    print("|---|---|---|---|---|---|---|---|---|---|---|---|")
    for s in summary:
        ratios = [fmt(s.get(f"{sh}_ratio"), 2) for sh in shapes]
        print(f"| {s['model']} | {s['engine']} | {s['weights']} | {s['norm']} | "
              f"{fmt(s['pp128'])} | {fmt(s['pp512'])} | {fmt(s[tg])} | "
              + " | ".join(ratios) + f" | {fmt(s['peak_rss_mb'], 0)} | {fmt(s['ppl'], 4)} |")
    print("\npeak RSS of `flashnorm generate` vs issue 21's budget (file + KV cache at --ctx "
          f"{meta['flashnorm_ctx']} + 150 MB), MiB:")
    for s in summary:
        if "rss_within_budget" in s:
            b = meta["rss_budget"][s["model"]]
            print(f"  {s['model']} {s['weights']}/{s['norm']}: {s['peak_rss_mb']:.0f} "
                  f"{'<=' if s['rss_within_budget'] else '>'} {s['rss_budget_mb']:.0f} "
                  f"(file {b['file_bytes'] / 2**20:.0f} + KV {b['kv_cache_bytes'] / 2**20:.1f} "
                  f"+ 143) {'ok' if s['rss_within_budget'] else 'OVER'}")
    print(f"wrote {out}", file=sys.stderr)


if __name__ == "__main__":
    cmd, args = sys.argv[1], sys.argv[2:]
    if cmd == "calibrate":
        calibrate(args[0], args[1], args[2], int(args[3]), args[4])
    elif cmd == "llama_bench":
        llama_bench(args[0], args[1], json.loads(args[2]))
    elif cmd == "generate":
        generate(args[0], args[1], json.loads(args[2]), args[3] == "1")
    elif cmd == "perplexity":
        perplexity(args[0], args[1], args[2], json.loads(args[3]))
    elif cmd == "budget":
        print(json.dumps(memory_budget(args[0], int(args[1]))))
    elif cmd == "summarize":
        summarize(args[0], args[1], args[2])
PY

# --- prompts of exactly 128 and 512 tokens for each model (cached) ------------------------------
mkdir -p "$cache/cpu_bench"
for m in "${models[@]}"; do
  file="${m#*:}"
  for n in 128 512; do
    p="$cache/cpu_bench/$(basename "$file" .gguf)-gpl3-$n.txt"
    [ -s "$p" ] || python3 "$py" calibrate "$cli" "$file" "$text" "$n" "$p"
  done
done

# every run as one JSON line, kept in the cache so that a run stopped half way leaves its data;
# named after the output so that two invocations at once (other worktrees) never share the file
runs="$cache/cpu_bench/runs-$(basename "$out" .json).jsonl"
: > "$runs"
load1() { cut -d' ' -f1 /proc/loadavg; }
# base JSON of one run: base ENGINE MODEL ROUND WEIGHTS NORM [KEY VALUE]...
base() {
  local e="$1" m="$2" r="$3" w="$4" n="$5"
  shift 5
  python3 -c 'import json, sys
a = sys.argv[1:]
d = dict(engine=a[0], model=a[1], round=int(a[2]), weights=a[3], norm=a[4],
         loadavg1_before=float(a[5]))
d.update({a[i]: (int(a[i + 1]) if a[i + 1].isdigit() else a[i + 1]) for i in range(6, len(a), 2)})
print(json.dumps(d))' "$e" "$m" "$r" "$w" "$n" "$(load1)" "$@"
}
# llama-bench ARGS...: one run under /usr/bin/time, appended to $runs as one line per test
run_llama_bench() {
  local b="$1"
  shift
  /usr/bin/time -v -o "$tmp/time.txt" nice -n "$NICE" "$lbench" -t "$T" -r 1 -o json "$@" \
    > "$tmp/out.txt" 2> "$tmp/err.txt" || { cat "$tmp/err.txt" >&2; exit 1; }
  python3 "$py" llama_bench "$tmp/out.txt" "$tmp/time.txt" "$b" >> "$runs"
}
# flashnorm generate on the cached prompt of TARGET tokens: run_generate BASE FILE W NORM TARGET N
run_generate() {
  local b="$1" file="$2" w="$3" norm="$4" target="$5" n="$6"
  /usr/bin/time -v -o "$tmp/time.txt" nice -n "$NICE" "$cli" generate -m "$file" \
    -f "$cache/cpu_bench/$(basename "$file" .gguf)-gpl3-$target.txt" -n "$n" --ctx "$CTX" \
    --device cpu --weights "$w" --norm "$norm" > /dev/null 2> "$tmp/err.txt" ||
    { cat "$tmp/err.txt" >&2; exit 1; }
  local decode=0
  [ "$n" -gt 1 ] && decode=1
  python3 "$py" generate "$tmp/err.txt" "$tmp/time.txt" "$b" "$decode" >> "$runs"
}

# --- speed: A (llama.cpp) then B (one flashnorm configuration), every round ---------------------
for round in $(seq "$R"); do
  for m in "${models[@]}"; do
    name="${m%%:*}" file="${m#*:}"
    for w in native f32; do
      for norm in standard flashnorm; do
        echo "round $round/$R $name: llama.cpp, then flashnorm $w/$norm (load $(load1))" >&2
        pair=(paired_with "$w/$norm")
        run_llama_bench "$(base llama.cpp "$name" "$round" native standard "${pair[@]}")" \
          -m "$file" -p 128,512 -n 0
        run_llama_bench "$(base llama.cpp "$name" "$round" native standard "${pair[@]}")" \
          -m "$file" -p 0 -n "$N" -d 128
        run_generate "$(base flashnorm "$name" "$round" "$w" "$norm" target 128 n "$N")" \
          "$file" "$w" "$norm" 128 "$N"
        run_generate "$(base flashnorm "$name" "$round" "$w" "$norm" target 512 n 1)" \
          "$file" "$w" "$norm" 512 1
      done
    done
  done
done

# --- perplexity: once per model and engine, the first PPL_CHUNKS chunks of 512 tokens ----------
for m in "${models[@]}"; do
  name="${m%%:*}" file="${m#*:}"
  echo "perplexity $name: llama-perplexity, then flashnorm verify (load $(load1))" >&2
  b="$(base llama.cpp "$name" 0 native standard)"
  /usr/bin/time -v -o "$tmp/time.txt" nice -n "$NICE" "$lppl" -m "$file" -f "$text" -c 512 \
    -b 512 --chunks "$PPL_CHUNKS" -t "$T" > "$tmp/out.txt" 2> "$tmp/err.txt" ||
    { tail -20 "$tmp/err.txt" >&2; exit 1; }
  python3 "$py" perplexity "$tmp/out.txt" "$tmp/err.txt" "$tmp/time.txt" "$b" >> "$runs"
  b="$(base flashnorm "$name" 0 all all)"
  /usr/bin/time -v -o "$tmp/time.txt" nice -n "$NICE" "$cli" verify "$file" --weights native \
    --text "$text" --ctx 512 --max-text-tokens $((PPL_CHUNKS * 512)) --tokens 0 \
    --chunks llama-perplexity --json "$tmp/verify.json" > "$tmp/out.txt" 2> "$tmp/err.txt" ||
    { tail -20 "$tmp/err.txt" >&2; exit 1; }
  python3 "$py" perplexity "$tmp/verify.json" "$tmp/err.txt" "$tmp/time.txt" "$b" >> "$runs"
done

# --- JSON and table -----------------------------------------------------------------------------
python3 - "$tmp/meta.json" <<PY
import json, os, platform, sys, time
info = open("/proc/cpuinfo").read().splitlines()
cpu = next((l.split(":", 1)[1].strip() for l in info if l.startswith("model name")), "")
flags = next((l.split(":", 1)[1].split() for l in info if l.startswith("flags")), [])
simd = ("avx2", "fma", "f16c", "avx512f", "avx512bw", "avx512vl", "avx512dq", "avx512_vnni", "avx_vnni")
json.dump({
    "what": "flashnorm CPU engine vs llama.cpp on the same GGUF files, threads and cores",
    "date": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
    "flashnorm_commit": "$fn_commit", "flashnorm_dirty": $fn_dirty == 1,
    "flashnorm_binary": "$cli", "flashnorm_binary_mtime": $fn_bin_time,
    "flashnorm_source_head_time": $fn_head_time,
    "llama_cpp_python": "$LLAMA_CPP_PYTHON", "llama_cpp_commit": "$llama_commit",
    "cpu_model": cpu, "cpu_flags": [f for f in flags if f in simd],
    "flashnorm_isa": os.environ.get("FLASHNORM_CPU_ISA") or "default (avx2 where available)",
    "llama_cpp_isa": "$LLAMA_ISA",
    "cpus": os.cpu_count(), "kernel": platform.release(), "threads": $T,
    "flashnorm_threads": "its pool uses std::thread::hardware_concurrency() = os.cpu_count(); "
                         "OPENBLAS_NUM_THREADS=$T",
    "rounds": $R, "n_decode": $N, "flashnorm_ctx": $CTX, "nice": $NICE, "ppl_chunks": $PPL_CHUNKS,
    "ppl_ctx": 512, "text": "$text", "models": ["smollm2", "gemma3"],
    "model_files": {"smollm2": "$(basename "$FLASHNORM_SMOLLM2_GGUF")",
                    "gemma3": "$(basename "$FLASHNORM_GEMMA3_GGUF")"},
    "loadavg_at_end": open("/proc/loadavg").read().split()[:3],
    "rss_budget": {"smollm2": $(python3 "$py" budget "$FLASHNORM_SMOLLM2_GGUF" "$CTX"),
                   "gemma3": $(python3 "$py" budget "$FLASHNORM_GEMMA3_GGUF" "$CTX")},
}, open(sys.argv[1], "w"), indent=1)
PY
mkdir -p "$(dirname "$out")"
python3 "$py" summarize "$runs" "$tmp/meta.json" "$out"

# --- the requantization table (fold output types), unless REQUANT=0 ------------------------------
if [ "${REQUANT:-1}" = 1 ]; then
  T="$T" NICE="$NICE" LLAMA_CPP_PYTHON="$LLAMA_CPP_PYTHON" FLASHNORM_COMMIT="$fn_commit" \
    LLAMA_PERPLEXITY="$lppl" \
    "$root/scripts/requant_bench.sh" "$build" "${out%.json}-requant.json"
fi
