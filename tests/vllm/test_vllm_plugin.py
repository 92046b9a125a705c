"""flashnorm.vllm against stock vLLM and transformers on random tiny checkpoints of every supported
architecture (tests/vllm/checkpoints.py), on the CPU build of vLLM (scripts/setup_vllm.sh): greedy
tokens identical and each greedy token's logprob within TOL of transformers' (teacher-forced on
vLLM's tokens), for the unfolded checkpoint (folded as vLLM loads it) and the directory `flashnorm
fold` wrote, in eager mode, compiled (torch.compile, vLLM's default) and with
tensor_parallel_size=2; the flashnorm_linear op counted on every worker (a plugin that is not used
cannot pass); negative controls (the rstd scale skipped; one gain left unfolded) must fail.

All vLLM runs go through one process (vllm_run.py: imports once, TP 1 engines in-process), run by
the module fixture; each test checks one run. Needs FLASHNORM_CLI (the `flashnorm` binary) for
the folded directories. Run with the vLLM environment's python (scripts/test.sh does):
  FLASHNORM_CLI=build/release/src/cli/flashnorm .cache/vllm-venv/bin/python -m pytest tests/vllm
"""
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
from checkpoints import ARCHS, write  # noqa: E402
from vllm_env import vllm_env  # noqa: E402

TOL = 1e-5      # largest |logprob difference| accepted against transformers
NEG_MIN = 1e-2  # a negative control must differ from transformers by at least this much
N_TOKENS = 8
PROMPTS = [[5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15], [40, 41, 300], [7] * 5 + [200, 201, 202, 3]]
DROP_QK = ("qwen3", "gemma3")  # the architectures with QK-norm

# name -> (FlashNorm class?, checkpoint, compiled, tp, negative, extra environment)
RUNS = {
    "stock_eager": (False, "unfolded", False, 1, None, {}),
    "flashnorm_eager": (True, "unfolded", False, 1, None, {}),
    "flashnorm_eager_folded": (True, "folded", False, 1, None, {}),
    "negative_rstd": (True, "unfolded", False, 1, "rstd", {}),
    "negative_fold": (True, "unfolded", False, 1, "fold", {}),
    "stock_compiled": (False, "unfolded", True, 1, None, {}),
    "flashnorm_compiled": (True, "unfolded", True, 1, None, {}),
    "flashnorm_compiled_folded": (True, "folded", True, 1, None, {}),
    "stock_tp2": (False, "unfolded", False, 2, None, {}),
    "flashnorm_tp2": (True, "unfolded", False, 2, None, {}),
    "flashnorm_drop_qk": (True, "unfolded", False, 1, None,
                          {"FLASHNORM_VLLM_DROP_QK_RSTD": "1"}),
}
# Llama only: refusals and weight reloads (the run's extra keys, vllm_run.py)
EXTRA = {
    "reload_all": {"reload": "all"},
    "reload_chunked": {"reload": "chunked"},
    "refuse_lora": {"lora": True},
}
CHECKED = [r for r in RUNS if not r.startswith("negative") and r != "flashnorm_drop_qk"]


def _runs_for(arch):
    return [r for r in RUNS if r != "flashnorm_drop_qk" or arch in DROP_QK]


@torch.no_grad()
def reference(model, prompt, tokens):
    """transformers' log-softmax at each of vLLM's greedy tokens (teacher-forced), and its own
    argmax there."""
    ids = torch.tensor([prompt + tokens[:-1]])
    logp = torch.log_softmax(model(ids).logits[0].double(), -1)
    rows = logp[len(prompt) - 1:]
    return [float(rows[i, t]) for i, t in enumerate(tokens)], rows.argmax(-1).tolist()


@pytest.fixture(scope="module")
def results(tmp_path_factory):
    cli = os.environ.get("FLASHNORM_CLI")
    if not cli or not Path(cli).is_file():
        pytest.fail("FLASHNORM_CLI must name the flashnorm binary (for the folded checkpoints)")
    work = tmp_path_factory.mktemp("vllm")
    models, runs = {}, []
    for i, arch in enumerate(ARCHS):
        unfolded, folded = work / arch, work / f"{arch}-folded"
        models[arch] = write(arch, 100 + i, unfolded)
        r = subprocess.run([cli, "fold", str(unfolded), "-o", str(folded)], capture_output=True,
                           text=True)
        assert r.returncode == 0, f"flashnorm fold {arch}: {r.stderr.strip()}"
        for name in _runs_for(arch):
            flashnorm, ckpt, compiled, tp, negative, env = RUNS[name]
            hf_class = ARCHS[arch][0]
            runs.append({"name": f"{arch}/{name}", "model": str(folded if ckpt == "folded"
                                                                 else unfolded),
                         "arch": f"FlashNorm{hf_class}" if flashnorm else None,
                         "compiled": compiled, "tp": tp, "negative": negative, "env": env})
    for name, extra in EXTRA.items():
        runs.append({"name": f"llama/{name}", "model": str(work / "llama"),
                     "arch": "FlashNormLlamaForCausalLM", "tp": 1, **extra})
    runs.sort(key=lambda r: r["tp"])  # the in-process (TP 1) engines first
    spec = work / "runs.json"
    spec.write_text(json.dumps({"prompts": PROMPTS, "tokens": N_TOKENS, "runs": runs}))
    out = work / "out.json"
    log = work / "vllm_run.log"
    with open(log, "w") as f:
        proc = subprocess.run([sys.executable, str(HERE / "vllm_run.py"), str(spec), str(out)],
                              env=vllm_env(work), stdout=f, stderr=subprocess.STDOUT,
                              timeout=1800)
    if proc.returncode != 0 or not out.exists():
        pytest.fail(f"vllm_run.py exited {proc.returncode}: {log.read_text()[-3000:]}")
    got = json.loads(out.read_text())
    refs = {arch: [reference(models[arch], p, got[f"{arch}/stock_eager"]["tokens"][k])
                   for k, p in enumerate(PROMPTS)] if "error" not in got[f"{arch}/stock_eager"]
            else None for arch in ARCHS}
    return got, refs, log.read_text()


