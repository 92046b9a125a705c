// OpenBLAS's thread count for a scope. The CPU engine's native prefill multiplies each pool
// thread's share of a dequantized tile with its own single-threaded sgemm
// (kernels/cpu/quant_matmul.h) and spreads attention's heads over the pool, so OpenBLAS's own
// threads would only compete for the cores (their spinning took a tenth of a prompt's samples on 2
// cores).
#pragma once

namespace flashnorm::kernels::cpu {

// Sets OpenBLAS's thread count to `n` for the object's life; when the last of the scopes alive in
// the process ends, restores the count from before the first of them (overlapping scopes on
// several threads, e.g. two CPU engines in one server, never leave it at `n`). Process-wide: a
// BLAS call on another thread meanwhile runs with it too (its speed changes, not its result).
// A no-op where the BLAS library is not OpenBLAS (available() false).
class BlasThreads {
 public:
  explicit BlasThreads(int n);
  ~BlasThreads();
  BlasThreads(const BlasThreads&) = delete;
  BlasThreads& operator=(const BlasThreads&) = delete;
  // Whether the BLAS library is OpenBLAS (its thread count can be set).
  static bool available();

 private:
  bool held_ = false;  // counted among the scopes alive
};

}  // namespace flashnorm::kernels::cpu
