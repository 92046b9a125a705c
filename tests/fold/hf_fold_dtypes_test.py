"""`flashnorm fold --dtype` on Hugging Face directories, against references outside the product.

Random bf16 checkpoints are built and saved by `transformers` (seeded, every RMSNorm gain
randomized): a Llama with its own LM head and a Gemma 3 with a tied one (gains stored as `1 + w`).
The reference fold is computed here in float64 with torch from the stored bf16 values
(W[:, i] * g_i, or * (1 + w_i) for Gemma), and rounded once, in numpy, to the stored type. Checks:
  * `--dtype f32` (the default): every rewritten tensor is F32 and within 2e-6 relative (largest
    |a - b| / |b| per element) of the float64 fold; it is in fact its one rounding to fp32;
  * `--dtype bf16` and `--dtype f16`: rewritten tensors equal the float64 fold rounded once
    (to nearest even) to that type;
  * every tensor that is not rewritten keeps its bytes, dtype and shape (read with a safetensors
    parser written here); the folded norms hold their identity value in their own dtype;
  * config.json keeps the input's `dtype` (or transformers 4's `torch_dtype`), and gets one when it
    had none and the output is mixed (`dtype` for a transformers 5 config, else `torch_dtype`), so
    it loads as bf16 like its input; __metadata__ flashnorm.dtypes counts the dtypes; an fp32
    checkpoint folded with --dtype bf16 keeps its F32 tensors and config float32;
  * transformers loads the folded directory with no missing or unexpected keys; loaded with
    dtype=torch.float32 its logits match the unfolded model's (also float32) within 1e-5 relative
    (max |a - b| / max |b|); loaded by default it is bf16 like the input, and then the Llama fold
    stored as F32 becomes exactly the `--dtype bf16` fold;
  * negative controls: a fold computed in bf16 (rounded to bf16, then stored as fp32) misses the
    2e-6 bar, the default-dtype (bf16) load of the folded model misses the 1e-5 logit bar, a
    folded directory with its LM head removed is reported as missing a key, and a mixed output
    whose config has no dtype loads as float32 (its first floating tensor's type).
Usage: hf_fold_dtypes_test.py --cli FLASHNORM
"""
import argparse
import json
import shutil
import struct
import subprocess
import sys
import tempfile
from pathlib import Path

import numpy as np
import torch
import transformers
from safetensors.torch import load_file, save_file
from transformers import AutoModelForCausalLM

# the random checkpoints of the engine's transformers test: same builder, same small shapes
sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "engine"))
from hf_transformers_test import SMALL, VOCAB, gemma3, llama  # noqa: E402
from hf_transformers_test import build as hf_build  # noqa: E402

WEIGHT_TOL = 2e-6  # largest elementwise relative difference of an F32 fold from the fp64 fold
LOGIT_TOL = 1e-5   # largest relative logit difference, folded vs unfolded, both loaded as float32
# What a fold rewrites, written out from the paper's rule (not read from flashnorm): each norm
# whose output enters linear layers -> those layers; the final norm -> the LM head.
LAYER_FOLDS = {
    "llama": {"input_layernorm": ["self_attn.q_proj", "self_attn.k_proj", "self_attn.v_proj"],
              "post_attention_layernorm": ["mlp.gate_proj", "mlp.up_proj"]},
    "gemma3": {"input_layernorm": ["self_attn.q_proj", "self_attn.k_proj", "self_attn.v_proj"],
               "pre_feedforward_layernorm": ["mlp.gate_proj", "mlp.up_proj"]},
}


def build(kind, seed, work):
    """A random fp32 transformers model of `kind` (untied Llama, tied Gemma 3), built, randomized
    (every gain too) and saved to work/KIND_f32 by the engine test's builder."""
    factory = (lambda: llama(tie_word_embeddings=False)) if kind == "llama" else gemma3
    return hf_build(factory, seed, work / f"{kind}_f32").eval()


