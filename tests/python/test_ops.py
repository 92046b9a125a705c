"""The flashnorm ops (src/torch, python/flashnorm/ops.py) on the CPU: torch.library.opcheck (schema,
fake implementation, dispatcher registrations) on every op and dtype the CPU supports with odd
shapes, values against formulas computed here in fp64 with plain torch (the reference outside the
product), the fold's one rounding against the nearest representable value, and the refusals."""
import pytest
import torch

import flashnorm

DTYPES = [torch.float32, torch.bfloat16, torch.float16]
# |ours - fp64 formula| / max|formula|: one rounding of the output plus the input conversions
TOL = {torch.float32: 1e-5, torch.bfloat16: 1e-2, torch.float16: 2e-3}
# leading dimensions (M = 1, 3, 33 rows; a 3-D batch) x K (none a multiple of 64)
SHAPES = [((1,), 70), ((3,), 8), ((33,), 130), ((2, 3), 70)]
EPS = 1e-5


def rand(*shape, dtype, seed):
    g = torch.Generator().manual_seed(seed)
    return torch.randn(*shape, generator=g).to(dtype)


def rel(a, b):
    return ((a.double() - b).abs().max() / b.abs().max()).item()


def rstd64(x, eps):
    return torch.rsqrt(x.double().pow(2).mean(-1) + eps)


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("lead,K", SHAPES)
def test_rstd(dtype, lead, K):
    x = rand(*lead, K, dtype=dtype, seed=1)
    torch.library.opcheck(torch.ops.flashnorm.rstd, (x, EPS))
    r = flashnorm.rstd(x, EPS)
    assert r.dtype == torch.float32 and r.shape == lead
    assert rel(r, rstd64(x, EPS)) < 1e-6


def cases(variants):
    """Every dtype x shape once, the variants taken in turn (each dtype sees each variant)."""
    return [(d, lead, K, variants[(i + j) % len(variants)])
            for i, d in enumerate(DTYPES) for j, (lead, K) in enumerate(SHAPES)]


@pytest.mark.parametrize("dtype,lead,K,one_plus", cases([False, True]))
def test_rms_norm(dtype, lead, K, one_plus):
    x, g = rand(*lead, K, dtype=dtype, seed=2), rand(K, dtype=dtype, seed=3)
    torch.library.opcheck(torch.ops.flashnorm.rms_norm, (x, g, EPS, one_plus))
    y = flashnorm.rms_norm(x, g, EPS, one_plus)
    G = g.double() + 1 if one_plus else g.double()
    want = x.double() * rstd64(x, EPS)[..., None] * G
    assert y.dtype == dtype and y.shape == x.shape
    assert rel(y, want) < TOL[dtype]
    # no gain: plain normalization, and torch's own RMSNorm agrees
    y0 = flashnorm.rms_norm(x, None, EPS)
    assert rel(y0, torch.nn.functional.rms_norm(x.double(), (K,), eps=EPS)) < TOL[dtype]


@pytest.mark.parametrize("dtype,lead,K,variant",
                         cases([(False, False), (True, False), (True, True)]))
def test_flashnorm_linear(dtype, lead, K, variant):
    masked, biased = variant
    N = 37
    x, w = rand(*lead, K, dtype=dtype, seed=4), rand(N, K, dtype=dtype, seed=5) * K ** -0.5
    mask = (torch.arange(N) % 3 != 0) if masked else None
    bias = rand(N, dtype=dtype, seed=6) if biased else None
    torch.library.opcheck(torch.ops.flashnorm.flashnorm_linear, (x, w, EPS, mask, bias))
    y = flashnorm.flashnorm_linear(x, w, EPS, mask, bias)
    raw = x.double() @ w.double().T
    scale = rstd64(x, EPS)[..., None]
    want = torch.where(mask, raw * scale, raw) if masked else raw * scale
    if biased:
        want = want + bias.double()
    assert y.dtype == dtype and y.shape == (*lead, N)
    assert rel(y, want) < TOL[dtype]
    if masked:  # negative control: the unmasked columns really are unscaled
        assert rel(y, raw * scale + (bias.double() if biased else 0)) > 1e-2


def test_flashnorm_linear_equals_rmsnorm_then_linear():
    """The identity FlashNorm rests on: RMSNorm(x) * g @ W^T == rstd(x) * (x @ (W * g)^T)."""
    x, w, g = rand(5, 70, dtype=torch.float32, seed=7), rand(9, 70, dtype=torch.float32, seed=8), \
        rand(70, dtype=torch.float32, seed=9)
    want = torch.nn.functional.rms_norm(x, (70,), g, EPS) @ w.T
    got = flashnorm.flashnorm_linear(x, flashnorm.fold_gain(w, g, False), EPS)
    assert rel(got, want.double()) < 1e-5


