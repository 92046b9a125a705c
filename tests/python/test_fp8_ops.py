"""The FP8 ops (flashnorm.fp8_quantize, flashnorm.fp8_linear) on the CPU against plain torch (the
reference outside the product): torch.library.opcheck (schema, fake, registrations; fp8_linear
without the schema test, whose input perturbation float8 lacks) on odd shapes;
the payload bit for bit equal to torch's own float8_e4m3fn cast of x * g / s; the row scale
within one fp32 rounding of s * rstd computed in fp64; fp8_linear against the fp64 product of the
decoded payloads and scales. The FP8 identity of docs/design.md: FlashNorm's one pass over the raw
x (rstd on the row scale) against the standard pipeline (RMSNorm with gain, then per-token
quantization): the same payload bytes but for rounding (>= 99%) and the same linear output within
the FP8 error; negative control: the raw x quantized without the rstd on its scale misses. Under
torch.compile(fullgraph=True) the two ops trace through their fakes."""
import pytest
import torch

import flashnorm

SHAPES = [((1,), 70), ((3,), 8), ((33,), 130), ((2, 3), 70)]
EPS = 1e-5


def rand(*shape, dtype=torch.float32, seed=0, scale=1.0):
    g = torch.Generator().manual_seed(seed)
    return (torch.randn(*shape, generator=g) * scale).to(dtype)


def rstd64(x, eps):
    return torch.rsqrt(x.double().pow(2).mean(-1) + eps)


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
@pytest.mark.parametrize("lead,K", SHAPES)
@pytest.mark.parametrize("rstd_on_scale", [True, False])
def test_fp8_quantize_matches_torch_cast(dtype, lead, K, rstd_on_scale):
    x = rand(*lead, K, dtype=dtype, seed=1, scale=3.0)
    g = rand(K, dtype=dtype, seed=2)
    torch.library.opcheck(torch.ops.flashnorm.fp8_quantize, (x, g, EPS, rstd_on_scale, False))
    payload, scale = flashnorm.fp8_quantize(x, g, EPS, rstd_on_scale)
    assert payload.dtype == torch.float8_e4m3fn and payload.shape == x.shape
    assert scale.dtype == torch.float32 and scale.shape == lead
    v = x.float() * g.float()
    s = v.abs().amax(-1, keepdim=True) / 448.0
    want = (v / s).to(torch.float8_e4m3fn)
    assert torch.equal(payload.view(torch.uint8), want.view(torch.uint8))
    want_scale = s.squeeze(-1).double() * (rstd64(x, EPS) if rstd_on_scale else 1.0)
    assert ((scale.double() - want_scale).abs() / want_scale).max() < 2e-7


def test_fp8_quantize_gain_one_plus_and_zero_rows():
    x = rand(4, 16, seed=3)
    x[2] = 0
    w = rand(16, seed=4) * 0.1
    a, sa = flashnorm.fp8_quantize(x, w, EPS, True, gain_one_plus=True)
    b, sb = flashnorm.fp8_quantize(x, 1 + w, EPS, True)
    assert torch.equal(a.view(torch.uint8), b.view(torch.uint8)) and torch.equal(sa, sb)
    assert sa[2] == 0 and not a[2].view(torch.uint8).any()


@pytest.mark.parametrize("lead,K", SHAPES)
def test_fp8_linear_against_fp64(lead, K):
    N = 37
    x, xs = flashnorm.fp8_quantize(rand(*lead, K, seed=5), None, EPS, False)
    w = rand(N, K, seed=6)
    ws = w.abs().amax(1) / 448.0
    wq = (w / ws[:, None]).to(torch.float8_e4m3fn)
    bias = rand(N, seed=7)
    # (opcheck's schema test perturbs the inputs with arithmetic float8 tensors do not have)
    torch.library.opcheck(torch.ops.flashnorm.fp8_linear, (x, xs, wq, ws, bias),
                          test_utils=("test_faketensor", "test_autograd_registration",
                                      "test_aot_dispatch_dynamic"))
    y = flashnorm.fp8_linear(x, xs, wq, ws, bias)
    want = (x.double() @ wq.double().T) * xs.double()[..., None] * ws.double() + bias.double()
    assert y.dtype == torch.float32 and y.shape == (*lead, N)
    assert ((y.double() - want).abs().max() / want.abs().max()) < 1e-5


def test_flashnorm_one_pass_equals_the_standard_pipeline():
    """rstd on the row scale (one pass over raw x) = RMSNorm with gain, then quantization."""
    M, K, N = 64, 256, 96
    x = rand(M, K, seed=8, scale=5.0)
    x[:, :4] *= 30  # outlier features, as residual streams have
    g = rand(K, seed=9) * 0.5 + 1
    w = rand(N, K, seed=10)
    ws = w.abs().amax(1) / 448.0
    wq = (w / ws[:, None]).to(torch.float8_e4m3fn)
    fast_p, fast_s = flashnorm.fp8_quantize(x, g, EPS, True)
    xn = flashnorm.rms_norm(x, g, EPS)
    std_p, std_s = flashnorm.fp8_quantize(xn, None, EPS, False)
    same = (fast_p.view(torch.uint8) == std_p.view(torch.uint8)).double().mean().item()
    assert same >= 0.99, same
    exact = (x.double() * rstd64(x, EPS)[:, None] * g.double()) @ (wq.double() * ws[:, None]).T
    err_fast = (flashnorm.fp8_linear(fast_p, fast_s, wq, ws).double() - exact).abs().max()
    err_std = (flashnorm.fp8_linear(std_p, std_s, wq, ws).double() - exact).abs().max()
    assert err_fast <= 1.5 * err_std, (err_fast, err_std)
    # negative control: the raw x's payload with its scale alone (the rstd forgotten)
    raw_p, raw_s = flashnorm.fp8_quantize(x, g, EPS, False)
    err_raw = (flashnorm.fp8_linear(raw_p, raw_s, wq, ws).double() - exact).abs().max()
    assert err_raw > 10 * err_std, (err_raw, err_std)


def test_compiled_fullgraph():
    def f(x, g, wq, ws):
        p, s = flashnorm.fp8_quantize(x, g, EPS, True)
        return flashnorm.fp8_linear(p, s, wq, ws)
    x, g = rand(5, 32, seed=11), rand(32, seed=12)
    w = rand(8, 32, seed=13)
    ws = w.abs().amax(1) / 448.0
    wq = (w / ws[:, None]).to(torch.float8_e4m3fn)
    compiled = torch.compile(f, fullgraph=True, backend="aot_eager")
    assert torch.equal(compiled(x, g, wq, ws), f(x, g, wq, ws))


@pytest.mark.parametrize("bad,msg", [
    (lambda x, w: flashnorm.fp8_linear(x.float(), torch.ones(3), w, torch.ones(4)), "x must be"),
    (lambda x, w: flashnorm.fp8_linear(x, torch.ones(2), w, torch.ones(4)), "x_scale"),
    (lambda x, w: flashnorm.fp8_linear(x, torch.ones(3), w, torch.ones(5)), "w_scale"),
    (lambda x, w: flashnorm.fp8_quantize(x.float(), torch.ones(7), EPS), "gain"),
])
def test_refusals(bad, msg):
    x = torch.ones(3, 8).to(torch.float8_e4m3fn)
    w = torch.ones(4, 8).to(torch.float8_e4m3fn)
    with pytest.raises(RuntimeError, match=msg):
        bad(x, w)