def raw_tensors(d):
    """{name: (dtype, shape, bytes)} of every safetensors file in `d`, parsed per the format spec
    (8-byte little-endian header length, JSON header, data buffer), and the first file's
    __metadata__."""
    out, meta = {}, None
    for f in sorted(d.glob("*.safetensors")):
        b = f.read_bytes()
        (n,) = struct.unpack("<Q", b[:8])
        header = json.loads(b[8:8 + n])
        meta = meta if meta is not None else header.pop("__metadata__", {})
        header.pop("__metadata__", None)
        for name, e in header.items():
            lo, hi = e["data_offsets"]
            out[name] = (e["dtype"], tuple(e["shape"]), b[8 + n + lo:8 + n + hi])
    return out, meta


def to_f64(dtype, shape, raw):
    """The stored values as float64 (bf16 is the upper half of an fp32)."""
    if dtype == "BF16":
        u = np.frombuffer(raw, "<u2").astype(np.uint32) << 16
        return u.view(np.float32).astype(np.float64).reshape(shape)
    return np.frombuffer(raw, {"F32": "<f4", "F16": "<f2"}[dtype]).astype(np.float64).reshape(shape)


def round_once(x, bits, emin):
    """x (float64) rounded once to nearest even with `bits` significant bits and normal exponents
    down to `emin` (bf16: 8, -126; f16: 11, -14; below: the type's subnormal spacing)."""
    m, e = np.frexp(x)  # x = m * 2^e, 0.5 <= |m| < 1: the leading bit has weight 2^(e-1)
    e = np.maximum(e, emin + 1)
    return np.ldexp(np.rint(np.ldexp(x, bits - e)), e - bits)  # exact scaling; rint: ties to even


def fold_plan(kind, names, n_layer):
    """{rewritten tensor: (its source tensor, its norm)} and the folded norms."""
    plan, norms = {}, []
    for layer in range(n_layer):
        for norm, consumers in LAYER_FOLDS[kind].items():
            nn = f"model.layers.{layer}.{norm}.weight"
            norms.append(nn)
            for c in consumers:
                t = f"model.layers.{layer}.{c}.weight"
                plan[t] = (t, nn)
    head_src = "lm_head.weight" if "lm_head.weight" in names else "model.embed_tokens.weight"
    plan["lm_head.weight"] = (head_src, "model.norm.weight")
    norms.append("model.norm.weight")
    return plan, norms


def reference_fold(kind, inp, plan):
    """{rewritten tensor: its fold in float64} from the input's stored values (torch, fp64)."""
    ref = {}
    for t, (src, norm) in plan.items():
        w = torch.from_numpy(to_f64(*inp[src]))
        g = torch.from_numpy(to_f64(*inp[norm]))
        ref[t] = (w * ((1.0 + g) if kind == "gemma3" else g)[None, :]).numpy()
    return ref


def max_rel(a, b):
    """Largest elementwise |a - b| / |b| over b != 0."""
    nz = b != 0
    return float(np.max(np.abs(a[nz] - b[nz]) / np.abs(b[nz])))


def logits_rel(a, b):
    return float(np.max(np.abs(a - b)) / np.max(np.abs(b)))


def logits(model, tokens):
    with torch.no_grad():
        return model(torch.tensor([tokens])).logits[0].double().numpy()


def fold(cli, src, dst, *extra):
    r = subprocess.run([cli, "fold", str(src), "-o", str(dst), *extra], capture_output=True,
                       text=True)
    if r.returncode != 0:
        raise RuntimeError(f"flashnorm fold {' '.join(extra)}: {r.stderr.strip()}")
    return r.stdout


class Checks:
    def __init__(self):
        self.failed = []

    def __call__(self, ok, what):
        print(f"  {'ok  ' if ok else 'FAIL'} {what}")
        if not ok:
            self.failed.append(what)