def _run(results, arch, name):
    got = results[0][f"{arch}/{name}"]
    assert "error" not in got, f"{arch}/{name}: {got.get('error')}"
    return got


def _max_diff(got, ref):
    """The largest |logprob - transformers'| of a run whose tokens equal the reference's."""
    worst = 0.0
    for k, (ref_lp, ref_argmax) in enumerate(ref):
        assert got["tokens"][k] == ref_argmax, (
            f"prompt {k}: greedy tokens {got['tokens'][k]} != transformers' {ref_argmax}")
        worst = max(worst, max(abs(a - b) for a, b in zip(got["logprobs"][k], ref_lp)))
    return worst


@pytest.mark.parametrize("name", CHECKED)
@pytest.mark.parametrize("arch", list(ARCHS))
def test_matches_transformers_and_stock(results, arch, name):
    got = _run(results, arch, name)
    stock = _run(results, arch, name.replace("flashnorm", "stock").replace("_folded", ""))
    ref = results[1][arch]
    assert ref is not None
    assert got["tokens"] == stock["tokens"], f"greedy tokens differ from stock vLLM's ({name})"
    diff = _max_diff(got, ref)
    assert diff <= TOL, f"{arch}/{name}: logprobs differ from transformers' by {diff:.3g}"
    flashnorm = RUNS[name][0]
    expected_class = ("FlashNorm" if flashnorm else "") + ARCHS[arch][0]
    assert got["model_class"] == expected_class
    calls = got["linear_calls"]
    assert len(calls) == RUNS[name][3]
    if flashnorm:  # the op ran on every worker (counted in C++: compiled graphs too)
        assert all(c > 0 for c in calls), f"flashnorm_linear calls per worker: {calls}"
    else:
        assert all(c == 0 for c in calls), f"stock vLLM called flashnorm_linear: {calls}"


@pytest.mark.parametrize("negative", ["negative_rstd", "negative_fold"])
@pytest.mark.parametrize("arch", list(ARCHS))
def test_negative_control_fails(results, arch, negative):
    got = _run(results, arch, negative)
    ref = results[1][arch]
    worst = 0.0
    for k, (ref_lp, _) in enumerate(ref):
        worst = max(worst, max(abs(a - b) for a, b in zip(got["logprobs"][k], ref_lp)))
    differs = worst >= NEG_MIN or any(got["tokens"][k] != ref[k][1] for k in range(len(ref)))
    assert differs, f"{arch}/{negative}: the broken plugin still matched ({worst:.3g})"


@pytest.mark.parametrize("arch", DROP_QK)
def test_drop_qk_rstd_effect(results, arch):
    """Dropping the q/k rstd that QK-norm cancels: greedy tokens still identical; the logprob
    difference (the eps bound of docs/design.md) is reported, and stays far below the negative
    controls'."""
    got = _run(results, arch, "flashnorm_drop_qk")
    diff = _max_diff(got, results[1][arch])
    print(f"\n{arch}: q/k rstd dropped: largest |logprob difference| {diff:.3g}")
    assert diff < NEG_MIN


def test_norms_made_free_are_logged(results):
    """One line per model from the C++ descriptions: which norms became free, which were kept."""
    log = results[2]
    assert "flashnorm: llama: 5 norms made free (input_layernorm -> qkv_proj, norm -> lm_head, " \
        "post_attention_layernorm -> gate_up_proj); 0 kept (none)" in log
    assert "flashnorm: qwen3: 4 norms made free (input_layernorm -> qkv_proj, " \
        "post_attention_layernorm -> gate_up_proj); 5 kept (k_norm (per-head norm before " \
        "RoPE, not a linear layer), norm (the LM head is tied to the embedding), q_norm " in log
    for arch in ARCHS:
        assert f"flashnorm: {arch}: " in log, f"no flashnorm line for {arch}"


def test_reload_in_one_call_gives_the_same_tokens(results):
    got = _run(results, "llama", "reload_all")
    assert "reload_error" not in got, got.get("reload_error")
    assert got["tokens_after_reload"] == got["tokens"]


def test_partial_weight_update_is_refused(results):
    """Gains in one load_weights call, projections in the next: the fold cannot be right."""
    got = _run(results, "llama", "reload_chunked")
    assert "input_layernorm.weight loaded without" in got.get("reload_error", ""), got


@pytest.mark.parametrize("name,message", [
    ("refuse_lora", "LoRA is not supported"),
])
def test_refused_with_one_line(results, name, message):
    got = results[0][f"llama/{name}"]
    assert message in got.get("error", ""), got
