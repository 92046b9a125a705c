// RAII owners of CUDA resources for host code that throws (the engine, the benchmark): device and
// pinned host buffers, streams, events and instantiated graphs, plus cuda_check(), the one checked
// call that turns a CUDA error into flashnorm::Error("<what>: <name> (<description>)").
#pragma once

#include <cuda_runtime_api.h>

#include <cstddef>
#include <string>
#include <utility>

namespace flashnorm::kernels::cuda {

// True when a CUDA device with compute capability 9.0 is present (the kernels are built for
// sm_90a only); otherwise false and *why (optional) says what is missing, in one line.
bool hopper_device_available(std::string* why = nullptr);

// Throws flashnorm::Error naming `what` when e != cudaSuccess.
void cuda_check(cudaError_t e, const char* what);
#define FN_CUDA_CHECK(call) ::flashnorm::kernels::cuda::cuda_check((call), #call)

// Owned bytes from one CUDA allocator (Alloc: DeviceAlloc or PinnedAlloc below), at least 16 so
// that every pointer is valid and aligned; freed on destruction. Movable, not copyable.
template <class Alloc>
class OwnedBytes {
 public:
  OwnedBytes() = default;
  explicit OwnedBytes(size_t bytes) : n_(bytes) {
    cuda_check(Alloc::alloc(&p_, bytes < 16 ? 16 : bytes), Alloc::name);
  }
  ~OwnedBytes() {
    if (p_) Alloc::free(p_);
  }
  OwnedBytes(OwnedBytes&& o) noexcept : p_(std::exchange(o.p_, nullptr)), n_(o.n_) {}
  OwnedBytes& operator=(OwnedBytes&& o) noexcept {
    if (this != &o) {
      if (p_) Alloc::free(p_);
      p_ = std::exchange(o.p_, nullptr);
      n_ = o.n_;
    }
    return *this;
  }
  OwnedBytes(const OwnedBytes&) = delete;
  OwnedBytes& operator=(const OwnedBytes&) = delete;
  void* get() const { return p_; }
  template <class T>
  T* as() const {
    return static_cast<T*>(p_);
  }
  size_t bytes() const { return n_; }

 private:
  void* p_ = nullptr;
  size_t n_ = 0;
};

// cudaMalloc / cudaFree: device memory (256-byte aligned).
struct DeviceAlloc {
  static constexpr const char* name = "cudaMalloc";
  static cudaError_t alloc(void** p, size_t n);
  static void free(void* p);
};
// cudaMallocHost / cudaFreeHost: page-locked host memory, so that copies inside a CUDA graph can
// read or write it when the graph runs.
struct PinnedAlloc {
  static constexpr const char* name = "cudaMallocHost";
  static cudaError_t alloc(void** p, size_t n);
  static void free(void* p);
};
using DeviceBuffer = OwnedBytes<DeviceAlloc>;
using PinnedBuffer = OwnedBytes<PinnedAlloc>;

// A CUDA runtime handle, created by the constructor (flashnorm::Error on failure) and destroyed
// with the object: Stream (cudaStream_t, non-blocking) and Event (cudaEvent_t, timing).
template <class H>
class CudaHandle {
 public:
  CudaHandle();
  ~CudaHandle();
  CudaHandle(const CudaHandle&) = delete;
  CudaHandle& operator=(const CudaHandle&) = delete;
  H get() const { return h_; }

 private:
  H h_ = nullptr;
};
extern template class CudaHandle<cudaStream_t>;  // device.cpp
extern template class CudaHandle<cudaEvent_t>;
using Stream = CudaHandle<cudaStream_t>;  // a non-blocking stream
using Event = CudaHandle<cudaEvent_t>;    // a timing event

// An instantiated CUDA graph (empty until set).
class GraphExec {
 public:
  GraphExec() = default;
  ~GraphExec();
  GraphExec(const GraphExec&) = delete;
  GraphExec& operator=(const GraphExec&) = delete;
  // Takes ownership of a captured graph: instantiates it and destroys the graph. Throws on error.
  void set(cudaGraph_t g);
  void reset();
  bool empty() const { return e_ == nullptr; }
  void launch(cudaStream_t s) const;

 private:
  cudaGraphExec_t e_ = nullptr;
};

}  // namespace flashnorm::kernels::cuda