def check_fold(check, kind, src, out, dtype, plan, norms, ref):
    """The rewritten tensors of `out` against `ref` rounded to `dtype`, the others against `src`;
    returns the largest relative difference of the rewritten tensors from the fp64 fold."""
    inp, _ = raw_tensors(src)
    got, meta = raw_tensors(out)
    check(set(got) == set(inp) | {"lm_head.weight"}, f"{kind} {dtype}: the input's tensors + head")
    st = {"f32": "F32", "bf16": "BF16", "f16": "F16"}[dtype]
    worst, exact = 0.0, True
    stored = {got[t][0] for t in plan}
    check(stored == {st}, f"{kind} {dtype}: rewritten tensors stored as {sorted(stored)}")
    for t in plan:
        if got[t][1] != tuple(ref[t].shape):
            check(False, f"{kind} {dtype}: {t} has shape {got[t][1]}")
            continue
        v = to_f64(*got[t])
        worst = max(worst, max_rel(v, ref[t]))
        once = {"f32": lambda x: x.astype(np.float32).astype(np.float64),  # IEEE nearest even
                "bf16": lambda x: round_once(x, 8, -126),
                "f16": lambda x: round_once(x, 11, -14)}[dtype](ref[t])
        exact &= np.array_equal(v, once)
    check(exact, f"{kind} {dtype}: every rewritten tensor is the fp64 fold rounded once to {st}")
    ident = 0.0 if kind == "gemma3" else 1.0
    check(all(got[n][0] == inp[n][0] and np.all(to_f64(*got[n]) == ident) for n in norms),
          f"{kind} {dtype}: {len(norms)} folded norms hold {ident:g} in their own dtype")
    kept = [n for n in inp if n not in plan and n not in norms]
    check(all(got[n] == inp[n] for n in kept),
          f"{kind} {dtype}: {len(kept)} other tensors byte-identical (dtype, shape, bytes)")
    other = {}
    for n in kept + norms:
        other[inp[n][0]] = other.get(inp[n][0], 0) + 1
    want = {"folded": {st: len(plan)}, "other": other}
    check(meta.get("flashnorm.folded") == "true" and
          json.loads(meta.get("flashnorm.dtypes", "{}")) == want,
          f"{kind} {dtype}: metadata flashnorm.dtypes = {meta.get('flashnorm.dtypes')}")
    return worst


def load(d, **kw):
    model, info = AutoModelForCausalLM.from_pretrained(d, output_loading_info=True, **kw)
    bad = {k: v for k, v in info.items() if v and k != "error_msgs"} | (
        {"error_msgs": info["error_msgs"]} if info.get("error_msgs") else {})
    return model.eval(), bad


