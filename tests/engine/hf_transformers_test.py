"""The CPU engine against `transformers` (the reference outside the product) on random checkpoints.

For each architecture and config feature the engine implements, a small model is built by
transformers itself (seeded, every RMSNorm gain randomized, fp32) and saved (some cases then edit
config.json into an older or sparser spelling); the reference is transformers loading that saved
directory with from_pretrained, so it reads the same config.json the engine reads; then:
  * the engine's logits on a fixed 20-token batch match transformers' within 1e-5 relative
    (max |a - b| / max |b|), and 32 greedy tokens are identical, in both norm modes, on the
    original directory and on the directory `flashnorm fold` writes;
  * the folded directory loads in transformers and gives the same logits;
  * a negative control per feature: the same comparison with that feature's value changed in the
    engine's copy of config.json only, or a bias tensor zeroed in the engine's copy of the weights
    only, must fail (differences above 1e-3);
  * GGUF: the same random checkpoints (Qwen 2 with its q/k/v biases, Qwen 3) written as GGUF files
    with gguf-py's GGUFWriter under llama.cpp's key and tensor names (gguf-py's own name map), the
    engine on the GGUF and on the GGUF `flashnorm fold` writes against transformers' logits;
  * refusals: an unknown rope type, an unknown architecture, an unknown key, a bias flag,
    attention-score soft-capping, a zero logit cap -> exit 1 with one line naming it.
Usage: hf_transformers_test.py --tool ENGINE_LOGITS --cli FLASHNORM [--only NAME]
"""
import argparse
import json
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

import gguf
import numpy as np
import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "support"))
from random_hf import randomize_  # noqa: E402  (the shared random weights)
import transformers
from safetensors.torch import load_file, save_file
from transformers import (AutoModelForCausalLM, Gemma3ForCausalLM, Gemma3TextConfig,
                          LlamaConfig, LlamaForCausalLM, MistralConfig, MistralForCausalLM,
                          Qwen2Config, Qwen2ForCausalLM, Qwen3Config, Qwen3ForCausalLM)

TOL = 1e-5        # largest relative logit difference accepted
NEG_MIN = 1e-3    # a negative control must differ by at least this much
N_PROMPT, N_GREEDY, VOCAB = 20, 32, 300

SMALL = dict(vocab_size=VOCAB, hidden_size=64, intermediate_size=96, num_hidden_layers=3,
             num_attention_heads=4, num_key_value_heads=2, head_dim=16,
             max_position_embeddings=256, rms_norm_eps=1e-5, bos_token_id=1, eos_token_id=2,
             pad_token_id=0)


def llama(**kw):
    return LlamaConfig(**{**SMALL, "rope_parameters": {"rope_type": "default",
                                                       "rope_theta": 50000.0}, **kw}), \
        LlamaForCausalLM


def gemma3(**kw):
    base = {**SMALL, "rms_norm_eps": 1e-6, "sliding_window": 4, "query_pre_attn_scalar": 24,
            "layer_types": ["sliding_attention", "full_attention", "sliding_attention"],
            "rope_parameters": {"full_attention": {"rope_type": "default", "rope_theta": 1e6},
                                "sliding_attention": {"rope_type": "default",
                                                      "rope_theta": 1e4}}}
    return Gemma3TextConfig(**{**base, **kw}), Gemma3ForCausalLM


def qwen3(**kw):
    return Qwen3Config(**{**SMALL, "rope_parameters": {"rope_type": "default",
                                                       "rope_theta": 20000.0}, **kw}), \
        Qwen3ForCausalLM


def qwen2(**kw):
    return Qwen2Config(**{**SMALL, "rope_parameters": {"rope_type": "default",
                                                       "rope_theta": 30000.0}, **kw}), \
        Qwen2ForCausalLM


def mistral(**kw):
    return MistralConfig(**{**SMALL, "sliding_window": 5, **kw}), MistralForCausalLM


def edit(path, fn):
    """Applies fn to the parsed config.json at `path` and writes it back."""
    c = json.loads(path.read_text())
    fn(c)
    path.write_text(json.dumps(c, indent=2))


