"""FlashNorm for a serving engine that stacks projections (vLLM; an SGLang adapter would reuse it):
which norms become free, in the engine's module names, and the deferred linear. Engine-neutral: no
engine is imported here; the engine's glue (flashnorm.vllm) maps modules and calls these.

    plan = engine_plan(hf_plan(hf_class, config), packed_modules, tied_head)
    for site in plan.free:  the norm at site.norm becomes a residual add; the projection at
                            site.projection computes deferred_linear(x, W*, eps, mask, bias)
                            with W* = fold_shard(W, gain, plan.gain_one_plus)

Which norm feeds which projection, the gain convention and which rstd cancels come from the C++
architecture descriptions and cancellation audit (torch.ops.flashnorm.hf_plan), never from a
table here.
"""
import json
from dataclasses import dataclass, field

import torch

from . import ops


@dataclass(frozen=True)
class Site:
    """A norm made free. norm: the norm's module path ("model.layers.0.input_layernorm");
    projection: the module that reads it, stacked as the engine stacks it ("...self_attn.qkv_proj",
    or "lm_head"); shards: the Hugging Face consumers in stacking order ("q_proj", "k_proj",
    "v_proj"); cancellable: per shard, whether a following RMSNorm cancels its rstd (QK-norm)."""
    norm: str
    projection: str
    shards: tuple[str, ...]
    cancellable: tuple[bool, ...]


@dataclass(frozen=True)
class Kept:
    """A norm left as it is, and why (the audit's reason, or the tied LM head)."""
    norm: str
    reason: str


@dataclass
class EnginePlan:
    """gain_one_plus: the gains are stored as 1 + w (Gemma); free / kept: every norm site."""
    arch: str
    gain_one_plus: bool
    free: list[Site] = field(default_factory=list)
    kept: list[Kept] = field(default_factory=list)

    def describe(self) -> str:
        """One line: which norms were made free, which were kept and why (one example each)."""
        free = sorted({_leaf(s.norm) + " -> " + _leaf(s.projection) for s in self.free})
        kept = sorted({_leaf(k.norm) + " (" + k.reason + ")" for k in self.kept})
        return (f"flashnorm: {self.arch}: {len(self.free)} norms made free ({', '.join(free)}); "
                f"{len(self.kept)} kept ({', '.join(kept) or 'none'})")


def _leaf(path: str) -> str:
    return path.rpartition(".")[2]


def module_path(param: str, who: str = "flashnorm") -> str:
    """The module path of weight `param` ("model.layers.0.input_layernorm.weight" ->
    "model.layers.0.input_layernorm"); ValueError, prefixed with `who`, for a non-weight."""
    path, _, leaf = param.rpartition(".")
    if leaf != "weight":
        raise ValueError(f"{who}: {param} is not a weight")
    return path


def sites(plan: dict):
    """(site, is_final) for every norm site of an hf_plan, layers first, then the final norm's."""
    for layer in plan["layers"]:
        for site in layer:
            yield site, False
    for site in plan["final"]:
        yield site, True


def hf_parameter_names(hf_class: str, config) -> list[str]:
    """The parameter names of the transformers model `hf_class` built from `config` on the meta
    device (no memory, no file): the names hf_plan audits, tied duplicates included."""
    import transformers

    cls = getattr(transformers, hf_class, None)
    if cls is None:
        raise ValueError(f"flashnorm: transformers has no class {hf_class}")
    with torch.device("meta"):
        model = cls(config)
    return [n for n, _ in model.named_parameters(remove_duplicate=False)]


def plan_for(hf_class: str, config, names: list[str], who: str = "flashnorm") -> dict:
    """torch.ops.flashnorm.hf_plan for the transformers model `hf_class` with `config` and
    parameter names `names` (format: src/torch/hf_plan.cpp). ValueError (prefixed with `who`) for
    a config without num_hidden_layers; RuntimeError for a class no description covers."""
    layers = getattr(config, "num_hidden_layers", None)
    if not isinstance(layers, int):
        raise ValueError(f"{who} has no num_hidden_layers")
    return json.loads(torch.ops.flashnorm.hf_plan(hf_class, layers, names))


