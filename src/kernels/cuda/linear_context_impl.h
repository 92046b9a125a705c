// Internal: LinearContext's state and implementations (linear.h declares the interface). The
// dispatch and the three implementations are in linear_context.cpp, the tuners in autotune.cpp,
// the cuBLASLt plans in cublaslt_plan.cpp.
#pragma once

#include <cuda_runtime_api.h>

#include <cstdint>
#include <map>
#include <string>
#include <tuple>

#include "cublaslt_plan.h"
#include "flashnorm/kernels/cuda/linear.h"

namespace flashnorm::kernels::cuda {

struct LinearContext::Impl {
  Impl();  // throws flashnorm::Error; frees what it created first
  ~Impl();
  Impl(const Impl&) = delete;
  Impl& operator=(const Impl&) = delete;

  // Grows *buf to at least `bytes` (synchronizing both streams first and bumping
  // workspace_generation); kUnsupported while s is being captured.
  Status ensure(void** buf, size_t* cap, size_t bytes, cudaStream_t s, const char* what);
  DecodeConfig decode_config(int64_t M, int64_t N, int64_t K) const;
  PrefillConfig prefill_config(int64_t M, int64_t N, int64_t K) const;
  // The implementations; arguments already validated.
  Status run_decode(const LinearArgs& a, DecodeConfig c, cudaStream_t s);
  Status run_prefill(const LinearArgs& a, const PrefillConfig& c, cudaStream_t s);
  // *refused (nullable): CUTLASS cannot implement this tile for the shape (the caller may fall
  // back).
  Status run_prefill_fused(const LinearArgs& a, const PrefillConfig& c, cudaStream_t s,
                           bool* refused);
  Status run_prescale(const LinearArgs& a, cudaStream_t s);
  Status run_two_stream(const LinearArgs& a, cudaStream_t s);
  int rstd_ctas(int64_t M, int64_t N, int tile) const;  // rstd kernel of a PDL configuration

  detail::LtGemm lt;
  int num_sms = 132;
  cudaStream_t side = nullptr;
  cudaEvent_t ev_fork = nullptr, ev_gemm = nullptr, ev_rstd = nullptr;
  void* rstd = nullptr;
  size_t rstd_cap = 0;
  void* xs = nullptr;  // prefill: the prescaled x
  size_t xs_cap = 0;
  void* part = nullptr;  // decode split-K partials
  size_t part_cap = 0;
  unsigned* counters = nullptr;  // decode split-K arrival counters (self-resetting)
  void* prefill_ws = nullptr;    // the fused prefill kernel's tile-scheduler workspace
  size_t prefill_ws_cap = 0;
  std::string last_prefill_path;
  uint64_t workspace_generation = 0;
  RaceHooks race;
  // The tuned choices with their graph-timed microseconds per call (choose()'s input; -1: set,
  // not timed), decode by padded M, prefill by exact M. Both tuners time on the card as it is at
  // that moment, decode first; a candidate timed on a hotter card is disadvantaged (no
  // interleaving across them).
  struct TunedDecode {
    DecodeConfig config;
    double us = -1;
  };
  struct TunedPrefill {
    PrefillConfig config;
    double us = -1;
  };
  std::map<std::tuple<int, int64_t, int64_t>, TunedDecode> tuned_decode;
  std::map<std::tuple<int64_t, int64_t, int64_t>, TunedPrefill> tuned_prefill;

 private:
  void release() noexcept;
};

namespace detail {
// K elements per CTA of the decode kernel for a split-K factor ks (whole 32-wide chunks).
inline int64_t decode_kchunk(int64_t K, int ks) { return ((K + ks - 1) / ks + 31) / 32 * 32; }
// Whether the decode kernel supports configuration c for M rows and depth K.
bool valid_decode_config(const DecodeConfig& c, int M, int K);
}  // namespace detail

}  // namespace flashnorm::kernels::cuda
