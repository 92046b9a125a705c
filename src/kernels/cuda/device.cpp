// RAII owners of CUDA resources: include/flashnorm/kernels/cuda/device.h.
#include "flashnorm/kernels/cuda/device.h"

#include <cuda_runtime.h>
#include <fmt/format.h>

#include "flashnorm/error.h"

namespace flashnorm::kernels::cuda {

bool hopper_device_available(std::string* why) {
  int n = 0;
  cudaError_t e = cudaGetDeviceCount(&n);
  if (e != cudaSuccess || n == 0) {
    cudaGetLastError();
    if (why) {
      *why = e == cudaErrorInsufficientDriver || e == cudaErrorNoDevice || n == 0
                 ? std::string("no NVIDIA GPU with a CUDA 13 driver found")
                 : std::string("CUDA: ") + cudaGetErrorString(e);
    }
    return false;
  }
  int dev = 0, major = 0;
  cudaGetDevice(&dev);
  cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, dev);
  if (major != 9) {
    if (why)
      *why = fmt::format("device {} has compute capability {}.x; the kernels need 9.0", dev, major);
    return false;
  }
  return true;
}

void cuda_check(cudaError_t e, const char* what) {
  if (e != cudaSuccess) {
    throw Error(fmt::format("{}: {} ({})", what, cudaGetErrorName(e), cudaGetErrorString(e)));
  }
}

cudaError_t DeviceAlloc::alloc(void** p, size_t n) { return cudaMalloc(p, n); }
void DeviceAlloc::free(void* p) { cudaFree(p); }
cudaError_t PinnedAlloc::alloc(void** p, size_t n) { return cudaMallocHost(p, n); }
void PinnedAlloc::free(void* p) { cudaFreeHost(p); }

namespace {
cudaError_t create(cudaStream_t* h) { return cudaStreamCreateWithFlags(h, cudaStreamNonBlocking); }
cudaError_t create(cudaEvent_t* h) { return cudaEventCreate(h); }
void destroy(cudaStream_t h) { cudaStreamDestroy(h); }
void destroy(cudaEvent_t h) { cudaEventDestroy(h); }
}  // namespace

template <class H>
CudaHandle<H>::CudaHandle() {
  FN_CUDA_CHECK(create(&h_));
}
template <class H>
CudaHandle<H>::~CudaHandle() {
  if (h_) destroy(h_);
}
template class CudaHandle<cudaStream_t>;
template class CudaHandle<cudaEvent_t>;

GraphExec::~GraphExec() { reset(); }
void GraphExec::reset() {
  if (e_) cudaGraphExecDestroy(e_);
  e_ = nullptr;
}
void GraphExec::set(cudaGraph_t g) {
  reset();
  cudaGraphExec_t exec = nullptr;
  cudaError_t e = cudaGraphInstantiate(&exec, g, 0);
  cudaGraphDestroy(g);
  FN_CUDA_CHECK(e);
  e_ = exec;
}
void GraphExec::launch(cudaStream_t s) const { FN_CUDA_CHECK(cudaGraphLaunch(e_, s)); }

}  // namespace flashnorm::kernels::cuda
