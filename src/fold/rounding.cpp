#include <fmt/format.h>

#include <bit>
#include <cmath>
#include <cstdint>

#include "flashnorm/fold/fold.h"
#include "flashnorm/io/dequant.h"
#include "flashnorm/io/error.h"

namespace flashnorm {
float round_to_odd_f32(double v) {
  if (!std::isfinite(v)) return static_cast<float>(v);
  float f = static_cast<float>(v);
  if (static_cast<double>(f) == v) return f;
  if (std::fabs(static_cast<double>(f)) > std::fabs(v)) f = std::nextafter(f, 0.0f);
  return std::bit_cast<float>(std::bit_cast<uint32_t>(f) | 1u);
}

float round_to_f32(double v) { return static_cast<float>(v); }
uint16_t round_to_f16(double v) { return io::fp32_to_fp16(round_to_odd_f32(v)); }
uint16_t round_to_bf16(double v) { return io::fp32_to_bf16(round_to_odd_f32(v)); }

void check_folded_range(std::span<const double> v, FoldTarget target, std::string_view tensor) {
  for (size_t i = 0; i < v.size(); ++i) {
    if (!std::isfinite(v[i]))
      throw Error(
          fmt::format("fold: tensor '{}' element {} is {} after folding (a non-finite "
                      "weight)",
                      tensor, i, v[i]));
    float back = 0;
    const char* name = "f32";
    switch (target) {
      case FoldTarget::kF32:
        back = round_to_f32(v[i]);
        break;
      case FoldTarget::kF16:
        back = io::fp16_to_fp32(round_to_f16(v[i]));
        name = "f16";
        break;
      case FoldTarget::kBF16:
        back = io::bf16_to_fp32(round_to_bf16(v[i]));
        name = "bf16";
        break;
    }
    if (!std::isfinite(back))
      throw Error(
          fmt::format("fold: tensor '{}' element {} = {:.6g} after folding overflows {}; "
                      "fold to a wider type (--dtype bf16 or f32)",
                      tensor, i, v[i], name));
  }
}

std::vector<double> fold_matrix(std::span<const float> w, size_t rows, size_t cols,
                                std::span<const double> gain) {
  std::vector<double> out(rows * cols);
  for (size_t r = 0; r < rows; ++r) {
    for (size_t c = 0; c < cols; ++c) out[r * cols + c] = double(w[r * cols + c]) * gain[c];
  }
  return out;
}

std::map<std::string, double> FoldReport::requant_rel_rms_by_kind() const {
  std::map<std::string, std::pair<double, double>> acc;
  for (const auto& t : tensors) {
    acc[t.kind].first += t.sum_sq_err;
    acc[t.kind].second += t.sum_sq_ref;
  }
  std::map<std::string, double> out;
  for (const auto& [k, v] : acc) out[k] = v.second > 0 ? std::sqrt(v.first / v.second) : 0.0;
  return out;
}

}  // namespace flashnorm
