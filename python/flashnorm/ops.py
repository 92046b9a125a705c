"""The `torch.ops.flashnorm` ops (schemas and semantics: src/torch/registration.cpp) with their fake
(meta) implementations, which torch.compile uses to trace them without a graph break, and thin
Python wrappers with documented arguments. Every op takes any leading batch dimensions (features
last) and checks dtypes, devices and shapes, raising RuntimeError naming the argument.
"""
import torch

_ops = torch.ops.flashnorm


def rstd(x: torch.Tensor, eps: float) -> torch.Tensor:
    """1 / sqrt(mean(x^2, -1) + eps) per row: float32 [...] for x [..., K] (fp32/bf16/fp16)."""
    return _ops.rstd(x, eps)


def rms_norm(x: torch.Tensor, gain: torch.Tensor | None, eps: float,
             gain_one_plus: bool = False) -> torch.Tensor:
    """RMSNorm x * rstd(x) * G in fp32, rounded once to x's dtype; G = gain [K], 1 + gain
    (gain_one_plus, Gemma's convention) or 1 (gain None). x: [..., K]."""
    return _ops.rms_norm(x, gain, eps, gain_one_plus)


def flashnorm_linear(x: torch.Tensor, w: torch.Tensor, eps: float,
                     scale_mask: torch.Tensor | None = None,
                     bias: torch.Tensor | None = None) -> torch.Tensor:
    """FlashNorm linear: rstd(x) * (x w^T) (+ bias after the scale), [..., N] in x's dtype.
    x: [..., K]; w: [N, K], the weight with the norm's gain folded in (fold_gain); scale_mask: bool
    [N], the rstd scale only where True (columns whose rstd a following RMSNorm cancels stay raw);
    bias: [N]. fp32 arithmetic, one rounding."""
    return _ops.flashnorm_linear(x, w, eps, scale_mask, bias)


def tune_linear(x: torch.Tensor, w: torch.Tensor, eps: float,
                scale_mask: torch.Tensor | None = None, bias: torch.Tensor | None = None) -> None:
    """CUDA only: tunes the kernels flashnorm_linear runs for this shape (x's rows, w's [N, K]) on
    x's device; later calls with that shape use the tuned configurations. Synchronizes; refused
    during CUDA graph capture (tune eagerly, before capturing)."""
    _ops.tune_linear(x, w, eps, scale_mask, bias)


def fold_gain(w: torch.Tensor, gain: torch.Tensor, gain_one_plus: bool) -> torch.Tensor:
    """w [N, K] with column k multiplied by gain[k] (1 + gain[k] when gain_one_plus), the product in
    fp64 and rounded once to w's dtype (what `flashnorm fold` writes). CPU tensors."""
    return _ops.fold_gain(w, gain, gain_one_plus)


def fp8_quantize(x: torch.Tensor, gain: torch.Tensor | None, eps: float,
                 rstd_on_scale: bool = True, gain_one_plus: bool = False):
    """Per-token FP8 quantization of v = x * G (G = gain, 1 + gain with gain_one_plus, or 1):
    returns (payload float8_e4m3fn [..., K], scale float32 [...]) with s = max|v| / 448 per row,
    payload = fp8(v / s) (ties to even, saturated at 448) and scale = s * rstd(x) when
    rstd_on_scale (FlashNorm: one pass over the raw x; max|rstd v| = rstd max|v|, so the payload is
    the normalized x's up to rounding and the rstd rides on the row scale), else s (x normalized
    already). x: [..., K] float32/bfloat16/float16; gain [K] in x's dtype. CPU reference."""
    return _ops.fp8_quantize(x, gain, eps, rstd_on_scale, gain_one_plus)


def fp8_linear(x: torch.Tensor, x_scale: torch.Tensor, w: torch.Tensor, w_scale: torch.Tensor,
               bias: torch.Tensor | None = None) -> torch.Tensor:
    """(x w^T) * x_scale[row] * w_scale[n] (+ bias) in float32 [..., N]: x [..., K] and w [N, K]
    float8_e4m3fn, x_scale float32 [...] (fp8_quantize's scale), w_scale float32 [N] (a per-channel
    weight scale, compressed-tensors' weight_scale). CPU reference."""
    return _ops.fp8_linear(x, x_scale, w, w_scale, bias)


@torch.library.register_fake("flashnorm::fp8_quantize")
def _fp8_quantize_fake(x, gain, eps, rstd_on_scale=True, gain_one_plus=False):
    torch._check(gain is None or gain.shape == x.shape[-1:],
                 lambda: f"flashnorm::fp8_quantize: gain must have shape [{x.shape[-1]}]")
    return (x.new_empty(x.shape, dtype=torch.float8_e4m3fn),
            x.new_empty(x.shape[:-1], dtype=torch.float32))


@torch.library.register_fake("flashnorm::fp8_linear")
def _fp8_linear_fake(x, x_scale, w, w_scale, bias=None):
    torch._check(w.dim() == 2 and w.shape[1] == x.shape[-1],
                 lambda: f"flashnorm::fp8_linear: w must have shape [N, {x.shape[-1]}]")
    return x.new_empty((*x.shape[:-1], w.shape[0]), dtype=torch.float32)


@torch.library.register_fake("flashnorm::rstd")
def _rstd_fake(x, eps):
    return x.new_empty(x.shape[:-1], dtype=torch.float32)


@torch.library.register_fake("flashnorm::rms_norm")
def _rms_norm_fake(x, gain, eps, gain_one_plus=False):
    torch._check(gain is None or gain.shape == x.shape[-1:],
                 lambda: f"flashnorm::rms_norm: gain must have shape [{x.shape[-1]}]")
    return torch.empty_like(x)


@torch.library.register_fake("flashnorm::flashnorm_linear")
def _flashnorm_linear_fake(x, w, eps, scale_mask=None, bias=None):
    torch._check(w.dim() == 2 and w.shape[1] == x.shape[-1],
                 lambda: f"flashnorm::flashnorm_linear: w must have shape [N, {x.shape[-1]}]")
    torch._check(w.dtype == x.dtype, lambda: "flashnorm::flashnorm_linear: w must have x's dtype")
    return x.new_empty((*x.shape[:-1], w.shape[0]))


@torch.library.register_fake("flashnorm::tune_linear")
def _tune_linear_fake(x, w, eps, scale_mask=None, bias=None):
    return None


@torch.library.register_fake("flashnorm::fold_gain")
def _fold_gain_fake(w, gain, gain_one_plus):
    return torch.empty_like(w)