def set_key(*keys_and_value):
    *keys, value = keys_and_value

    def fn(c):
        d = c
        for k in keys[:-1]:
            d = d[k]
        if value is DROP:
            d.pop(keys[-1], None)
        else:
            d[keys[-1]] = value
    return fn


DROP = object()


class ZeroBias:
    """A negative control on the weights: every tensor named *.<proj>.bias set to zero."""

    def __init__(self, proj):
        self.suffix = f".{proj}.bias"

    def __call__(self, d):
        for f in sorted(d.glob("*.safetensors")):
            ts = load_file(f)
            hit = [n for n in ts if n.endswith(self.suffix)]
            assert hit, f"no {self.suffix} in {f}"
            for n in hit:
                ts[n] = torch.zeros_like(ts[n])
            save_file(ts, f, metadata={"format": "pt"})

    def __repr__(self):
        return f"{self.suffix[1:]} zeroed"


ATTN_BIAS = ["q_proj", "k_proj", "v_proj", "o_proj"]
MLP_BIAS = ["gate_proj", "up_proj", "down_proj"]


def legacy_rope(theta, scaling):
    """config.json as transformers 4 wrote it: rope_theta + rope_scaling, no rope_parameters."""
    def fn(c):
        c.pop("rope_parameters", None)
        c["rope_theta"] = theta
        c["rope_scaling"] = scaling
    return fn


# name -> what `flashnorm inspect` must print for the case's directory (the audit of biased
# consumers: rstd needed, bias after the row scale)
INSPECT = {
    "qwen2/qkv_bias": ["-> blk.0.attn_q.weight", "rstd needed: output used without renormalization",
                       "bias blk.0.attn_v.bias: added after the rstd row scale"],
    "qwen3/attention_bias": ["rstd needed: bias after the projection breaks scale invariance",
                             "bias blk.0.attn_k.bias: added after the rstd row scale"],
}

# name -> (model factory, edit of the saved config before the engine reads it (legacy spellings;
# the model in memory is the reference), negative control edit)
LLAMA3 = {"rope_type": "llama3", "rope_theta": 50000.0, "factor": 4.0, "low_freq_factor": 1.0,
          "high_freq_factor": 4.0, "original_max_position_embeddings": 32}
