// The FlashNorm linear layer on Hopper (sm_90a), deferred normalization:
//   y[M, N] = rstd(x) * (x[M, K] W*[N, K]^T)  (+ bias),   rstd(x_m) = 1 / sqrt(mean_k(x_mk^2) +
//   eps)
// W* is the folded weight (the norm's gain multiplied into its columns). Source: docs/design.md
// (deferred normalization, the join).
//
// Every entry point takes raw device pointers and a stream, validates shapes, strides, alignment
// and dtypes first, and returns a Status (status.h).
// Layouts: row-major; x row m starts at x + m * ldx (elements), W row n (output feature n) at
// w + n * ldw, y row m at y + m * ldy. Requirements (vectorized 16-byte paths): K % 8 == 0,
// ldx, ldw, ldy multiples of 8 elements, all pointers 16-byte aligned; M, N, K >= 1.
// All arithmetic accumulates in fp32; inputs and outputs are bf16 or fp16 (same dtype for all).
#pragma once

#include <cuda_runtime_api.h>

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "flashnorm/kernels/cuda/status.h"

namespace flashnorm::kernels::cuda {

// Gated linear unit activation: SiLU (SwiGLU, Llama) or the tanh approximation of GELU (GeGLU,
// Gemma; HF gelu_pytorch_tanh).
enum class GluKind { kSwiGLU, kGeGLU };

// Arguments of flashnorm_linear: y[M, N] = rstd(x) * (x W^T) (+ bias). W is the folded weight
// (gain already multiplied into its columns). scale_mask (nullable, N bytes on the device): output
// column n gets the rstd scale only where scale_mask[n] != 0 (QK-norm models); bias (nullable, [N],
// dtype) is added after the scale.
struct LinearArgs {
  DType dtype = DType::kBF16;
  int64_t M = 0, N = 0, K = 0;
  const void* x = nullptr;
  int64_t ldx = 0;
  const void* w = nullptr;
  int64_t ldw = 0;
  void* y = nullptr;
  int64_t ldy = 0;
  float eps = 1e-6f;
  const void* bias = nullptr;
  const uint8_t* scale_mask = nullptr;
  // y (and ldy) in fp32 instead of dtype, e.g. the logits of an LM head: every implementation.
  bool y_f32 = false;
  // kDecode only: fused epilogue of a residual add. y must be fp32 (y_f32); y += the result instead
  // of y = the result, and y_rounded (nullable; dtype, same shape and ldy) receives the updated y
  // rounded to dtype. With it the decode step needs no separate residual-add kernel.
  bool accumulate = false;
  void* y_rounded = nullptr;
  // kDecode only, M <= 16: x is the fp32 [M, ldx] output of a gate|up projection (gate columns
  // 0..K-1, up columns K..2K-1; ldx >= 2K) and the kernel's input is round_dtype(act(gate) * up),
  // computed once per CTA into shared memory (M x its K range; kUnsupported when that exceeds the
  // kernel's shared memory): the GLU kernel fused into the down projection, same rounding.
  bool x_glu = false;
  GluKind glu_kind = GluKind::kSwiGLU;
  // kDecode only: launch with programmatic dependent launch (PDL, sm_90). The kernel starts
  // streaming W before the preceding kernel on the stream has finished and waits for it
  // (griddepcontrol.wait: full completion and memory flush) before it reads x or writes y or any
  // workspace. It lets the next kernel launch early, before its own wait, so kernels launched
  // with PDL can be in flight several deep: W must not be written by any kernel that may still
  // be running, i.e. by any kernel back to the most recent one that waits before it lets its
  // successor launch (in the CUDA engine W is never written after load). Off by default.
  bool pdl = false;
};

// The three implementations, plus the shape-based dispatcher.
//  kDecode:    one fused kernel (M <= 64): streams W once with 16-byte loads (two batches of loads
//              in flight per thread), tensor-core mma.sync with W as the streamed operand, sum of
//              squares of x taken from the same fragments; CTA shape (row-warps x k-warps) and an
//              optional split-K over CTAs (joined by a release/acquire counter) tuned per shape;
//              rstd applied in registers. One launch.
//  kPrefill:   fused (builds with CUTLASS): one tensor-core GEMM kernel (CUTLASS 3.x sm90 TMA
//              warp-specialized, 10 tile configurations, tuned per shape by tune_prefill) whose
//              consumer warps also take the sum of squares of each x row (tiles 0-3: from the x
//              tiles staged in shared memory for the wgmma; 4-9: from the x fragments the
//              register-A wgmma reads) and multiply the fp32 accumulators by rstd before the
//              epilogue (y in the input type or fp32); no extra read of x from memory; the join is
//              inside the thread that owns a row's accumulators (after every wgmma of the tile
//              and every k-tile's sum). Or (PrefillConfig::Rstd::kKernelPdl)
//              rstd by PDL: a small rstd kernel (one warp per row, on the CTAs the GEMM leaves
//              free) runs first, and the same GEMM without the in-mainloop reduction is launched
//              behind it with programmatic dependent launch, so its mainloop overlaps the
//              reduction; each consumer thread executes griddepcontrol.wait (the rstd grid has
//              completed, its writes are visible) before its epilogue multiplies the tile's
//              rows by rstd[m] from the context's buffer.
//              Prescale (the tuned or heuristic choice for the shape, or the fallback: no
//              CUTLASS, or CUTLASS refuses the shape): x_s = x * rstd(x) (one kernel) then a
//              plain cuBLASLt GEMM on x_s, stream order as the join.
//              With bias/mask: kTwoStream. last_prefill_path() says which ran.
//  kTwoStream: cuBLASLt GEMM on the caller's stream, rstd on a side stream,
//              events recorded on both, the post-scale kernel waits on both events.
//  kAuto:      see LinearContext::choose.
enum class LinearImpl { kAuto, kDecode, kPrefill, kTwoStream };
const char* impl_name(LinearImpl impl);

// Launch configuration of the decode kernel: rw row-warps (16 output features each) x kw k-warps
// per CTA (rw * kw <= 8), ks CTAs along K (split-K; 1 = none), stages: 0 = W streamed through a
// register double buffer, 3 or 4 = through a per-thread cp.async ring of that many batches in
// shared memory (M <= 8 only; a call with the GLU input takes the register path).
struct DecodeConfig {
  int rw = 0, kw = 0, ks = 0, stages = 0;
};

// Configuration of the prefill implementation: the prescale path (x_s = x * rstd(x), then a plain
// cuBLASLt GEMM), or one of the fused CUTLASS sm90 kernels: a CTA tile / mainloop (tile 0 .. 9:
// 0-3 read x from shared memory, 4-9 from registers), an order of the persistent tile scheduler
// over the output tiles (0 .. kOrders - 1: CUTLASS's default, then raster along M or N with swizzle
// 1, 2, 4, 8; it changes which tiles run concurrently and so what the L2 holds), and how rstd is
// obtained (in the mainloop, or by a separate rstd kernel the GEMM follows with PDL).
struct PrefillConfig {
  enum class Rstd { kPrescale, kMainloop, kKernelPdl };
  static constexpr int kTiles = 10;  // tile configurations 0 .. 9
  static constexpr int kOrders = 9;  // tile-scheduler orders 0 .. 8
  Rstd rstd = Rstd::kPrescale;
  int tile = 0;   // fused only: 0 .. kTiles - 1
  int order = 0;  // fused only: 0 .. kOrders - 1
  // Benchmark only (bf16, rstd = kMainloop): the fused tile's GEMM without the sum of squares and
  // the scale, y = x W^T (a wrong flashnorm result): the measure of the in-kernel reduction's cost.
  bool plain_gemm = false;

