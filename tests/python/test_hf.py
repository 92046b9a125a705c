"""flashnorm.hf on random transformers models (the reference outside the product: the unmodified
model, computed by transformers). Per architecture a small model built by transformers itself
(seeded; weights at unit-variance scales, every RMSNorm gain randomized; fp32): after fold_ +
apply_ the logits match the unmodified model's within 1e-5 relative (max |a - b| / max |b|) and 32
greedy tokens from generate() are identical; the same under torch.compile(fullgraph=True) with
Inductor (torch.compile's default backend) behind a counting backend, for every architecture:
generate() through the compiled forward gives the same 32 greedy tokens and per-step logits within
1e-5, with no graph break and every flashnorm op in each graph; negative
controls (gains ignored by the fold, the QK-norm mask ignored, biases dropped or added before the
row scale) fail; refusals name what they refuse. With FLASHNORM_CLI set, a directory
folded by `flashnorm fold` is loaded with from_pretrained and apply_-ed."""
import copy
import os
import subprocess
import sys

import pytest
import torch
import torch._inductor.config
from torch._dynamo.backends.registry import lookup_backend
from transformers import (AutoModelForCausalLM, Gemma3ForCausalLM, Gemma3TextConfig, LlamaConfig,
                          LlamaForCausalLM, MistralConfig, MistralForCausalLM, Olmo2Config,
                          Olmo2ForCausalLM, Qwen2Config, Qwen2ForCausalLM, Qwen3Config,
                          Qwen3ForCausalLM)

import flashnorm.hf as fh

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "support"))
from random_hf import randomize_  # noqa: E402  (the shared random weights)

TOL = 1e-5       # largest relative logit difference accepted
NEG_MIN = 1e-3   # a negative control must differ by at least this much
VOCAB, N_GREEDY = 300, 32
SMALL = dict(vocab_size=VOCAB, hidden_size=64, intermediate_size=96, num_hidden_layers=3,
             num_attention_heads=4, num_key_value_heads=2, head_dim=16,
             max_position_embeddings=256, rms_norm_eps=1e-5, bos_token_id=1, eos_token_id=2,
             pad_token_id=0)
ARCHS = {
    "llama": lambda: LlamaForCausalLM(LlamaConfig(**SMALL)),
    "llama_tied": lambda: LlamaForCausalLM(LlamaConfig(**SMALL, tie_word_embeddings=True)),
    # q/k/v biases in every Qwen 2 checkpoint (the description's has_bias)
    "qwen2": lambda: Qwen2ForCausalLM(Qwen2Config(**SMALL)),
    # biases a config adds, seen from the model's tensors (q/k/v/o and gate/up/down)
    "llama_bias": lambda: LlamaForCausalLM(LlamaConfig(**SMALL, attention_bias=True,
                                                       mlp_bias=True)),
    "qwen3": lambda: Qwen3ForCausalLM(Qwen3Config(**SMALL)),
    "gemma3": lambda: Gemma3ForCausalLM(Gemma3TextConfig(**{
        **SMALL, "rms_norm_eps": 1e-6, "sliding_window": 4, "query_pre_attn_scalar": 24,
        "layer_types": ["sliding_attention", "full_attention", "sliding_attention"]})),
    "mistral": lambda: MistralForCausalLM(MistralConfig(**SMALL, sliding_window=5)),
}
# Inductor's cost is mostly fixed (about 21 s of CPU with 1 layer, 25 s with 3, on the 2-core
# development machine): every compile runs with one compile thread (no worker pool)
INDUCTOR = torch._inductor.config.patch(compile_threads=1)


def build(arch, seed=0):
    """A random model of `arch`: matrices N(0, 1/K) (embeddings N(0, 1)), biases N(0, 0.25),
    gains randomized (Gemma: stored w in [-0.5, 0.5), applied as 1 + w; else [0.5, 1.5) with 5%
    negated)."""
    torch.manual_seed(seed)
    model = ARCHS[arch]().eval()
    randomize_(model, seed + 1)
    return model


def tokens(seed=0):
    return torch.randint(3, VOCAB, (2, 20), generator=torch.Generator().manual_seed(seed))


def rel(a, b):
    return ((a.double() - b.double()).abs().max() / b.double().abs().max()).item()


def logits(model, ids):
    with torch.no_grad():
        return model(ids, use_cache=False).logits