CASES = {
    "llama/base": (lambda: llama(), None,
                   set_key("rope_parameters", "rope_theta", 10000.0)),
    "llama/tied": (lambda: llama(tie_word_embeddings=True), None,
                   set_key("rope_parameters", "rope_theta", 10000.0)),
    "llama/head_dim": (lambda: llama(head_dim=24), None,
                       set_key("rope_parameters", "rope_theta", 10000.0)),
    "llama/rope_theta_legacy": (lambda: llama(), legacy_rope(50000.0, None),
                                set_key("rope_theta", 10000.0)),
    "llama/llama3_scaling": (lambda: llama(rope_parameters=dict(LLAMA3)), None,
                             set_key("rope_parameters", {"rope_type": "default",
                                                         "rope_theta": 50000.0})),
    "llama/llama3_scaling_legacy": (
        lambda: llama(rope_parameters=dict(LLAMA3)),
        legacy_rope(50000.0, {k: v for k, v in LLAMA3.items() if k != "rope_theta"}),
        set_key("rope_scaling", "factor", 2.0)),
    "llama/linear_scaling": (
        lambda: llama(rope_parameters={"rope_type": "linear", "rope_theta": 50000.0,
                                       "factor": 4.0}), None,
        set_key("rope_parameters", "factor", 2.0)),
    "gemma3/layer_types": (lambda: gemma3(), None,
                           set_key("layer_types", ["full_attention"] * 3)),
    "gemma3/sliding_window": (lambda: gemma3(), None, set_key("sliding_window", 8)),
    "gemma3/query_pre_attn_scalar": (lambda: gemma3(), None,
                                     set_key("query_pre_attn_scalar", 16)),
    "gemma3/rope_per_layer_type": (
        lambda: gemma3(rope_parameters={
            "full_attention": {"rope_type": "linear", "rope_theta": 1e6, "factor": 8.0},
            "sliding_attention": {"rope_type": "default", "rope_theta": 1e4}}), None,
        set_key("rope_parameters", "full_attention", "factor", 1.0)),
    "gemma3/untied": (lambda: gemma3(tie_word_embeddings=False), None,
                      set_key("rope_parameters", "sliding_attention", "rope_theta", 1e5)),
    "qwen3/base": (lambda: qwen3(tie_word_embeddings=True), None,
                   set_key("rope_parameters", "rope_theta", 10000.0)),
    "qwen3/sliding": (lambda: qwen3(use_sliding_window=True, sliding_window=4,
                                    max_window_layers=1), None,
                      set_key("sliding_window", 8)),
    "mistral/sliding_window": (lambda: mistral(), None, set_key("sliding_window", None)),
    # defaults transformers applies to absent keys
    "gemma3/query_pre_attn_scalar_default": (
        lambda: gemma3(), set_key("query_pre_attn_scalar", DROP),
        set_key("query_pre_attn_scalar", 16)),
    "gemma3/sliding_window_pattern_legacy": (
        lambda: gemma3(num_hidden_layers=4, layer_types=None),
        lambda c: (c.pop("layer_types"), c.__setitem__("sliding_window_pattern", 2)),
        set_key("sliding_window_pattern", 4)),
    "qwen3/max_window_layers_default": (
        lambda: qwen3(num_hidden_layers=30, use_sliding_window=True, sliding_window=4,
                      rms_norm_eps=1e-6),
        lambda c: (c.pop("layer_types"), c.pop("max_window_layers")),
        set_key("max_window_layers", 30)),
    # biases, added after the row scale (one negative control per bias tensor)
    "qwen2/qkv_bias": (lambda: qwen2(), None, [ZeroBias(p) for p in ATTN_BIAS[:3]]),
    "llama/attention_mlp_bias": (lambda: llama(attention_bias=True, mlp_bias=True), None,
                                 [ZeroBias(p) for p in ATTN_BIAS + MLP_BIAS]),
    # q and k renormalized but biased: their rstd must not be dropped
    "qwen3/attention_bias": (lambda: qwen3(attention_bias=True), None,
                             [ZeroBias(p) for p in ATTN_BIAS]),
    # the random model's logits reach about +-78 (std 9.5): a cap of 20 compresses most of them
    # without saturating the top ones to ties; controls: no cap, another cap
    "gemma3/final_logit_softcapping": (lambda: gemma3(final_logit_softcapping=20.0), None,
                                       [set_key("final_logit_softcapping", None),
                                        set_key("final_logit_softcapping", 30.0)]),
}

# name -> (model factory, config edit, the words the one-line refusal must contain)
REFUSALS = {
    "rope_type_yarn": (lambda: llama(), set_key("rope_parameters", "rope_type", "yarn"),
                       "rope_parameters.rope_type 'yarn' is not supported"),
    "architecture": (lambda: llama(), set_key("architectures", ["Qwen2MoeForCausalLM"]),
                     "architectures 'Qwen2MoeForCausalLM' is not supported"),
    "unknown_key": (lambda: llama(), set_key("moe_every_layer", 2), "key 'moe_every_layer'"),
    "attention_bias_without_tensors": (lambda: llama(), set_key("attention_bias", True),
                                       "missing tensor 'model.layers.0.self_attn.q_proj.bias'"),
    "bias_not_declared": (lambda: llama(attention_bias=True), set_key("attention_bias", False),
                          "_proj.bias' is a bias that the llama model does not declare"),
    "attention_bias_not_boolean": (lambda: llama(), set_key("attention_bias", "true"),
                                   "attention_bias is not a boolean (\"true\")"),
    "mistral_attention_bias": (lambda: mistral(), set_key("attention_bias", True),
                               "attention_bias = true is not supported"),
    "gemma3_attention_bias": (lambda: gemma3(), set_key("attention_bias", True),
                              "attention_bias = true is not supported"),
    "attn_softcapping": (lambda: gemma3(), set_key("attn_logit_softcapping", 50.0),
                         "attn_logit_softcapping = 50.0 is not supported"),
    "hidden_act": (lambda: qwen3(), set_key("hidden_act", "gelu"),
                   "hidden_act = \"gelu\" is not supported"),
    "rope_type_and_type": (lambda: llama(), set_key("rope_parameters", "type", "linear"),
                           "rope_parameters.rope_type 'default' and rope_parameters.type "
                           "'linear' disagree"),
    "nested_rope_on_llama": (lambda: llama(),
                             set_key("rope_parameters", {"full_attention": {"rope_theta": 5e4}}),
                             "rope_parameters.full_attention"),
    "gemma3_flat_rope": (lambda: gemma3(),
                         set_key("rope_parameters", {"rope_type": "linear", "factor": 8.0}),
                         "rope_parameters must be one set per layer type"),
    "untied_without_head": (lambda: llama(tie_word_embeddings=True),
                            set_key("tie_word_embeddings", False),
                            "tie_word_embeddings is false but there is no lm_head.weight"),
    "qwen3_sliding_layers_switched_off": (
        lambda: qwen3(use_sliding_window=True, sliding_window=4, max_window_layers=1),
        set_key("use_sliding_window", False),
        "layer_types has sliding_attention layers but use_sliding_window is false"),
    "final_softcapping_zero": (lambda: gemma3(), set_key("final_logit_softcapping", 0),
                               "final_logit_softcapping = 0 is not supported"),
}


