"""FlashNorm for a loaded Hugging Face `transformers` model, in place.

    fold_(model)   multiplies every foldable RMSNorm gain into the linear layers that read the
                   norm's output (fp64 product, one rounding: torch.ops.flashnorm.fold_gain) and
                   sets the gain to the identity in the model's own convention (w = 1; Gemma's
                   1 + w: w = 0). What `flashnorm fold` does to a directory.
    apply_(model)  replaces each folded norm and its consumers with modules that call
                   torch.ops.flashnorm.flashnorm_linear: rstd(x) * (x W*^T), one op call for all
                   consumers of a norm (q|k|v, gate|up); no rstd scale where every consumer's cancels.
    tune_(model)   on a GPU: tunes the kernels for the shapes the model will run (eagerly,
                   before any CUDA graph capture).

Which norm feeds which projection, the gain convention and which rstd cancels are not written
here: they come from the C++ architecture descriptions and the cancellation audit
(src/model/arch.cpp, audit.cpp) through torch.ops.flashnorm.hf_plan, which also refuses a model
class it does not know; so does whether a consumer has a bias (Qwen2's q/k/v, or a bias the model
holds, e.g. Llama's attention_bias). Supported: LlamaForCausalLM (SmolLM2), Qwen2ForCausalLM,
Qwen3ForCausalLM, Gemma3ForCausalLM, MistralForCausalLM.

Tensor parallelism (transformers' tp_plan="auto", weights as DTensors): fold_ folds into each
rank's local shard of a column-parallel projection (its rows hold every input column, so the
fold is exact); apply_ builds the fused q|k|v and gate|up projections from the local shards (a
column-parallel layer needs no communication: its input is the whole hidden vector on every
rank) and keeps the LM head's hooked Linear, whose output gather transformers installed, scaling
its rows by rstd after it (RowScaled). A weight sharded any other way is refused.
"""

import torch
from torch import nn

from . import ops
from .deferred import module_path, plan_for, sites


def plan(model: nn.Module) -> dict:
    """The architecture description and cancellation audit of `model` in its parameter names, as
    torch.ops.flashnorm.hf_plan returns it (format: src/torch/hf_plan.cpp). RuntimeError for a
    model class no description covers."""
    names = [n for n, _ in model.named_parameters(remove_duplicate=False)]
    return plan_for(type(model).__name__, model.config, names,
                    who=f"flashnorm.hf: {type(model).__name__}.config")


def _module(model: nn.Module, param: str) -> nn.Module:
    """The module that owns parameter `param` ("model.layers.0.input_layernorm.weight")."""
    return model.get_submodule(module_path(param, who="flashnorm.hf"))


def _eps(norm: nn.Module, name: str) -> float:
    """The eps of a transformers RMSNorm module (Llama/Qwen3: variance_epsilon, Gemma 3: eps)."""
    for attr in ("variance_epsilon", "eps"):
        if isinstance(getattr(norm, attr, None), float):
            return getattr(norm, attr)
    raise ValueError(f"flashnorm.hf: {name}: {type(norm).__name__} has no eps")


def _linear(model: nn.Module, consumer: dict) -> nn.Linear:
    """The nn.Linear a norm feeds (plan consumer {"tensor", "bias", ...}); its bias must be the one
    the plan names (the bias is added after the row scale and is not folded): a module with a bias
    the plan does not know, or without the bias it names, is refused."""
    name = consumer["tensor"]
    lin = _module(model, name)
    if not isinstance(lin, nn.Linear):
        raise ValueError(f"flashnorm.hf: {name}: expected nn.Linear, got {type(lin).__name__}")
    has = lin.bias is not None
    if has != (consumer["bias"] is not None):
        raise ValueError(f"flashnorm.hf: {name}: the module has {'a' if has else 'no'} bias, the "
                         f"architecture description {'does not' if has else 'does'} "
                         f"({consumer['bias'] or 'no bias'})")
    return lin


def _dtensor(t: torch.Tensor) -> bool:
    """Whether t is a torch.distributed DTensor (a tensor-parallel model's weight)."""
    try:
        from torch.distributed.tensor import DTensor
    except ImportError:
        return False
    return isinstance(t, DTensor)


def _full(t: torch.Tensor) -> torch.Tensor:
    """The whole tensor: t, or a DTensor's full value (a norm gain is small)."""
    return t.full_tensor() if _dtensor(t) else t


