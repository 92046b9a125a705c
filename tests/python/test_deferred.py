"""flashnorm.deferred, the engine-neutral part of the vLLM plugin: the plan in an engine's module
names from the C++ descriptions (stacking checked, tied heads kept, refusals), the scale mask,
the shard fold (fp64 product, one rounding); and on a GPU (skipped without one) a decoder block
as the plugin runs it (residual add, deferred q|k|v and gate|up) under torch.compile(fullgraph)
and captured piecewise in CUDA graphs as vLLM captures it (attention outside the graphs),
against the normalized-first block in fp64."""
import pytest
import torch

import flashnorm  # noqa: F401 - loads the ops
from flashnorm import deferred

PACKED = {"qkv_proj": ["q_proj", "k_proj", "v_proj"], "gate_up_proj": ["gate_proj", "up_proj"]}


def _names(layers, qk_norm=False, tied=False):
    out = ["model.embed_tokens.weight", "model.norm.weight"]
    if not tied:
        out.append("lm_head.weight")
    for i in range(layers):
        p = f"model.layers.{i}."
        out += [p + n + ".weight" for n in (
            "input_layernorm", "post_attention_layernorm", "self_attn.q_proj", "self_attn.k_proj",
            "self_attn.v_proj", "self_attn.o_proj", "mlp.gate_proj", "mlp.up_proj",
            "mlp.down_proj")]
        if qk_norm:
            out += [p + "self_attn.q_norm.weight", p + "self_attn.k_norm.weight"]
    return out


def _hf_plan(cls, layers, **kw):
    import json
    return json.loads(torch.ops.flashnorm.hf_plan(cls, layers, _names(layers, **kw)))


def test_engine_plan_llama_untied():
    ep = deferred.engine_plan(_hf_plan("LlamaForCausalLM", 2), PACKED, tied_head=False)
    assert not ep.gain_one_plus and ep.arch == "llama"
    assert [(s.norm, s.projection) for s in ep.free] == [
        ("model.layers.0.input_layernorm", "model.layers.0.self_attn.qkv_proj"),
        ("model.layers.0.post_attention_layernorm", "model.layers.0.mlp.gate_up_proj"),
        ("model.layers.1.input_layernorm", "model.layers.1.self_attn.qkv_proj"),
        ("model.layers.1.post_attention_layernorm", "model.layers.1.mlp.gate_up_proj"),
        ("model.norm", "lm_head")]
    assert ep.free[0].shards == ("q_proj", "k_proj", "v_proj") and ep.kept == []


def test_engine_plan_qwen3_tied_keeps_final_norm_and_marks_qk_cancellable():
    ep = deferred.engine_plan(_hf_plan("Qwen3ForCausalLM", 1, qk_norm=True, tied=True), PACKED,
                              tied_head=True)
    assert ep.free[0].cancellable == (True, True, False)
    kept = {k.norm: k.reason for k in ep.kept}
    assert kept["model.norm"] == "the LM head is tied to the embedding"
    assert "model.layers.0.self_attn.q_norm" in kept
    assert "1 kept" not in ep.describe() and "3 kept" in ep.describe()


def test_engine_plan_refuses_a_projection_the_engine_does_not_stack():
    # an engine that stacks q|k but not v: the q|k|v norm cannot become one deferred call
    with pytest.raises(ValueError, match="input_layernorm feeds .* does not stack"):
        deferred.engine_plan(_hf_plan("LlamaForCausalLM", 1),
                             {"qk_proj": ["q_proj", "k_proj"], **{"gate_up_proj":
                                                                 PACKED["gate_up_proj"]}},
                             tied_head=False)


def test_scale_mask():
    assert deferred.scale_mask([4, 2, 2], (True, True, False), drop_cancelled=False) is None
    assert deferred.scale_mask([4, 2], (False, False), drop_cancelled=True) is None
    m = deferred.scale_mask([4, 2, 2], (True, True, False), drop_cancelled=True)
    assert m.tolist() == [False] * 6 + [True] * 2
    with pytest.raises(ValueError, match="3 output shards for 2 consumers"):
        deferred.scale_mask([1, 1, 1], (True, False), drop_cancelled=True)


@pytest.mark.parametrize("one_plus", [False, True])
def test_fold_shard_is_the_fp64_product_rounded_once(one_plus):
    g = torch.Generator().manual_seed(3)
    w = torch.randn(6, 10, generator=g).bfloat16()
    gain = torch.rand(10, generator=g) + 0.5
    got = deferred.fold_shard(w, gain, one_plus)
    want = (w.double() * ((1 + gain.double()) if one_plus else gain.double())).bfloat16()
    assert got.dtype == torch.bfloat16 and torch.equal(got, want)
    # a tensor-parallel rank's rows: the same columns, the same gain
    assert torch.equal(deferred.fold_shard(w[3:], gain, one_plus), want[3:])


# --- on a GPU: the block the plugin runs, compiled and captured piecewise -----------------------

