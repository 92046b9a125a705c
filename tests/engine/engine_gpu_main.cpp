// main() of the CUDA engine's GPU test programs: without a CUDA device they print one line and exit
// 77, which ctest reports as skipped (SKIP_RETURN_CODE, tests/engine/CMakeLists.txt); otherwise
// they run their GoogleTest tests. A program may define engine_gpu_test_args() to read its own
// options from what GoogleTest leaves in argv (weak default: none).
#include <cuda_runtime.h>
#include <gtest/gtest.h>

#include <cstdio>

// Returns false (after printing why) when the arguments left after GoogleTest's are not valid.
__attribute__((weak)) bool engine_gpu_test_args(int argc, char** argv) {
  if (argc > 1) std::fprintf(stderr, "%s: unknown argument %s\n", argv[0], argv[1]);
  return argc <= 1;
}

int main(int argc, char** argv) {
  ::testing::InitGoogleTest(&argc, argv);
  if (!engine_gpu_test_args(argc, argv)) return 2;
  int n = 0;
  const cudaError_t e = cudaGetDeviceCount(&n);
  if (e != cudaSuccess || n == 0) {
    std::printf("%s: SKIPPED: no CUDA device (%s); this GPU test needs an NVIDIA GPU\n", argv[0],
                e == cudaSuccess ? "0 devices" : cudaGetErrorString(e));
    return 77;
  }
  return RUN_ALL_TESTS();
}
