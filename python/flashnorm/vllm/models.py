"""The FlashNorm model classes vLLM builds (registered by flashnorm.vllm.register): each subclasses
vLLM's own class, so weight loading, q|k|v and gate|up stacking, tensor-parallel sharding,
attention, the KV cache and the scheduler are vLLM's. What changes, for every norm the plan
(flashnorm.deferred.engine_plan) makes free:
  * the norm module becomes ResidualAdd: x + residual, not normalized (its gain Parameter stays,
    so the checkpoint's gain loads into it);
  * the projection that reads it gets DeferredLinearMethod: rstd(x) * (x W*^T) (+ bias after the
    scale). Under tensor parallelism its input is the whole hidden vector on every rank, so each
    rank computes rstd itself, exactly, with no collective;
  * after vLLM loads the weights, each gain is folded into the projection's local rows (fp64
    product, one rounding) and set to the identity: a directory `flashnorm fold` wrote (gains
    already the identity) and an unfolded checkpoint both work.
Under the pooling runner (embeddings) the final norm, which the pooler reads, is kept as vLLM
computes it; every other norm is made free as above.
Refused with one line naming it: a quantized model (vLLM's quantization config), LoRA (its
deltas would read the un-normalized x), a runner other than "generate" and "pooling", a
projection whose linear method is not vLLM's unquantized one, and a load_weights call that brings
a free norm's gain without its projection or the other way round (a partial weight update: the
fold needs both).
"""
import logging
import os

import torch
from torch import nn
from vllm.distributed import get_tensor_model_parallel_rank
from vllm.model_executor.layers.linear import UnquantizedLinearMethod
from vllm.model_executor.layers.vocab_parallel_embedding import UnquantizedEmbeddingMethod
from vllm.model_executor.models.gemma3 import Gemma3ForCausalLM
from vllm.model_executor.models.llama import LlamaForCausalLM
from vllm.model_executor.models.mistral import MistralForCausalLM
from vllm.model_executor.models.qwen2 import Qwen2ForCausalLM
from vllm.model_executor.models.qwen3 import Qwen3ForCausalLM
from vllm.model_executor.models.utils import PPMissingLayer

import flashnorm  # noqa: F401 - loads the ops

from .. import deferred

logger = logging.getLogger("vllm.flashnorm")  # under vLLM's logger: its handler and format


class ResidualAdd(nn.Module):
    """A folded pre-norm: returns x (no residual) or (x + residual, x + residual), vLLM's RMSNorm
    calling convention without the normalization (the projection that reads it applies rstd).
    weight: the norm's gain Parameter, the identity once folded; variance_epsilon: the norm's."""

    def __init__(self, norm: nn.Module):
        super().__init__()
        self.weight = norm.weight
        self.variance_epsilon = float(norm.variance_epsilon)

    def forward(self, x: torch.Tensor, residual: torch.Tensor | None = None):
        if residual is None:
            return x
        s = x + residual
        return s, s


class DeferredLinearMethod(UnquantizedLinearMethod):
    """vLLM's unquantized linear method with the norm deferred: apply() computes
    rstd(x) * (x W*^T) (+ bias) through torch.ops.flashnorm.flashnorm_linear on the raw x that
    ResidualAdd passes. eps: the norm's; mask: bool [local output columns] or None (every column
    scaled). Keeps the plain [N, K] weight (no CPU repacking after loading)."""

    def __init__(self, eps: float, mask: torch.Tensor | None):
        super().__init__()
        self.eps = eps
        self.mask = mask

    def process_weights_after_loading(self, layer: nn.Module) -> None:
        if self.mask is not None:
            self.mask = self.mask.to(layer.weight.device)

    def apply(self, layer: nn.Module, x: torch.Tensor,
              bias: torch.Tensor | None = None) -> torch.Tensor:
        return deferred.deferred_linear(x, layer.weight, self.eps, self.mask, bias)


class DeferredHeadMethod(UnquantizedEmbeddingMethod):
    """The LM head's method with the final norm deferred (an untied head only): apply() as
    DeferredLinearMethod's; the embedding lookup (a tied head) is never deferred."""

    def __init__(self, eps: float):
        super().__init__()
        self.eps = eps

    def process_weights_after_loading(self, layer: nn.Module) -> None:
        pass

    def apply(self, layer: nn.Module, x: torch.Tensor,
              bias: torch.Tensor | None = None) -> torch.Tensor:
        return deferred.deferred_linear(x, layer.weight, self.eps, None, bias)


def _drop_qk_rstd() -> bool:
    v = os.environ.get("FLASHNORM_VLLM_DROP_QK_RSTD", "")
    if v not in ("", "0", "1"):
        raise ValueError(f"flashnorm.vllm: FLASHNORM_VLLM_DROP_QK_RSTD={v!r}: expected 1 or 0")
    return v == "1"


