// LinearContext: construction, dispatch (kAuto's choice, explicit configurations) and the three
// flashnorm_linear implementations (decode, prefill, two-stream). Source: docs/design.md
// (deferred normalization, the join). Tuners: autotune.cpp; cuBLASLt: cublaslt_plan.cpp.
#include <cuda_runtime.h>
#include <fmt/format.h>

#include <algorithm>

#include "check.h"
#include "flashnorm/error.h"
#include "flashnorm/kernels/cuda/linear.h"
#include "flashnorm/kernels/cuda/rms_norm.h"
#include "launch.h"
#include "linear_context_impl.h"
#include "prefill_sm90.h"

namespace flashnorm::kernels::cuda {

using detail::invalid;

const char* impl_name(LinearImpl impl) {
  switch (impl) {
    case LinearImpl::kAuto:
      return "auto";
    case LinearImpl::kDecode:
      return "decode";
    case LinearImpl::kPrefill:
      return "prefill";
    case LinearImpl::kTwoStream:
      return "two_stream";
  }
  return "?";
}

std::string PrefillConfig::name() const {
  return is_fused() ? detail::prefill_tile_name(detail::prefill_index(*this)) : "prescale";
}

// ---- construction -------------------------------------------------------------------------------

LinearContext::LinearContext() : p_(std::make_unique<Impl>()) {}
LinearContext::~LinearContext() = default;

LinearContext::Impl::Impl() {
  // The destructor does not run for a constructor that throws: release what was created first.
  try {
    int dev = 0;
    if (cudaGetDevice(&dev) != cudaSuccess) throw flashnorm::Error("LinearContext: no CUDA device");
    cudaDeviceGetAttribute(&num_sms, cudaDevAttrMultiProcessorCount, dev);
    auto chk = [](cudaError_t e, const char* what) {
      if (e != cudaSuccess)
        throw flashnorm::Error(fmt::format("LinearContext: {}: {}", what, cudaGetErrorString(e)));
    };
    chk(cudaStreamCreateWithFlags(&side, cudaStreamNonBlocking), "cudaStreamCreate");
    chk(cudaEventCreateWithFlags(&ev_fork, cudaEventDisableTiming), "cudaEventCreate");
    chk(cudaEventCreateWithFlags(&ev_gemm, cudaEventDisableTiming), "cudaEventCreate");
    chk(cudaEventCreateWithFlags(&ev_rstd, cudaEventDisableTiming), "cudaEventCreate");
    constexpr size_t kCounters = 1 << 16;
    chk(cudaMalloc(&counters, kCounters * sizeof(unsigned)), "cudaMalloc(counters)");
    chk(cudaMemset(counters, 0, kCounters * sizeof(unsigned)), "cudaMemset(counters)");
  } catch (...) {
    release();
    throw;
  }
}

LinearContext::Impl::~Impl() { release(); }

void LinearContext::Impl::release() noexcept {
  cudaFree(rstd);
  cudaFree(xs);
  cudaFree(part);
  cudaFree(prefill_ws);
  cudaFree(counters);
  if (side) cudaStreamDestroy(side);
  for (auto e : {ev_fork, ev_gemm, ev_rstd})
    if (e) cudaEventDestroy(e);
  rstd = xs = part = prefill_ws = nullptr, counters = nullptr;
  side = nullptr, ev_fork = ev_gemm = ev_rstd = nullptr;
}

Status LinearContext::Impl::ensure(void** buf, size_t* cap, size_t bytes, cudaStream_t s,
                                   const char* what) {
  if (bytes <= *cap) return {};
  cudaStreamCaptureStatus cs = cudaStreamCaptureStatusNone;
  FN_CUDA(cudaStreamIsCapturing(s, &cs));
  if (cs != cudaStreamCaptureStatusNone)
    return {Code::kUnsupported,
            fmt::format(
                "{} must grow to {} bytes during stream capture: run the shape once eagerly first",
                what, bytes)};
  FN_CUDA(cudaStreamSynchronize(s));
  FN_CUDA(cudaStreamSynchronize(side));
  ++workspace_generation;  // graphs captured before now point at the buffer freed here
  cudaFree(*buf);
  *buf = nullptr;
  *cap = 0;
  FN_CUDA(cudaMalloc(buf, bytes));
  *cap = bytes;
  return {};
}

// ---- accessors ----------------------------------------------------------------------------------

const std::string& LinearContext::last_prefill_path() const { return p_->last_prefill_path; }
uint64_t LinearContext::workspace_generation() const { return p_->workspace_generation; }
void LinearContext::set_race_hooks(const RaceHooks& hooks) { p_->race = hooks; }
const RaceHooks& LinearContext::race_hooks() const { return p_->race; }
bool LinearContext::has_fused_prefill() { return detail::prefill_fused_available(); }

Status LinearContext::gemm(DType dtype, int64_t M, int64_t N, int64_t K, const void* x, int64_t ldx,
                           const void* w, int64_t ldw, void* y, int64_t ldy,
                           const float* alpha_rows, cudaStream_t stream, bool y_f32) {
  return p_->lt.gemm(dtype, M, N, K, x, ldx, w, ldw, y, ldy, alpha_rows, stream, y_f32);
}

// ---- configurations -----------------------------------------------------------------------------

bool detail::valid_decode_config(const DecodeConfig& c, int M, int K) {
  if (!(c.rw == 1 || c.rw == 2 || c.rw == 4) || c.kw < 1 || c.ks < 1) return false;
  if (c.rw * c.kw * 32 > kDecodeMaxThreads) return false;
  if (decode_smem_bytes(M, c.rw, c.kw) > static_cast<size_t>(kDecodeMaxSmem)) return false;
  if (!(c.stages == 0 || c.stages == 3 || c.stages == 4)) return false;
  if (c.stages > 0 && (M > 8 || decode_smem_bytes(M, c.rw, c.kw, 0, c.stages) >
                                    static_cast<size_t>(kDecodeMaxSmemRing)))
    return false;
  return c.ks == 1 || K / c.ks >= 32;
}

Status LinearContext::set_decode_config(int64_t M, int64_t N, int64_t K, const DecodeConfig& c) {
  if (M < 1 || M > detail::kMaxDecodeM || N < 1 || K < 1 ||
      !detail::valid_decode_config(c, static_cast<int>(M), static_cast<int>(K)))
    return invalid(
        fmt::format("set_decode_config: rw={} kw={} ks={} stages={} is not a decode "
                    "configuration for M={} N={} K={}",
                    c.rw, c.kw, c.ks, c.stages, M, N, K));
  p_->tuned_decode[{detail::decode_mp(static_cast<int>(M)), N, K}] = {c, -1.0};  // not timed here
  return {};
}

DecodeConfig LinearContext::decode_config(int64_t M, int64_t N, int64_t K) const {
  return p_->decode_config(M, N, K);
}

DecodeConfig LinearContext::Impl::decode_config(int64_t M, int64_t N, int64_t K) const {
  auto it = tuned_decode.find({detail::decode_mp(static_cast<int>(M)), N, K});
  if (it != tuned_decode.end()) return it->second.config;
  DecodeConfig c;
  c.rw = 1;  // the tuner picked rw = 1 on every benchmark shape (docs/kernels.md)
  c.kw = M <= 16 ? 8 : 4;
  const int64_t ctas = (N + 16 * c.rw - 1) / (16 * c.rw);
  const int64_t target = 2 * num_sms;
  int64_t ks = (target + ctas - 1) / ctas;
  const int64_t max_ks = std::max<int64_t>(1, K / (32 * c.kw));  // >= 32 k per warp
  c.ks = static_cast<int>(std::clamp<int64_t>(ks, 1, std::min<int64_t>(max_ks, 8)));
  return c;
}

PrefillConfig LinearContext::prefill_config(int64_t M, int64_t N, int64_t K) const {
  return p_->prefill_config(M, N, K);
}

PrefillConfig LinearContext::Impl::prefill_config(int64_t M, int64_t N, int64_t K) const {
  auto it = tuned_prefill.find({M, N, K});
  if (it != tuned_prefill.end()) return it->second.config;
  // Untuned: detail::prefill_default_tile (measurements in docs/kernels.md).
  return detail::prefill_from_index(detail::prefill_default_tile(
      static_cast<int>(M), static_cast<int>(N), static_cast<int>(K), num_sms));
}

// ---- dispatch -----------------------------------------------------------------------------------

LinearImpl LinearContext::choose(const LinearArgs& a) const {
  if (a.M <= kAutoDecodeMaxM) return LinearImpl::kDecode;
  if (!a.bias && !a.scale_mask) {
    if (a.M <= detail::kMaxDecodeM) {  // both tuned for this shape: the faster one
      const auto d = p_->tuned_decode.find({detail::decode_mp(static_cast<int>(a.M)), a.N, a.K});
      const auto p = p_->tuned_prefill.find({a.M, a.N, a.K});
      if (d != p_->tuned_decode.end() && p != p_->tuned_prefill.end() && d->second.us >= 0 &&
          p->second.us >= 0 && d->second.us < p->second.us)
        return LinearImpl::kDecode;
    }
    return LinearImpl::kPrefill;
  }
  return LinearImpl::kTwoStream;
}

Status LinearContext::run(const LinearArgs& a, LinearImpl impl, cudaStream_t stream) {
  if (impl == LinearImpl::kAuto) impl = choose(a);
  Status st = validate_linear(a, impl);
  if (!st.ok()) return st;
  switch (impl) {
    case LinearImpl::kDecode:
      return p_->run_decode(a, p_->decode_config(a.M, a.N, a.K), stream);
    case LinearImpl::kPrefill:
      return p_->run_prefill(a, p_->prefill_config(a.M, a.N, a.K), stream);
    case LinearImpl::kTwoStream:
      return p_->run_two_stream(a, stream);
    default:
      return invalid("flashnorm_linear: unknown implementation");
  }
}

Status LinearContext::run(const LinearArgs& a, const DecodeConfig& config, cudaStream_t stream) {
  Status st = validate_linear(a, LinearImpl::kDecode);
  return st.ok() ? p_->run_decode(a, config, stream) : st;
}

Status LinearContext::run(const LinearArgs& a, const PrefillConfig& config, cudaStream_t stream) {
  Status st = validate_linear(a, LinearImpl::kPrefill);
  return st.ok() ? p_->run_prefill(a, config, stream) : st;
}

// ---- the implementations ------------------------------------------------------------------------

Status LinearContext::Impl::run_decode(const LinearArgs& a, DecodeConfig c, cudaStream_t s) {
  detail::DecodeParams p{};
  p.x = a.x, p.ldx = a.ldx, p.w = a.w, p.ldw = a.ldw, p.y = a.y, p.ldy = a.ldy;
  p.bias = a.bias, p.mask = a.scale_mask, p.y_f32 = a.y_f32 ? 1 : 0;
  p.accumulate = a.accumulate ? 1 : 0, p.y_rounded = a.y_rounded;
  p.x_glu = !a.x_glu ? 0 : (a.glu_kind == GluKind::kSwiGLU ? 1 : 2);
  p.M = static_cast<int>(a.M), p.N = static_cast<int>(a.N), p.K = static_cast<int>(a.K),
  p.eps = a.eps;
  if (a.x_glu) c.stages = 0;  // the ring path has no GLU input: same shape, register path
  if (!detail::valid_decode_config(c, p.M, p.K))
    return invalid(
        fmt::format("flashnorm_linear: bad decode configuration rw={} kw={} ks={} stages={}", c.rw,
                    c.kw, c.ks, c.stages));
  const int rows = 16 * c.rw;
  const int nrb = static_cast<int>((a.N + rows - 1) / rows);
  if (nrb > (1 << 16))
    return {Code::kUnsupported, "flashnorm_linear: N too large for the decode kernel"};
  int ks = c.ks;
  int kchunk = static_cast<int>(detail::decode_kchunk(a.K, ks));
  ks = static_cast<int>((a.K + kchunk - 1) / kchunk);
  p.rw = c.rw, p.kw = c.kw, p.stages = c.stages;
  p.pdl = a.pdl ? 1 : 0;
  p.ksplit = ks, p.kchunk = kchunk, p.n_pad = nrb * rows;
  if (a.x_glu && detail::decode_smem_bytes(p.M, c.rw, c.kw, kchunk) >
                     static_cast<size_t>(detail::kDecodeMaxSmem))
    return {Code::kUnsupported,
            fmt::format("flashnorm_linear: x_glu stages M x {} elements, more than the decode "
                        "kernel's shared memory",
                        kchunk)};
  p.counters = counters;
  if (ks > 1) {
    const int mp = detail::decode_mp(p.M);
    const size_t part_elems = static_cast<size_t>(ks) * mp * p.n_pad;
    const size_t ss_elems = static_cast<size_t>(ks) * nrb * mp;
    Status st = ensure(&part, &part_cap, (part_elems + ss_elems) * sizeof(float), s,
                       "decode split-K workspace");
    if (!st.ok()) return st;
    p.part = static_cast<float*>(part);
    p.ss_part = p.part + part_elems;
  }
  if (race.delay_gemm_cycles > 0) FN_CUDA(detail::launch_spin(race.delay_gemm_cycles, s));
  FN_CUDA(detail::launch_decode(a.dtype, p, s));
  return {};
}

Status LinearContext::Impl::run_prefill(const LinearArgs& a, const PrefillConfig& c,
                                        cudaStream_t s) {
  if (a.bias || a.scale_mask || a.K > 32768) {  // prescale: no per-column mask, K <= 32768
    last_prefill_path = "two_stream_fallback";
    return run_two_stream(a, s);
  }
  if (detail::prefill_fused_available() && c.is_fused()) {
    bool refused = false;
    Status st = run_prefill_fused(a, c, s, &refused);
    if (!refused) {
      if (st.ok())
        last_prefill_path = c.rstd == PrefillConfig::Rstd::kKernelPdl ? "rstd_pdl" : "fused";
      return st;
    }  // CUTLASS refuses the shape: prescale below
  }
  return run_prescale(a, s);
}

Status LinearContext::Impl::run_prefill_fused(const LinearArgs& a, const PrefillConfig& c,
                                              cudaStream_t s, bool* refused) {
  if (refused) *refused = false;
  if (a.bias || a.scale_mask || a.accumulate || a.x_glu) {
    if (refused) *refused = true;
    return {Code::kUnsupported,
            "flashnorm_linear: the fused prefill has no bias, scale mask or fused ops"};
  }
  const int config = detail::prefill_index(c);
  if (config < 0) return invalid("flashnorm_linear: not a fused prefill configuration");
  const bool plain = c.plain_gemm;
  Status st = ensure(&prefill_ws, &prefill_ws_cap,
                     detail::prefill_fused_workspace(a, config, plain, num_sms), s,
                     "fused prefill workspace");
  if (!st.ok()) return st;
  detail::PrefillRstd r;
  if (!plain && c.rstd == PrefillConfig::Rstd::kKernelPdl) {
    // rounded up to whole 16-byte vectors: the epilogue's column broadcast may load rstd in
    // vectors of up to 4 floats, predicated on the first element's row
    st = ensure(&rstd, &rstd_cap, static_cast<size_t>((a.M + 3) / 4 * 4) * sizeof(float), s,
                "rstd buffer");
    if (!st.ok()) return st;
    r.rstd = static_cast<float*>(rstd);
    r.ctas = rstd_ctas(a.M, a.N, config);
    r.delay = race.delay_rstd_cycles;
    r.join = !race.no_join;
  }
  if (race.delay_gemm_cycles > 0) FN_CUDA(detail::launch_spin(race.delay_gemm_cycles, s));
  bool cutlass_refused = false;
  st = detail::launch_prefill_fused(a, config, plain, num_sms, prefill_ws, s, &cutlass_refused, &r);
  if (refused) *refused = cutlass_refused;
  return st;
}

// CTAs of the rstd kernel behind a PDL prefill GEMM of configuration `config`: the persistent GEMM
// fills min(tiles, SMs) SMs with one CTA each, and a GEMM CTA does not fit beside an rstd CTA
// (registers), so the rstd kernel takes the SMs the GEMM leaves idle when there are at least 8
// (its GEMM CTAs then start at once); otherwise one CTA per SM at most, so that it finishes fast.
int LinearContext::Impl::rstd_ctas(int64_t M, int64_t N, int config) const {
  const detail::PrefillTileShape t = detail::prefill_tile_shape(config);
  const int64_t tiles = ((M + t.bm - 1) / t.bm) * ((N + t.bn - 1) / t.bn);
  const int64_t idle = num_sms - std::min<int64_t>(tiles, num_sms);
  const int64_t warp_rows = (M + 7) / 8;  // CTAs of 8 warps, one row per warp
  if (idle >= 8) return static_cast<int>(std::min(idle, warp_rows));
  return static_cast<int>(std::min<int64_t>(num_sms, warp_rows));
}

Status LinearContext::Impl::run_prescale(const LinearArgs& a, cudaStream_t s) {
  const size_t esz = 2;
  Status st = ensure(&xs, &xs_cap, static_cast<size_t>(a.M) * a.K * esz, s, "prescale buffer");
  if (!st.ok()) return st;
  if (race.delay_rstd_cycles > 0) FN_CUDA(detail::launch_spin(race.delay_rstd_cycles, s));
  RmsNormArgs r;
  r.dtype = a.dtype, r.M = a.M, r.K = a.K, r.x = a.x, r.ldx = a.ldx, r.gain = nullptr;
  r.y = xs, r.ldy = a.K, r.eps = a.eps;
  FN_CUDA(detail::launch_rms_norm(r, s));  // x_s = x * rstd(x), fp32 sum of squares
  if (race.delay_gemm_cycles > 0) FN_CUDA(detail::launch_spin(race.delay_gemm_cycles, s));
  // Join: the GEMM is stream-ordered after the prescale kernel that wrote x_s.
  st = lt.gemm(a.dtype, a.M, a.N, a.K, xs, a.K, a.w, a.ldw, a.y, a.ldy, nullptr, s, a.y_f32);
  if (st.ok()) last_prefill_path = "prescale";
  return st;
}

Status LinearContext::Impl::run_two_stream(const LinearArgs& a, cudaStream_t s) {
  Status st = ensure(&rstd, &rstd_cap, static_cast<size_t>(a.M) * sizeof(float), s, "rstd buffer");
  if (!st.ok()) return st;
  float* r = static_cast<float*>(rstd);
  // fork: the side stream starts after everything already queued on s (x is ready, and the previous
  // step's post-scale has finished reading rstd)
  FN_CUDA(cudaEventRecord(ev_fork, s));
  FN_CUDA(cudaStreamWaitEvent(side, ev_fork, 0));
  if (race.delay_rstd_cycles > 0) FN_CUDA(detail::launch_spin(race.delay_rstd_cycles, side));
  FN_CUDA(detail::launch_rstd(a.dtype, a.M, a.K, a.x, a.ldx, a.eps, r, side));
  FN_CUDA(cudaEventRecord(ev_rstd, side));
  if (race.delay_gemm_cycles > 0) FN_CUDA(detail::launch_spin(race.delay_gemm_cycles, s));
  st = lt.gemm(a.dtype, a.M, a.N, a.K, a.x, a.ldx, a.w, a.ldw, a.y, a.ldy, nullptr, s, a.y_f32);
  if (!st.ok()) return st;
  FN_CUDA(cudaEventRecord(ev_gemm, s));
  // the join: the post-scale waits on both producers' events
  if (!race.no_join) {
    FN_CUDA(cudaStreamWaitEvent(s, ev_rstd, 0));
    FN_CUDA(cudaStreamWaitEvent(s, ev_gemm, 0));
  }
  FN_CUDA(
      detail::launch_postscale(a.dtype, a.M, a.N, a.y, a.ldy, r, a.bias, a.scale_mask, s, a.y_f32));
  return {};
}

}  // namespace flashnorm::kernels::cuda