def build(factory, seed, out):
    """A random model from `factory`, gains randomized, saved to `out` (fp32 safetensors)."""
    torch.manual_seed(seed)
    cfg, cls = factory()
    model = cls(cfg).eval()
    randomize_(model, seed + 1)
    model.save_pretrained(out)
    return model


def reference(model, tokens):
    """transformers' logits [n, vocab] for `tokens` and its greedy continuation."""
    with torch.no_grad():
        ids = torch.tensor([tokens])
        logits = model(ids).logits[0].float().numpy()
        greedy, seq = [], list(tokens)
        for _ in range(N_GREEDY):
            nxt = int(model(torch.tensor([seq])).logits[0, -1].argmax())
            greedy.append(nxt)
            seq.append(nxt)
    return logits, greedy


def engine(tool, path, mode, tokens):
    r = subprocess.run([tool, str(path), mode, ",".join(map(str, tokens)), str(N_GREEDY)],
                       capture_output=True, text=True)
    if r.returncode != 0:
        raise RuntimeError(f"engine_logits {path} {mode}: exit {r.returncode}: {r.stderr.strip()}")
    out = json.loads(r.stdout)
    return np.array(out["logits"], dtype=np.float64), out["greedy"]


def rel(a, b):
    return float(np.max(np.abs(np.asarray(a, np.float64) - b)) / np.max(np.abs(b)))


def fold(args, src, dst):
    r = subprocess.run([args.cli, "fold", str(src), "-o", str(dst)], capture_output=True,
                       text=True)
    if r.returncode != 0:
        raise RuntimeError(f"flashnorm fold: {r.stderr.strip()}")


def compare_engine(name, variants, args, tokens, ref_logits, ref_greedy, rows):
    """The engine on each (label, model path) in both modes against transformers' outputs."""
    ok = True
    for variant, path in variants:
        for mode in ("standard", "flashnorm"):
            logits, greedy = engine(args.tool, path, mode, tokens)
            r = rel(logits, ref_logits)
            same = greedy == ref_greedy
            good = r <= TOL and same
            ok &= good
            rows.append({"case": name, "dir": variant, "mode": mode, "max_rel_diff": r,
                         "greedy_identical": f"{sum(a == b for a, b in zip(greedy, ref_greedy))}"
                                             f"/{N_GREEDY}", "ok": good})
            print(f"  {name:32s} {variant:6s} {mode:9s} rel {r:.2e} greedy "
                  f"{rows[-1]['greedy_identical']:>5s} {'ok' if good else 'FAIL'}")
    return ok


def negative_control(name, label, args, path, tokens, ref_logits):
    """The engine on `path`, an input with one feature changed, must differ from transformers."""
    try:
        n_logits, _ = engine(args.tool, path, "standard", tokens)
        r = rel(n_logits, ref_logits)
        caught = r > NEG_MIN
        detail = f"rel {r:.2e}"
    except RuntimeError as e:
        caught, detail = False, f"refused instead of computed: {e}"
    print(f"  {name:32s} negative control {label}: {detail} "
          f"{'caught' if caught else 'NOT CAUGHT'}")
    return caught


