// LinearContext's tuners (linear.h): tune_gemm (cuBLASLt algorithms), tune_decode (decode kernel
// launch configurations), tune_prefill (prescale and every fused CUTLASS configuration) and
// tune_shape. Each times every candidate as a CUDA graph over rotating argument sets
// (graph_timer.h), then plays the fastest few off against each other interleaved.
#include <cuda_runtime.h>

#include <algorithm>
#include <functional>
#include <vector>

#include "check.h"
#include "flashnorm/kernels/cuda/graph_timer.h"
#include "flashnorm/kernels/cuda/linear.h"
#include "launch.h"
#include "linear_context_impl.h"
#include "prefill_sm90.h"

namespace flashnorm::kernels::cuda {

using detail::invalid;

namespace {
// Runs candidate `i` once on argument set x.
using Run = std::function<Status(int i, const LinearArgs& x)>;

// The interleaved graph times (median of `rounds`, ms per graph of `reps` calls cycling over the n
// argument sets) of the candidates ids[0 .. count - 1].
Status time_candidates(const std::vector<int>& ids, const Run& run, const LinearArgs* sets, int n,
                       int reps, cudaStream_t stream, std::vector<float>* median_ms) {
  std::vector<std::vector<float>> times;
  GraphTimerOptions o;  // one warm-up call, one warm replay, 5 sweeps
  const Status st = time_graphs_interleaved(
      static_cast<int>(ids.size()), reps,
      [&](int v, int r, cudaStream_t) { return run(ids[v], sets[r % n]); }, stream, o, &times);
  median_ms->assign(ids.size(), 1e30f);
  for (size_t i = 0; i < ids.size() && st.ok(); ++i) (*median_ms)[i] = median(times[i]);
  return st;
}

// A candidate's first-pass time: its graph alone, median of 5 replays (ms per graph).
Status time_one(int i, const Run& run, const LinearArgs* sets, int n, int reps, cudaStream_t stream,
                float* ms) {
  std::vector<float> med;
  const Status st = time_candidates({i}, run, sets, n, reps, stream, &med);
  *ms = med[0];
  return st;
}

// The tuners' playoff: the k fastest candidates by their first-pass times ms (indices into ms),
// timed again interleaved (so that the finalists share the card's clock history: a sequential
// first pass times later candidates on a hotter, slower card). *winner: the fastest of those (-1
// when fewer than two candidates: nothing to decide), *winner_ms its median.
Status playoff(const std::vector<float>& ms, int k, const Run& run, const LinearArgs* sets, int n,
               int reps, cudaStream_t stream, int* winner, float* winner_ms) {
  *winner = -1;
  std::vector<int> fin(ms.size());  // the k fastest, fastest first
  for (size_t i = 0; i < fin.size(); ++i) fin[i] = static_cast<int>(i);
  std::stable_sort(fin.begin(), fin.end(), [&](int a, int b) { return ms[a] < ms[b]; });
  if (static_cast<int>(fin.size()) > k) fin.resize(k);
  if (fin.size() < 2) return {};
  std::vector<float> med;
  const Status st = time_candidates(fin, run, sets, n, reps, stream, &med);
  for (size_t i = 0; i < fin.size() && st.ok(); ++i)
    if (i == 0 || med[i] < *winner_ms) *winner_ms = med[i], *winner = fin[i];
  return st;
}

// Every argument set valid for `impl` and of the first one's shape.
Status same_shape(const LinearArgs* sets, int n, LinearImpl impl, const char* who) {
  if (n < 1) return invalid(std::string(who) + ": no argument sets");
  for (int i = 0; i < n; ++i) {
    Status st = validate_linear(sets[i], impl);
    if (!st.ok()) return st;
    if (sets[i].M != sets[0].M || sets[i].N != sets[0].N || sets[i].K != sets[0].K)
      return invalid(std::string(who) + ": argument sets differ in shape");
  }
  return {};
}

// Clears the race hooks while a tuner runs (it tunes what production runs).
class NoRaceHooks {
 public:
  explicit NoRaceHooks(RaceHooks* h) : h_(h), saved_(*h) { *h = {}; }
  ~NoRaceHooks() { *h_ = saved_; }
  NoRaceHooks(const NoRaceHooks&) = delete;
  NoRaceHooks& operator=(const NoRaceHooks&) = delete;