EPS = 1e-6
H, HEADS, HD, F = 256, 4, 64, 512


def _block_weights(dtype, seed):
    g = torch.Generator().manual_seed(seed)

    def mat(n, k):
        return (torch.randn(n, k, generator=g) * k ** -0.5).to(dtype).cuda()
    gains = [(torch.rand(H, generator=g) + 0.5).cuda() for _ in range(2)]
    return {"g1": gains[0], "g2": gains[1], "qkv": mat(3 * HEADS * HD, H),
            "o": mat(H, HEADS * HD), "gate_up": mat(2 * F, H), "down": mat(H, F)}


def _attention(qkv):
    """Stands in for vLLM's attention op (outside the captured graphs): causal SDPA."""
    T = qkv.shape[0]
    q, k, v = qkv.view(T, 3, HEADS, HD).unbind(1)
    out = torch.nn.functional.scaled_dot_product_attention(
        q.transpose(0, 1), k.transpose(0, 1), v.transpose(0, 1), is_causal=True)
    return out.transpose(0, 1).reshape(T, HEADS * HD)


def _piece1(x, residual, w):
    s = x + residual  # ResidualAdd
    return deferred.deferred_linear(s, w["qkv"], EPS), s


def _piece2(attn, residual, w):
    s = torch.nn.functional.linear(attn, w["o"]) + residual
    gu = deferred.deferred_linear(s, w["gate_up"], EPS)
    gate, up = gu.chunk(2, -1)
    return torch.nn.functional.linear(torch.nn.functional.silu(gate) * up, w["down"]), s


def _reference(x, residual, w, raw):
    """The normalized-first block in fp64 with the unfolded weights `raw`."""
    d = {k: v.double() for k, v in raw.items()}

    def norm(s, g):
        return s * torch.rsqrt(s.pow(2).mean(-1, keepdim=True) + EPS) * g
    s = x.double() + residual.double()
    qkv = norm(s, d["g1"]) @ d["qkv"].T
    s2 = _attention(qkv) @ d["o"].T + s
    gate, up = (norm(s2, d["g2"]) @ d["gate_up"].T).chunk(2, -1)
    return (torch.nn.functional.silu(gate) * up) @ d["down"].T


@pytest.mark.skipif(not torch.cuda.is_available(), reason="no CUDA device")
@pytest.mark.parametrize("T", [1, 8, 40])
def test_block_compiled_and_piecewise_cuda_graphs(T):
    dtype = torch.bfloat16
    raw = _block_weights(dtype, 11)
    w = dict(raw)
    w["qkv"] = deferred.fold_shard(raw["qkv"], raw["g1"], False)
    w["gate_up"] = deferred.fold_shard(raw["gate_up"], raw["g2"], False)
    g = torch.Generator().manual_seed(T)
    x = torch.randn(T, H, generator=g).to(dtype).cuda()
    residual = torch.randn(T, H, generator=g).to(dtype).cuda()

    def eager(x, residual):
        qkv, s = _piece1(x, residual, w)
        return _piece2(_attention(qkv), s, w)[0]

    y = eager(x, residual)
    ref = _reference(x, residual, w, raw)
    rel = float((y.double() - ref).abs().max() / ref.abs().max())
    assert rel < 3e-2, f"eager block vs fp64 normalized-first: {rel:.3g}"

    p1 = torch.compile(lambda x, r: _piece1(x, r, w), fullgraph=True)
    p2 = torch.compile(lambda a, r: _piece2(a, r, w), fullgraph=True)
    qkv, s = p1(x, residual)
    yc = p2(_attention(qkv), s)[0]
    rel_c = float((yc.double() - y.double()).abs().max() / y.double().abs().max())
    assert rel_c < 1e-2, f"compiled vs eager: {rel_c:.3g}"

    # piecewise capture, as vLLM's: each compiled piece in its own graph, attention between
    xs, rs, attn = x.clone(), residual.clone(), torch.empty(T, HEADS * HD, dtype=dtype,
                                                            device="cuda")
    torch.cuda.synchronize()
    g1, g2 = torch.cuda.CUDAGraph(), torch.cuda.CUDAGraph()
    with torch.cuda.graph(g1):
        qkv_g, s_g = p1(xs, rs)
    with torch.cuda.graph(g2):
        y_g = p2(attn, s_g)[0]
    for seed in (100, 101):  # new inputs each replay: the graphs read them, not the capture's
        g = torch.Generator().manual_seed(seed)
        xs.copy_(torch.randn(T, H, generator=g).to(dtype))
        rs.copy_(torch.randn(T, H, generator=g).to(dtype))
        g1.replay()
        attn.copy_(_attention(qkv_g))
        g2.replay()
        torch.cuda.synchronize()
        qkv_e, s_e = p1(xs, rs)
        want = p2(_attention(qkv_e), s_e)[0]
        assert torch.equal(y_g, want), f"replay {seed}: graphs differ from the compiled pieces"
