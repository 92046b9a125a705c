// validate_linear (linear.h): the argument checks every flashnorm_linear entry point runs first.
#include <cuda_runtime.h>
#include <fmt/format.h>

#include <cstdint>
#include <utility>

#include "check.h"
#include "flashnorm/kernels/cuda/linear.h"
#include "launch.h"

namespace flashnorm::kernels::cuda {

using detail::aligned16;
using detail::invalid;

Status validate_linear(const LinearArgs& a, LinearImpl impl) {
  if (a.dtype != DType::kBF16 && a.dtype != DType::kFP16)
    return invalid("flashnorm_linear: dtype must be bf16 or fp16");
  if (a.M < 1 || a.N < 1 || a.K < 1)
    return invalid(
        fmt::format("flashnorm_linear: M={}, N={}, K={} must all be >= 1", a.M, a.N, a.K));
  if (a.M > INT32_MAX || a.N > INT32_MAX || a.K > INT32_MAX)
    return invalid("flashnorm_linear: M, N, K must fit in int32");
  if (a.K % 8 != 0)
    return invalid(fmt::format("flashnorm_linear: K={} must be a multiple of 8", a.K));
  if (!a.x || !a.w || !a.y) return invalid("flashnorm_linear: x, w and y must be non-null");
  if (a.ldx < a.K || a.ldx % 8)
    return invalid(
        fmt::format("flashnorm_linear: ldx={} must be >= K={} and a multiple of 8", a.ldx, a.K));
  if (a.ldw < a.K || a.ldw % 8)
    return invalid(
        fmt::format("flashnorm_linear: ldw={} must be >= K={} and a multiple of 8", a.ldw, a.K));
  if (a.ldy < a.N || a.ldy % 8)
    return invalid(
        fmt::format("flashnorm_linear: ldy={} must be >= N={} and a multiple of 8", a.ldy, a.N));
  if (!aligned16(a.x) || !aligned16(a.w) || !aligned16(a.y) || !aligned16(a.bias))
    return invalid("flashnorm_linear: x, w, y and bias must be 16-byte aligned");
  if (!(a.eps >= 0.f)) return invalid("flashnorm_linear: eps must be >= 0");
  if ((a.accumulate || a.x_glu) && impl != LinearImpl::kDecode)
    return {Code::kUnsupported,
            "flashnorm_linear: accumulate and x_glu exist in the decode implementation only"};
  if (a.x_glu && (a.M > 16 || a.ldx < 2 * a.K))
    return invalid(fmt::format(
        "flashnorm_linear: x_glu needs M <= 16 and ldx >= 2K (fp32 gate|up rows), got M={} ldx={}",
        a.M, a.ldx));
  if (a.accumulate && !a.y_f32) return invalid("flashnorm_linear: accumulate needs y_f32");
  if (a.y_rounded && (!a.accumulate || !aligned16(a.y_rounded)))
    return invalid("flashnorm_linear: y_rounded needs accumulate and 16-byte alignment");
  if (impl == LinearImpl::kDecode && a.M > detail::kMaxDecodeM)
    return {Code::kUnsupported,
            fmt::format("flashnorm_linear: decode implementation needs M <= {}, got M={}",
                        detail::kMaxDecodeM, a.M)};
  for (auto [p, name] : {std::pair{(const void*)a.x, "x"}, {a.w, "w"}, {(const void*)a.y, "y"}}) {
    cudaPointerAttributes attr{};
    if (cudaPointerGetAttributes(&attr, p) != cudaSuccess ||
        (attr.type != cudaMemoryTypeDevice && attr.type != cudaMemoryTypeManaged)) {
      cudaGetLastError();
      return invalid(fmt::format("flashnorm_linear: {} is not a device pointer", name));
    }
  }
  return {};
}

}  // namespace flashnorm::kernels::cuda
