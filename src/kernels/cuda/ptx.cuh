// Internal: inline-PTX helpers of the decode kernel (decode_gemv.cu): streaming 16-byte loads of W,
// cp.async into shared memory, and the m16n8k16 tensor-core mma for bf16 / fp16.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>
#include <type_traits>

#include "elements.cuh"

namespace flashnorm::kernels::cuda::detail {

// Streaming 16-byte load of W: read once, do not keep in L1.
__device__ __forceinline__ uint4 ld_stream(const void* p) {
  uint4 r;
  asm("ld.global.nc.L1::no_allocate.L2::256B.v4.u32 {%0,%1,%2,%3}, [%4];"
      : "=r"(r.x), "=r"(r.y), "=r"(r.z), "=r"(r.w)
      : "l"(p));
  return r;
}
__device__ __forceinline__ uint4 ld_nc(const void* p) {
  return __ldg(reinterpret_cast<const uint4*>(p));
}
// 16-byte asynchronous copy global -> shared (cp.async, PTX ISA 7.0+): cache-global (not kept in
// L1), 256-byte L2 prefetch; valid = false zero-fills the 16 bytes and reads nothing.
__device__ __forceinline__ void cp_async16(void* smem, const void* gmem, bool valid) {
  const unsigned dst = static_cast<unsigned>(__cvta_generic_to_shared(smem));
  asm volatile("cp.async.cg.shared.global.L2::256B [%0], [%1], 16, %2;" ::"r"(dst), "l"(gmem),
               "r"(valid ? 16 : 0)
               : "memory");
}
__device__ __forceinline__ void cp_async_commit() {
  asm volatile("cp.async.commit_group;" ::: "memory");
}
// Waits until at most N of this thread's committed cp.async groups are still pending.
template <int N>
__device__ __forceinline__ void cp_async_wait() {
  asm volatile("cp.async.wait_group %0;" ::"n"(N) : "memory");
}

// c[0..3] += A (16 x 16, row-major fragments a0..a3) x B (16 x 8, column-major fragments b0, b1),
// fp32 accumulation, A and B in E's type (mma.sync.aligned.m16n8k16).
#define FN_MMA16816(ty)                                  \
  asm("mma.sync.aligned.m16n8k16.row.col.f32." ty "." ty \
      ".f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, "              \
      "{%8,%9}, {%0,%1,%2,%3};"                          \
      : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])   \
      : "r"(a0), "r"(a1), "r"(a2), "r"(a3), "r"(b0), "r"(b1))
template <class E>
__device__ __forceinline__ void mma16816(float c[4], uint32_t a0, uint32_t a1, uint32_t a2,
                                         uint32_t a3, uint32_t b0, uint32_t b1) {
  if constexpr (std::is_same_v<E, BF16>) {
    FN_MMA16816("bf16");
  } else {
    FN_MMA16816("f16");
  }
}
#undef FN_MMA16816

}  // namespace flashnorm::kernels::cuda::detail
