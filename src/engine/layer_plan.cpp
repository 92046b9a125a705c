// Per-layer tensor plan and RoPE tables shared by the engines:
// include/flashnorm/engine/layer_plan.h.
#include "flashnorm/engine/layer_plan.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>

#include "flashnorm/error.h"

namespace flashnorm {

std::vector<LayerPlan> plan_layers(const Model& m) {
  const ArchDescription& a = *m.arch;
  const ModelConfig& c = m.cfg;
  // The attention norm's consumers and what renormalizes their outputs.
  const NormSite* attn_site = nullptr;
  for (const auto& s : a.layer_norms) {
    if (s.norm == "blk.{L}.attn_norm.weight") attn_site = &s;
  }
  if (!attn_site || attn_site->consumers.size() != 3) {
    throw Error(fmt::format("architecture {}: attn_norm must feed q, k and v", a.name));
  }
  const auto& cons = attn_site->consumers;
  if (cons[2].renorm && !cons[2].renorm->empty()) {
    throw Error("a v renorm with a gain is not supported by the engines");
  }
  std::vector<LayerPlan> plans;
  for (int l = 0; l < c.n_layer; ++l) {
    auto n = [&](std::string_view p) { return p.empty() ? std::string() : expand_layer(p, l); };
    // the bias of a weight pattern, when the model has it
    auto bias = [&](const std::string& weight) {
      const std::string b = bias_name(weight);
      return std::find(c.biases.begin(), c.biases.end(), b) != c.biases.end() ? n(b)
                                                                              : std::string();
    };
    LayerPlan p;
    p.attn_norm = n("blk.{L}.attn_norm.weight");
    p.ffn_norm = n("blk.{L}.ffn_norm.weight");
    for (int k = 0; k < 3; ++k) p.qkv[k] = n(cons[k].tensor);
    if (cons[0].renorm) p.q_norm = n(*cons[0].renorm);
    if (cons[1].renorm) p.k_norm = n(*cons[1].renorm);
    p.v_renorm = cons[2].renorm.has_value();
    for (int k = 0; k < 3; ++k) {
      p.qkv_bias[k] = bias(cons[k].tensor);
      p.qkv_cancels[k] = cons[k].renorm.has_value() && p.qkv_bias[k].empty() && !cons[k].has_bias;
    }
    p.gate = n("blk.{L}.ffn_gate.weight");
    p.up = n("blk.{L}.ffn_up.weight");
    p.attn_output = n("blk.{L}.attn_output.weight");
    p.down = n("blk.{L}.ffn_down.weight");
    p.gate_bias = bias("blk.{L}.ffn_gate.weight");
    p.up_bias = bias("blk.{L}.ffn_up.weight");
    p.attn_output_bias = bias("blk.{L}.attn_output.weight");
    p.down_bias = bias("blk.{L}.ffn_down.weight");
    p.post_attn = n(a.hooks.post_attn_norm);
    p.post_ffn = n(a.hooks.post_ffn_norm);
    p.local = c.sliding_window > 0 && size_t(l) < c.layer_local.size() && c.layer_local[size_t(l)];
    plans.push_back(std::move(p));
  }
  return plans;
}

std::vector<float> fused_bias(const Model& m,
                              std::initializer_list<std::pair<std::string, std::string>> parts) {
  std::vector<float> out;
  bool any = false;
  for (const auto& [weight, bias] : parts) {
    if (bias.empty()) {
      out.resize(out.size() + m.get(weight).rows(), 0.0f);
    } else {
      const std::vector<float>& b = m.get(bias).data;
      out.insert(out.end(), b.begin(), b.end());
      any = true;
    }
  }
  if (!any) out.clear();
  return out;
}

std::vector<double> rope_inv_freq(int D, const RopeFrequencies& f) {
  const int half = D / 2;
  std::vector<double> inv(static_cast<size_t>(half));
  const RopeScaling& s = f.scaling;
  const double kPi = 3.14159265358979323846;
  for (int i = 0; i < half; ++i) {
    double w = std::pow(f.base, -2.0 * i / D);
    if (s.kind == RopeScaling::Kind::kLinear) {
      w /= s.factor;
    } else if (s.kind == RopeScaling::Kind::kLlama3) {
      const double wavelen = 2 * kPi / w;
      const double low_wavelen = s.original_context / s.low_freq_factor;
      const double high_wavelen = s.original_context / s.high_freq_factor;
      if (wavelen > low_wavelen) {
        w /= s.factor;  // low frequencies: scaled
      } else if (wavelen >= high_wavelen) {
        // medium: interpolated between scaled and unscaled
        const double smooth = (s.original_context / wavelen - s.low_freq_factor) /
                              (s.high_freq_factor - s.low_freq_factor);
        w = (1 - smooth) * w / s.factor + smooth * w;
      }  // high frequencies: kept
    }
    inv[size_t(i)] = w;
  }
  return inv;
}

void rope_tables(int n_pos, int D, const RopeFrequencies& f, std::vector<float>& cs,
                 std::vector<float>& sn) {
  const int half = D / 2;
  const std::vector<double> inv = rope_inv_freq(D, f);
  cs.resize(size_t(n_pos) * half);
  sn.resize(cs.size());
  for (int p = 0; p < n_pos; ++p) {
    for (int i = 0; i < half; ++i) {
      const double theta = p * inv[size_t(i)];
      cs[size_t(p) * half + i] = static_cast<float>(std::cos(theta));
      sn[size_t(p) * half + i] = static_cast<float>(std::sin(theta));
    }
  }
}

}  // namespace flashnorm