def run_model(check, cli, work, kind, seed, rows):
    model = build(kind, seed, work)
    src = work / f"{kind}_bf16"
    model.to(torch.bfloat16).save_pretrained(src)
    inp, _ = raw_tensors(src)
    cfg_in = json.loads((src / "config.json").read_text())
    check(("lm_head.weight" in inp) == (kind == "llama"), f"{kind}: LM head tied: {kind != 'llama'}")
    check(cfg_in.get("dtype") == "bfloat16" and {v[0] for v in inp.values()} == {"BF16"},
          f"{kind}: transformers saved a bf16 checkpoint (config dtype {cfg_in.get('dtype')})")
    plan, norms = fold_plan(kind, inp, SMALL["num_hidden_layers"])
    ref = reference_fold(kind, inp, plan)

    outs = {}
    for dtype in ("f32", "bf16", "f16"):
        outs[dtype] = work / f"{kind}_fold_{dtype}"
        fold(cli, src, outs[dtype], *([] if dtype == "f32" else ["--dtype", dtype]))
        worst = check_fold(check, kind, src, outs[dtype], dtype, plan, norms, ref)
        if dtype == "f32":
            check(worst < WEIGHT_TOL, f"{kind} f32: largest relative difference from the fp64 "
                                      f"fold {worst:.2e} < {WEIGHT_TOL:g}")
        rows.append((kind, f"--dtype {dtype}", "rewritten vs fp64 fold (elementwise rel.)", worst))
        cfg = json.loads((outs[dtype] / "config.json").read_text())
        check(cfg.get("dtype") == "bfloat16" and "torch_dtype" not in cfg and
              cfg.get("tie_word_embeddings") is False,
              f"{kind} {dtype}: config dtype {cfg.get('dtype')}, tie_word_embeddings false")

    # negative control: the fold computed in bf16 (products rounded to bf16, then stored as f32)
    twice = 0.0
    for t, (s, n) in plan.items():
        w = torch.from_numpy(to_f64(*inp[s])).to(torch.bfloat16)
        g = torch.from_numpy(to_f64(*inp[n])).to(torch.bfloat16)
        g = (1 + g) if kind == "gemma3" else g  # (1 + w also rounded to bf16)
        twice = max(twice, max_rel((w * g[None, :]).double().numpy(), ref[t]))
    check(twice > WEIGHT_TOL, f"{kind} negative control: a fold in bf16 differs by {twice:.2e} "
                              f"> {WEIGHT_TOL:g}")
    rows.append((kind, "fold in bf16 (control)", "rewritten vs fp64 fold (elementwise rel.)", twice))

    # transformers: the unfolded model and the F32 fold, both loaded as float32
    tokens = [int(t) for t in np.random.default_rng(seed).integers(3, VOCAB, 16)]
    base, bad = load(src, dtype=torch.float32)
    ref_logits = logits(base, tokens)
    for dtype, d in outs.items():
        m, bad = load(d, dtype=torch.float32)
        r = logits_rel(logits(m, tokens), ref_logits)
        rows.append((kind, f"--dtype {dtype}", "logits vs unfolded, loaded as float32", r))
        check(not bad, f"{kind} {dtype}: loads with no missing/unexpected keys {bad or ''}")
        if dtype == "f32":
            check(r < LOGIT_TOL, f"{kind} f32 loaded as float32: logits rel {r:.2e} < {LOGIT_TOL:g}")
    if kind == "llama":  # negative control: a key removed from the folded dir is reported
        cut = work / "llama_fold_f32_no_head"
        shutil.copytree(outs["f32"], cut)
        sd = load_file(cut / "model.safetensors")
        del sd["lm_head.weight"]
        save_file(sd, cut / "model.safetensors", metadata=raw_tensors(outs["f32"])[1])
        _, bad = load(cut, dtype=torch.float32)
        check("lm_head.weight" in bad.get("missing_keys", ()),
              f"negative control: lm_head.weight removed is reported missing ({bad})")
    # by default (dtype "auto": the config's) the F32 fold loads as bf16, like the input
    m, bad = load(outs["f32"])
    r = logits_rel(logits(m, tokens), ref_logits)
    rows.append((kind, "--dtype f32", "logits vs unfolded, default load (bf16)", r))
    check(m.dtype == torch.bfloat16 and not bad, f"{kind} f32 default load: {m.dtype}")
    check(r > LOGIT_TOL, f"{kind} negative control: default (bf16) load, logits rel {r:.2e} > "
                         f"{LOGIT_TOL:g}")
    if kind == "llama":  # plain bf16 gains: the fp64 product is exact in fp32, so one rounding
        sd = {k: v.float().numpy() for k, v in m.state_dict().items()}
        b16, _ = raw_tensors(outs["bf16"])
        check(all(np.array_equal(sd[t].astype(np.float64), to_f64(*b16[t])) for t in plan),
              f"{kind}: the F32 fold loaded as bf16 equals the --dtype bf16 fold")
    return src


