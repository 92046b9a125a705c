// The schemas of the flashnorm PyTorch ops (namespace `flashnorm`). Kernels: cpu_ops.cpp (CPU),
// cuda_ops.cpp (CUDA, where built), fold_op.cpp, hf_plan.cpp; fake (meta) implementations for
// torch.compile: python/flashnorm/ops.py. Semantics (eps inside the square root, as HF
// Llama/Gemma/Qwen; fp32 arithmetic, one rounding of each output):
//   rstd(x, eps)                      -> float32 [...]: 1 / sqrt(mean(x^2, -1) + eps)
//   rms_norm(x, gain, eps, one_plus)  -> x.dtype [..., K]: x * rstd(x) * G,
//                                        G = gain, 1 + gain (one_plus, Gemma) or 1 (no gain)
//   flashnorm_linear(x, w, eps, scale_mask, bias) -> x.dtype [..., N]:
//       rstd(x) * (x w^T) (+ bias), the rstd scale only on columns n where scale_mask[n]
//       (QK-norm: cancelled columns stay raw); w is the folded weight [N, K]
//   tune_linear(x, w, eps, scale_mask, bias) -> (): CUDA only: tunes flashnorm_linear's kernels
//                                        for this shape (cuda_ops.cpp); never during capture
//   fold_gain(w, gain, one_plus)      -> w.dtype [N, K]: w * G per column, in fp64, one rounding
//                                        (flashnorm/fold/fold_gain.h, what `flashnorm fold` does)
//   hf_plan(hf_class, num_layers, tensors) -> str: the architecture description and the
//                                        cancellation audit as JSON (hf_plan.cpp)
//   linear_calls()                    -> int: flashnorm_linear calls executed by this process
//                                        (linear_calls.h)
//   fp8_quantize(x, gain, eps, rstd_on_scale, one_plus) -> (float8_e4m3fn [..., K], float32 [...]):
//       v = x * G, s = max|v| / 448 per row, payload fp8(v / s) (ties to even, saturated), scale
//       s * rstd(x) (rstd_on_scale: FlashNorm's one pass over the raw x) or s (x normalized
//       already: the standard pipeline's quantization step) (fp8_ops.cpp)
//   fp8_linear(x, x_scale, w, w_scale, bias) -> float32 [..., N]: (x w^T) * x_scale[row] *
//       w_scale[n] (+ bias), x [..., K] and w [N, K] float8_e4m3fn, the scales float32
#include <torch/csrc/stable/library.h>

STABLE_TORCH_LIBRARY(flashnorm, m) {
  m.def("rstd(Tensor x, float eps) -> Tensor");
  m.def("rms_norm(Tensor x, Tensor? gain, float eps, bool gain_one_plus=False) -> Tensor");
  m.def(
      "flashnorm_linear(Tensor x, Tensor w, float eps, Tensor? scale_mask=None, "
      "Tensor? bias=None) -> Tensor");
  m.def(
      "tune_linear(Tensor x, Tensor w, float eps, Tensor? scale_mask=None, Tensor? bias=None) -> "
      "()");
  m.def("fold_gain(Tensor w, Tensor gain, bool gain_one_plus) -> Tensor");
  m.def("hf_plan(str hf_class, int num_layers, str[] tensors) -> str");
  m.def("linear_calls() -> int");
  m.def(
      "fp8_quantize(Tensor x, Tensor? gain, float eps, bool rstd_on_scale=True, "
      "bool gain_one_plus=False) -> (Tensor, Tensor)");
  m.def(
      "fp8_linear(Tensor x, Tensor x_scale, Tensor w, Tensor w_scale, Tensor? bias=None) -> "
      "Tensor");
}
