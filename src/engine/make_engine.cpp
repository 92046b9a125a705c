// The engine factory (engine/make_engine.h): the only place that knows whether this build has the
// CUDA engine.
#include "flashnorm/engine/make_engine.h"

#include "flashnorm/engine/cpu_engine.h"
#include "flashnorm/error.h"
#if defined(FLASHNORM_HAVE_CUDA)
#include <cuda_runtime.h>

#include "flashnorm/engine/cuda_engine.h"
#endif

namespace flashnorm {

bool cuda_available(std::string* why) {
#if defined(FLASHNORM_HAVE_CUDA)
  return cuda_device_available(why);
#else
  if (why) *why = "flashnorm was built without CUDA";
  return false;
#endif
}

Device resolve_device(Device d) {
  if (d == Device::kCpu) return d;
  std::string why;
  const bool gpu = cuda_available(&why);
  if (d == Device::kAuto) return gpu ? Device::kCuda : Device::kCpu;
#if defined(FLASHNORM_HAVE_CUDA)
  if (!gpu) throw Error("--device cuda: no usable NVIDIA GPU (" + why + ")");
#else
  if (!gpu) throw Error("--device cuda: " + why);
#endif
  return d;
}

std::unique_ptr<Engine> make_engine(Model model, NormMode mode, const EngineOptions& o) {
#if defined(FLASHNORM_HAVE_CUDA)
  if (resolve_device(o.device) == Device::kCuda) {
    CudaEngineOptions c;
    c.capacity.max_context = o.max_context;
    c.dtype = o.dtype;
    c.flashnorm = {o.cancel, o.deferred, o.tied_head};
    c.launch.decode = o.decode;
    return std::make_unique<CudaEngine>(model, mode, c);
  }
#else
  resolve_device(o.device);  // refuses kCuda
#endif
  return std::make_unique<CpuEngine>(std::move(model), mode, o.max_context, o.cancel,
                                     o.track_cancellation);
}

std::string gpu_name() {
#if defined(FLASHNORM_HAVE_CUDA)
  cudaDeviceProp prop{};
  int dev = 0;
  if (cudaGetDevice(&dev) == cudaSuccess && cudaGetDeviceProperties(&prop, dev) == cudaSuccess) {
    return prop.name;
  }
#endif
  return "none";
}

}  // namespace flashnorm
