// The engine factory (engine/make_engine.h): the CPU engine here, the CUDA engine through the CUDA
// module (engine/cuda_module.h), which is loaded only when the GPU is asked for.
#include "flashnorm/engine/make_engine.h"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <array>

#include "flashnorm/engine/cpu_engine.h"
#include "flashnorm/engine/cuda_module.h"
#include "flashnorm/error.h"

namespace flashnorm {

namespace {
// The enumerator whose name `s` is (`names` in enumerator order); Error "WHAT 'S' is not one of
// ..." otherwise.
template <class E, size_t N>
E parse_named(std::string_view s, const char* what, const std::array<std::string_view, N>& names) {
  for (size_t i = 0; i < N; ++i) {
    if (s == names[i]) return static_cast<E>(i);
  }
  throw Error(fmt::format("{} '{}' is not one of {}", what, s, fmt::join(names, ", ")));
}
}  // namespace

Device parse_device(std::string_view s) {
  return parse_named<Device, 3>(s, "device", {"auto", "cpu", "cuda"});
}

Weights parse_weights(std::string_view s) {
  return parse_named<Weights, 3>(s, "weights", {"auto", "f32", "native"});
}

WeightStorage weight_storage(Weights w, Device d, const std::string& path) {
  if (w == Weights::kNative) return WeightStorage::kNative;
  if (w == Weights::kF32 || resolve_device(d) == Device::kCuda) return WeightStorage::kF32;
  return cpu_default_storage(path);
}

std::string describe_engine(const Engine& e) {
  return fmt::format("{}, {}", e.device(), e.describe());
}

bool cuda_available(std::string* why) {
#if !defined(FLASHNORM_HAVE_CUDA_MODULE)
  if (why) *why = "flashnorm was built without CUDA";
  return false;
#else
  // No driver: no GPU, and no reason to load the CUDA libraries to learn it.
  if (!cuda_driver_present(why)) return false;
  const CudaModule* m = nullptr;
  try {
    m = &cuda_module();
  } catch (const Error& e) {
    if (why) *why = e.what();
    return false;
  }
  return m->device_available(why);
#endif
}

Device resolve_device(Device d) {
  if (d == Device::kCpu) return d;
  if (d == Device::kAuto) return cuda_available() ? Device::kCuda : Device::kCpu;
#if !defined(FLASHNORM_HAVE_CUDA_MODULE)
  throw Error("--device cuda: flashnorm was built without CUDA");
#else
  // --device cuda: the module is needed whatever the driver; its load error names what is missing
  const CudaModule* m = nullptr;
  try {
    m = &cuda_module();
  } catch (const Error& e) {
    throw Error(std::string("--device cuda: ") + e.what());
  }
  std::string why;
  if (!m->device_available(&why)) throw Error("--device cuda: no usable NVIDIA GPU (" + why + ")");
  return d;
#endif
}

std::unique_ptr<Engine> make_engine(Model model, NormMode mode, const EngineOptions& o) {
  if (resolve_device(o.device) == Device::kCuda) {
    if (model.cfg.headless || !model.cfg.causal || model.cfg.gguf_pooling >= 0) {
      throw Error(fmt::format("{}: the CUDA engine does not compute embeddings yet (--device cpu)",
                              model.source.string()));
    }
    if (model.cfg.fp8) {
      throw Error(fmt::format(
          "{}/config.json: quantization_config (FP8): the CUDA engine does not run FP8 models yet "
          "(--device cpu)",
          model.source.string()));
    }
    return cuda_module().make_engine(model, mode, o);
  }
  return std::make_unique<CpuEngine>(std::move(model), mode,
                                     CpuEngineOptions{.max_context = o.max_context,
                                                      .cancel = o.cancel,
                                                      .track_cancellation = o.track_cancellation});
}

void require_lm_head(const Model& model) {
  if (model.cfg.headless || !model.cfg.causal || model.cfg.gguf_pooling >= 0) {
    throw Error(fmt::format(
        "{}: {}: the model computes embeddings only (flashnorm embed)", model.source.string(),
        model.cfg.headless ? "config.json architectures names a base model without an LM head"
        : model.cfg.gguf_pooling >= 0 ? fmt::format("{}.pooling_type is set", model.cfg.arch)
                                      : "the model's config asks for bidirectional attention"));
  }
}

std::string gpu_name() {
  const CudaModule* m = cuda_module_if_loaded();
  return m ? m->gpu_name() : "none";
}

}  // namespace flashnorm