def _local_rows(w: torch.Tensor, name: str) -> torch.Tensor:
    """The rows of weight w [N, K] this rank holds, every input column included: w itself, or a
    DTensor's local shard when it is sharded by rows (column-parallel) or replicated. ValueError
    for another sharding (its gain would need the matching slice)."""
    if not _dtensor(w):
        return w
    from torch.distributed.tensor import Replicate, Shard

    if not all(isinstance(p, Replicate) or (isinstance(p, Shard) and p.dim == 0)
               for p in w.placements):
        raise ValueError(f"flashnorm.hf: {name}: sharded as {w.placements}; only row shards "
                         f"(column-parallel) and replicas can be folded")
    return w.to_local()


def _tied(model: nn.Module, p: dict) -> bool:
    """Whether the LM head shares its weight with the embedding."""
    params = dict(model.named_parameters(remove_duplicate=False))
    head, source = params.get(p["head"]), params.get(p["tied_source"])
    return head is not None and head is source


@torch.no_grad()
def fold_(model: nn.Module, tied_head: str = "untie") -> nn.Module:
    """Folds the model's RMSNorm gains into the linear layers they feed, in place; returns model.

    tied_head: "untie" (default): an LM head tied to the embedding gets its own folded copy and
    config.tie_word_embeddings becomes False (the embedding lookup stays unfolded); "keep": the
    head stays tied and the final norm keeps its gain (applied at run time; apply_ leaves that
    norm and the head as they are). ValueError when already folded, for a consumer that is not a
    nn.Linear, a bias the architecture description does not name (or a named bias missing) or a
    norm without eps; RuntimeError (hf_plan) for an unknown class. Biases stay as they are."""
    if tied_head not in ("untie", "keep"):
        raise ValueError(
            f"flashnorm.hf.fold_: tied_head must be 'untie' or 'keep', got {tied_head!r}")
    if getattr(model, "_flashnorm_folded", False):
        raise ValueError("flashnorm.hf.fold_: the model is folded already")
    p = plan(model)
    one_plus = p["gain_convention"] == "one_plus"
    tied = _tied(model, p)
    for site, final in sites(p):
        if not site["foldable"] or (final and tied and tied_head == "keep"):
            continue
        norm = _module(model, site["norm"])
        _eps(norm, site["norm"])
        gain = _full(norm.weight).detach().cpu()
        for c in site["consumers"]:
            lin = _linear(model, c)
            w = lin.weight
            local = _local_rows(w, c["tensor"])
            folded = ops.fold_gain(local.detach().cpu(), gain, one_plus).to(local.device)
            if final and tied:  # untie: the embedding keeps the unfolded values
                if _dtensor(w):
                    from torch.distributed.tensor import DTensor
                    folded = DTensor.from_local(folded, w.device_mesh, w.placements,
                                                run_check=False, shape=w.shape,
                                                stride=w.stride())
                lin.weight = nn.Parameter(folded, requires_grad=w.requires_grad)
            else:
                local.copy_(folded)
        norm.weight.fill_(0.0 if one_plus else 1.0)
    if tied and tied_head == "untie":
        model.config.tie_word_embeddings = False
    model._flashnorm_folded = True
    return model


# Inputs of at least this many rows (the product of the leading dimensions: prefill) are
# normalized before the projection instead of deferring rstd past it: x * rstd(x) rounded to x's
# dtype, then the folded weight (what the unmodified model computes, on the folded weights). At
# such M the GEMM is compute-bound and cuBLAS runs it faster than the fused kernels (H200,
# docs/results_h200.md: Qwen3-0.6B prefill at 1,024 and 4,096 rows was 0.97x / 0.93x of the
# unmodified model with the deferred op), while the norm is one memory-bound pass that
# torch.compile fuses into the residual add that produces x. Below it (decode) the deferral wins.
PRENORM_ROWS = 256


def _rows(x: torch.Tensor):
    """The number of rows of x [..., K] (an int, or a SymInt under dynamic shapes)."""
    return x.numel() // x.shape[-1] if x.shape[-1] else 0


def _normalized(x: torch.Tensor, eps: float) -> torch.Tensor:
    """RMSNorm without a gain (the gain is folded): x * rstd(x) in fp32, rounded once to x's
    dtype; under torch.compile as plain tensor ops (so Inductor fuses it with the residual add
    that produces x), eagerly as the flashnorm::rms_norm op (one kernel)."""
    if torch.compiler.is_compiling():
        xf = x.float()
        return (xf * torch.rsqrt(xf.pow(2).mean(-1, keepdim=True) + eps)).to(x.dtype)
    return ops.rms_norm(x, None, eps)