def greedy(model, ids):
    return model.generate(ids[:1], max_new_tokens=N_GREEDY, min_new_tokens=N_GREEDY,
                          do_sample=False)[0, ids.shape[1]:]


def count(model, cls):
    return sum(isinstance(m, cls) for m in model.modules())


@pytest.mark.parametrize("arch", list(ARCHS))
def test_fold_apply_matches_transformers(arch):
    ref = build(arch)
    model = fh.apply_(fh.fold_(copy.deepcopy(ref)))
    layers = ref.config.num_hidden_layers
    # every q|k|v and gate|up group is one op call, the head one more
    assert count(model, fh.FlashNormProjection) == 2 * layers
    assert count(model, fh.FlashNormLinear) == 1
    ids = tokens()
    assert rel(logits(model, ids), logits(ref, ids)) <= TOL
    assert torch.equal(greedy(model, ids), greedy(ref, ids))


@pytest.mark.parametrize("arch", ["qwen2", "llama_bias"])
def test_biases_after_the_scale(arch):
    """Every consumer bias of the plan ends up in the fused projection, the rest stay in their
    modules; negative controls: the fused biases dropped, or added before the row scale, fail."""
    ref = build(arch)
    model = fh.apply_(fh.fold_(copy.deepcopy(ref)))
    layer, ref_layer = model.model.layers[0], ref.model.layers[0]
    att = ref_layer.self_attn
    want = torch.cat([att.q_proj.bias, att.k_proj.bias, att.v_proj.bias])
    assert torch.equal(layer.input_layernorm.bias, want)
    mlp = layer.post_attention_layernorm.bias
    assert (mlp is None) == (ref_layer.mlp.gate_proj.bias is None)
    assert (layer.self_attn.o_proj.bias is None) == (att.o_proj.bias is None)
    ids = tokens()
    want_logits = logits(ref, ids)
    assert rel(logits(model, ids), want_logits) <= TOL
    fused = [m for m in model.modules() if isinstance(m, fh.FlashNormProjection)
             and m.bias is not None]
    assert fused
    for m in fused:  # the bias before the scale: rstd * (x W^T + b)
        m.forward = lambda x, m=m: (fh.ops.flashnorm_linear(x, m.weight, m.eps, m.scale_mask) +
                                    fh.ops.rstd(x, m.eps).unsqueeze(-1) * m.bias)
    assert rel(logits(model, ids), want_logits) > NEG_MIN
    for m in fused:  # the bias dropped
        m.forward = lambda x, m=m: fh.ops.flashnorm_linear(x, m.weight, m.eps, m.scale_mask)
    assert rel(logits(model, ids), want_logits) > NEG_MIN


@pytest.mark.parametrize("arch", ["qwen3", "gemma3"])
def test_qk_norm_columns_unscaled(arch):
    """QK-norm with cancel_columns=True: the q and k columns of the fused projection are left
    unscaled (their rstd is cancelled by the per-head norm); by default every column is scaled
    (no mask: v's rstd is computed anyway). Negative control: leaving every column unscaled
    fails."""
    ref = build(arch)
    plain = fh.apply_(fh.fold_(copy.deepcopy(ref)))
    assert plain.model.layers[0].input_layernorm.scale_mask is None
    model = fh.apply_(fh.fold_(copy.deepcopy(ref)), cancel_columns=True)
    proj = model.model.layers[0].input_layernorm
    cfg = ref.config
    nq, nkv = cfg.num_attention_heads * cfg.head_dim, cfg.num_key_value_heads * cfg.head_dim
    want = torch.cat([torch.zeros(nq + nkv, dtype=torch.bool), torch.ones(nkv, dtype=torch.bool)])
    assert torch.equal(proj.scale_mask, want)
    ids = tokens()
    for layer in model.model.layers:
        layer.input_layernorm.scale_mask.zero_()  # v unscaled too: wrong
    assert rel(logits(model, ids), logits(ref, ids)) > NEG_MIN


def compile_counting(fn, backend="inductor", **kw):
    """torch.compile(fn, fullgraph=True, **kw) with a backend that records every graph it is given
    and runs it with `backend` (Inductor traces the fake implementations and generates and
    compiles C++ kernels around the ops); returns (compiled, graphs)."""
    graphs = []

    def counting(gm, example_inputs):
        graphs.append(gm)
        return lookup_backend(backend)(gm, example_inputs)

    torch._dynamo.reset()
    return torch.compile(fn, backend=counting, fullgraph=True, **kw), graphs


