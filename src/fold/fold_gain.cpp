// The fold primitive and its rounding policy: flashnorm/fold/fold_gain.h.
#include "flashnorm/fold/fold_gain.h"

#include <fmt/format.h>

#include <bit>
#include <cmath>

#include "flashnorm/error.h"
#include "flashnorm/half.h"

namespace flashnorm {

std::vector<double> gain_multipliers(std::span<const float> w, GainConvention c) {
  std::vector<double> g(w.begin(), w.end());
  if (c == GainConvention::OnePlus) {
    for (auto& v : g) v += 1.0;
  }
  return g;
}

float identity_gain(GainConvention c) { return c == GainConvention::OnePlus ? 0.0f : 1.0f; }

float round_to_odd_f32(double v) {
  if (!std::isfinite(v)) return static_cast<float>(v);
  float f = static_cast<float>(v);
  if (static_cast<double>(f) == v) return f;
  // truncate toward zero: where rounding went up in magnitude, the next float toward zero is the
  // magnitude's bits minus one (f is nonzero there; from infinity that gives FLT_MAX), which
  // std::nextafter computes too, as a libm call per element that made the fold five times slower
  uint32_t bits = std::bit_cast<uint32_t>(f);
  if (std::fabs(static_cast<double>(f)) > std::fabs(v)) bits -= 1;
  return std::bit_cast<float>(bits | 1u);
}

float round_to_f32(double v) { return static_cast<float>(v); }
uint16_t round_to_f16(double v) { return half::f32_to_f16(round_to_odd_f32(v)); }
uint16_t round_to_bf16(double v) { return half::f32_to_bf16(round_to_odd_f32(v)); }

namespace {

// One fp64 value rounded once per the policy of fold_gain for an output element of type T
// (double: kept, fold_matrix's exact form).
double round_as(double v, FoldTarget, double*) { return v; }
float round_as(double v, FoldTarget t, float*) {
  return t == FoldTarget::kF32 ? round_to_f32(v) : round_to_odd_f32(v);
}
uint16_t round_as(double v, FoldTarget t, uint16_t*) {
  return t == FoldTarget::kBF16 ? round_to_bf16(v) : round_to_f16(v);
}

template <class T>
void check_out(size_t in, std::span<T> out, FoldTarget t) {
  if (out.size() != in) {
    throw Error(fmt::format("fold: output of {} elements for {} values", out.size(), in));
  }
  if constexpr (std::is_same_v<T, uint16_t>) {
    if (t == FoldTarget::kF32) throw Error("fold: 16-bit output asked for an fp32 target");
  }
}

// The one loop: out[i] = round(value(i)), value(i) the fp64 product of fold_gain.
template <class T>
void fold_into(std::span<const float> w, size_t cols, std::span<const double> gain,
               FoldTarget target, std::span<T> out) {
  if (cols == 0 || w.size() % cols != 0 || (!gain.empty() && gain.size() != cols)) {
    throw Error(fmt::format("fold: {} values do not form rows of {} columns (gain of {})", w.size(),
                            cols, gain.size()));
  }
  check_out(w.size(), out, target);
  for (size_t r = 0; r < w.size() / cols; ++r) {
    const float* row = w.data() + r * cols;
    T* o = out.data() + r * cols;
    for (size_t i = 0; i < cols; ++i) {
      o[i] = round_as(gain.empty() ? double(row[i]) : double(row[i]) * gain[i], target, o);
    }
  }
}

template <class T>
void round_into(std::span<const double> v, FoldTarget target, std::span<T> out) {
  check_out(v.size(), out, target);
  for (size_t i = 0; i < v.size(); ++i) out[i] = round_as(v[i], target, out.data());
}

}  // namespace

std::vector<double> fold_matrix(std::span<const float> w, size_t rows, size_t cols,
                                std::span<const double> gain) {
  std::vector<double> out(rows * cols);
  fold_into(w.first(rows * cols), cols, gain, FoldTarget::kF32, std::span<double>(out));
  return out;
}

void fold_gain(std::span<const float> w, size_t cols, std::span<const double> gain,
               FoldTarget target, std::span<float> out) {
  fold_into(w, cols, gain, target, out);
}
void fold_gain(std::span<const float> w, size_t cols, std::span<const double> gain,
               FoldTarget target, std::span<uint16_t> out) {
  fold_into(w, cols, gain, target, out);
}
void round_folded(std::span<const double> v, FoldTarget target, std::span<float> out) {
  round_into(v, target, out);
}
void round_folded(std::span<const double> v, FoldTarget target, std::span<uint16_t> out) {
  round_into(v, target, out);
}

}  // namespace flashnorm
