"""FlashNorm for PyTorch: RMSNorm weight folding and deferred normalization as `torch.ops.flashnorm`
custom ops (CPU; CUDA where the extension was built with nvcc) and `flashnorm.hf`, which folds and
accelerates a Hugging Face `transformers` model in place. docs/python.md describes the package.

    import flashnorm.hf
    model = AutoModelForCausalLM.from_pretrained(path)
    flashnorm.hf.fold_(model); flashnorm.hf.apply_(model)
    model.generate(...)
"""
import os

import torch

# The extension (src/torch, built by the project's CMake through scikit-build-core) registers the
# ops on PyTorch's stable ABI when loaded; it is a plain shared library, not a Python module.
torch.ops.load_library(os.path.join(os.path.dirname(__file__), "_C.so"))

# importing ops registers the fake implementations
from .ops import (flashnorm_linear, fold_gain, fp8_linear, fp8_quantize, rms_norm,  # noqa: E402
                  rstd, tune_linear)

__all__ = ["flashnorm_linear", "fold_gain", "fp8_linear", "fp8_quantize", "rms_norm", "rstd",
           "tune_linear"]
