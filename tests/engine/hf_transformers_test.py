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
    engine's copy of config.json only must fail (differences above 1e-3);
  * refusals: an unknown rope type, an unknown architecture, an unknown key, a bias flag -> exit 1
    with one line naming it.
Usage: hf_transformers_test.py --tool ENGINE_LOGITS --cli FLASHNORM [--only NAME]
"""
import argparse
import json
import math
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

import numpy as np
import torch
import transformers
from transformers import (AutoModelForCausalLM, Gemma3ForCausalLM, Gemma3TextConfig,
                          LlamaConfig, LlamaForCausalLM, MistralConfig, MistralForCausalLM,
                          Qwen3Config, Qwen3ForCausalLM)

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


def legacy_rope(theta, scaling):
    """config.json as transformers 4 wrote it: rope_theta + rope_scaling, no rope_parameters."""
    def fn(c):
        c.pop("rope_parameters", None)
        c["rope_theta"] = theta
        c["rope_scaling"] = scaling
    return fn


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
}

# name -> (model factory, config edit, the words the one-line refusal must contain)
REFUSALS = {
    "rope_type_yarn": (lambda: llama(), set_key("rope_parameters", "rope_type", "yarn"),
                       "rope_parameters.rope_type 'yarn' is not supported"),
    "architecture": (lambda: llama(), set_key("architectures", ["Qwen2MoeForCausalLM"]),
                     "architectures 'Qwen2MoeForCausalLM' is not supported"),
    "unknown_key": (lambda: llama(), set_key("moe_every_layer", 2), "key 'moe_every_layer'"),
    "attention_bias": (lambda: llama(), set_key("attention_bias", True),
                       "attention_bias = true is not supported"),
    "softcapping": (lambda: gemma3(), set_key("final_logit_softcapping", 30.0),
                    "final_logit_softcapping = 30.0 is not supported"),
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
}


def build(factory, seed, out):
    """A random model from `factory`, gains randomized, saved to `out` (fp32 safetensors)."""
    torch.manual_seed(seed)
    cfg, cls = factory()
    model = cls(cfg).eval()
    g = torch.Generator().manual_seed(seed + 1)
    with torch.no_grad():
        for name, p in model.named_parameters():
            if p.dim() == 2:
                std = 1.0 if "embed" in name else 1.0 / math.sqrt(p.shape[1])
                p.copy_(torch.randn(p.shape, generator=g) * std)
            elif "norm" in name:
                if isinstance(model, Gemma3ForCausalLM):  # stored w, applied as 1 + w
                    p.copy_(torch.rand(p.shape, generator=g) - 0.5)
                else:
                    v = 0.5 + torch.rand(p.shape, generator=g)
                    v[torch.rand(p.shape, generator=g) < 0.05] *= -1
                    p.copy_(v)
            else:
                raise AssertionError(f"unexpected parameter {name} {tuple(p.shape)}")
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


def run_case(name, spec, args, work, seed, rows):
    factory, cfg_edit, negative = spec
    d = work / name.replace("/", "_")
    build(factory, seed, d / "orig")
    if cfg_edit:
        edit(d / "orig" / "config.json", cfg_edit)
    # the reference reads the same config.json the engine reads
    model = AutoModelForCausalLM.from_pretrained(d / "orig", dtype=torch.float32).eval()
    rng = np.random.default_rng(seed)
    tokens = [int(t) for t in rng.integers(3, VOCAB, N_PROMPT)]
    ref_logits, ref_greedy = reference(model, tokens)
    fold = subprocess.run([args.cli, "fold", str(d / "orig"), "-o", str(d / "folded")],
                          capture_output=True, text=True)
    if fold.returncode != 0:
        raise RuntimeError(f"flashnorm fold: {fold.stderr.strip()}")
    ok = True
    for variant in ("orig", "folded"):
        for mode in ("standard", "flashnorm"):
            logits, greedy = engine(args.tool, d / variant, mode, tokens)
            r = rel(logits, ref_logits)
            same = greedy == ref_greedy
            good = r <= TOL and same
            ok &= good
            rows.append({"case": name, "dir": variant, "mode": mode, "max_rel_diff": r,
                         "greedy_identical": f"{sum(a == b for a, b in zip(greedy, ref_greedy))}"
                                             f"/{N_GREEDY}", "ok": good})
            print(f"  {name:32s} {variant:6s} {mode:9s} rel {r:.2e} greedy "
                  f"{rows[-1]['greedy_identical']:>5s} {'ok' if good else 'FAIL'}")
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
    # negative control: the feature's value changed in the engine's input only
    neg = d / "negative"
    shutil.copytree(d / "orig", neg)
    edit(neg / "config.json", negative)
    try:
        n_logits, _ = engine(args.tool, neg, "standard", tokens)
        r = rel(n_logits, ref_logits)
        caught = r > NEG_MIN
        detail = f"rel {r:.2e}"
    except RuntimeError as e:
        caught, detail = False, f"refused instead of computed: {e}"
    ok &= caught
    print(f"  {name:32s} negative control {detail} {'caught' if caught else 'NOT CAUGHT'}")
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