def flashnorm_calls(graph_module):
    """How many flashnorm_linear calls a graph holds, or None for a graph that calls nothing."""
    calls = [str(n.target) for n in graph_module.graph.nodes if n.op == "call_function"]
    return sum("flashnorm.flashnorm_linear" in t for t in calls) if calls else None


def generate_logits(model, ids):
    """32 greedy tokens of both rows of ids, and the logits of every step [32, 2, vocab]."""
    out = model.generate(ids, max_new_tokens=N_GREEDY, min_new_tokens=N_GREEDY, do_sample=False,
                         output_logits=True, return_dict_in_generate=True)
    return out.sequences[:, ids.shape[1]:], torch.stack(out.logits)


@pytest.mark.parametrize("arch", list(ARCHS))
def test_compiled_generate_matches_transformers(arch):
    """generate() on 2 x 20 prompt tokens with the forward compiled by Inductor behind the counting
    backend (fullgraph, dynamic shapes), for every architecture: the same 32 greedy tokens per row
    as the unmodified eager model and the logits of every step within 1e-5; no graph break counted
    by dynamo, and every graph that computes anything (the prefill; the decode step, whose length 1
    dynamo specializes; transformers also compiles empty graphs) holds the 2 x layers + 1
    flashnorm_linear calls."""
    ref = build(arch)
    model = fh.apply_(fh.fold_(copy.deepcopy(ref)))
    ids = tokens()
    torch._dynamo.utils.counters.clear()
    with INDUCTOR:
        model.forward, graphs = compile_counting(model.forward, dynamic=True)
        got_tokens, got_logits = generate_logits(model, ids)
    want_tokens, want_logits = generate_logits(ref, ids)
    assert torch.equal(got_tokens, want_tokens)
    assert rel(got_logits, want_logits) <= TOL
    assert not torch._dynamo.utils.counters["graph_break"]
    counts = [k for k in map(flashnorm_calls, graphs) if k is not None]
    assert len(counts) >= 2 and all(k == 2 * ref.config.num_hidden_layers + 1 for k in counts)


@pytest.mark.parametrize("arch", ["llama_tied", "qwen2", "qwen3", "gemma3"])
def test_prenorm_rows_match_transformers(arch):
    """Inputs of prenorm_rows rows or more are normalized before the projection (prefill): with the
    threshold at 1 row every flashnorm module takes that path and the logits still match the
    unmodified model within 1e-5, also with the QK-norm mask (which that path does not use: q and
    k are renormalized per head anyway), and the 32 greedy tokens are the same. Negative control:
    that path with the normalization left out fails. A threshold above the input's 40 rows keeps
    every call on the op (graph of dynamo's eager backend). Qwen3 also under Inductor (fullgraph;
    the normalization as plain tensor ops): same logits, no flashnorm_linear call in the graph."""
    ref = build(arch)
    ids = tokens()
    want = logits(ref, ids)
    for cancel_columns in (False, True):
        model = fh.apply_(fh.fold_(copy.deepcopy(ref)), cancel_columns=cancel_columns,
                          prenorm_rows=1)
        assert rel(logits(model, ids), want) <= TOL
    assert torch.equal(greedy(model, ids), greedy(ref, ids))
    saved = fh._normalized
    try:
        fh._normalized = lambda x, eps: x
        assert rel(logits(model, ids), want) > NEG_MIN
    finally:
        fh._normalized = saved
    deferred = fh.apply_(fh.fold_(copy.deepcopy(ref)), prenorm_rows=ids.numel() + 1)
    forward, graphs = compile_counting(lambda i: deferred(i, use_cache=False).logits,
                                       backend="eager")
    with torch.no_grad():
        assert rel(forward(ids), want) <= TOL
    assert flashnorm_calls(graphs[0]) == 2 * ref.config.num_hidden_layers + 1
    if arch != "qwen3":  # one Inductor compile (about 25 s of CI time each)
        return
    with INDUCTOR:
        forward, graphs = compile_counting(lambda i: model(i, use_cache=False).logits)
        with torch.no_grad():
            got = forward(ids)
    assert rel(got, want) <= TOL
    assert len(graphs) == 1 and flashnorm_calls(graphs[0]) == 0


