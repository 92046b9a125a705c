"""flashnorm.vllm under vLLM's pooling runner (embeddings) against sentence-transformers, on the
random checkpoints of tests/cli/embed_st_test.py in the sizes vLLM's CPU attention takes
(Qwen3-Embedding: last-token pooling, Normalize; EmbeddingGemma: bidirectional attention, mean
pooling, two Dense, Normalize; gte-Qwen2: bidirectional, last-token pooling, Dense with bias and
Tanh, Normalize; every gain randomized), written with transformers and sentence-transformers by
the reference environment's python (.venv, scripts/requirements-torch.txt). For each shape, the
FlashNorm class on the checkpoint and on its `flashnorm fold` copy, and stock vLLM: cosine
similarity >= 0.99999 against SentenceTransformer.encode for every one of 64 texts and the same
top-1 neighbour of every text (the same token ids: sentence-transformers' own). The FlashNorm runs
must call flashnorm_linear; the negative control (the deferred linear without its rstd scale) must
miss the bar.
"""
import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

HERE = Path(__file__).resolve().parent
ROOT = HERE.parents[1]
sys.path.insert(0, str(HERE))
from vllm_env import vllm_env  # noqa: E402

COS_BAR = 0.99999
# name -> the FlashNorm class; stock vLLM has no Qwen3Model, so its run builds Qwen3ForCausalLM
SHAPES = {"qwen3_embedding": ("FlashNormQwen3ForCausalLM", "Qwen3ForCausalLM"),
          "embeddinggemma": ("FlashNormGemma3ForCausalLM", None),
          "gte_qwen2": ("FlashNormQwen2ForCausalLM", None)}


@pytest.fixture(scope="module")
def results(tmp_path_factory):
    cli = os.environ.get("FLASHNORM_CLI")
    if not cli or not Path(cli).is_file():
        pytest.fail("FLASHNORM_CLI must name the flashnorm binary (for the folded checkpoints)")
    ref_python = Path(os.environ.get("FLASHNORM_REFERENCE_PYTHON", ROOT / ".venv/bin/python3"))
    if not ref_python.exists():
        pytest.fail(f"{ref_python}: the reference environment (scripts/test.sh makes it; "
                    f"FLASHNORM_REFERENCE_PYTHON names another)")
    work = tmp_path_factory.mktemp("vllm_pooling")
    r = subprocess.run([str(ref_python), str(ROOT / "tests/cli/embed_st_test.py"), "--cli", cli,
                        "--write-for-vllm", str(work)], capture_output=True, text=True,
                       timeout=900)
    assert r.returncode == 0, f"writing the checkpoints failed: {r.stderr[-3000:]}"
    ref = json.loads((work / "reference.json").read_text())
    runs = []
    for name, (flashnorm, stock) in SHAPES.items():
        m = ref[name]
        runs += [{"name": f"{name}/stock", "model": m["model"], "arch": stock, "ids": m["ids"]},
                 {"name": f"{name}/flashnorm", "model": m["model"], "arch": flashnorm,
                  "ids": m["ids"]},
                 {"name": f"{name}/flashnorm_folded", "model": m["folded"], "arch": flashnorm,
                  "ids": m["ids"]},
                 {"name": f"{name}/negative_rstd", "model": m["model"], "arch": flashnorm,
                  "ids": m["ids"], "negative": "rstd"}]
    spec, out, log = work / "runs.json", work / "out.json", work / "vllm_embed_run.log"
    spec.write_text(json.dumps({"runs": runs}))
    with open(log, "w") as f:
        proc = subprocess.run([sys.executable, str(HERE / "vllm_embed_run.py"), str(spec),
                               str(out)], env=vllm_env(work), stdout=f, stderr=subprocess.STDOUT,
                              timeout=1800, cwd=HERE)
    if proc.returncode != 0 or not out.exists():
        pytest.fail(f"vllm_embed_run.py exited {proc.returncode}: {log.read_text()[-3000:]}")
    return json.loads(out.read_text()), ref


def agreement(got, want):
    """(smallest cosine similarity, share of texts with the same top-1 neighbour)."""
    g = np.asarray(got, dtype=np.float64)
    w = np.asarray(want, dtype=np.float64)
    if g.shape != w.shape:
        return -1.0, 0.0
    g /= np.linalg.norm(g, axis=1, keepdims=True)
    w /= np.linalg.norm(w, axis=1, keepdims=True)

    def top1(e):
        s = e @ e.T
        np.fill_diagonal(s, -np.inf)
        return s.argmax(1)
    return float((g * w).sum(1).min()), float((top1(g) == top1(w)).mean())


def _run(results, name):
    got = results[0][name]
    assert "error" not in got, f"{name}: {got.get('error')}"
    return got


@pytest.mark.parametrize("shape", SHAPES)
@pytest.mark.parametrize("run", ["stock", "flashnorm", "flashnorm_folded"])
def test_matches_sentence_transformers(results, shape, run):
    got = _run(results, f"{shape}/{run}")
    cos, top1 = agreement(got["embeddings"], results[1][shape]["embeddings"])
    assert cos >= COS_BAR and top1 == 1.0, f"{shape}/{run}: min cosine {cos:.8f}, top-1 {top1}"
    if run != "stock":
        assert got["linear_calls"] > 0, f"{shape}/{run}: flashnorm_linear never called"
        assert got["model_class"].startswith("FlashNorm"), got["model_class"]


@pytest.mark.parametrize("shape", SHAPES)
def test_negative_control_without_rstd_misses(results, shape):
    got = _run(results, f"{shape}/negative_rstd")
    cos, top1 = agreement(got["embeddings"], results[1][shape]["embeddings"])
    assert cos < COS_BAR or top1 < 1.0, f"{shape}: min cosine {cos:.8f} without the rstd"
