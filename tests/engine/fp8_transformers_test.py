"""The CPU engine on FP8 checkpoints (compressed-tensors' FP8 dynamic scheme: float8_e4m3 weights
with a per-row weight_scale, per-token dynamic float8 activations; the LM head unquantized)
against transformers with the `compressed-tensors` package, which decompresses the weights and
quantizes each Linear's input per token as the scheme says (the reference outside the product).

For Llama, Qwen 3 (QK-norm) and Gemma 3 (1 + w gains, post-norms), a random model built by
transformers (tests/engine/hf_transformers_test.py's shapes, every gain randomized) is quantized by
this test with torch (scale = max|row| / 448, torch.float8_e4m3fn) and saved with the
quantization_config compressed-tensors writes; then, in both norm modes (flashnorm: the gain on x,
fp8(x * g / s) and rstd * s on the output rows):
  * logits on a fixed 20-token batch within 1e-4 relative of transformers' (measured: at most
    1.6e-6; a one-ulp flip of an fp8 activation, 1/16 of its value, is where the fp32 sums of
    the two sides could round across one) and the same 16 greedy tokens;
  * negative controls, which must miss by more than NEG_MIN: the weight scales set to 1 in the
    engine's copy, and transformers without the activation quantization as the reference;
  * refusals, one line naming the field: weight-only FP8 (no input_activations), a per-tensor
    weight strategy, an ignore list other than lm_head, a float8 tensor without the config, a
    bf16 projection beside float8 ones, `flashnorm fold` on the FP8 directory.
Usage: fp8_transformers_test.py --tool ENGINE_LOGITS --cli FLASHNORM
"""
import argparse
import json
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

import torch
import transformers
from safetensors.torch import load_file, save_file
from transformers import AutoModelForCausalLM

sys.path.insert(0, str(Path(__file__).resolve().parent))
import hf_transformers_test as hft  # noqa: E402  (shapes, build, engine, rel)

FP8_TOL = 1e-4
NEG_MIN = 2e-2
N_GREEDY = 16
TOKENS = [5, 17, 42, 9, 100, 3, 77, 250, 1, 64, 8, 33, 190, 12, 6, 240, 55, 2, 99, 130]
CASES = {"llama": hft.llama, "qwen3": hft.qwen3, "gemma3": hft.gemma3}


def scheme(**weights):
    """compressed-tensors' FP8_DYNAMIC quantization_config, `weights` overriding weight args."""
    args = {"num_bits": 8, "type": "float", "symmetric": True, "group_size": None,
            "dynamic": False, "actorder": None, "block_structure": None, "observer": "minmax",
            "observer_kwargs": {}}
    return {"config_groups": {"group_0": {
        "targets": ["Linear"], "weights": {**args, "strategy": "channel", **weights},
        "input_activations": {**args, "strategy": "token", "dynamic": True, "observer": None},
        "output_activations": None, "format": "float-quantized"}},
        "quant_method": "compressed-tensors", "kv_cache_scheme": None, "format": "float-quantized",
        "quantization_status": "compressed", "global_compression_ratio": None,
        "ignore": ["lm_head"], "sparsity_config": {}}


def quantize_dir(src, dst):
    """src (fp32 safetensors) with every layer projection as float8_e4m3 + weight_scale [N, 1]."""
    sd = load_file(src / "model.safetensors")
    out = {}
    for k, v in sd.items():
        if k.startswith("model.layers.") and k.endswith("_proj.weight"):
            s = v.abs().amax(1, keepdim=True).float() / 448.0
            out[k] = (v / s).to(torch.float8_e4m3fn)
            out[k[:-len("weight")] + "weight_scale"] = s
        else:
            out[k] = v
    dst.mkdir()
    for f in src.iterdir():
        if f.name != "model.safetensors":
            shutil.copy(f, dst)
    save_file(out, dst / "model.safetensors", metadata={"format": "pt"})
    c = json.loads((src / "config.json").read_text())
    c["quantization_config"] = scheme()
    (dst / "config.json").write_text(json.dumps(c, indent=1))


def reference(path):
    """transformers' logits and greedy tokens for the FP8 directory (compressed-tensors)."""
    return hft.reference(AutoModelForCausalLM.from_pretrained(path, dtype=torch.float32).eval(),
                         TOKENS)


def reference_without_input_quantization(src, q):
    """The same weights (fp8 * scale) in the unquantized model `src`: no input quantization."""
    model = AutoModelForCausalLM.from_pretrained(src, dtype=torch.float32).eval()
    sd = load_file(q / "model.safetensors")
    with torch.no_grad():
        for name, p in model.named_parameters():
            if name + "_scale" in sd:
                p.copy_(sd[name].float() * sd[name + "_scale"])
    return hft.reference(model, TOKENS)


