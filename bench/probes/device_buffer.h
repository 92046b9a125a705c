// Shared by the CUDA kernel labs (quant_gemv_bench, decode_attention_bench): a failed check ends
// the lab with one line naming it, and an RAII device buffer.
#pragma once

#include <cuda_runtime_api.h>

#include <cstddef>
#include <cstdio>
#include <cstdlib>

// Exit status 1 with "FILE:LINE: check failed: EXPR" when EXPR is false.
#define CHECK(x)                                                                 \
  do {                                                                           \
    if (!(x)) {                                                                  \
      std::fprintf(stderr, "%s:%d: check failed: %s\n", __FILE__, __LINE__, #x); \
      std::exit(1);                                                              \
    }                                                                            \
  } while (0)

// `bytes` bytes of device memory (cudaMalloc; CHECK on failure), freed with the object.
struct Dev {
  void* p = nullptr;
  size_t bytes = 0;
  explicit Dev(size_t n) : bytes(n) { CHECK(cudaMalloc(&p, n) == cudaSuccess); }
  ~Dev() { cudaFree(p); }
  Dev(const Dev&) = delete;
  Dev& operator=(const Dev&) = delete;
  float* f() const { return static_cast<float*>(p); }  // as fp32
};