@pytest.mark.parametrize("arch", ["llama", "gemma3"])
def test_fold_ignoring_gains_fails(arch):
    """Negative control: a fold that resets the gains without multiplying them in."""
    ref = build(arch)
    model = copy.deepcopy(ref)
    identity = 0.0 if arch == "gemma3" else 1.0
    with torch.no_grad():
        for layer_sites in fh.plan(model)["layers"] + [fh.plan(model)["final"]]:
            for site in layer_sites:
                if site["foldable"]:
                    model.get_submodule(site["norm"].rpartition(".")[0]).weight.fill_(identity)
    model._flashnorm_folded = True
    fh.apply_(model)
    assert rel(logits(model, tokens()), logits(ref, tokens())) > NEG_MIN


def test_tune_skips_cpu_modules():
    """tune_ tunes GPU kernels only: on a CPU model it changes nothing."""
    ref = build("llama")
    model = fh.apply_(fh.fold_(copy.deepcopy(ref)))
    assert fh.tune_(model) is model
    assert rel(logits(model, tokens()), logits(ref, tokens())) <= TOL


def test_tied_head():
    ref = build("llama_tied")
    assert ref.lm_head.weight is ref.model.embed_tokens.weight
    ids = tokens()
    # untie (default): the head gets a folded copy, the embedding keeps its values
    untied = fh.fold_(copy.deepcopy(ref))
    assert untied.lm_head.weight is not untied.model.embed_tokens.weight
    assert not untied.config.tie_word_embeddings
    assert torch.equal(untied.model.embed_tokens.weight, ref.model.embed_tokens.weight)
    assert rel(logits(fh.apply_(untied), ids), logits(ref, ids)) <= TOL
    # keep: still tied, the final norm keeps its gain and apply_ leaves it and the head alone
    kept = fh.fold_(copy.deepcopy(ref), tied_head="keep")
    assert kept.lm_head.weight is kept.model.embed_tokens.weight
    assert torch.equal(kept.model.norm.weight, ref.model.norm.weight)
    fh.apply_(kept)
    assert count(kept, fh.FlashNormLinear) == 0
    assert rel(logits(kept, ids), logits(ref, ids)) <= TOL
    assert torch.equal(greedy(kept, ids), greedy(ref, ids))


def test_refusals():
    tiny = {k: v for k, v in SMALL.items() if k != "head_dim"}
    with pytest.raises(RuntimeError, match='unsupported model class "Olmo2ForCausalLM"'):
        fh.fold_(Olmo2ForCausalLM(Olmo2Config(**tiny)))
    no_bias = build("qwen2")
    no_bias.model.layers[1].self_attn.k_proj.bias = None
    with pytest.raises(ValueError, match=r"model.layers.1.self_attn.k_proj.weight: the module has "
                                         r"no bias, the architecture description does "
                                         r"\(model.layers.1.self_attn.k_proj.bias\)"):
        fh.fold_(no_bias)
    model = build("llama")
    with pytest.raises(ValueError, match=r"model.layers.0.input_layernorm.weight is not the "
                                         r"identity \(1.0\): the model is not folded"):
        fh.apply_(model)
    fh.fold_(model)
    with pytest.raises(ValueError, match="folded already"):
        fh.fold_(model)
    with pytest.raises(ValueError, match="tied_head must be"):
        fh.fold_(build("llama"), tied_head="drop")
    fh.apply_(model)
    with pytest.raises(ValueError, match="applied already"):
        fh.apply_(model)


@pytest.mark.skipif(not os.environ.get("FLASHNORM_CLI"), reason="FLASHNORM_CLI not set")
@pytest.mark.parametrize("arch", ["llama_tied", "qwen2", "gemma3"])
def test_cli_folded_directory(arch, tmp_path):
    """A directory written by `flashnorm fold`, loaded with from_pretrained and apply_-ed (no
    in-memory fold), against the unfolded model."""
    ref = build(arch)
    ref.save_pretrained(tmp_path / "orig")
    r = subprocess.run([os.environ["FLASHNORM_CLI"], "fold", str(tmp_path / "orig"), "-o",
                        str(tmp_path / "folded")], capture_output=True, text=True)
    assert r.returncode == 0, r.stderr
    model = AutoModelForCausalLM.from_pretrained(tmp_path / "folded", dtype=torch.float32).eval()
    fh.apply_(model)
    assert count(model, fh.FlashNormProjection) == 2 * ref.config.num_hidden_layers
    ids = tokens()
    assert rel(logits(model, ids), logits(ref, ids)) <= TOL
    assert torch.equal(greedy(model, ids), greedy(ref, ids))
