// The RMSNorm and row-rstd entry points (rms_norm.h): argument checks, then the launchers of
// rms_norm.cu and row_scale.cu.
#include "flashnorm/kernels/cuda/rms_norm.h"

#include <fmt/format.h>

#include <cstdint>

#include "check.h"
#include "launch.h"

namespace flashnorm::kernels::cuda {

Status rms_norm(const RmsNormArgs& a, cudaStream_t stream) {
  if (a.dtype != DType::kBF16 && a.dtype != DType::kFP16)
    return detail::invalid("rms_norm: dtype must be bf16 or fp16");
  if (a.M < 1 || a.K < 1 || a.M > INT32_MAX)
    return detail::invalid(fmt::format("rms_norm: M={}, K={} must be >= 1", a.M, a.K));
  if (a.K % 8 || a.K > 32768)
    return detail::invalid(fmt::format("rms_norm: K={} must be a multiple of 8 and <= 32768", a.K));
  if (!a.x || !a.y) return detail::invalid("rms_norm: x and y must be non-null");
  if (a.ldx < a.K || a.ldx % 8 || a.ldy < a.K || a.ldy % 8)
    return detail::invalid(fmt::format(
        "rms_norm: ldx={}, ldy={} must be >= K={} and multiples of 8", a.ldx, a.ldy, a.K));
  if (a.residual &&
      (!a.residual_out || a.ld_res < a.K || a.ld_res % 8 || a.ld_res_out < a.K || a.ld_res_out % 8))
    return detail::invalid(
        "rms_norm: residual needs residual_out and strides >= K, multiples of 8");
  for (const void* p : {a.x, static_cast<const void*>(a.y), a.gain, a.residual,
                        static_cast<const void*>(a.residual_out)})
    if (!detail::aligned16(p))
      return detail::invalid(
          "rms_norm: x, y, gain, residual, residual_out must be 16-byte aligned");
  if (!(a.eps >= 0.f)) return detail::invalid("rms_norm: eps must be >= 0");
  return detail::cuda_status(detail::launch_rms_norm(a, stream), "rms_norm launch");
}

Status row_rstd(DType dtype, int64_t M, int64_t K, const void* x, int64_t ldx, float eps,
                float* rstd, cudaStream_t stream) {
  if (M < 1 || K < 1 || K % 8 || ldx < K || ldx % 8 || !x || !rstd || !detail::aligned16(x))
    return detail::invalid(fmt::format("row_rstd: bad arguments M={} K={} ldx={}", M, K, ldx));
  return detail::cuda_status(detail::launch_rstd(dtype, M, K, x, ldx, eps, rstd, stream),
                             "row_rstd launch");
}

}  // namespace flashnorm::kernels::cuda
