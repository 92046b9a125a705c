// main() of the GPU test binaries: refuses to run (exit 2, one clear line) when no CUDA device is
// present, and takes --no-join (the race test's switch that removes the two-stream join).
#include <cuda_runtime.h>
#include <gtest/gtest.h>

#include <cstdio>
#include <cstring>

bool g_no_join = false;

int main(int argc, char** argv) {
  ::testing::InitGoogleTest(&argc, argv);
  for (int i = 1; i < argc; ++i)
    if (std::strcmp(argv[i], "--no-join") == 0) g_no_join = true;
  int n = 0;
  const cudaError_t e = cudaGetDeviceCount(&n);
  if (e != cudaSuccess || n == 0) {
    std::fprintf(stderr,
                 "%s: no CUDA device (%s): this GPU test needs an NVIDIA GPU; run it through "
                 "scripts/gpu_kernels.sh on the device machine\n",
                 argv[0], e == cudaSuccess ? "0 devices" : cudaGetErrorString(e));
    return 2;
  }
  if (g_no_join)
    std::printf("*** --no-join: the two-stream join is REMOVED; the race test must fail ***\n");
  return RUN_ALL_TESTS();
}
