// Range checks of folded values (fold.h) and FoldReport's summaries.
#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <cstdint>

#include "flashnorm/error.h"
#include "flashnorm/fold/fold.h"
#include "flashnorm/half.h"

namespace flashnorm {
namespace {

// Refuses a fold that stores `flushed` of a tensor's `nonzero` non-zero values as zero, when that
// is more than kMaxFlushedFraction of them.
void check_flushed(size_t flushed, size_t nonzero, size_t example, double example_value,
                   std::string_view tensor, std::string_view type, std::string_view advice) {
  if (flushed == 0 || double(flushed) <= kMaxFlushedFraction * double(nonzero)) return;
  throw Error(fmt::format(
      "fold: tensor '{}': {} of its {} non-zero values ({:.3g}%) would be stored as 0 in {} "
      "(e.g. element {} = {:.6g}; at most {:g}% may be); {}",
      tensor, flushed, nonzero, 100.0 * double(flushed) / double(nonzero), type, example,
      example_value, 100.0 * kMaxFlushedFraction, advice));
}

}  // namespace

void check_folded_range(std::span<const double> v, FoldTarget target, std::string_view tensor) {
  const char* name = target == FoldTarget::kF16    ? "f16"
                     : target == FoldTarget::kBF16 ? "bf16"
                                                   : "f32";
  size_t nonzero = 0, flushed = 0, example = 0;
  for (size_t i = 0; i < v.size(); ++i) {
    if (!std::isfinite(v[i]))
      throw Error(
          fmt::format("fold: tensor '{}' element {} is {} after folding (a non-finite "
                      "weight)",
                      tensor, i, v[i]));
    float back = 0;
    switch (target) {
      case FoldTarget::kF32:
        back = round_to_f32(v[i]);
        break;
      case FoldTarget::kF16:
        back = half::f16_to_f32(round_to_f16(v[i]));
        break;
      case FoldTarget::kBF16:
        back = half::bf16_to_f32(round_to_bf16(v[i]));
        break;
    }
    if (!std::isfinite(back)) {
      // f32 and bf16 share the widest range (about 3.4e38): no --dtype holds such a value.
      throw Error(fmt::format(
          "fold: tensor '{}' element {} = {:.6g} after folding overflows {}; {}", tensor, i, v[i],
          name,
          target == FoldTarget::kF16
              ? "fold to a wider type (--dtype bf16 or f32, whose range reaches about 3.4e38)"
              : "no --dtype has a wider range than f32 and bf16 (about 3.4e38): the norm gains "
                "are too large to fold into this tensor"));
    }
    if (v[i] != 0) {
      ++nonzero;
      if (back == 0 && flushed++ == 0) example = i;
    }
  }
  check_flushed(flushed, nonzero, example, flushed ? v[example] : 0, tensor, name,
                // the advice holds only where the values reach bf16/f32's normal range
                target == FoldTarget::kF16 && flushed && std::abs(v[example]) >= 1.2e-38
                    ? "the norm gains are too small for f16: fold to --dtype bf16 or f32 (values "
                      "down to about 1e-38 stay normal)"
                    : "no --dtype reaches smaller values than f32 and bf16: the norm gains are "
                      "too small to fold into this tensor");
}

void check_requantized(std::span<const double> v, std::span<const float> back, size_t block_elems,
                       std::string_view type, std::string_view tensor) {
  size_t nonzero = 0, flushed = 0, example = 0;
  for (size_t i = 0; i < v.size() && i < back.size(); ++i) {
    if (!std::isfinite(back[i])) {
      throw Error(fmt::format(
          "fold: tensor '{}' element {} = {:.6g} after folding reads back as {} once requantized "
          "to {} (its block's scale overflows); fold with --dtype f32 or bf16 instead of "
          "--requantize",
          tensor, i, v[i], back[i], type));
    }
  }
  const size_t b = block_elems == 0 ? 1 : block_elems;
  for (size_t s = 0; s < v.size() && s < back.size(); s += b) {
    const size_t e = std::min({s + b, v.size(), back.size()});
    size_t nz = 0;
    bool all_zero = true;
    for (size_t i = s; i < e; ++i) {
      nz += v[i] != 0;
      all_zero = all_zero && back[i] == 0;
    }
    nonzero += nz;
    if (all_zero && nz > 0) {
      if (flushed == 0) {
        example = s;
        while (v[example] == 0) ++example;
      }
      flushed += nz;
    }
  }
  check_flushed(flushed, nonzero, example, flushed ? v[example] : 0, tensor, type,
                "whole blocks read back as zero (their scale underflows); fold with --dtype f32 "
                "or bf16 instead of --requantize");
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