  static PrefillConfig prescale() { return {}; }
  static PrefillConfig fused(int tile, int order = 0, Rstd rstd = Rstd::kMainloop) {
    return {rstd, tile, order, false};
  }
  bool is_fused() const { return rstd != Rstd::kPrescale; }
  // "prescale", or "RS 128x256 cluster 2x1 cooperative, raster N swizzle 4" (tile, then the order
  // unless default, then ", rstd kernel + PDL" for kKernelPdl); "?" for an invalid tile or order.
  std::string name() const;
  bool operator==(const PrefillConfig& o) const {
    return rstd == o.rstd && tile == o.tile && order == o.order && plain_gemm == o.plain_gemm;
  }
};

// Fault injection for the race tests (tests/kernels/kernels_race_test.cpp and the CUDA engine's
// race test): all off in production. Set with LinearContext::set_race_hooks.
struct RaceHooks {
  // kTwoStream: skip the event wait on the rstd stream; kPrefill by PDL: skip both
  // griddepcontrol.wait (the rstd kernel's, for the kernel before it, and the GEMM's, before its
  // epilogue reads rstd): the bugs the race tests must catch
  bool no_join = false;
  long long delay_gemm_cycles = 0;  // spin kernel before the GEMM (caller's stream)
  // kTwoStream / prescale: spin kernel before the rstd (norm) kernel; kPrefill by PDL: every warp
  // of the rstd kernel spins this long, once, before it reads x and writes rstd (after it has let
  // the GEMM launch)
  long long delay_rstd_cycles = 0;
};

// Owns what the implementations need: the cuBLASLt handle and workspace, cached GEMM plans, the
// side stream and its events, the rstd buffer and the decode kernel's split-K workspace, and the
// tuned configurations. Buffers grow on demand; growing is refused while a stream is being captured
// (warm up eagerly first). One context per device and host thread; not thread-safe.
// Implementation: linear_context.cpp (dispatch), autotune.cpp (tuners), cublaslt_plan.cpp.
class LinearContext {
 public:
  LinearContext();  // on the current device; throws flashnorm::Error if CUDA/cuBLASLt init fails
  ~LinearContext();
  LinearContext(const LinearContext&) = delete;
  LinearContext& operator=(const LinearContext&) = delete;

