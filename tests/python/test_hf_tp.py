"""flashnorm.hf under transformers' own tensor parallelism (tp_plan="auto", 2 ranks under
torchrun, gloo on the CPU): fold_ + apply_ on every architecture against the unsharded,
unmodified model: logits within TOL (relative to the largest) and 32 greedy tokens identical;
a negative control (the LM head's hooked Linear replaced: its output gather lost) must fail.
Checkpoints: tests/vllm/checkpoints.py."""
import json
import subprocess
import sys
from pathlib import Path

import pytest
import torch

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent / "vllm"))
sys.path.insert(0, str(HERE))
from checkpoints import ARCHS, write  # noqa: E402
from hf_tp_run import N_GREEDY, PROMPT  # noqa: E402

TOL = 1e-5

pytest.importorskip("accelerate", reason="transformers' tensor parallelism needs accelerate "
                    "(scripts/requirements-torch.txt installs it)")


def torchrun(out, mode, dirs):
    cmd = [sys.executable, "-m", "torch.distributed.run", "--nproc-per-node", "2",
           str(HERE / "hf_tp_run.py"), str(out), mode, *map(str, dirs)]
    r = subprocess.run(cmd, capture_output=True, text=True, timeout=900)
    assert r.returncode == 0 and out.exists(), f"torchrun {mode}: {r.stderr[-3000:]}"
    return json.loads(out.read_text())


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    work = tmp_path_factory.mktemp("tp")
    dirs, refs = [], {}
    for i, arch in enumerate(ARCHS):
        d = work / arch
        model = write(arch, 200 + i, d)
        with torch.no_grad():
            ids = torch.tensor([PROMPT])
            logits = model(ids).logits[0]
            gen = model.generate(ids, max_new_tokens=N_GREEDY, do_sample=False,
                                 min_new_tokens=N_GREEDY)[0, len(PROMPT):].tolist()
        refs[str(d)] = (logits.double(), gen)
        dirs.append(d)
    return {mode: torchrun(work / f"{mode}.json", mode, dirs) for mode in ("flashnorm", "negative")}, refs


def _compare(got, ref):
    """None when got matches ref (logits within TOL, greedy tokens identical), else why not."""
    if "error" in got:
        return got["error"]
    logits = torch.tensor(got["logits"], dtype=torch.float64)
    if logits.shape != ref[0].shape:
        return f"logits shape {tuple(logits.shape)} != {tuple(ref[0].shape)}"
    rel = float((logits - ref[0]).abs().max() / ref[0].abs().max())
    if rel > TOL:
        return f"logits differ by {rel:.3g} (relative)"
    if got["tokens"] != ref[1]:
        return f"greedy tokens {got['tokens']} != {ref[1]}"
    return None


@pytest.mark.parametrize("arch", list(ARCHS))
def test_tensor_parallel_matches_unsharded(runs, arch):
    results, refs = runs
    key = next(k for k in refs if k.endswith("/" + arch))
    why = _compare(results["flashnorm"][key], refs[key])
    assert why is None, f"{arch}: {why}"


@pytest.mark.parametrize("arch", list(ARCHS))
def test_negative_control_replaced_head_fails(runs, arch):
    results, refs = runs
    key = next(k for k in refs if k.endswith("/" + arch))
    assert _compare(results["negative"][key], refs[key]) is not None, (
        f"{arch}: the model with its LM head's gather lost still matched")
