// flashnorm::fold_gain on the CPU: a norm's gain folded into a weight it feeds with the project's
// one fold primitive (flashnorm/fold/fold_gain.h: fp64 product, one rounding to w's dtype, no
// double rounding for bfloat16/float16), so that flashnorm.hf.fold_ rounds exactly as
// `flashnorm fold` does. Schema: registration.cpp.
#include <torch/csrc/stable/library.h>
#include <torch/csrc/stable/ops.h>

#include <span>

#include "flashnorm/fold/fold_gain.h"
#include "tensor_checks.h"

namespace flashnorm::torch_ops {
namespace {

namespace stable = torch::stable;

Tensor fold_gain_cpu(Tensor w, Tensor gain, bool gain_one_plus) {
  constexpr std::string_view op = "fold_gain";
  const ScalarType t = w.scalar_type();
  require(t == ScalarType::Float || t == ScalarType::BFloat16 || t == ScalarType::Half, op,
          "w must be float32, bfloat16 or float16, got {}", dtype_name(t));
  require(w.dim() == 2 && w.numel() > 0, op, "w must be a non-empty [N, K] matrix, got {}",
          shape_str(w));
  const int64_t K = w.size(1);
  require(gain.dim() == 1 && gain.size(0) == K, op, "gain must have shape [{}], got {}", K,
          shape_str(gain));
  const ScalarType gt = gain.scalar_type();
  require(gt == ScalarType::Float || gt == ScalarType::BFloat16 || gt == ScalarType::Half, op,
          "gain must be float32, bfloat16 or float16, got {}", dtype_name(gt));
  // every bf16/fp16 value is exact in fp32, so the fp32 copies carry the stored values
  Tensor wf = stable::to(stable::contiguous(w), ScalarType::Float);
  Tensor gf = stable::to(stable::contiguous(gain), ScalarType::Float);
  std::span<const float> ws(wf.const_data_ptr<float>(), size_t(wf.numel()));
  const std::vector<double> g =
      gain_multipliers({gf.const_data_ptr<float>(), size_t(K)},
                       gain_one_plus ? GainConvention::OnePlus : GainConvention::Plain);
  Tensor out = stable::new_empty(wf, {w.size(0), K}, t);
  if (t == ScalarType::Float) {
    fold_gain(ws, size_t(K), g, FoldTarget::kF32,
              std::span<float>(out.mutable_data_ptr<float>(), ws.size()));
  } else {
    fold_gain(ws, size_t(K), g, t == ScalarType::BFloat16 ? FoldTarget::kBF16 : FoldTarget::kF16,
              std::span<uint16_t>(static_cast<uint16_t*>(out.mutable_data_ptr()), ws.size()));
  }
  return out;
}

}  // namespace

STABLE_TORCH_LIBRARY_IMPL(flashnorm, CPU, m) { m.impl("fold_gain", TORCH_BOX(&fold_gain_cpu)); }

}  // namespace flashnorm::torch_ops