def run_configs(check, cli, work, src):
    """The config's dtype key: transformers 4's torch_dtype is kept; none gets one."""
    v4 = work / "cfg_v4"
    shutil.copytree(src, v4)
    c = json.loads((v4 / "config.json").read_text())
    c["torch_dtype"] = c.pop("dtype")
    c["transformers_version"] = "4.57.1"
    (v4 / "config.json").write_text(json.dumps(c))
    fold(cli, v4, work / "cfg_v4_fold")
    c = json.loads((work / "cfg_v4_fold" / "config.json").read_text())
    check(c.get("torch_dtype") == "bfloat16" and "dtype" not in c,
          f"torch_dtype input: output torch_dtype {c.get('torch_dtype')}, no dtype key")
    for version, key in (("5.24.0", "dtype"), (None, "torch_dtype")):
        none = work / f"cfg_none_{key}"
        shutil.copytree(src, none)
        c = json.loads((none / "config.json").read_text())
        del c["dtype"]
        if version is None:
            del c["transformers_version"]
        (none / "config.json").write_text(json.dumps(c))
        m, _ = load(none)
        fold(cli, none, work / f"{none.name}_fold")
        c = json.loads((work / f"{none.name}_fold" / "config.json").read_text())
        mf, _ = load(work / f"{none.name}_fold")
        other = "torch_dtype" if key == "dtype" else "dtype"
        check(c.get(key) == "bfloat16" and other not in c and
              m.dtype == mf.dtype == torch.bfloat16,
              f"no dtype key, transformers_version {version}: output {key} {c.get(key)}; "
              f"transformers loads input {m.dtype}, output {mf.dtype}")
    # negative control: without that key the mixed output loads as its first floating tensor's type
    bare = work / "cfg_none_dtype_fold"
    c = json.loads((bare / "config.json").read_text())
    del c["dtype"]
    (bare / "config.json").write_text(json.dumps(c))
    mb, _ = load(bare)
    check(mb.dtype == torch.float32, f"negative control: the output without it loads as {mb.dtype}")


def run_f32_input(check, cli, work, rows):
    """An fp32 checkpoint folded to bf16: only the rewritten tensors are bf16, config float32."""
    src = work / "llama_f32"  # (written by run_model)
    fold(cli, src, work / "llama_f32_bf16", "--dtype", "bf16")
    inp, _ = raw_tensors(src)
    got, meta = raw_tensors(work / "llama_f32_bf16")
    plan, norms = fold_plan("llama", inp, SMALL["num_hidden_layers"])
    c = json.loads((work / "llama_f32_bf16" / "config.json").read_text())
    kept = [n for n in inp if n not in plan and n not in norms]
    check(all(got[t][0] == "BF16" for t in plan) and all(got[n] == inp[n] for n in kept) and
          c.get("dtype") == "float32",
          f"f32 input --dtype bf16: rewritten BF16, {len(kept)} others byte-identical F32, "
          f"config dtype {c.get('dtype')}; metadata {meta.get('flashnorm.dtypes')}")
    m, bad = load(work / "llama_f32_bf16")
    check(m.dtype == torch.float32 and not bad, f"f32 input --dtype bf16: loads as {m.dtype}")


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--cli", required=True)
    args = ap.parse_args()
    torch.set_num_threads(1)
    transformers.utils.logging.disable_progress_bar()
    transformers.utils.logging.set_verbosity_error()
    print(f"transformers {transformers.__version__}, torch {torch.__version__}")
    check, rows = Checks(), []
    with tempfile.TemporaryDirectory(prefix="fn_fold_dtypes_") as tmp:
        work = Path(tmp)
        llama = run_model(check, args.cli, work, "llama", 11, rows)
        run_model(check, args.cli, work, "gemma3", 12, rows)
        run_configs(check, args.cli, work, llama)
        run_f32_input(check, args.cli, work, rows)
    print("\n| model | fold | measured | largest relative difference |\n|---|---|---|---|")
    for kind, what, measure, r in rows:
        print(f"| {kind} | {what} | {measure} | {r:.2e} |")
    print(f"{len(check.failed)} failed" if check.failed else "all passed")
    return 1 if check.failed else 0


if __name__ == "__main__":
    sys.exit(main())