  // Runs implementation `impl` (kAuto: choose(a)) with the configuration tuned or chosen for the
  // shape. Errors: validate_linear's, kCudaError / kCublasError from the launches.
  Status run(const LinearArgs& a, LinearImpl impl, cudaStream_t stream);
  // kDecode with an explicit launch configuration (benchmarks, tests; kInvalidArgument when the
  // decode kernel does not support it for the shape).
  Status run(const LinearArgs& a, const DecodeConfig& config, cudaStream_t stream);
  // kPrefill with an explicit configuration (benchmarks, tests). As run(kPrefill): bias, mask or
  // K > 32768 take the two-stream path; a fused configuration without CUTLASS in the build, or one
  // CUTLASS refuses for the shape, takes the prescale path (last_prefill_path() says which ran).
  Status run(const LinearArgs& a, const PrefillConfig& config, cudaStream_t stream);
  // kAuto's choice: kDecode for M <= kAutoDecodeMaxM; without bias/mask, for M <= 64 kDecode when
  // tune_decode (for this padded M, N, K) and tune_prefill (this exact shape) both timed it and
  // decode was faster, else kPrefill; with bias/mask kTwoStream. Only M, N, K, bias and scale_mask
  // of `a` are read; no validation (run() validates).
  LinearImpl choose(const LinearArgs& a) const;
  static constexpr int64_t kAutoDecodeMaxM = 16;

  // Plain cuBLASLt GEMM y = x W^T (bf16/fp16 in/out, fp32 accumulation): the "bare" baseline and
  // the GEMM of the unfused and two-stream paths. alpha_rows (nullable, fp32 [M] on the device):
  // per-row scale in the epilogue (row-order plan); returns kUnsupported when cuBLASLt has none.
  // y_f32: y is fp32 (not with alpha_rows).
  Status gemm(DType dtype, int64_t M, int64_t N, int64_t K, const void* x, int64_t ldx,
              const void* w, int64_t ldw, void* y, int64_t ldy, const float* alpha_rows,
              cudaStream_t stream, bool y_f32 = false);

  // Which path the last kPrefill call took: "fused" (rstd in the GEMM's mainloop), "rstd_pdl"
  // (rstd kernel + PDL GEMM), "prescale" or "two_stream_fallback".
  const std::string& last_prefill_path() const;
  // Decode configuration for this shape: the tuned value (tune_decode, set_decode_config), else a
  // heuristic (rw = 1, kw = 8 for M <= 16, about 2 CTAs per SM in total, split-K when the row
  // blocks cannot fill the SMs).
  DecodeConfig decode_config(int64_t M, int64_t N, int64_t K) const;
  // Sets the decode configuration of a shape as tune_decode would (e.g. one tuned by another
  // context, so that two contexts run identical kernels). kInvalidArgument when the configuration
  // is not one the decode kernel supports for (M, K).
  Status set_decode_config(int64_t M, int64_t N, int64_t K, const DecodeConfig& c);
  // Autotune the decode configuration for one shape: for every candidate (rw x kw in {1,2,4} x
  // {2,4,8}, split-K 1/2/4/8, and for M <= 8 without the GLU input, when `ring`, the cp.async ring
  // of 3 and 4 stages besides the register path), captures a CUDA graph of `reps` calls cycling
  // over the n argument sets (same shape, different buffers, so that W is rotated past the L2;
  // their y are overwritten), times its replay with CUDA events (median of 5, graph_timer.h), then
  // times the four fastest again in 5 interleaved sweeps and caches the fastest of those for
  // (padded M, N, K). Synchronizes the stream; must not be called during capture. Returns the
  // choice ({} on error); *best_us (optional) receives its time per call in microseconds
  // (interleaved median), *timings (optional) every candidate's configuration and first-pass time
  // per call in microseconds, in the order timed.
  DecodeConfig tune_decode(const LinearArgs* sets, int n, cudaStream_t stream,
                           Status* status = nullptr, double* best_us = nullptr,
                           std::vector<std::pair<DecodeConfig, double>>* timings = nullptr,
                           bool ring = true);

