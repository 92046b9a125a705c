// CUDA kernels of the flashnorm ops (schemas: registration.cpp): the Hopper kernels of
// flashnorm/kernels/cuda/{rms_norm,linear}.h behind the dispatcher, on PyTorch's current stream
// of x's device. bfloat16 and float16 only (the kernels' types); the kernels' own validation
// (K % 8 == 0, 16-byte aligned rows) is reported as a RuntimeError naming the field.
// flashnorm_linear runs LinearImpl::kAuto with the decode / prefill configurations the context
// holds for the shape: a heuristic unless tune_linear tuned it (tuning captures CUDA graphs of its
// own, so it is refused during a caller's capture and runs only when asked: flashnorm.hf.tune_).
// One LinearContext per device and host thread (its contract); its buffers grow on first use of a
// shape, so warm up eagerly before capturing a CUDA graph.
#define USE_CUDA 1
#include <torch/csrc/inductor/aoti_torch/c/shim.h>
#include <torch/csrc/stable/accelerator.h>
#include <torch/csrc/stable/library.h>
#include <torch/csrc/stable/ops.h>

#include <map>
#include <memory>
#include <optional>

#include "flashnorm/kernels/cuda/device.h"
#include "flashnorm/kernels/cuda/linear.h"
#include "flashnorm/kernels/cuda/rms_norm.h"
#include "linear_calls.h"
#include "tensor_checks.h"