class FlashNormProjection(nn.Module):
    """A folded RMSNorm and the linear layers that read it, as one flashnorm_linear call: replaces
    the norm module and returns the consumers' outputs side by side, [..., sum(sizes)]; each
    consumer is replaced by a Columns module that takes its part. weight: the consumers' folded
    weights stacked [sum(sizes), K]; scale_mask: bool [sum(sizes)] (None: every column scaled);
    bias: [sum(sizes)], the consumers' biases stacked (zeros for a consumer without one), added
    after the row scale, or None when no consumer has a bias. prenorm_rows: from this many rows
    on, x is normalized first and multiplied by the weight (PRENORM_ROWS)."""

    def __init__(self, weight: torch.Tensor, eps: float, scale_mask: torch.Tensor | None,
                 bias: torch.Tensor | None = None, prenorm_rows: int = PRENORM_ROWS):
        super().__init__()
        self.weight = nn.Parameter(weight, requires_grad=False)
        self.bias = None if bias is None else nn.Parameter(bias, requires_grad=False)
        self.eps = eps
        self.prenorm_rows = prenorm_rows
        self.register_buffer("scale_mask", scale_mask)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if _rows(x) >= self.prenorm_rows:
            return nn.functional.linear(_normalized(x, self.eps), self.weight, self.bias)
        return torch.ops.flashnorm.flashnorm_linear(x, self.weight, self.eps, self.scale_mask,
                                                    self.bias)


class Columns(nn.Module):
    """Columns [start, start + size) of a FlashNormProjection's output (one former consumer).
    Refuses any other input (a caller reading the consumer with something else than the norm's
    output would otherwise get wrong numbers)."""

    def __init__(self, start: int, size: int, total: int):
        super().__init__()
        self.start, self.size, self.total = start, size, total

    def forward(self, y: torch.Tensor) -> torch.Tensor:
        if y.shape[-1] != self.total:
            raise ValueError(f"flashnorm.hf.Columns: expected the fused projection's "
                             f"{self.total} features, got {y.shape[-1]}")
        return y.narrow(-1, self.start, self.size)


class RawInput(nn.Module):
    """A folded RMSNorm whose only consumer is a FlashNormLinear: passes x through unnormalized
    (the consumer applies rstd)."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x


class FlashNormLinear(nn.Module):
    """The single consumer of a folded RMSNorm (the LM head): flashnorm_linear(x, weight, eps,
    bias=bias) on the raw x that RawInput passes; keeps the Linear's weight and bias Parameters."""

    def __init__(self, weight: nn.Parameter, eps: float, bias: nn.Parameter | None = None,
                 prenorm_rows: int = PRENORM_ROWS):
        super().__init__()
        self.weight = weight
        self.bias = bias
        self.eps = eps
        self.prenorm_rows = prenorm_rows

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if _rows(x) >= self.prenorm_rows:
            return nn.functional.linear(_normalized(x, self.eps), self.weight, self.bias)
        return torch.ops.flashnorm.flashnorm_linear(x, self.weight, self.eps, None, self.bias)


class RowScaled(nn.Module):
    """The single consumer of a folded RMSNorm in a tensor-parallel model (the LM head): the
    hooked Linear `inner` kept as transformers sharded it (its output gather included), its output
    rows multiplied by rstd(x) in fp32 and rounded to x's dtype: rstd * (x W*^T), with one more
    rounding than flashnorm_linear's in bf16/fp16 (the Linear's own). inner has no bias."""

    def __init__(self, inner: nn.Module, eps: float):
        super().__init__()
        self.inner = inner
        self.eps = eps

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        y = self.inner(x)
        return (y.float() * ops.rstd(x, self.eps).unsqueeze(-1)).to(y.dtype)


def _replace(model: nn.Module, param: str, module: nn.Module) -> None:
    path = param.rpartition(".")[0]
    parent, _, child = path.rpartition(".")
    setattr(model.get_submodule(parent) if parent else model, child, module)