  // kPrefill's configuration for this shape: the tuned value, else a heuristic (above M*N*K = 4e9
  // the register-A 128x256 tile when it fills every SM, else prescale; below, the largest
  // shared-memory tile that still gives every SM a tile).
  PrefillConfig prefill_config(int64_t M, int64_t N, int64_t K) const;
  // Whether this build has the fused prefill kernel (built with the CUTLASS headers).
  static bool has_fused_prefill();
  // Autotune kPrefill for one shape like tune_decode: the prescale path and every fused tile in
  // CUTLASS's default order with both ways of getting rstd (in the mainloop; rstd kernel + PDL),
  // then every other order of the fastest fused configuration, each a graph of calls over the n
  // argument sets timed with CUDA events; the four fastest are timed again interleaved (as in
  // tune_decode) and the fastest of those is cached for (M, N, K).
  // Returns it, or nullopt on error or when this build has no fused prefill (*status kUnsupported).
  // *best_fused (optional): the fastest fused configuration with rstd in the mainloop even when
  // another won, *best_pdl (optional) the fastest with rstd kernel + PDL (nullopt if none).
  std::optional<PrefillConfig> tune_prefill(const LinearArgs* sets, int n, cudaStream_t stream,
                                            Status* status = nullptr, double* best_us = nullptr,
                                            std::optional<PrefillConfig>* best_fused = nullptr,
                                            std::optional<PrefillConfig>* best_pdl = nullptr);
  // Autotune the plain cuBLASLt GEMM y = x W^T of one shape (what `gemm` runs: the prescale
  // path's and the two-stream path's GEMM, the benchmark's bare and unfused baselines): up to 16
  // algorithms from cuBLASLt's heuristic (32 MiB workspace), each timed like tune_decode on the n
  // argument sets (x, w, y, ldx, ldw, ldy, y_f32 used; no bias, mask or scale; the three fastest
  // timed again interleaved); the fastest replaces the heuristic's first choice in the cached plan
  // of that (dtype, M, N, K, ld*, y_f32). Returns its time per call in microseconds (-1 on error,
  // *status set); *n_algos (optional): how many algorithms were timed.
  double tune_gemm(const LinearArgs* sets, int n, cudaStream_t stream, Status* status = nullptr,
                   int* n_algos = nullptr);

  // What tune_shape measured (microseconds per call; -1 / nullopt where not tuned).
  struct ShapeTuning {
    double gemm_us = -1;  // tune_gemm
    int gemm_algos = 0;
    double decode_us = -1;  // tune_decode (M <= 64), with every candidate it timed
    std::vector<std::pair<DecodeConfig, double>> decode_candidates;
    double prefill_us = -1;                       // tune_prefill: its choice
    std::optional<PrefillConfig> prefill_config;  // (a fused configuration or prescale)
    std::optional<PrefillConfig> prefill_fused;   // the fastest with rstd in the mainloop
    std::optional<PrefillConfig> prefill_pdl;     // the fastest with rstd kernel + PDL
  };
  // Everything run() may use for the shape of the n argument sets, in this order: tune_gemm,
  // tune_decode (M <= 64), tune_prefill (kUnsupported from it, e.g. no CUTLASS in the build,
  // leaves prefill untuned and is not an error). Same requirements as those; stops at the first
  // error and returns it.
  Status tune_shape(const LinearArgs* sets, int n, cudaStream_t stream, ShapeTuning* out);

  // Race-test fault injection (RaceHooks); the tuners always run without it.
  void set_race_hooks(const RaceHooks& hooks);
  const RaceHooks& race_hooks() const;

  // Bumped whenever a workspace buffer is reallocated: a CUDA graph captured before a change holds
  // pointers to freed memory and must be captured again.
  uint64_t workspace_generation() const;

  struct Impl;  // linear_context_impl.h (internal)

 private:
  std::unique_ptr<Impl> p_;
};

// Validation shared by all entry points (exposed for tests): empty Status when the arguments are
// acceptable for `impl`, else kInvalidArgument/kUnsupported naming the field.
Status validate_linear(const LinearArgs& a, LinearImpl impl);

}  // namespace flashnorm::kernels::cuda
