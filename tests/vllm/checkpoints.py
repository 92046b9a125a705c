"""Random tiny Hugging Face checkpoints of every architecture flashnorm.vllm supports, written with
transformers (no hub), every RMSNorm gain randomized (tests/support/random_hf.py), for the vLLM
and tensor-parallel tests. Shapes fit vLLM's CPU attention (head_dim 32) and 2-way tensor
parallelism (4 query heads, 2 key/value heads). Llama, Mistral and Qwen2 have an untied LM head
(its final norm is deferred), Qwen3 and Gemma 3 a tied one (their final norm is kept), as the
real checkpoints of these families mostly do; Qwen2 has q/k/v biases, Qwen3 and Gemma 3 QK-norm,
Gemma 3 sliding-window layers and post-norms. The layers' output projections (o_proj, down_proj;
Gemma 3: its post-norm gains) are scaled up so that the residual stream is not dominated by the
input token's embedding, and a tied head's final gain down: otherwise such a model repeats one
token with probability ~1, a weak test of greedy equality and logprobs."""
import sys
from pathlib import Path

import torch
import transformers

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "support"))
from random_hf import randomize_  # noqa: E402  (the shared random weights)

VOCAB = 320
SMALL = dict(vocab_size=VOCAB, hidden_size=128, intermediate_size=192, num_hidden_layers=2,
             num_attention_heads=4, num_key_value_heads=2, head_dim=32,
             max_position_embeddings=256, rms_norm_eps=1e-5, bos_token_id=1, eos_token_id=2,
             pad_token_id=0)


def _rope(theta):
    return {"rope_parameters": {"rope_type": "default", "rope_theta": theta}}


# name -> (transformers class, config class, config keywords)
ARCHS = {
    "llama": ("LlamaForCausalLM", "LlamaConfig",
              {**_rope(50000.0), "tie_word_embeddings": False}),
    "mistral": ("MistralForCausalLM", "MistralConfig",
                {**_rope(10000.0), "tie_word_embeddings": False, "sliding_window": None}),
    "qwen2": ("Qwen2ForCausalLM", "Qwen2Config",
              {**_rope(30000.0), "tie_word_embeddings": False}),
    "qwen3": ("Qwen3ForCausalLM", "Qwen3Config",
              {**_rope(20000.0), "tie_word_embeddings": True}),
    "gemma3": ("Gemma3ForCausalLM", "Gemma3TextConfig",
               {"rms_norm_eps": 1e-6, "sliding_window": 4, "query_pre_attn_scalar": 24,
                "layer_types": ["sliding_attention", "full_attention"],
                "tie_word_embeddings": True,
                "rope_parameters": {
                    "full_attention": {"rope_type": "default", "rope_theta": 1e6},
                    "sliding_attention": {"rope_type": "default", "rope_theta": 1e4}}}),
}


def build(name: str, seed: int):
    """The random model `name` (a key of ARCHS), fp32, in eval mode."""
    cls, cfg_cls, kw = ARCHS[name]
    cfg = getattr(transformers, cfg_cls)(**{**SMALL, **kw})
    torch.manual_seed(seed)
    model = randomize_(getattr(transformers, cls)(cfg).eval(), seed + 1)
    one_plus = name == "gemma3"  # Gemma stores w, applied as 1 + w

    def scale_gain(p, factor):
        p.copy_((1 + p) * factor - 1 if one_plus else p * factor)
    with torch.no_grad():
        for pname, p in model.named_parameters():
            if pname.endswith(("o_proj.weight", "down_proj.weight")):
                p.mul_(4.0)
            elif pname.endswith(("post_attention_layernorm.weight",
                                 "post_feedforward_layernorm.weight")) and one_plus:
                scale_gain(p, 24.0)  # Gemma's post-norms: the layers' share of the residual
            elif pname == "model.norm.weight" and cfg.tie_word_embeddings:
                scale_gain(p, 0.1)  # a softer tied head: logits are h . embedding
    return model


def write(name: str, seed: int, out: Path):
    """Writes the random model `name` to `out` (safetensors + config.json); returns the model."""
    model = build(name, seed)
    model.save_pretrained(out)
    return model