def nearest_check(out, exact):
    """Whether every element of `out` (bf16/fp16) is a nearest representable value to `exact`
    (fp64): no closer value one unit in the last place above or below."""
    bits = out.view(torch.int16)
    up, down = (bits + 1).view(out.dtype).double(), (bits - 1).view(out.dtype).double()
    d = (out.double() - exact).abs()
    return bool(((d <= (up - exact).abs()) & (d <= (down - exact).abs())).all())


@pytest.mark.parametrize("dtype,mant", [(torch.bfloat16, 7), (torch.float16, 10)])
def test_fold_gain_rounds_once(dtype, mant):
    """Row 0 is 1 + 2^-mant and gains 0..127 are the fp32 values around
    (1 + 2^-(mant+1)) / (1 + 2^-mant): some products lie just off a midpoint between two values of
    dtype, where rounding to fp32 first lands on the midpoint (a double rounding)."""
    w = rand(64, 512, dtype=dtype, seed=10)
    w[0] = 1 + 2.0 ** -mant
    c = torch.tensor((1 + 2.0 ** -(mant + 1)) / (1 + 2.0 ** -mant), dtype=torch.float32)
    near = (c.view(torch.int32) + torch.arange(-64, 64, dtype=torch.int32)).view(torch.float32)
    g = torch.cat([near, torch.rand(384, generator=torch.Generator().manual_seed(11)) + 0.5])
    torch.library.opcheck(torch.ops.flashnorm.fold_gain, (w, g, False))
    out = flashnorm.fold_gain(w, g, False)
    exact = w.double() * g.double()
    assert out.dtype == dtype and nearest_check(out, exact)
    # negative controls: torch's fp64 -> dtype conversion (and fp64 -> fp32 -> dtype) round twice
    # on these values, and the check above sees it
    assert not nearest_check(exact.to(dtype), exact)
    assert not nearest_check(exact.float().to(dtype), exact)
    # Gemma's convention: the multiplier is 1 + gain
    gm = torch.rand(512, generator=torch.Generator().manual_seed(12)) - 0.5
    assert nearest_check(flashnorm.fold_gain(w, gm, True), w.double() * (gm.double() + 1))


def test_fold_gain_float32():
    w, g = rand(7, 70, dtype=torch.float32, seed=12), rand(70, dtype=torch.float32, seed=13)
    torch.library.opcheck(torch.ops.flashnorm.fold_gain, (w, g, True))
    assert torch.equal(flashnorm.fold_gain(w, g, True), (w.double() * (g.double() + 1)).float())


@pytest.mark.parametrize("call,message", [
    (lambda: flashnorm.flashnorm_linear(torch.randn(2, 8), torch.randn(3, 9), EPS),
     r"w must have shape \[N, 8\]"),
    (lambda: flashnorm.flashnorm_linear(torch.randn(2, 8), torch.randn(3, 8).double(), EPS),
     "w must have x's dtype float32, got float64"),
    (lambda: flashnorm.flashnorm_linear(torch.randn(2, 8).long(), torch.randn(3, 8).long(), EPS),
     "x must be float32, bfloat16 or float16"),
    (lambda: flashnorm.flashnorm_linear(torch.randn(2, 8), torch.randn(3, 8), EPS,
                                        torch.ones(3)), "scale_mask must be bool"),
    (lambda: flashnorm.flashnorm_linear(torch.randn(2, 8), torch.randn(3, 8), EPS,
                                        torch.ones(4, dtype=torch.bool)),
     r"scale_mask must have shape \[3\]"),
    (lambda: flashnorm.flashnorm_linear(torch.randn(2, 8), torch.randn(3, 8), EPS, None,
                                        torch.ones(2)), r"bias must have shape \[3\]"),
    (lambda: flashnorm.rms_norm(torch.randn(2, 8), torch.randn(7), EPS),
     r"gain must have shape \[8\]"),
    (lambda: flashnorm.rstd(torch.tensor(1.0), EPS), "at least one dimension"),
    (lambda: flashnorm.fold_gain(torch.randn(3, 8), torch.randn(9), False),
     r"gain must have shape \[8\]"),
])
def test_refusals(call, message):
    with pytest.raises(RuntimeError, match=message):
        call()


def test_linear_calls_counts_each_flashnorm_linear_call():
    x, w = torch.randn(3, 8), torch.randn(4, 8)
    before = torch.ops.flashnorm.linear_calls()
    flashnorm.flashnorm_linear(x, w, 1e-5)
    flashnorm.rms_norm(x, None, 1e-5)  # other ops do not count
    flashnorm.flashnorm_linear(x, w, 1e-5)
    assert torch.ops.flashnorm.linear_calls() - before == 2