namespace flashnorm::torch_ops {
namespace {

namespace stable = torch::stable;
namespace kc = flashnorm::kernels::cuda;

kc::DType kernel_dtype(const Tensor& x, std::string_view op) {
  const ScalarType t = x.scalar_type();
  require(t == ScalarType::BFloat16 || t == ScalarType::Half, op,
          "the CUDA kernels take bfloat16 or float16, got {}", dtype_name(t));
  return t == ScalarType::BFloat16 ? kc::DType::kBF16 : kc::DType::kFP16;
}

cudaStream_t current_stream(const Tensor& x) {
  void* s = nullptr;
  STABLE_TORCH_ERROR_CODE_CHECK(aoti_torch_get_current_cuda_stream(x.get_device_index(), &s));
  return static_cast<cudaStream_t>(s);
}

void check(const kc::Status& s, std::string_view op) { require(s.ok(), op, "{}", s.message); }

kc::LinearContext& context(int32_t device) {
  thread_local std::map<int32_t, std::unique_ptr<kc::LinearContext>> contexts;
  auto& c = contexts[device];
  if (!c) c = std::make_unique<kc::LinearContext>();
  return *c;
}

Tensor rstd_cuda(Tensor x, double eps) {
  const int64_t K = check_activation(x, "rstd");
  const kc::DType dt = kernel_dtype(x, "rstd");
  stable::accelerator::DeviceGuard guard(x.get_device_index());
  Tensor xc = stable::contiguous(x);
  const int64_t M = xc.numel() / K;
  Tensor r = stable::new_empty(xc, {M}, ScalarType::Float);
  if (M > 0) {
    check(kc::row_rstd(dt, M, K, xc.const_data_ptr(), K, float(eps), r.mutable_data_ptr<float>(),
                       current_stream(x)),
          "rstd");
  }
  return stable::reshape(r, leading_dims(x));
}

Tensor rms_norm_cuda(Tensor x, std::optional<Tensor> gain, double eps, bool gain_one_plus) {
  const int64_t K = check_activation(x, "rms_norm");
  if (gain) check_vector(*gain, x, K, "gain", "rms_norm");
  kc::RmsNormArgs a;
  a.dtype = kernel_dtype(x, "rms_norm");
  stable::accelerator::DeviceGuard guard(x.get_device_index());
  Tensor xc = stable::contiguous(x);
  std::optional<Tensor> gc;
  if (gain) gc = stable::contiguous(*gain);
  Tensor y = stable::empty_like(xc);
  a.M = xc.numel() / K;
  a.K = K;
  a.x = xc.const_data_ptr();
  a.ldx = K;
  a.gain = gc ? gc->const_data_ptr() : nullptr;
  a.gain_one_plus = gain_one_plus;
  a.y = y.mutable_data_ptr();
  a.ldy = K;
  a.eps = float(eps);
  if (a.M > 0) check(kc::rms_norm(a, current_stream(x)), "rms_norm");
  return y;
}

// LinearArgs for y = flashnorm_linear(x, w, ...) into a new y; the tensors that own the pointers
// (contiguous copies where needed, y) are kept in `keep`.
kc::LinearArgs linear_args(const Tensor& x, const Tensor& w, double eps,
                           const std::optional<Tensor>& scale_mask,
                           const std::optional<Tensor>& bias, std::vector<Tensor>& keep) {
  const int64_t N = check_linear(x, w, scale_mask, bias);
  const int64_t K = x.size(-1);
  kc::LinearArgs a;
  a.dtype = kernel_dtype(x, "flashnorm_linear");
  keep.push_back(stable::contiguous(x));
  keep.push_back(stable::contiguous(w));
  keep.push_back(stable::new_empty(keep[0], with_last(x, N)));
  a.M = keep[0].numel() / K;
  a.N = N;
  a.K = K;
  a.x = keep[0].const_data_ptr();
  a.ldx = K;
  a.w = keep[1].const_data_ptr();
  a.ldw = K;
  a.y = keep[2].mutable_data_ptr();
  a.ldy = N;
  a.eps = float(eps);
  if (scale_mask) {  // bool: one byte per column, 0 or 1
    keep.push_back(stable::contiguous(*scale_mask));
    a.scale_mask = static_cast<const uint8_t*>(keep.back().const_data_ptr());
  }
  if (bias) {
    keep.push_back(stable::contiguous(*bias));
    a.bias = keep.back().const_data_ptr();
  }
  return a;
}

// The kernels write rows at a stride of a multiple of 8 elements (16 bytes): for an N that is not
// (e.g. a 300-token vocabulary's LM head) a padded [M, ceil8(N)] buffer like `y` is returned and
// `a` points at it (the caller copies its first N columns out); nullopt otherwise.
std::optional<Tensor> pad_output(kc::LinearArgs& a, const Tensor& y) {
  if (a.N % 8 == 0) return std::nullopt;
  const int64_t ld = (a.N + 7) / 8 * 8;
  Tensor padded = stable::new_empty(y, {a.M, ld});
  a.y = padded.mutable_data_ptr();
  a.ldy = ld;
  return padded;
}

Tensor flashnorm_linear_cuda(Tensor x, Tensor w, double eps, std::optional<Tensor> scale_mask,
                             std::optional<Tensor> bias) {
  linear_call_count().fetch_add(1, std::memory_order_relaxed);
  stable::accelerator::DeviceGuard guard(x.get_device_index());
  std::vector<Tensor> keep;
  kc::LinearArgs a = linear_args(x, w, eps, scale_mask, bias, keep);
  if (a.M == 0) return keep[2];
  std::optional<Tensor> padded = pad_output(a, keep[2]);
  check(context(x.get_device_index()).run(a, kc::LinearImpl::kAuto, current_stream(x)),
        "flashnorm_linear");
  if (padded) {
    Tensor out = stable::reshape(keep[2], {a.M, a.N});
    stable::copy_(out, stable::narrow(*padded, 1, 0, a.N));
  }
  return keep[2];
}

// Tunes the configurations flashnorm_linear uses for this shape (LinearContext::tune_shape: the
// GEMM, the decode kernel for M <= 64, the prefill kernel) on x's device; x's values are only read.
// Synchronizes the stream. Refused during CUDA graph capture.
void tune_linear_cuda(Tensor x, Tensor w, double eps, std::optional<Tensor> scale_mask,
                      std::optional<Tensor> bias) {
  stable::accelerator::DeviceGuard guard(x.get_device_index());
  std::vector<Tensor> keep;
  kc::LinearArgs a = linear_args(x, w, eps, scale_mask, bias, keep);
  const std::optional<Tensor> padded = pad_output(a, keep[2]);  // tuned with the stride run uses
  cudaStream_t stream = current_stream(x);
  cudaStreamCaptureStatus capture = cudaStreamCaptureStatusNone;
  require(cudaStreamIsCapturing(stream, &capture) == cudaSuccess &&
              capture == cudaStreamCaptureStatusNone,
          "tune_linear", "refused during CUDA graph capture (tune eagerly first)");
  if (a.M == 0) return;
  // Tuning times CUDA graphs that it captures on its stream, and the legacy default stream (torch's
  // current stream unless the caller chose another) cannot be captured: there it runs on a private
  // stream, after the legacy stream's pending work (x and w) is complete.
  std::optional<kc::Stream> own;
  if (stream == nullptr || stream == cudaStreamLegacy) {
    require(cudaStreamSynchronize(stream) == cudaSuccess, "tune_linear",
            "cudaStreamSynchronize failed");
    own.emplace();
    stream = own->get();
  }
  kc::LinearContext::ShapeTuning out;
  check(context(x.get_device_index()).tune_shape(&a, 1, stream, &out), "tune_linear");
}

}  // namespace

STABLE_TORCH_LIBRARY_IMPL(flashnorm, CUDA, m) {
  m.impl("rstd", TORCH_BOX(&rstd_cuda));
  m.impl("rms_norm", TORCH_BOX(&rms_norm_cuda));
  m.impl("flashnorm_linear", TORCH_BOX(&flashnorm_linear_cuda));
  m.impl("tune_linear", TORCH_BOX(&tune_linear_cuda));
}

}  // namespace flashnorm::torch_ops
