// main() of the GPU test binaries: without a CUDA device they exit 77, which ctest reports as
// skipped (SKIP_RETURN_CODE, tests/kernels/CMakeLists.txt), with one line saying why.
#include <cuda_runtime.h>
#include <gtest/gtest.h>

#include <cstdio>

int main(int argc, char** argv) {
  ::testing::InitGoogleTest(&argc, argv);
  int n = 0;
  const cudaError_t e = cudaGetDeviceCount(&n);
  if (e != cudaSuccess || n == 0) {
    std::fprintf(stderr, "%s: no CUDA device (%s): skipped (this GPU test needs an NVIDIA GPU)\n",
                 argv[0], e == cudaSuccess ? "0 devices" : cudaGetErrorString(e));
    return 77;
  }
  return RUN_ALL_TESTS();
}
