// The one place that chooses and makes an inference backend: the CPU fp32 engine or, in a build
// with CUDA and on a machine with a usable GPU, the CUDA engine. Callers (the CLI) drive the result
// through the Engine interface only.
#pragma once

#include <memory>
#include <string>
#include <string_view>

#include "flashnorm/engine/cuda_options.h"
#include "flashnorm/engine/engine.h"
#include "flashnorm/model/model.h"

namespace flashnorm {

// Where a model runs.
enum class Device {
  kAuto,  // the CUDA engine when a usable GPU is present (cuda_available), else the CPU engine
  kCpu,
  kCuda,  // Error when no usable GPU is present or the build has no CUDA
};

// What make_engine needs beyond the model and mode. CUDA-only groups are ignored by the CPU engine,
// CPU-only fields by the CUDA engine.
struct EngineOptions {
  Device device = Device::kAuto;
  int max_context = 0;  // KV cache positions (0: the backend's default)
  // CUDA only: sequences open at once for forward_batch (CudaCapacity::max_sequences; 0: the
  // engine does not batch). The CPU engine opens any number.
  int max_sequences = 0;
  bool cancel = true;                // FlashNorm mode: drop the rstd that renormalization cancels
  bool track_cancellation = false;   // CPU only: CpuEngine's track_cancellation
  HalfType dtype = HalfType::kBF16;  // CUDA only
  Deferred deferred = Deferred::kFused;        // CUDA, FlashNorm mode
  TiedHead tied_head = TiedHead::kKeepGain;    // CUDA, FlashNorm mode
  PrefillNorm prefill = PrefillNorm::kInAdd;   // CUDA, FlashNorm mode
  DecodeLaunch decode = DecodeLaunch::kGraph;  // CUDA
};

// True when the build has CUDA and a CUDA device with compute capability 9.0 is present (the
// kernels are built for sm_90a only); else false with the reason in *why (when given), e.g.
// "flashnorm was built without CUDA". Loads the CUDA module (engine/cuda_module.h) only when an
// NVIDIA driver is present.
bool cuda_available(std::string* why = nullptr);

// The device `d` resolves to on this machine and build: kCpu or kCuda (kAuto by cuda_available).
// Errors: Error for kCuda without a usable GPU ("--device cuda: no usable NVIDIA GPU (...)") or in
// a build without CUDA ("--device cuda: flashnorm was built without CUDA"), and for kCuda when the
// CUDA module cannot be loaded ("--device cuda: cannot load the CUDA module (...)").
Device resolve_device(Device d);

// An engine for `model` in `mode` on resolve_device(o.device). Errors: as resolve_device, and the
// engines' constructors' (engine/cpu_engine.h, engine/cuda_engine.h).
std::unique_ptr<Engine> make_engine(Model model, NormMode mode, const EngineOptions& o);

// Refuses a model that computes hidden states only (ModelConfig::headless, !causal or a GGUF
// pooling_type: an embedding model, engine/embedder.h) where logits are needed (generate, verify,
// bench, a served completion model). Errors: Error naming the model and config.json's field.
void require_lm_head(const Model& model);

// "auto" / "cpu" / "cuda" -> Device. Errors: Error naming the value otherwise.
Device parse_device(std::string_view s);

// The weights a command asks for (`--weights`, serve's `weights=`).
enum class Weights {
  kAuto,    // native on the CPU for a quantized GGUF (cpu_default_storage), fp32 on the GPU
  kF32,     // every matrix dequantized to fp32 at load
  kNative,  // a GGUF file's own blocks
};
// "auto" / "f32" / "native" -> Weights. Errors: Error naming the value otherwise.
Weights parse_weights(std::string_view s);
// How load_model holds the model at `path` for `w` on `d` (resolved with resolve_device only for
// kAuto; the GPU's bf16 weights were measured faster than its native blocks on the small real
// models, docs/quantized.md). Errors: as resolve_device, for kAuto.
WeightStorage weight_storage(Weights w, Device d, const std::string& path);

// "<device>, <Engine::describe()>" (e.g. "cpu, fp32, norm flashnorm"): the line commands print.
std::string describe_engine(const Engine& e);

// The current CUDA device's name, or "none" (no CUDA in this build, no device, or the CUDA module
// not loaded: a CUDA engine or a device check loads it; this never does).
std::string gpu_name();

}  // namespace flashnorm
