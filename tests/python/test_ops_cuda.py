"""The flashnorm ops on a GPU (skipped without one): the Hopper kernels behind the dispatcher
against fp64 formulas computed here with plain torch, opcheck on CUDA tensors, the kernels'
refusals as RuntimeErrors, CUDA-graph capture after an eager warm-up, and flashnorm.hf on a bf16
model on the GPU: its logits no further from the fp32 CPU reference than 3x the unmodified bf16
model's own distance."""
import copy

import pytest
import torch

import flashnorm

pytestmark = pytest.mark.skipif(not torch.cuda.is_available(), reason="no CUDA device")

EPS = 1e-5
TOL = {torch.bfloat16: 1e-2, torch.float16: 2e-3}


def rand(*shape, dtype, seed, scale=1.0):
    g = torch.Generator().manual_seed(seed)
    return (torch.randn(*shape, generator=g) * scale).to(dtype).cuda()


def rel(a, b):
    return ((a.double() - b.double()).abs().max() / b.double().abs().max()).item()


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16])
@pytest.mark.parametrize("M", [1, 3, 33, 200])
@pytest.mark.parametrize("variant", ["plain", "mask", "mask_bias"])
def test_flashnorm_linear_cuda(dtype, M, variant):
    K, N = 576, 96
    x, w = rand(M, K, dtype=dtype, seed=1), rand(N, K, dtype=dtype, seed=2, scale=K ** -0.5)
    mask = (torch.arange(N, device="cuda") % 3 != 0) if variant != "plain" else None
    bias = rand(N, dtype=dtype, seed=3) if variant == "mask_bias" else None
    torch.library.opcheck(torch.ops.flashnorm.flashnorm_linear, (x, w, EPS, mask, bias))
    y = flashnorm.flashnorm_linear(x, w, EPS, mask, bias)
    raw = x.double() @ w.double().T
    scale = torch.rsqrt(x.double().pow(2).mean(-1, keepdim=True) + EPS)
    want = torch.where(mask, raw * scale, raw) if mask is not None else raw * scale
    if bias is not None:
        want = want + bias.double()
    assert y.dtype == dtype and y.shape == (M, N) and y.is_cuda
    assert rel(y, want) < TOL[dtype]


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16])
def test_rms_norm_and_rstd_cuda(dtype):
    x, g = rand(2, 5, 256, dtype=dtype, seed=4), rand(256, dtype=dtype, seed=5)
    torch.library.opcheck(torch.ops.flashnorm.rms_norm, (x, g, EPS, True))
    torch.library.opcheck(torch.ops.flashnorm.rstd, (x, EPS))
    r64 = torch.rsqrt(x.double().pow(2).mean(-1) + EPS)
    assert rel(flashnorm.rstd(x, EPS), r64) < 1e-5
    want = x.double() * r64[..., None] * (g.double() + 1)
    assert rel(flashnorm.rms_norm(x, g, EPS, True), want) < TOL[dtype]


def test_cuda_refusals():
    x = torch.randn(2, 64, device="cuda")
    with pytest.raises(RuntimeError, match="CUDA kernels take bfloat16 or float16, got float32"):
        flashnorm.flashnorm_linear(x, torch.randn(8, 64, device="cuda"), EPS)
    xb = torch.randn(2, 70, device="cuda", dtype=torch.bfloat16)
    with pytest.raises(RuntimeError, match="flashnorm::flashnorm_linear"):
        flashnorm.flashnorm_linear(xb, torch.randn(8, 70, device="cuda", dtype=torch.bfloat16), EPS)
    with pytest.raises(RuntimeError, match="w must be on x's device"):
        flashnorm.flashnorm_linear(xb[:, :64].contiguous(), torch.randn(8, 64).bfloat16(), EPS)


@pytest.mark.parametrize("M", [1, 64])
def test_cuda_graph_capture(M):
    dtype = torch.bfloat16
    x, w = rand(M, 512, dtype=dtype, seed=6), rand(256, 512, dtype=dtype, seed=7, scale=512 ** -0.5)
    mask = torch.arange(256, device="cuda") >= 64
    eager = flashnorm.flashnorm_linear(x, w, EPS, mask)  # warm-up: buffers sized eagerly
    torch.cuda.synchronize()
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        out = flashnorm.flashnorm_linear(x, w, EPS, mask)
    x.copy_(rand(M, 512, dtype=dtype, seed=8))
    graph.replay()
    torch.cuda.synchronize()
    assert torch.equal(out, flashnorm.flashnorm_linear(x, w, EPS, mask))
    assert not torch.equal(out, eager)


@pytest.mark.parametrize("arch", ["llama", "qwen3", "gemma3"])
def test_hf_bf16_on_gpu(arch):
    from test_hf import build, count, tokens
    import flashnorm.hf as fh
    ref = build(arch)
    ids = tokens()
    with torch.no_grad():
        want = ref(ids, use_cache=False).logits
        plain = copy.deepcopy(ref).to("cuda", torch.bfloat16)
        base = rel(plain(ids.cuda(), use_cache=False).logits.cpu(), want)
        model = fh.apply_(fh.fold_(copy.deepcopy(ref).to("cuda", torch.bfloat16)))
        assert count(model, fh.FlashNormProjection) == 2 * ref.config.num_hidden_layers
        got = rel(model(ids.cuda(), use_cache=False).logits.cpu(), want)
        print(f"{arch}: bf16 standard {base:.3e}, bf16 flashnorm {got:.3e} (vs fp32 CPU)")
        assert got <= 3 * base
        out = model.generate(ids[:1].cuda(), max_new_tokens=16, min_new_tokens=16, do_sample=False)
        assert out.shape[1] == ids.shape[1] + 16
        fh.tune_(model, rows=(1, 40))  # 40 = 2 x 20 prompt rows
        assert rel(model(ids.cuda(), use_cache=False).logits.cpu(), want) <= 3 * base


def test_tune_refused_during_capture():
    x, w = rand(1, 512, dtype=torch.bfloat16, seed=9), rand(64, 512, dtype=torch.bfloat16, seed=10)
    flashnorm.tune_linear(x, w, EPS)
    flashnorm.flashnorm_linear(x, w, EPS)
    graph = torch.cuda.CUDAGraph()
    with pytest.raises(RuntimeError, match="refused during CUDA graph capture"):
        with torch.cuda.graph(graph):
            flashnorm.tune_linear(x, w, EPS)
