// The CUDA backend as a module loaded at run time. The CUDA engine, its kernels, the kernel
// benchmark and the engine's decode benchmark are built into libflashnorm_cuda.so (target
// flashnorm_cuda_module), which the CLI opens with dlopen only when a command asks for the GPU
// (--device cuda, --device auto on a machine with an NVIDIA driver, `flashnorm bench`): the
// executable itself does not link libcudart or libcublasLt, whose loading alone cost ~200 MB of
// resident memory. The module lives next to the executable (the build puts it in the
// CLI's directory; scripts/gpu_stage.sh bundles it with the binary), or where the environment
// variable FLASHNORM_CUDA_MODULE names it.
//
// The module's one exported symbol is the extern "C" factory flashnorm_cuda_module(), which returns
// a table of C++ entry points. The table passes C++ types (std::string, Model, Engine,
// nlohmann::json), so the module must come from the same build as the executable: the table carries
// kCudaModuleAbi and a layout stamp (cuda_module_layout()) that the loader compares. The module
// resolves the rest of the library (Model, Engine, Error, ...) against the executable, which
// exports its symbols (ENABLE_EXPORTS).
#pragma once

#include <cstdint>
#include <memory>
#include <nlohmann/json_fwd.hpp>
#include <string>

#include "flashnorm/engine/engine.h"
#include "flashnorm/engine/make_engine.h"
#include "flashnorm/model/model.h"

namespace flashnorm {
namespace cli {
struct ModelBenchArgs;  // src/cli/model_bench.h
}
namespace bench {
struct KernelBenchOptions;  // bench/kernel_bench/kernel_bench.h
}

// The module's file name, looked up in the directory of the running executable.
inline constexpr const char* kCudaModuleFile = "libflashnorm_cuda.so";
// The name of the extern "C" factory the module exports.
inline constexpr const char* kCudaModuleSymbol = "flashnorm_cuda_module";
// Bumped whenever CudaModule's members change, or a type passed through them (EngineOptions,
// ModelBenchArgs, KernelBenchOptions, ...) changes its layout.
inline constexpr int kCudaModuleAbi = 4;

// A stamp of the sizes of the types that cross the boundary: a module from another build (other
// headers, other compiler flags) is refused instead of misreading them.
constexpr uint64_t cuda_module_layout() {
  return (uint64_t(sizeof(Model)) << 48) ^ (uint64_t(sizeof(EngineOptions)) << 32) ^
         (uint64_t(sizeof(std::string)) << 16) ^ uint64_t(sizeof(std::unique_ptr<Engine>));
}

// The module's entry points. Each may throw flashnorm::Error.
struct CudaModule {
  int abi = kCudaModuleAbi;                // kCudaModuleAbi of the module's build
  uint64_t layout = cuda_module_layout();  // cuda_module_layout() of the module's build
  // True when a CUDA device with compute capability 9.0 is usable; else false and the reason in
  // *why (when given).
  bool (*device_available)(std::string* why) = nullptr;
  // The current CUDA device's name, or "none".
  std::string (*gpu_name)() = nullptr;
  // A CudaEngine for `model` in `mode` with EngineOptions' CUDA fields (engine/cuda_engine.h).
  std::unique_ptr<Engine> (*make_engine)(const Model& model, NormMode mode,
                                         const EngineOptions& o) = nullptr;
  // `flashnorm bench --model` (src/cli/model_bench.h).
  void (*run_model_bench)(const cli::ModelBenchArgs& a) = nullptr;
  // `flashnorm bench`'s kernel benchmark (bench/kernel_bench/kernel_bench.h).
  nlohmann::json (*run_kernel_bench)(const bench::KernelBenchOptions& o) = nullptr;
};

// The loaded module (dlopen with RTLD_NOW on first use; later calls return the same table).
// Errors: Error "flashnorm was built without CUDA" in a build without nvcc; Error "cannot load the
// CUDA module (DLERROR)" when the file or one of its libraries (libcudart, libcublasLt) is missing
// or a symbol does not resolve, DLERROR naming it; Error when the module is from another build.
const CudaModule& cuda_module();

// The module when cuda_module() has loaded it already, else nullptr (never loads it).
const CudaModule* cuda_module_if_loaded();

// True when an NVIDIA driver (libcuda.so.1) can be opened: the check --device auto makes before it
// loads the module, so that a machine without a driver never pays for loading the CUDA libraries.
// Else false with the reason in *why (when given).
bool cuda_driver_present(std::string* why = nullptr);

}  // namespace flashnorm

// The module's factory (defined in src/cli/cuda_module.cpp, exported by libflashnorm_cuda.so).
extern "C" const flashnorm::CudaModule* flashnorm_cuda_module();