@torch.no_grad()
def apply_(model: nn.Module, cancel: bool = True, cancel_columns: bool = False,
           prenorm_rows: int = PRENORM_ROWS) -> nn.Module:
    """Replaces every folded RMSNorm and its consumers with flashnorm modules, in place; returns
    model. A norm with several consumers (q|k|v, gate|up) becomes one FlashNormProjection (one op
    call) and its consumers Columns; a norm with one consumer (the LM head) becomes RawInput and
    the consumer FlashNormLinear. cancel: a norm whose consumers' rstd the audit finds cancelled,
    all of them, gets no rstd scale (False scales every column). cancel_columns: where only some
    consumers' rstd cancels (QK-norm: q and k are renormalized per head, v is not), leave those
    columns unscaled too (a per-column scale mask). Off by default: the rstd is computed for the
    other columns anyway, scaling every column costs nothing in the fused kernels and keeps the
    result exact (a mask adds the eps bound of docs/design.md section 3), while the masked op has
    no fused kernel above 16 rows (the CUDA kernels' two-stream path). prenorm_rows: inputs of
    at least this many rows (prefill) are normalized before the projection instead (PRENORM_ROWS
    says why), every column scaled whatever the mask; a value above any input's rows (e.g.
    sys.maxsize) keeps the deferral everywhere.

    The model must be folded: by fold_, or loaded from a directory `flashnorm fold` wrote. A
    foldable norm whose gain is not the identity is refused (ValueError), except the final norm of
    a head kept tied (fold_(tied_head="keep")), which stays as it is. Afterwards the model is for
    inference (generate() works, with transformers' KV caches); the final hidden state it reports
    is the un-normalized one, and its state dict has the fused names."""
    if getattr(model, "_flashnorm_applied", False):
        raise ValueError("flashnorm.hf.apply_: flashnorm modules are applied already")
    p = plan(model)
    identity = 0.0 if p["gain_convention"] == "one_plus" else 1.0
    tied = _tied(model, p)
    for site, final in sites(p):
        if not site["foldable"]:
            continue
        norm = _module(model, site["norm"])
        if not bool(torch.all(_full(norm.weight) == identity)):
            if final and tied:
                continue
            raise ValueError(f"flashnorm.hf.apply_: {site['norm']} is not the identity "
                             f"({identity}): the model is not folded (flashnorm.hf.fold_ first)")
        eps = _eps(norm, site["norm"])
        lins = [_linear(model, c) for c in site["consumers"]]
        sharded = any(_dtensor(lin.weight) for lin in lins)
        if len(lins) == 1 and sharded:  # keep the hooked Linear and its communication
            if lins[0].bias is not None:
                raise ValueError(f"flashnorm.hf.apply_: {site['consumers'][0]['tensor']}: a "
                                 f"sharded single consumer with a bias is not supported")
            _replace(model, site["norm"], RawInput())
            _replace(model, site["consumers"][0]["tensor"], RowScaled(lins[0], eps))
            continue
        if len(lins) == 1:
            _replace(model, site["norm"], RawInput())
            _replace(model, site["consumers"][0]["tensor"],
                     FlashNormLinear(lins[0].weight, eps, lins[0].bias, prenorm_rows))
            continue
        scaled = [not (cancel and c["cancellable"]) for c in site["consumers"]]
        if any(scaled) and not cancel_columns:
            scaled = [True] * len(scaled)
        # this rank's rows of each consumer (all of them when the model is not sharded): a
        # column-parallel projection's output stays local, as transformers' hooks leave it
        weights = [_local_rows(lin.weight, c["tensor"]).detach()
                   for lin, c in zip(lins, site["consumers"])]
        biases = [None if lin.bias is None else _local_rows(lin.bias, c["tensor"]).detach()
                  for lin, c in zip(lins, site["consumers"])]
        sizes = [w.shape[0] for w in weights]
        mask = None
        if not all(scaled):
            mask = torch.cat([torch.full((n,), s, dtype=torch.bool, device=w.device)
                              for n, s, w in zip(sizes, scaled, weights)])
        weight = torch.cat(weights)
        bias = None
        if any(b is not None for b in biases):
            bias = torch.cat([w.new_zeros(n) if b is None else b
                              for n, b, w in zip(sizes, biases, weights)])
        _replace(model, site["norm"], FlashNormProjection(weight, eps, mask, bias, prenorm_rows))
        start = 0
        for c, n in zip(site["consumers"], sizes):
            _replace(model, c["tensor"], Columns(start, n, weight.shape[0]))
            start += n
    model._flashnorm_applied = True
    return model


@torch.no_grad()
def tune_(model: nn.Module, rows: tuple[int, ...] = (1, 8, 32)) -> nn.Module:
    """Tunes the CUDA kernels of every flashnorm module of an apply_-ed model that lives on a GPU,
    for inputs of each number of rows in `rows` (decode batch sizes, prefill lengths: the M of
    flashnorm_linear), once per distinct shape; later calls, and CUDA graphs captured after this,
    use the tuned configurations. Modules on the CPU are skipped. Never call it while a CUDA graph
    is being captured (refused). Row counts a module normalizes first (prenorm_rows) run cuBLAS
    and are skipped. Returns model."""
    done = set()
    for m in model.modules():
        if not isinstance(m, (FlashNormProjection, FlashNormLinear)) or not m.weight.is_cuda:
            continue
        mask = getattr(m, "scale_mask", None)
        for r in rows:
            if r >= m.prenorm_rows:  # normalized first: cuBLAS, nothing to tune
                continue
            key = (r, tuple(m.weight.shape), m.weight.dtype, m.weight.device,
                   None if mask is None else tuple(mask.tolist()))
            if key in done:
                continue
            done.add(key)
            x = torch.randn(r, m.weight.shape[1], dtype=m.weight.dtype, device=m.weight.device)
            ops.tune_linear(x, m.weight, m.eps, mask)
    return model
