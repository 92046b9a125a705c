// The spin kernel behind RaceHooks' producer delays (linear.h): the race tests delay a producer
// inside LinearContext's launch sequence (e.g. the rstd kernel on the side stream) with it.
#include "launch.h"
#include "pdl.cuh"

namespace flashnorm::kernels::cuda::detail {
namespace {

// Lets a PDL-launched successor start at once (it must wait for this kernel before touching
// anything), so a delayed producer also tests the successor's griddepcontrol.wait.
__global__ void spin_kernel(long long cycles) {
  asm volatile("griddepcontrol.launch_dependents;" ::: "memory");
  const long long t0 = clock64();
  while (clock64() - t0 < cycles) {
  }
}

}  // namespace

cudaError_t launch_spin(long long cycles, cudaStream_t s) {
  spin_kernel<<<1, 1, 0, s>>>(cycles);
  return cudaGetLastError();
}

}  // namespace flashnorm::kernels::cuda::detail
