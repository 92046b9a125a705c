// The CUDA engine's weights on the device (internal.h): dequantized fp32 tensors rounded once to
// the engine dtype, the FlashNorm mode's gains folded at load (fold/fold_gain.h; biases are not
// scaled), or, for native weights, the file's GGML blocks of the projections quant_gemv reads (in
// its device layout, quant_layout.h: the blocks' fields in planes, the same values); the
// scale masks of the QK-norm-cancelled columns and the RoPE tables.
#include <fmt/format.h>

#include <algorithm>

#include "flashnorm/engine/layer_plan.h"
#include "flashnorm/error.h"
#include "flashnorm/fold/fold_gain.h"
#include "flashnorm/io/dequant.h"
#include "flashnorm/kernels/cuda/quant_layout.h"
#include "internal.h"

namespace flashnorm::cuda_engine {
namespace {

template <class T>
DeviceBuffer upload(const std::vector<T>& v) {
  DeviceBuffer b(v.size() * sizeof(T));
  FN_CUDA_CHECK(cudaMemcpy(b.get(), v.data(), v.size() * sizeof(T), cudaMemcpyHostToDevice));
  return b;
}

// Rows of `w` ([rows, cols]: its fp32 data, or its native blocks dequantized), each column i
// multiplied by gain[i] when gain is set (the fold, formed in fp64 and rounded once), appended to
// `out` as dtype bits.
void append_rows(FoldTarget t, const Tensor& w, const std::vector<double>* gain,
                 std::vector<uint16_t>& out) {
  std::vector<float> deq;
  if (!w.raw.empty()) {
    deq.resize(w.rows() * w.cols());
    io::dequantize(w.type, w.raw, deq);
  }
  const std::vector<float>& data = w.raw.empty() ? w.data : deq;
  const size_t at = out.size();
  out.resize(at + data.size());
  fold_gain(data, w.cols(), gain ? std::span<const double>(*gain) : std::span<const double>(), t,
            std::span<uint16_t>(out.data() + at, data.size()));
}

// The projection whose rows are those of `parts` stacked, in their blocks (device layout), when
// every part is a native tensor of a type quant_gemv reads; else empty (the caller uploads it in
// dt). Adjacent parts of one type and one `scaled` flag share one buffer (one launch).
QuantProj quant_proj(std::initializer_list<std::pair<const Tensor*, bool>> parts) {
  QuantProj q;
  for (const auto& [t, scaled] : parts)
    if (t->raw.empty() || !fk::quant_type(t->type)) return q;
  std::vector<std::vector<uint8_t>> bytes;
  for (const auto& [t, scaled] : parts) {
    const fk::QuantType type = *fk::quant_type(t->type);
    q.K = static_cast<int>(t->cols());
    if (q.parts.empty() || q.parts.back().type != type || q.parts.back().scaled != scaled) {
      QuantPart p;
      p.type = type, p.n0 = q.N, p.scaled = scaled;
      q.parts.push_back(std::move(p));
      bytes.emplace_back();
    }
    bytes.back().insert(bytes.back().end(), t->raw.begin(), t->raw.end());
    q.parts.back().N += static_cast<int>(t->rows());
    q.N += static_cast<int>(t->rows());
  }
  // the device layout of quant_gemv: the blocks' fields in planes (quant_layout.h)
  for (size_t i = 0; i < q.parts.size(); ++i)
    q.parts[i].w = upload(fk::to_device_layout(q.parts[i].type, bytes[i]));
  return q;
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
    // native weights: each projection kept in its blocks where quant_gemv reads them all
    auto unscaled = [&](int i) { return cancel && p.qkv_cancels[i]; };
    ly.qqkv = quant_proj({{&m.get(p.qkv[0]), !unscaled(0)},
                          {&m.get(p.qkv[1]), !unscaled(1)},
                          {&m.get(p.qkv[2]), !unscaled(2)}});
    ly.qgu = quant_proj({{&m.get(p.gate), true}, {&m.get(p.up), true}});
    ly.qo = quant_proj({{&m.get(p.attn_output), false}});
    ly.qdown = quant_proj({{&m.get(p.down), false}});
    std::vector<uint16_t> w;
    if (ly.qqkv.empty()) {
      for (const std::string& name : p.qkv) append_rows(t, m.get(name), fold ? &ag : nullptr, w);
      ly.wqkv = upload(w);
    }
    if (ly.qgu.empty()) {
      w.clear();
      append_rows(t, m.get(p.gate), fold ? &fg : nullptr, w);
      append_rows(t, m.get(p.up), fold ? &fg : nullptr, w);
      ly.wgu = upload(w);
    }
    if (ly.qo.empty()) {
      w.clear();
      append_rows(t, m.get(p.attn_output), nullptr, w);
      ly.wo = upload(w);
    }
    if (ly.qdown.empty()) {
      w.clear();
      append_rows(t, m.get(p.down), nullptr, w);
      ly.wdown = upload(w);
    }
    e.quant_down = e.quant_down || !ly.qdown.empty();
    if (!ly.qqkv.empty()) ly.attn_gain32 = gain_f32(ag);
    if (!ly.qgu.empty()) ly.ffn_gain32 = gain_f32(fg);
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
    // native weights: a head in blocks quant_gemv reads stays in them, tied or not (the final gain
    // applied to x in FlashNorm mode, so nothing to fold)
    e.qhead = quant_proj({{&m.head(), true}});
    if (!e.qhead.empty()) {
      e.out_gain32 = gain_f32(og);
    } else if (c.tied_head && (!fold || opt.flashnorm.tied_head == TiedHead::kKeepGain)) {
      e.head_is_emb = true;
    } else {
      w.clear();
      append_rows(t, m.head(), fold ? &og : nullptr, w);
      e.head = upload(w);
    }
  }
  // the projections kept in blocks: how many, and the largest (its tile)
  int n_quant = 0, n_half = 0;
  auto count = [&](const QuantProj& q) {
    if (q.empty()) return void(++n_half);
    ++n_quant;
    e.tile_elems = std::max(e.tile_elems, size_t(q.N) * q.K);
  };
  for (const DeviceWeights::Layer& ly : e.layers)
    for (const QuantProj* q : {&ly.qqkv, &ly.qgu, &ly.qo, &ly.qdown}) count(*q);
  count(e.qhead);
  e.any_quant = n_quant > 0;
  e.quant_summary = fmt::format("{} of {} projections in their blocks", n_quant, n_quant + n_half);
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