def run_case(name, spec, args, work, seed, rows):
    factory, cfg_edit, negatives = spec
    d = work / name.replace("/", "_")
    build(factory, seed, d / "orig")
    if cfg_edit:
        edit(d / "orig" / "config.json", cfg_edit)
    # the reference reads the same config.json the engine reads
    model = AutoModelForCausalLM.from_pretrained(d / "orig", dtype=torch.float32).eval()
    rng = np.random.default_rng(seed)
    tokens = [int(t) for t in rng.integers(3, VOCAB, N_PROMPT)]
    ref_logits, ref_greedy = reference(model, tokens)
    fold(args, d / "orig", d / "folded")
    ok = compare_engine(name, [(v, d / v) for v in ("orig", "folded")], args, tokens, ref_logits,
                        ref_greedy, rows)
    if name in INSPECT:
        out = subprocess.run([args.cli, "inspect", str(d / "orig")], capture_output=True,
                             text=True).stdout
        missing = [w for w in INSPECT[name] if w not in out]
        ok &= not missing
        print(f"  {name:32s} inspect {'ok' if not missing else f'FAIL: no {missing}'}")
    # the folded directory in transformers itself
    folded = AutoModelForCausalLM.from_pretrained(d / "folded", dtype=torch.float32).eval()
    f_logits, f_greedy = reference(folded, tokens)
    r = rel(f_logits, ref_logits)
    good = r <= TOL and f_greedy == ref_greedy
    ok &= good
    rows.append({"case": name, "dir": "folded", "mode": "transformers", "max_rel_diff": r,
                 "greedy_identical": f"{sum(a == b for a, b in zip(f_greedy, ref_greedy))}"
                                     f"/{N_GREEDY}", "ok": good})
    print(f"  {name:32s} folded in transformers  rel {r:.2e} {'ok' if good else 'FAIL'}")
    # negative controls: the feature's value changed in the engine's input only (config.json, or
    # a ZeroBias edit of the weights)
    for i, negative in enumerate(negatives if isinstance(negatives, list) else [negatives]):
        neg = d / f"negative{i}"
        shutil.copytree(d / "orig", neg)
        if isinstance(negative, ZeroBias):
            negative(neg)
        else:
            edit(neg / "config.json", negative)
        ok &= negative_control(name, repr(negative) if isinstance(negative, ZeroBias) else "config",
                               args, neg, tokens, ref_logits)
    return ok


def write_gguf(model, path, edit_tensors=None):
    """A GGUF file of a transformers Qwen 2 / Qwen 3 model as llama.cpp names it: arch and keys from
    gguf-py's constants (GGUFWriter's add_* methods), tensor names from gguf-py's HF -> GGUF name
    map; fp32 tensors, no q/k permutation (NEOX rotation in llama.cpp for both). No vocabulary.
    `edit_tensors(name, array)` may change a tensor (negative controls)."""
    c = model.config
    arch = {"qwen2": gguf.MODEL_ARCH.QWEN2, "qwen3": gguf.MODEL_ARCH.QWEN3}[c.model_type]
    w = gguf.GGUFWriter(str(path), gguf.MODEL_ARCH_NAMES[arch])
    w.add_block_count(c.num_hidden_layers)
    w.add_context_length(c.max_position_embeddings)
    w.add_embedding_length(c.hidden_size)
    w.add_feed_forward_length(c.intermediate_size)
    w.add_head_count(c.num_attention_heads)
    w.add_head_count_kv(c.num_key_value_heads)
    head_dim = getattr(c, "head_dim", None) or c.hidden_size // c.num_attention_heads
    w.add_key_length(head_dim)
    w.add_value_length(head_dim)
    w.add_rope_freq_base(c.rope_parameters["rope_theta"])
    w.add_layer_norm_rms_eps(c.rms_norm_eps)
    names = gguf.get_tensor_name_map(arch, c.num_hidden_layers)
    for hf, t in model.state_dict().items():
        if hf == "lm_head.weight" and c.tie_word_embeddings:
            continue
        name = names.get_name(hf, try_suffixes=(".weight", ".bias"))
        assert name, f"no GGUF name for {hf}"
        a = t.detach().float().numpy().copy()
        if edit_tensors:
            a = edit_tensors(name, a)
        w.add_tensor(name, a)
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()