def hf_plan(hf_class: str, config) -> dict:
    """plan_for the transformers model `hf_class` built from `config` (hf_parameter_names)."""
    return plan_for(hf_class, config, hf_parameter_names(hf_class, config),
                    who=f"flashnorm: {type(config).__name__}")


def engine_plan(plan: dict, packed_modules: dict[str, list[str]], tied_head: bool) -> EnginePlan:
    """The norm sites of `plan` (hf_plan) in the engine's module names. packed_modules: the
    engine's stacking ({"qkv_proj": ["q_proj", "k_proj", "v_proj"], ...}); a norm with several
    consumers must feed exactly one stacked module, in its order (ValueError otherwise, naming the
    norm). tied_head: the LM head shares the embedding's weight, so the final norm is kept (its
    gain cannot be folded into a weight the embedding lookup also reads)."""
    out = EnginePlan(arch=plan["arch"], gain_one_plus=plan["gain_convention"] == "one_plus")
    for site, final in sites(plan):
        norm = module_path(site["norm"])
        if not site["foldable"]:
            out.kept.append(Kept(norm, site["fold_reason"] or "not foldable"))
            continue
        if final and tied_head:
            out.kept.append(Kept(norm, "the LM head is tied to the embedding"))
            continue
        paths = [module_path(c["tensor"]) for c in site["consumers"]]
        parents = {p.rpartition(".")[0] for p in paths}
        leaves = tuple(_leaf(p) for p in paths)
        if len(paths) == 1:
            projection = paths[0]
        else:
            stacked = [name for name, parts in packed_modules.items() if tuple(parts) == leaves]
            if len(parents) != 1 or len(stacked) != 1:
                raise ValueError(f"flashnorm: {norm} feeds {', '.join(paths)}, which the engine "
                                 f"does not stack as one projection")
            projection = parents.pop() + "." + stacked[0]
        out.free.append(Site(norm, projection, leaves,
                             tuple(bool(c["cancellable"]) for c in site["consumers"])))
    return out


@torch.no_grad()
def fold_shard(weight: torch.Tensor, gain: torch.Tensor, gain_one_plus: bool) -> torch.Tensor:
    """weight [N, K] (a tensor-parallel rank's rows of a column-parallel projection, or all of
    them) with column k multiplied by gain[k] (1 + gain[k] when gain_one_plus): the fp64 product
    rounded once to weight's dtype (torch.ops.flashnorm.fold_gain), on weight's device."""
    folded = ops.fold_gain(weight.detach().cpu(), gain.detach().cpu(), gain_one_plus)
    return folded.to(weight.device)


def scale_mask(shard_sizes: list[int], cancellable: tuple[bool, ...],
               drop_cancelled: bool) -> torch.Tensor | None:
    """The flashnorm_linear scale mask of a stacked projection whose local output holds
    shard_sizes[i] columns of shard i: None (every column scaled: exact) unless drop_cancelled,
    then False on the columns of shards whose rstd a following RMSNorm cancels."""
    if len(shard_sizes) != len(cancellable):
        raise ValueError(f"flashnorm: {len(shard_sizes)} output shards for "
                         f"{len(cancellable)} consumers")
    if not drop_cancelled or not any(cancellable):
        return None
    return torch.cat([torch.full((n,), not c, dtype=torch.bool)
                      for n, c in zip(shard_sizes, cancellable)])


def deferred_linear(x: torch.Tensor, weight: torch.Tensor, eps: float,
                    mask: torch.Tensor | None = None,
                    bias: torch.Tensor | None = None) -> torch.Tensor:
    """rstd(x) * (x weight^T) (+ bias after the scale): x [..., K] raw (not normalized), weight
    [N, K] folded, mask bool [N] or None; torch.ops.flashnorm.flashnorm_linear."""
    return torch.ops.flashnorm.flashnorm_linear(x, weight, eps, mask, bias)
