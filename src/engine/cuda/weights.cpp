// The CUDA engine's weights on the device (internal.h): dequantized fp32 tensors rounded once to
// the engine dtype, the FlashNorm mode's gains folded at load (fold/fold_gain.h; biases are not
// scaled), the scale masks of the QK-norm-cancelled columns and the RoPE tables.
#include <fmt/format.h>

#include <algorithm>

#include "flashnorm/engine/layer_plan.h"
#include "flashnorm/error.h"
#include "flashnorm/fold/fold_gain.h"
#include "internal.h"

namespace flashnorm::cuda_engine {
namespace {

template <class T>
DeviceBuffer upload(const std::vector<T>& v) {
  DeviceBuffer b(v.size() * sizeof(T));
  FN_CUDA_CHECK(cudaMemcpy(b.get(), v.data(), v.size() * sizeof(T), cudaMemcpyHostToDevice));
  return b;
}

// Rows of `w` ([rows, cols] fp32), each column i multiplied by gain[i] when gain is set (the fold,
// formed in fp64 and rounded once), appended to `out` as dtype bits.
void append_rows(FoldTarget t, const Tensor& w, const std::vector<double>* gain,
                 std::vector<uint16_t>& out) {
  const size_t at = out.size();
  out.resize(at + w.data.size());
  fold_gain(w.data, w.cols(), gain ? std::span<const double>(*gain) : std::span<const double>(), t,
            std::span<uint16_t>(out.data() + at, w.data.size()));
}

}  // namespace

DeviceWeights upload_weights(const Model& m, NormMode mode, const CudaEngineOptions& opt,
                             const Dims& d) {
  DeviceWeights e;
  const ModelConfig& c = m.cfg;
  const ArchDescription& a = *m.arch;
  const bool fold = mode == NormMode::FlashNorm;
  const bool cancel = opt.flashnorm.cancel && fold;
  const FoldTarget t = opt.dtype == HalfType::kBF16 ? FoldTarget::kBF16 : FoldTarget::kF16;
  auto gain_of = [&](const std::string& name) {
    return gain_multipliers(m.get(name).data, c.gains);
  };
  auto gain_dt = [&](const std::vector<double>& g) {
    std::vector<uint16_t> b(g.size());
    round_folded(g, t, b);
    return upload(b);
  };
  auto gain_f32 = [&](const std::vector<double>& g) {
    return upload(std::vector<float>(g.begin(), g.end()));
  };
  // a bias [rows] rounded once to dt, or an empty buffer (null) for none
  auto bias_dt = [&](const std::vector<float>& b) {
    return b.empty() ? DeviceBuffer() : gain_dt(std::vector<double>(b.begin(), b.end()));
  };
  auto bias_of = [&](const std::string& name) {
    return name.empty() ? DeviceBuffer() : bias_dt(m.get(name).data);
  };
  for (const LayerPlan& p : plan_layers(m)) {
    DeviceWeights::Layer ly;
    const std::vector<double> ag = gain_of(p.attn_norm), fg = gain_of(p.ffn_norm);
    ly.attn_gain = gain_dt(ag);
    ly.ffn_gain = gain_dt(fg);
    if (!p.q_norm.empty()) ly.q_norm = gain_f32(gain_of(p.q_norm)), ly.has_q_norm = true;
    if (!p.k_norm.empty()) ly.k_norm = gain_f32(gain_of(p.k_norm)), ly.has_k_norm = true;
    ly.v_renorm = p.v_renorm;
    ly.cancels = p.qkv_cancels;
    ly.bqkv = bias_dt(fused_bias(
        m, {{p.qkv[0], p.qkv_bias[0]}, {p.qkv[1], p.qkv_bias[1]}, {p.qkv[2], p.qkv_bias[2]}}));
    ly.bgu = bias_dt(fused_bias(m, {{p.gate, p.gate_bias}, {p.up, p.up_bias}}));
    ly.bo = bias_of(p.attn_output_bias);
    ly.bdown = bias_of(p.down_bias);
    std::vector<uint16_t> w;
    for (const std::string& name : p.qkv) append_rows(t, m.get(name), fold ? &ag : nullptr, w);
    ly.wqkv = upload(w);
    w.clear();
    append_rows(t, m.get(p.gate), fold ? &fg : nullptr, w);
    append_rows(t, m.get(p.up), fold ? &fg : nullptr, w);
    ly.wgu = upload(w);
    w.clear();
    append_rows(t, m.get(p.attn_output), nullptr, w);
    ly.wo = upload(w);
    w.clear();
    append_rows(t, m.get(p.down), nullptr, w);
    ly.wdown = upload(w);
    if (!p.post_attn.empty()) {
      ly.post_attn = gain_f32(gain_of(p.post_attn));
      ly.post_ffn = gain_f32(gain_of(p.post_ffn));
      ly.has_post = true;
    }
    ly.local = p.local;
    e.layers.push_back(std::move(ly));
  }
  // q|k|v columns whose rstd cancels (QK-norm renormalizes them, no bias): scale mask 0 there.
  if (cancel && !e.layers.empty()) {
    const DeviceWeights::Layer& l0 = e.layers[0];
    std::vector<uint8_t> mask(d.nqkv, 1);
    if (l0.cancels[0]) std::fill(mask.begin(), mask.begin() + d.nq, 0);
    if (l0.cancels[1]) std::fill(mask.begin() + d.nq, mask.begin() + d.nq + d.nkv, 0);
    if (l0.cancels[2]) std::fill(mask.begin() + d.nq + d.nkv, mask.end(), 0);
    e.qkv_masked = std::count(mask.begin(), mask.end(), 0) > 0;
    e.qkv_all_unscaled = std::count(mask.begin(), mask.end(), 0) == d.nqkv;
    e.qkv_mask = upload(mask);
  }
  e.zero_mask = upload(std::vector<uint8_t>(std::max({d.V, d.nqkv, 2 * d.F, d.H}), 0));
  const std::vector<double> og = gain_of("output_norm.weight");
  e.out_gain = gain_dt(og);
  {
    std::vector<uint16_t> w;
    append_rows(t, m.get(a.tied_source), nullptr, w);
    e.emb = upload(w);
    if (c.tied_head && (!fold || opt.flashnorm.tied_head == TiedHead::kKeepGain)) {
      e.head_is_emb = true;
    } else {
      w.clear();
      append_rows(t, m.head(), fold ? &og : nullptr, w);
      e.head = upload(w);
    }
  }
  std::vector<float> cs, sn;
  rope_tables(d.max_ctx, d.D, c.rope_global, cs, sn);
  e.cos_g = upload(cs), e.sin_g = upload(sn);
  if (!c.layer_local.empty()) {
    rope_tables(d.max_ctx, d.D, c.rope_local, cs, sn);
    e.cos_l = upload(cs), e.sin_l = upload(sn);
  } else {
    e.cos_l = upload(std::vector<float>(1)), e.sin_l = upload(std::vector<float>(1));
  }
  return e;
}

}  // namespace flashnorm::cuda_engine
