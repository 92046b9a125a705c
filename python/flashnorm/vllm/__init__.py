"""FlashNorm in vLLM: a `vllm.general_plugins` entry point (pyproject.toml) that registers model
classes whose pre-norms are residual adds and whose projections compute rstd(x) * (x W*^T) with
the gain folded into W* (docs/vllm.md).

Opt-in, nothing changes otherwise:
  * FLASHNORM_VLLM=1 in the environment: the stock architecture names (LlamaForCausalLM,
    MistralForCausalLM, Qwen2ForCausalLM, Qwen3ForCausalLM, Gemma3ForCausalLM) run the FlashNorm
    classes;
  * or per model, whatever the environment: --hf-overrides '{"architectures":
    ["FlashNormLlamaForCausalLM"]}' (the stock name prefixed with FlashNorm).
FLASHNORM_VLLM_DROP_QK_RSTD=1 leaves the q and k columns that QK-norm renormalizes unscaled
(exact up to the eps bound of docs/design.md; default: every column scaled, exact).
"""
import logging
import os

logger = logging.getLogger("vllm.flashnorm")  # under vLLM's logger: its handler and format

# the stock vLLM architecture names with a FlashNorm class (flashnorm.vllm.models)
ARCHITECTURES = ("LlamaForCausalLM", "MistralForCausalLM", "Qwen2ForCausalLM", "Qwen3ForCausalLM",
                 "Gemma3ForCausalLM")


def opted_in() -> bool:
    """Whether FLASHNORM_VLLM asks for the stock names to be replaced ("1"; unset, "" or "0":
    no). Any other value is refused with a warning naming it, and counts as no."""
    v = os.environ.get("FLASHNORM_VLLM", "")
    if v not in ("", "0", "1"):
        logger.warning("flashnorm.vllm: FLASHNORM_VLLM=%r ignored: expected 1 or 0", v)
    return v == "1"


def register() -> None:
    """The entry point: registers FlashNorm<arch> for every architecture in ARCHITECTURES (lazily:
    nothing is imported until vLLM builds such a model), and <arch> itself when opted_in().
    Idempotent; never raises into vLLM (a failure is logged and leaves vLLM as it was)."""
    try:
        from vllm import ModelRegistry

        replace = opted_in()
        for arch in ARCHITECTURES:
            target = f"flashnorm.vllm.models:FlashNorm{arch}"
            ModelRegistry.register_model(f"FlashNorm{arch}", target)
            if replace:
                ModelRegistry.register_model(arch, target)
    except Exception as e:  # noqa: BLE001 - a plugin must not break vLLM
        logger.warning("flashnorm.vllm: not registered: %s", e)
