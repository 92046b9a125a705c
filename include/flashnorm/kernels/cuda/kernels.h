// FlashNorm CUDA kernels for Hopper (sm_90a): RMSNorm, and the deferred-normalization linear layer
//   y[M, N] = rstd(x) * (x[M, K] W*[N, K]^T)  (+ bias),   rstd(x_m) = 1 / sqrt(mean_k(x_mk^2) +
//   eps)
// Source: shared/design/flashnorm.md section 2 (deferred normalization, the join) and issue 3.
//
// Every entry point takes raw device pointers and a stream, validates shapes, strides, alignment
// and dtypes first, and returns a Status (never throws, never aborts); throw_if_error() turns a
// failed Status into flashnorm::Error for callers that prefer exceptions. Every CUDA/cuBLAS call
// and every launch inside is checked and reported in the Status message.
//
// Layouts: row-major; x row m starts at x + m * ldx (elements), W row n (output feature n) at
// w + n * ldw, y row m at y + m * ldy. Requirements (vectorized 16-byte paths): K % 8 == 0,
// ldx, ldw, ldy multiples of 8 elements, all pointers 16-byte aligned; M, N, K >= 1.
// All arithmetic accumulates in fp32; inputs and outputs are bf16 or fp16 (same dtype for all).
#pragma once

#include <cuda_runtime_api.h>

#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <tuple>
#include <utility>
#include <vector>

namespace flashnorm::kernels::cuda {

// Element type of x, W, y, gain, residual and bias.
enum class DType { kBF16, kFP16 };

// Outcome of a kernel call. code == kOk means every launch was issued without error.
enum class Code { kOk, kInvalidArgument, kUnsupported, kCudaError, kCublasError };
struct Status {
  Code code = Code::kOk;
  std::string message;  // one line naming the argument or the failing call
  bool ok() const { return code == Code::kOk; }
};

// Throws flashnorm::Error(status.message) when !status.ok().
void throw_if_error(const Status& status);

// RMSNorm, the baseline the unfused path uses (FlashInfer/vLLM-style: one CTA per row, 16-byte
// loads, fp32 sum of squares).
//   h = residual ? round(x + residual) : x          (h written to residual_out when residual !=
//   null) y = round(h * rstd(h) * G),  G = gain ? (gain_one_plus ? 1 + gain : gain) : 1
// Shapes: x, residual, residual_out, y: [M, K] with row strides ldx, ld_res, ld_res_out, ldy;
// gain: [K]. K <= 32768 and K % 8 == 0. eps is added inside the square root (HF Llama/Gemma/Qwen).
struct RmsNormArgs {
  DType dtype = DType::kBF16;
  int64_t M = 0, K = 0;
  const void* x = nullptr;
  int64_t ldx = 0;
  const void* gain = nullptr;      // nullable: no gain
  bool gain_one_plus = false;      // Gemma's (1 + w) convention
  const void* residual = nullptr;  // nullable: no fused residual add
  int64_t ld_res = 0;
  void* residual_out = nullptr;  // required when residual != null (may equal residual)
  int64_t ld_res_out = 0;
  void* y = nullptr;
  int64_t ldy = 0;
  float eps = 1e-6f;
  // Launch with programmatic dependent launch: the kernel may start before the preceding kernel on
  // the stream has finished and waits for it before its first memory access (sm_90).
  bool pdl = false;
};
Status rms_norm(const RmsNormArgs& a, cudaStream_t stream);

// Gated linear unit activation: SiLU (SwiGLU, Llama) or the tanh approximation of GELU (GeGLU,
// Gemma; HF gelu_pytorch_tanh).
enum class GluKind { kSwiGLU, kGeGLU };

// rstd[m] = 1 / sqrt(mean_k x[m, k]^2 + eps) in fp32, one warp per row. rstd: [M] fp32 device.
Status row_rstd(DType dtype, int64_t M, int64_t K, const void* x, int64_t ldx, float eps,
                float* rstd, cudaStream_t stream);

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
//              and every k-tile's sum). Or (configurations >= kPrefillTiles * kPrefillOrders)
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
//  kTwoStream: the seed's scheme: cuBLASLt GEMM on the caller's stream, rstd on a side stream,
//              events recorded on both, the post-scale kernel waits on both events.
//  kAuto:      see LinearContext::choose.
enum class LinearImpl { kAuto, kDecode, kPrefill, kTwoStream };
const char* impl_name(LinearImpl impl);

// Test hooks for the race tests; never set in production.
struct DebugHooks {
  // kTwoStream: skip the event wait on the rstd stream; kPrefill by PDL: skip both
  // griddepcontrol.wait (the rstd kernel's, for the kernel before it, and the GEMM's, before its
  // epilogue reads rstd): the bugs the race tests must catch
  bool no_join = false;
  long long delay_gemm_cycles = 0;  // spin kernel before the GEMM (caller's stream)
  // kTwoStream / prescale: spin kernel before the rstd (norm) kernel; kPrefill by PDL: every warp
  // of the rstd kernel spins this long, once, before it reads x and writes rstd (after it has let
  // the GEMM launch)
  long long delay_rstd_cycles = 0;
  int decode_ksplit = 0;   // >0: force the decode kernel's split-K factor
  int decode_rw = 0;       // >0: force the decode CTA's row-warps (1, 2 or 4)
  int decode_kw = 0;       // >0: force the decode CTA's k-warps (rw * kw <= 8)
  int decode_stages = -1;  // >=0: force the decode kernel's cp.async stages (0, 3 or 4)
  int prefill_tile =
      -2;  // >=0: force a fused prefill configuration (prefill_tile_name); -1: prescale
  bool prefill_prescale = false;  // kPrefill: take the prescale path even when fused is built
  // kPrefill, bf16: run the fused kernel WITHOUT the sum of squares and the scale (y = x W^T, a
  // wrong flashnorm result): the benchmark's measure of the in-kernel reduction's cost.
  bool prefill_plain_gemm = false;
};

// Launch configuration of the decode kernel: rw row-warps (16 output features each) x kw k-warps
// per CTA (rw * kw <= 8), ks CTAs along K (split-K; 1 = none), stages: 0 = W streamed through a
// register double buffer, 3 or 4 = through a per-thread cp.async ring of that many batches in
// shared memory (M <= 8 only; a call with the GLU input takes the register path).
struct DecodeConfig {
  int rw = 0, kw = 0, ks = 0, stages = 0;
};

// Owns what the implementations need: the cuBLASLt handle and workspace, cached GEMM plans, the
// side stream and its events, the rstd buffer and the decode kernel's split-K workspace. Buffers
// grow on demand; growing is refused while a stream is being captured (warm up eagerly first).
// One context per device and host thread; not thread-safe.
class LinearContext {
 public:
  LinearContext();  // on the current device; throws flashnorm::Error if CUDA/cuBLASLt init fails
  ~LinearContext();
  LinearContext(const LinearContext&) = delete;
  LinearContext& operator=(const LinearContext&) = delete;