# name -> (model factory, negative control: (label, edit of the engine's GGUF tensors))
GGUF_CASES = {
    "qwen2/gguf_qkv_bias": (lambda: qwen2(), [
        (f"{p}.bias zeroed", lambda n, a, p=p: a * 0 if n.endswith(f"{p}.bias") else a)
        for p in ("attn_q", "attn_k", "attn_v")]),
    "qwen3/gguf_tied": (lambda: qwen3(tie_word_embeddings=True), [
        (f"{p} reset to 1", lambda n, a, p=p: a * 0 + 1 if n.endswith(f"{p}.weight") else a)
        for p in ("attn_q_norm", "attn_k_norm")]),
}


def run_gguf_case(name, spec, args, work, seed, rows):
    factory, negatives = spec
    d = work / name.replace("/", "_")
    model = build(factory, seed, d / "hf")
    rng = np.random.default_rng(seed)
    tokens = [int(t) for t in rng.integers(3, VOCAB, N_PROMPT)]
    ref_logits, ref_greedy = reference(model, tokens)
    write_gguf(model, d / "orig.gguf")
    fold(args, d / "orig.gguf", d / "folded.gguf")
    ok = compare_engine(name, [(v, d / f"{v}.gguf") for v in ("orig", "folded")], args, tokens,
                        ref_logits, ref_greedy, rows)
    for i, (label, fn) in enumerate(negatives):
        write_gguf(model, d / f"negative{i}.gguf", fn)
        ok &= negative_control(name, label, args, d / f"negative{i}.gguf", tokens, ref_logits)
    return ok


def run_refusal(name, spec, args, work, seed):
    factory, cfg_edit, words = spec
    d = work / f"refuse_{name}"
    build(factory, seed, d)
    edit(d / "config.json", cfg_edit)
    r = subprocess.run([args.tool, str(d), "standard", "1,2,3", "1"], capture_output=True,
                       text=True)
    lines = r.stderr.strip().splitlines()
    ok = r.returncode == 1 and len(lines) == 1 and words in lines[0]
    print(f"  refusal {name:26s} exit {r.returncode}: {r.stderr.strip()} "
          f"{'ok' if ok else 'FAIL (expected one line containing: ' + words + ')'}")
    return ok


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--tool", required=True)
    ap.add_argument("--cli", required=True)
    ap.add_argument("--only", default="")
    ap.add_argument("--json", default="", help="write the table rows here")
    args = ap.parse_args()
    torch.set_num_threads(1)
    transformers.utils.logging.disable_progress_bar()
    transformers.utils.logging.set_verbosity_error()
    print(f"transformers {transformers.__version__}, torch {torch.__version__}")
    rows, failed = [], []
    with tempfile.TemporaryDirectory(prefix="fn_hf_") as tmp:
        work = Path(tmp)
        for i, (name, spec) in enumerate(CASES.items()):
            if args.only and args.only not in name:
                continue
            if not run_case(name, spec, args, work, 100 + i, rows):
                failed.append(name)
        for i, (name, spec) in enumerate(GGUF_CASES.items()):
            if args.only and args.only not in name:
                continue
            if not run_gguf_case(name, spec, args, work, 300 + i, rows):
                failed.append(name)
        for i, (name, spec) in enumerate(REFUSALS.items()):
            if args.only and args.only not in name:
                continue
            if not run_refusal(name, spec, args, work, 200 + i):
                failed.append("refusal " + name)
    if args.json:
        Path(args.json).write_text(json.dumps({"transformers": transformers.__version__,
                                               "torch": torch.__version__, "rows": rows},
                                              indent=1))
    print(f"{len(failed)} failed: {', '.join(failed)}" if failed else "all passed")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
