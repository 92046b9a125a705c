// Internal: programmatic dependent launch (PDL, sm_90; CUDA programming guide, "Programmatic
// Dependent Launch and Synchronization"). A kernel launched with the attribute may start while the
// preceding kernel on the stream is still running; it must wait (griddepcontrol.wait: the preceding
// grid has completed and its memory is visible) before it touches any buffer that kernel could
// read or write. Inside a CUDA graph capture the attribute becomes a programmatic edge. Three
// kernels read constant data before their wait (the decode GEMV its weights, quant_gemv its blocks
// (an L2 prefetch), decode_attention the KV-cache rows below *pos); since a kernel that triggers
// before its own wait lets launches run ahead, what they read early must not be written by any
// kernel still running (linear.h, LinearArgs::pdl).
#pragma once

#include <cuda_runtime.h>

#include <utility>

namespace flashnorm::kernels::cuda::detail {

// The first statement of every kernel launched through launch_ex with pdl: wait for the preceding
// kernel, then let the next one launch early (its own wait protects it). Global reads and writes
// come after this. Without the attribute both instructions are no-ops.
__device__ __forceinline__ void pdl_begin() {
  asm volatile("griddepcontrol.wait;" ::: "memory");
  asm volatile("griddepcontrol.launch_dependents;" ::: "memory");
}

// The launch configuration of launch_ex: cluster > 1 groups that many consecutive CTAs along x
// into a thread block cluster (sm_90; gridDim.x must be a multiple of it, at most 8 portable).
// Not copyable: cfg.attrs points into the object's own at[].
struct LaunchConfig {
  cudaLaunchConfig_t cfg = {};
  cudaLaunchAttribute at[2];
  LaunchConfig(dim3 grid, dim3 block, size_t smem, cudaStream_t stream, bool pdl, int cluster) {
    cfg.gridDim = grid;
    cfg.blockDim = block;
    cfg.dynamicSmemBytes = smem;
    cfg.stream = stream;
    cfg.attrs = at;
    if (pdl) {
      at[cfg.numAttrs].id = cudaLaunchAttributeProgrammaticStreamSerialization;
      at[cfg.numAttrs++].val.programmaticStreamSerializationAllowed = 1;
    }
    if (cluster > 1) {
      at[cfg.numAttrs].id = cudaLaunchAttributeClusterDimension;
      at[cfg.numAttrs++].val.clusterDim = {static_cast<unsigned>(cluster), 1, 1};
    }
  }
  LaunchConfig(const LaunchConfig&) = delete;
  LaunchConfig& operator=(const LaunchConfig&) = delete;
};

// kernel<<<grid, block, smem, stream>>>(args...), with programmatic stream serialization allowed
// when pdl is set. Returns the launch's error (cudaLaunchKernelEx).
template <class... KArgs, class... Args>
cudaError_t launch_ex(void (*kernel)(KArgs...), dim3 grid, dim3 block, size_t smem,
                      cudaStream_t stream, bool pdl, Args&&... args) {
  LaunchConfig c(grid, block, smem, stream, pdl, 1);
  return cudaLaunchKernelEx(&c.cfg, kernel, std::forward<Args>(args)...);
}

// launch_ex in clusters of `cluster` CTAs along x (LaunchConfig).
template <class... KArgs, class... Args>
cudaError_t launch_cluster(void (*kernel)(KArgs...), dim3 grid, dim3 block, size_t smem,
                           cudaStream_t stream, bool pdl, int cluster, Args&&... args) {
  LaunchConfig c(grid, block, smem, stream, pdl, cluster);
  return cudaLaunchKernelEx(&c.cfg, kernel, std::forward<Args>(args)...);
}

}  // namespace flashnorm::kernels::cuda::detail