  Status run(const LinearArgs& a, LinearImpl impl, cudaStream_t stream);
  // kAuto's choice: kDecode for M <= kAutoDecodeMaxM; without bias/mask, for M <= 64 kDecode when
  // tune_decode (for this padded M, N, K) and tune_prefill (this exact shape) both timed it and
  // decode was faster, else kPrefill; with bias/mask kTwoStream. Only M, N, K, bias and scale_mask
  // of `a` are read; no validation (run() validates).
  LinearImpl choose(const LinearArgs& a);
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
  const std::string& last_prefill_path() const { return last_prefill_path_; }
  // Decode configuration for this shape: debug overrides, else the tuned value (tune_decode), else
  // a heuristic (rw = 1, kw = 8 for M <= 8, about 8 warps per SM in total, split-K when the row
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
  // their y are overwritten), times its replay with CUDA events (median of 5), then times the four
  // fastest again in 5 interleaved sweeps (time_interleaved) and caches the fastest of those for
  // (padded M, N, K). Synchronizes the stream; must not be called during capture. Returns the
  // choice ({} on error); *best_us (optional) receives its time per call in microseconds
  // (interleaved median), *timings (optional) every candidate's configuration and first-pass time
  // per call in microseconds, in the order timed.
  DecodeConfig tune_decode(const LinearArgs* sets, int n, cudaStream_t stream,
                           Status* status = nullptr, double* best_us = nullptr,
                           std::vector<std::pair<DecodeConfig, double>>* timings = nullptr,
                           bool ring = true);

