// The CUDA module's factory (engine/cuda_module.h): the table of entry points that
// libflashnorm_cuda.so exports to the executable that loads it.
#include "flashnorm/engine/cuda_module.h"

#include <cuda_runtime.h>

#include <nlohmann/json.hpp>

#include "flashnorm/engine/cuda_engine.h"
#include "kernel_bench.h"  // bench/kernel_bench
#include "model_bench.h"   // src/cli

namespace flashnorm {
namespace {

std::string current_gpu_name() {
  cudaDeviceProp prop{};
  int dev = 0;
  if (cudaGetDevice(&dev) == cudaSuccess && cudaGetDeviceProperties(&prop, dev) == cudaSuccess) {
    return prop.name;
  }
  cudaGetLastError();  // clear the error a missing driver leaves
  return "none";
}

std::unique_ptr<Engine> make_cuda_engine(const Model& model, NormMode mode,
                                         const EngineOptions& o) {
  CudaEngineOptions c;
  c.capacity.max_context = o.max_context;
  c.capacity.max_sequences = o.max_sequences;
  c.dtype = o.dtype;
  c.flashnorm = {o.cancel, o.deferred, o.tied_head, o.prefill};
  c.launch.decode = o.decode;
  return std::make_unique<CudaEngine>(model, mode, c);
}

}  // namespace
}  // namespace flashnorm

extern "C" const flashnorm::CudaModule* flashnorm_cuda_module() {
  static const flashnorm::CudaModule m = [] {
    flashnorm::CudaModule t;
    t.device_available = &flashnorm::cuda_device_available;
    t.gpu_name = &flashnorm::current_gpu_name;
    t.make_engine = &flashnorm::make_cuda_engine;
    t.run_model_bench = &flashnorm::cli::run_model_bench;
    t.run_kernel_bench = &flashnorm::bench::run_kernel_bench;
    return t;
  }();
  return &m;
}