def _install(model: nn.Module, vllm_config, hf_class: str) -> deferred.EnginePlan:
    """Replaces the free norms and their projections' linear methods of `model` (just built by
    vLLM); returns the plan for the fold after loading."""
    if vllm_config.quant_config is not None:
        raise ValueError(f"flashnorm.vllm: quantization "
                         f"{vllm_config.quant_config.get_name()!r} is not supported (the "
                         f"deferred linear needs unquantized weights)")
    if vllm_config.lora_config is not None:
        raise ValueError("flashnorm.vllm: LoRA is not supported (its deltas would read the "
                         "un-normalized input of the deferred projections)")
    runner = getattr(vllm_config.model_config, "runner_type", "generate")
    if runner not in ("generate", "pooling"):
        raise ValueError(f"flashnorm.vllm: runner {runner!r} is not supported ('generate', "
                         f"'pooling')")
    config = vllm_config.model_config.hf_config
    tied = bool(getattr(config, "tie_word_embeddings", False))
    audit = deferred.hf_plan(hf_class, config)
    plan = deferred.engine_plan(audit, type(model).packed_modules_mapping, tied)
    if runner == "pooling":
        # no LM head: the pooler reads the final norm's output, so that norm stays as it is
        # (its rstd is not dropped either: a request may ask for unnormalized embeddings)
        final = {deferred.module_path(s["norm"]) for s, is_final in deferred.sites(audit)
                 if is_final}
        plan.kept += [deferred.Kept(s.norm, "the pooler reads it") for s in plan.free
                      if s.norm in final]
        plan.free = [s for s in plan.free if s.norm not in final]
    drop = _drop_qk_rstd()
    dropped = False
    for site in plan.free:
        norm = model.get_submodule(site.norm)
        if isinstance(norm, PPMissingLayer):  # another pipeline stage's layer
            continue
        proj = model.get_submodule(site.projection)
        eps = getattr(norm, "variance_epsilon", None)
        if not isinstance(eps, float):
            raise ValueError(f"flashnorm.vllm: {site.norm}: {type(norm).__name__} has no "
                             f"variance_epsilon")
        if isinstance(proj.quant_method, UnquantizedEmbeddingMethod):
            proj.quant_method = DeferredHeadMethod(eps)
        elif type(proj.quant_method) is UnquantizedLinearMethod:
            sizes = list(getattr(proj, "output_partition_sizes", [proj.weight.shape[0]]))
            if len(site.shards) == 1:
                sizes = [sum(sizes)]
            mask = deferred.scale_mask(sizes, site.cancellable, drop)
            dropped |= mask is not None
            proj.quant_method = DeferredLinearMethod(eps, mask)
        else:
            raise ValueError(f"flashnorm.vllm: {site.projection}: linear method "
                             f"{type(proj.quant_method).__name__} is not supported")
        parent, _, child = site.norm.rpartition(".")
        setattr(model.get_submodule(parent), child, ResidualAdd(norm))
    if get_tensor_model_parallel_rank() == 0:
        logger.info("%s%s", plan.describe(),
                    "; q/k rstd dropped where QK-norm cancels it" if dropped else "")
    return plan


@torch.no_grad()
def _fold(model: nn.Module, plan: deferred.EnginePlan, loaded: set[str]) -> None:
    """Folds each free norm's gain into its projection's local weight where one load_weights call
    brought both (`loaded`: the parameter names it loaded), then sets the gain to the identity (a
    gain already the identity: nothing to fold). ValueError, naming them, when it brought one of
    the two: a gain arriving alone cannot be folded into weights that hold the last one's product,
    nor a projection alone be folded without its gain."""
    identity = 0.0 if plan.gain_one_plus else 1.0
    for site in plan.free:
        norm = model.get_submodule(site.norm)
        if not isinstance(norm, ResidualAdd):
            continue
        gain_name, proj_name = site.norm + ".weight", site.projection + ".weight"
        if (gain_name in loaded) != (proj_name in loaded):
            have, lack = (gain_name, proj_name) if gain_name in loaded else (proj_name, gain_name)
            raise ValueError(f"flashnorm.vllm: {have} loaded without {lack}: the fold needs both "
                             f"in one load_weights call (a partial weight update is refused)")
        if gain_name not in loaded:
            continue
        gain = norm.weight
        if bool(torch.all(gain == identity)):
            continue
        w = model.get_submodule(site.projection).weight
        w.copy_(deferred.fold_shard(w, gain, plan.gain_one_plus))
        gain.fill_(identity)


def _flashnorm_class(base: type, hf_class: str) -> type:
    """vLLM's `base` with the norms of the plan made free (module docstring)."""

    def __init__(self, *, vllm_config, prefix: str = "", **kwargs):
        config = vllm_config.model_config.hf_config
        if (getattr(vllm_config.model_config, "runner_type", "generate") == "pooling"
                and getattr(config, "use_bidirectional_attention", None) is not None):
            # what vLLM's config hook for Gemma3TextModel does (EmbeddingGemma), which a
            # FlashNorm architecture name would otherwise skip
            config.is_causal = not config.use_bidirectional_attention
        base.__init__(self, vllm_config=vllm_config, prefix=prefix, **kwargs)
        self._flashnorm_plan = _install(self, vllm_config, hf_class)

    def load_weights(self, weights):
        loaded = base.load_weights(self, weights)
        _fold(self, self._flashnorm_plan, set(loaded))
        return loaded

    name = "FlashNorm" + hf_class
    return type(name, (base,), {"__init__": __init__, "load_weights": load_weights,
                                "__module__": __name__, "__qualname__": name,
                                "__doc__": f"vLLM's {base.__name__} with FlashNorm."})


FlashNormLlamaForCausalLM = _flashnorm_class(LlamaForCausalLM, "LlamaForCausalLM")
FlashNormMistralForCausalLM = _flashnorm_class(MistralForCausalLM, "MistralForCausalLM")
FlashNormQwen2ForCausalLM = _flashnorm_class(Qwen2ForCausalLM, "Qwen2ForCausalLM")
FlashNormQwen3ForCausalLM = _flashnorm_class(Qwen3ForCausalLM, "Qwen3ForCausalLM")
FlashNormGemma3ForCausalLM = _flashnorm_class(Gemma3ForCausalLM, "Gemma3ForCausalLM")