  // kPrefill's choice for this shape: a fused tile configuration (>= 0) or kPrefillPrescale (debug
  // override, else the tuned value, else a heuristic: above M*N*K = 4e9 the register-A 128x256
  // tile when it fills every SM, else prescale; below, the largest shared-memory tile that still
  // gives every SM a tile).
  // A fused configuration is tile + kPrefillTiles * order (+ kPrefillPdlFirst for rstd kernel +
  // PDL): the CTA tile / mainloop (0 .. 9) and the persistent tile scheduler's order
  // of the output tiles (0 .. kPrefillOrders - 1: CUTLASS's default, then raster along M or N with
  // swizzle 1, 2, 4, 8; a runtime argument of the same kernel, it changes which tiles run
  // concurrently and so what the L2 holds).
  static constexpr int kPrefillPrescale = -1;
  int prefill_tile(int64_t M, int64_t N, int64_t K) const;
  // "RS 128x256 cluster 2x1 cooperative, raster N swizzle 4" (tile, then the order unless default,
  // then ", rstd kernel + PDL" for those configurations); "?" outside 0 .. kPrefillConfigs - 1.
  static std::string prefill_tile_name(int config);
  static constexpr int kPrefillTiles = 10;  // tile configurations 0 .. 9
  static constexpr int kPrefillOrders = 9;  // tile-scheduler orders 0 .. 8
  // Every configuration: tile + kPrefillTiles * order (rstd in the mainloop), the same plus
  // kPrefillPdlFirst (rstd kernel + PDL).
  static constexpr int kPrefillPdlFirst = kPrefillTiles * kPrefillOrders;
  static constexpr int kPrefillConfigs = 2 * kPrefillPdlFirst;
  // Whether this build has the fused prefill kernel (built with the CUTLASS headers).
  static bool has_fused_prefill();
  // Autotune kPrefill for one shape like tune_decode: the prescale path and every fused tile in
  // CUTLASS's default order with both ways of getting rstd (in the mainloop; rstd kernel + PDL),
  // then every other order of the fastest fused configuration, each a graph of calls over the n
  // argument sets timed with CUDA events; the four fastest are timed again interleaved (as in
  // tune_decode) and the fastest of those is cached for (M, N, K).
  // Returns it (a fused configuration or kPrefillPrescale), or -2 on error or when this build has
  // no fused prefill.
  // *best_fused (optional): the fastest fused configuration with rstd in the mainloop even when
  // another won, *best_pdl (optional) the fastest with rstd kernel + PDL (-2 if none).
  int tune_prefill(const LinearArgs* sets, int n, cudaStream_t stream, Status* status = nullptr,
                   double* best_us = nullptr, int* best_fused = nullptr, int* best_pdl = nullptr);
  // Autotune the plain cuBLASLt GEMM y = x W^T of one shape (what `gemm` runs: the prescale
  // path's and the two-stream path's GEMM, the benchmark's bare and unfused baselines): up to 16
  // algorithms from cuBLASLt's heuristic (32 MiB workspace), each timed like tune_decode on the n
  // argument sets (x, w, y, ldx, ldw, ldy, y_f32 used; no bias, mask or scale; the three fastest
  // timed again interleaved); the fastest
  // replaces the heuristic's first choice in the cached plan of that (dtype, M, N, K, ld*, y_f32).
  // Returns its time per call in microseconds (-1 on error, *status set); *n_algos (optional):
  // how many algorithms were timed.
  double tune_gemm(const LinearArgs* sets, int n, cudaStream_t stream, Status* status = nullptr,
                   int* n_algos = nullptr);

  // What tune_shape measured (microseconds per call; -1 / -2 where not tuned).
  struct ShapeTuning {
    double gemm_us = -1;  // tune_gemm
    int gemm_algos = 0;
    double decode_us = -1;  // tune_decode (M <= 64), with every candidate it timed
    std::vector<std::pair<DecodeConfig, double>> decode_candidates;
    double prefill_us = -1;   // tune_prefill: its choice (a fused configuration or prescale)
    int prefill_config = -2;  // and its configuration
    int prefill_fused = -2;   // the fastest with rstd in the mainloop
    int prefill_pdl = -2;     // the fastest with rstd kernel + PDL
  };
  // Everything run() may use for the shape of the n argument sets, in this order: tune_gemm,
  // tune_decode (M <= 64), tune_prefill (kUnsupported from it, e.g. no CUTLASS in the build,
  // leaves prefill untuned and is not an error). Same requirements as those; stops at the first
  // error and returns it.
  Status tune_shape(const LinearArgs* sets, int n, cudaStream_t stream, ShapeTuning* out);

  DebugHooks debug;

  // Bumped whenever a workspace buffer is reallocated: a CUDA graph captured before a change holds
  // pointers to freed memory and must be captured again.
  uint64_t workspace_generation() const { return workspace_generation_; }

