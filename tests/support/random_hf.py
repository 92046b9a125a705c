"""Random weights for transformers models built by the tests and benchmarks (the reference side of
the engine, fold, PyTorch-op and GPU comparisons): matrices N(0, 1/K) (embeddings N(0, 1)), biases
N(0, 0.25), RMSNorm gains randomized so that folding them matters (Gemma 3 stores w applied as
1 + w: w in [-0.5, 0.5); others: [0.5, 1.5) with 5% negated). Every draw comes from one generator,
in parameter order, so a seed gives the same model everywhere."""
import math

import torch
from transformers import Gemma3ForCausalLM


def randomize_(model, seed):
    """Overwrites every parameter of `model` in place (seeded); returns the model. Raises
    AssertionError for a parameter that is neither a matrix, a bias nor a norm gain."""
    g = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for name, p in model.named_parameters():
            if p.dim() == 2:
                std = 1.0 if "embed" in name else 1.0 / math.sqrt(p.shape[1])
                p.copy_(torch.randn(p.shape, generator=g) * std)
            elif name.endswith(".bias"):
                p.copy_(torch.randn(p.shape, generator=g) * 0.5)
            elif "norm" in name:
                if isinstance(model, Gemma3ForCausalLM):  # stored w, applied as 1 + w
                    p.copy_(torch.rand(p.shape, generator=g) - 0.5)
                else:
                    v = 0.5 + torch.rand(p.shape, generator=g)
                    v[torch.rand(p.shape, generator=g) < 0.05] *= -1
                    p.copy_(v)
            else:
                raise AssertionError(f"unexpected parameter {name} {tuple(p.shape)}")
    return model