 private:
  RaceHooks* h_;
  RaceHooks saved_;
};
}  // namespace

DecodeConfig LinearContext::tune_decode(const LinearArgs* sets, int n, cudaStream_t stream,
                                        Status* status, double* best_us,
                                        std::vector<std::pair<DecodeConfig, double>>* timings,
                                        bool ring) {
  Status st = same_shape(sets, n, LinearImpl::kDecode, "tune_decode");
  if (n < 1) {
    if (status) *status = st;
    return {};
  }
  const LinearArgs& a = sets[0];
  NoRaceHooks no_hooks(&p_->race);
  DecodeConfig best{};
  float best_ms = 1e30f;
  const int reps = std::max(32, n);
  std::vector<DecodeConfig> cand;  // every configuration timed, and its time
  std::vector<float> cand_ms;
  const Run run = [&](int i, const LinearArgs& x) { return p_->run_decode(x, cand[i], stream); };
  for (int rw : {1, 2, 4})
    for (int kw : {2, 4, 8})
      for (int ks : {1, 2, 4, 8})
        for (int stages : {0, 3, 4}) {
          const DecodeConfig c{rw, kw, ks, stages};
          if (!st.ok() ||
              !detail::valid_decode_config(c, static_cast<int>(a.M), static_cast<int>(a.K)))
            continue;
          if (stages > 0 && (a.x_glu || !ring)) continue;  // GLU input: register path only
          if (ks > 1 && a.K / ks < 32 * kw) continue;      // at least one chunk per warp
          if (a.x_glu) {  // the staged GLU input must fit next to the partials
            if (detail::decode_smem_bytes(static_cast<int>(a.M), rw, kw,
                                          static_cast<int>(detail::decode_kchunk(a.K, ks))) >
                static_cast<size_t>(detail::kDecodeMaxSmem))
              continue;
          }
          cand.push_back(c);
          float ms = 1e30f;
          st = time_one(static_cast<int>(cand.size()) - 1, run, sets, n, reps, stream, &ms);
          if (!st.ok()) {
            cand.pop_back();
            continue;
          }
          if (timings) timings->push_back({c, ms * 1e3 / reps});
          cand_ms.push_back(ms);
          if (ms < best_ms) best_ms = ms, best = c;
        }
  int w = -1;
  float w_ms = 0;
  if (st.ok()) st = playoff(cand_ms, 4, run, sets, n, reps, stream, &w, &w_ms);
  if (st.ok() && w >= 0) best_ms = w_ms, best = cand[w];
  if (status) *status = st;
  if (!st.ok()) return {};
  if (best.rw > 0)
    p_->tuned_decode[{detail::decode_mp(static_cast<int>(a.M)), a.N, a.K}] = {best,
                                                                              best_ms * 1e3 / reps};
  if (best_us) *best_us = best_ms * 1e3 / reps;
  return best;
}

std::optional<PrefillConfig> LinearContext::tune_prefill(const LinearArgs* sets, int n,
                                                         cudaStream_t stream, Status* status,
                                                         double* best_us,
                                                         std::optional<PrefillConfig>* best_fused,
                                                         std::optional<PrefillConfig>* best_pdl) {
  using Rstd = PrefillConfig::Rstd;
  if (best_fused) best_fused->reset();
  if (best_pdl) best_pdl->reset();
  Status st;
  if (n < 1) st = invalid("tune_prefill: no argument sets");
  if (st.ok() && !detail::prefill_fused_available())
    st = {Code::kUnsupported, "tune_prefill: this build has no fused prefill (CUTLASS)"};
  if (st.ok()) st = same_shape(sets, n, LinearImpl::kPrefill, "tune_prefill");
  for (int i = 0; i < n && st.ok(); ++i)
    if (sets[i].bias || sets[i].scale_mask || sets[i].K > 32768)
      st = {Code::kUnsupported,
            "tune_prefill: bias, scale mask or K > 32768 take the two-stream path"};
  NoRaceHooks no_hooks(&p_->race);
  std::optional<PrefillConfig> best, fused, inloop, pdl;
  float best_ms = 1e30f, fused_ms = 1e30f, inloop_ms = 1e30f, pdl_ms = 1e30f;
  const int reps = std::max(16, n);
  std::vector<PrefillConfig> cand;  // every configuration timed, and its time
  std::vector<float> cand_ms;
  const Run run = [&](int i, const LinearArgs& x) {
    return cand[i].is_fused() ? p_->run_prefill_fused(x, cand[i], stream, nullptr)
                              : p_->run_prescale(x, stream);
  };
  auto try_config = [&](const PrefillConfig& c) {
    bool refused = false;
    cand.push_back(c);
    const int i = static_cast<int>(cand.size()) - 1;
    float ms = 1e30f;
    st = time_one(
        i,
        [&](int j, const LinearArgs& x) {
          return cand[j].is_fused() ? p_->run_prefill_fused(x, cand[j], stream, &refused)
                                    : p_->run_prescale(x, stream);
        },
        sets, n, reps, stream, &ms);
    if (refused || !st.ok()) {  // CUTLASS refuses this tile for the shape: skip it
      cand.pop_back();
      if (refused) st = {};
      return;
    }
    cand_ms.push_back(ms);
    if (ms < best_ms) best_ms = ms, best = c;
    if (c.is_fused() && ms < fused_ms) fused_ms = ms, fused = c;
    if (c.rstd == Rstd::kKernelPdl && ms < pdl_ms) pdl_ms = ms, pdl = c;
    if (c.rstd == Rstd::kMainloop && ms < inloop_ms) inloop_ms = ms, inloop = c;
  };
  // every tile in the default order, rstd in the mainloop and by PDL, then the other orders of
  // the fastest of those
  if (st.ok()) try_config(PrefillConfig::prescale());
  for (Rstd mode : {Rstd::kMainloop, Rstd::kKernelPdl})
    for (int tile = 0; tile < PrefillConfig::kTiles && st.ok(); ++tile)
      try_config(PrefillConfig::fused(tile, 0, mode));
  const std::optional<PrefillConfig> first = fused;
  for (int order = 1; first && order < PrefillConfig::kOrders && st.ok(); ++order)
    try_config(PrefillConfig::fused(first->tile, order, first->rstd));
  int w = -1;
  float w_ms = 0;
  if (st.ok()) st = playoff(cand_ms, 4, run, sets, n, reps, stream, &w, &w_ms);
  if (st.ok() && w >= 0) best_ms = w_ms, best = cand[w];
  if (best_fused) *best_fused = inloop;
  if (best_pdl) *best_pdl = pdl;
  if (status) *status = st;
  if (!st.ok() || !best) return std::nullopt;
  p_->tuned_prefill[{sets[0].M, sets[0].N, sets[0].K}] = {*best, best_ms * 1e3 / reps};
  if (best_us) *best_us = best_ms * 1e3 / reps;
  return best;
}

double LinearContext::tune_gemm(const LinearArgs* sets, int n, cudaStream_t stream, Status* status,
                                int* n_algos) {
  if (n_algos) *n_algos = 0;
  Status st;
  if (n < 1) st = invalid("tune_gemm: no argument sets");
  const LinearArgs& a = n >= 1 ? sets[0] : LinearArgs{};
  for (int i = 0; i < n && st.ok(); ++i) {
    st = validate_linear(sets[i], LinearImpl::kTwoStream);
    if (st.ok() && (sets[i].dtype != a.dtype || sets[i].M != a.M || sets[i].N != a.N ||
                    sets[i].K != a.K || sets[i].ldx != a.ldx || sets[i].ldw != a.ldw ||
                    sets[i].ldy != a.ldy || sets[i].y_f32 != a.y_f32))
      st = invalid("tune_gemm: argument sets differ in shape, strides or output type");
  }
  int found = 0;
  if (st.ok()) st = p_->lt.find_algorithms(a, 16, &found);
  const bool have_plan = st.ok();
  float best_ms = 1e30f;
  int best = -1;
  const int reps = std::max(16, n);
  int timed = 0;
  Status last_failure;
  std::vector<int> cand;  // every algorithm timed, and its time
  std::vector<float> cand_ms;
  const Run run = [&](int i, const LinearArgs& x) {
    p_->lt.use_algorithm(a, i);
    return p_->lt.gemm(x.dtype, x.M, x.N, x.K, x.x, x.ldx, x.w, x.ldw, x.y, x.ldy, nullptr, stream,
                       x.y_f32);
  };
  for (int i = 0; i < found && st.ok(); ++i) {
    float ms = 1e30f;
    const Status t = time_one(i, run, sets, n, reps, stream, &ms);
    if (!t.ok()) {  // this candidate failed to run: skip it (a sticky CUDA error ends the loop)
      last_failure = t;
      if (cudaPeekAtLastError() != cudaSuccess) st = t;
      continue;
    }
    ++timed;
    cand.push_back(i), cand_ms.push_back(ms);
    if (ms < best_ms) best_ms = ms, best = i;
  }
  int w = -1;
  float w_ms = 0;
  if (st.ok())
    st = playoff(
        cand_ms, 3, [&](int i, const LinearArgs& x) { return run(cand[i], x); }, sets, n, reps,
        stream, &w, &w_ms);
  if (st.ok() && w >= 0) best_ms = w_ms, best = cand[w];
  if (st.ok() && timed == 0)
    st = last_failure.ok()
             ? Status{Code::kUnsupported, "tune_gemm: no candidate algorithm fits the workspace"}
             : last_failure;
  if (have_plan) p_->lt.use_algorithm(a, st.ok() ? best : -1);
  if (status) *status = st;
  if (n_algos) *n_algos = timed;
  if (!st.ok()) return -1;
  return best_ms * 1e3 / reps;
}

Status LinearContext::tune_shape(const LinearArgs* sets, int n, cudaStream_t stream,
                                 ShapeTuning* out) {
  ShapeTuning t;
  Status st;
  t.gemm_us = tune_gemm(sets, n, stream, &st, &t.gemm_algos);
  if (st.ok() && sets[0].M <= detail::kMaxDecodeM)
    tune_decode(sets, n, stream, &st, &t.decode_us, &t.decode_candidates);
  if (st.ok()) {
    double us = -1;
    t.prefill_config = tune_prefill(sets, n, stream, &st, &us, &t.prefill_fused, &t.prefill_pdl);
    if (st.ok()) t.prefill_us = us;
    if (st.code == Code::kUnsupported) st = {}, t.prefill_config.reset();
  }
  if (out) *out = std::move(t);
  return st;
}

}  // namespace flashnorm::kernels::cuda