 private:
  struct Plan;
  Status run_decode(const LinearArgs& a, cudaStream_t s);
  Status run_prefill(const LinearArgs& a, cudaStream_t s);
  Status run_two_stream(const LinearArgs& a, cudaStream_t s);
  // *refused: CUTLASS cannot implement this tile for the shape (the caller may fall back).
  Status run_prefill_fused(const LinearArgs& a, int tile, cudaStream_t s, bool* refused);
  int rstd_ctas(int64_t M, int64_t N, int config) const;  // rstd kernel of a PDL configuration
  Status run_prescale(const LinearArgs& a, cudaStream_t s);
  // Times graph replays of `reps` calls of run(sets[r % n]) (median of 5); *ms per graph.
  template <class Run>
  Status time_graph(const Run& run, const LinearArgs* sets, int n, int reps, cudaStream_t stream,
                    float* ms);
  // The tuners' final round: candidate i's graph of `reps` calls run(i, sets[r % n]) is captured
  // for every i first, then `rounds` sweeps launch every graph once, starting at the next candidate
  // each sweep, so that the finalists share the card's clock history (a sequential first pass
  // times later candidates on a hotter, slower card). *median_ms: per candidate, ms per graph.
  Status time_interleaved(int count, const std::function<Status(int, const LinearArgs&)>& run,
                          const LinearArgs* sets, int n, int reps, cudaStream_t stream, int rounds,
                          std::vector<float>* median_ms);
  // The tuners' playoff: the k fastest candidates by their first-pass times ms (indices into ms),
  // timed again with time_interleaved (5 sweeps; run(candidate, x) runs one). *winner: the fastest
  // of those (-1 when fewer than two candidates: nothing to decide), *winner_ms its median.
  Status playoff(const std::vector<float>& ms, int k,
                 const std::function<Status(int, const LinearArgs&)>& run, const LinearArgs* sets,
                 int n, int reps, cudaStream_t stream, int* winner, float* winner_ms);
  Status ensure(void** buf, size_t* cap, size_t bytes, cudaStream_t s, const char* what);
  Status get_plan(DType dt, int64_t M, int64_t N, int64_t K, int64_t ldx, int64_t ldw, int64_t ldy,
                  bool row_alpha, bool y_f32, Plan** out);

  void* lt_ = nullptr;  // cublasLtHandle_t
  void* ws_ = nullptr;  // cuBLASLt workspace
  size_t ws_bytes_ = 0;
  cudaStream_t side_ = nullptr;
  cudaEvent_t ev_fork_ = nullptr, ev_gemm_ = nullptr, ev_rstd_ = nullptr;
  void* rstd_ = nullptr;
  size_t rstd_cap_ = 0;
  void* xs_ = nullptr;  // prefill: the prescaled x
  size_t xs_cap_ = 0;
  void* part_ = nullptr;  // decode split-K partials
  size_t part_cap_ = 0;
  unsigned* counters_ = nullptr;  // decode split-K arrival counters (self-resetting)
  int num_sms_ = 132;
  std::map<std::tuple<int, int64_t, int64_t, int64_t, int64_t, int64_t, int64_t, bool, bool>,
           std::unique_ptr<Plan>>
      plans_;
  std::string last_prefill_path_;
  uint64_t workspace_generation_ = 0;
  // The tuned choices with their graph-timed microseconds per call (choose()'s input; -1: set,
  // not timed), decode by padded M, prefill by exact M. Both tuners time on the card as it is at
  // that moment, decode first; a candidate timed on a hotter card is disadvantaged (no
  // interleaving across them).
  struct TunedDecode {
    DecodeConfig config;
    double us = -1;
  };
  struct TunedPrefill {
    int config = kPrefillPrescale;
    double us = -1;
  };
  std::map<std::tuple<int, int64_t, int64_t>, TunedDecode> tuned_;
  std::map<std::tuple<int64_t, int64_t, int64_t>, TunedPrefill> tuned_prefill_;
  void init();                  // the constructor's body (throws flashnorm::Error)
  void release() noexcept;      // frees every resource (destructor, and a constructor that throws)
  void* prefill_ws_ = nullptr;  // the fused prefill kernel's tile-scheduler workspace
  size_t prefill_ws_cap_ = 0;
};

// Validation shared by all entry points (exposed for tests): empty Status when the arguments are
// acceptable for `impl`, else kInvalidArgument/kUnsupported naming the field.
Status validate_linear(const LinearArgs& a, LinearImpl impl);

}  // namespace flashnorm::kernels::cuda