def edit_config(path, fn):
    c = json.loads((path / "config.json").read_text())
    fn(c)
    (path / "config.json").write_text(json.dumps(c, indent=1))


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--tool", required=True)
    ap.add_argument("--cli", required=True)
    args = ap.parse_args()
    torch.set_num_threads(1)
    transformers.utils.logging.disable_progress_bar()
    transformers.utils.logging.set_verbosity_error()
    hft.N_GREEDY = N_GREEDY
    failures = []

    def check(ok, what):
        print(("ok   " if ok else "FAIL ") + what)
        if not ok:
            failures.append(what)

    with tempfile.TemporaryDirectory(prefix="fn_fp8_") as tmp:
        work = Path(tmp)
        for i, (name, factory) in enumerate(CASES.items()):
            src, q = work / name, work / f"{name}_fp8"
            hft.build(factory, 500 + i, src)
            quantize_dir(src, q)
            ref_logits, ref_greedy = reference(q)
            for mode in ("standard", "flashnorm"):
                logits, greedy = hft.engine(args.tool, q, mode, TOKENS)
                r = hft.rel(logits, ref_logits)
                check(r <= FP8_TOL and greedy == ref_greedy,
                      f"{name} {mode}: rel {r:.2e}, greedy "
                      f"{sum(a == b for a, b in zip(greedy, ref_greedy))}/{N_GREEDY}")
            # negative controls
            ones = work / f"{name}_scale_one"
            shutil.copytree(q, ones)
            sd = load_file(ones / "model.safetensors")
            save_file({k: torch.ones_like(v) if k.endswith("weight_scale") else v
                       for k, v in sd.items()}, ones / "model.safetensors")
            r = hft.rel(hft.engine(args.tool, ones, "flashnorm", TOKENS)[0], ref_logits)
            check(r > NEG_MIN, f"{name} negative control, weight scales ignored: rel {r:.2e}")
            plain_logits, _ = reference_without_input_quantization(src, q)
            r = hft.rel(hft.engine(args.tool, q, "flashnorm", TOKENS)[0], plain_logits)
            check(r > FP8_TOL, f"{name} negative control, reference without the activation "
                               f"quantization: rel {r:.2e}")

        # refusals: exit 1, one line naming the field
        base = work / "llama_fp8"

        def refusal(label, edit, field, command=("generate", "-p", "hi", "-n", "1")):
            bad = work / f"refuse_{label.replace(' ', '_')}"
            shutil.copytree(base, bad)
            edit(bad)
            r = subprocess.run([args.cli, command[0], *(["-m"] if command[0] == "generate"
                                                        else []), str(bad), *command[1:]],
                               capture_output=True, text=True, timeout=300)
            msg = r.stderr.strip()
            check(r.returncode == 1 and field in msg and len(msg.splitlines()) == 1,
                  f"refuses {label}: exit {r.returncode}, {msg!r}")

        def groups(fn):
            return lambda d: edit_config(d, lambda c: fn(c["quantization_config"]
                                                          ["config_groups"]["group_0"]))

        refusal("weight-only FP8", groups(lambda g: g.update(input_activations=None)),
                "input_activations")
        refusal("per-tensor weights", groups(lambda g: g["weights"].update(strategy="tensor")),
                "weights.strategy")
        refusal("another ignore list", lambda d: edit_config(
            d, lambda c: c["quantization_config"].update(ignore=[])), "ignore")
        refusal("float8 without the config",
                lambda d: edit_config(d, lambda c: c.pop("quantization_config")),
                "no quantization_config")

        def bf16_projection(d):
            sd = load_file(d / "model.safetensors")
            k = "model.layers.0.mlp.down_proj.weight"
            sd[k] = sd[k].float().to(torch.bfloat16)
            del sd["model.layers.0.mlp.down_proj.weight_scale"]
            save_file(sd, d / "model.safetensors")
        refusal("a bf16 projection", bf16_projection, "down_proj.weight")
        out = work / "folded_fp8"
        r = subprocess.run([args.cli, "fold", str(base), "-o", str(out)], capture_output=True,
                           text=True)
        check(r.returncode == 1 and "quantization_config" in r.stderr and not out.exists(),
              f"fold refuses an FP8 checkpoint: {r.stderr.strip()!r}")
    print(f"{len(failures)} failure(s)")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
