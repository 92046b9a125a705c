// Loads the CUDA module (engine/cuda_module.h) with dlopen on first use.
#include <dlfcn.h>
#include <fmt/format.h>

#include <filesystem>
#include <mutex>

#include "flashnorm/engine/cuda_module.h"
#include "flashnorm/error.h"

namespace flashnorm {

namespace {

std::mutex g_mutex;
const CudaModule* g_module = nullptr;  // set once, under g_mutex

#if defined(FLASHNORM_HAVE_CUDA_MODULE)
// FLASHNORM_CUDA_MODULE when set, else kCudaModuleFile in the running executable's directory.
std::string module_path() {
  if (const char* env = std::getenv("FLASHNORM_CUDA_MODULE"); env && *env) return env;
  std::error_code ec;
  const std::filesystem::path exe = std::filesystem::read_symlink("/proc/self/exe", ec);
  if (ec) return kCudaModuleFile;  // dlopen's own search (LD_LIBRARY_PATH, ldconfig)
  return (exe.parent_path() / kCudaModuleFile).string();
}

const CudaModule* load() {
  const std::string path = module_path();
  // RTLD_NOW: a missing symbol or library fails here, in one line, not at a later call.
  void* h = ::dlopen(path.c_str(), RTLD_NOW | RTLD_LOCAL);
  if (!h) {
    const char* e = ::dlerror();
    throw Error(fmt::format("cannot load the CUDA module ({})", e ? e : path));
  }
  using Factory = const CudaModule* (*)();
  auto factory = reinterpret_cast<Factory>(::dlsym(h, kCudaModuleSymbol));
  if (!factory) {
    ::dlclose(h);
    throw Error(fmt::format("cannot load the CUDA module ({} has no {})", path, kCudaModuleSymbol));
  }
  const CudaModule* m = factory();
  if (!m || m->abi != kCudaModuleAbi || m->layout != cuda_module_layout() || !m->device_available ||
      !m->gpu_name || !m->make_engine || !m->run_model_bench || !m->run_kernel_bench) {
    ::dlclose(h);
    throw Error(fmt::format(
        "cannot load the CUDA module ({} is from another flashnorm build; rebuild both)", path));
  }
  return m;  // never closed: the CUDA runtime it links must outlive every engine
}
#endif

}  // namespace

const CudaModule& cuda_module() {
#if defined(FLASHNORM_HAVE_CUDA_MODULE)
  std::lock_guard<std::mutex> lock(g_mutex);
  if (!g_module) g_module = load();
  return *g_module;
#else
  throw Error("flashnorm was built without CUDA");
#endif
}

const CudaModule* cuda_module_if_loaded() {
  std::lock_guard<std::mutex> lock(g_mutex);
  return g_module;
}

bool cuda_driver_present(std::string* why) {
  // RTLD_LAZY | RTLD_LOCAL and closed again at once: only whether the driver library exists
  void* h = ::dlopen("libcuda.so.1", RTLD_LAZY | RTLD_LOCAL);
  if (!h) {
    if (why) *why = "no NVIDIA driver (libcuda.so.1 not found)";
    return false;
  }
  ::dlclose(h);
  return true;
}

}  // namespace flashnorm
