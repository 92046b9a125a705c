// The fold of a norm's gain into a matrix it feeds (docs/design.md section 1), shared by
// the fold tool (fold/fold.h), the CPU engine (folds at load in fp32) and the CUDA engine (folds at
// load into bf16/f16): W*[r, i] = g_i * W[r, i] for W [rows, cols], formed in fp64 from the
// original values and rounded once to the stored type (the rounding policy, FoldTarget). Gains are
// multipliers: a gain stored under Gemma's `1 + w` convention is turned into one first
// (gain_multipliers).
#pragma once

#include <cstddef>
#include <cstdint>
#include <span>
#include <vector>

#include "flashnorm/model/arch.h"

namespace flashnorm {

// The multipliers of a norm weight `w` stored under convention `c`: w itself (Plain) or 1 + w
// (OnePlus, Gemma), in fp64.
std::vector<double> gain_multipliers(std::span<const float> w, GainConvention c);
// The stored value of a gain that multiplies by 1 under `c` (1 Plain, 0 OnePlus): what a folded
// norm's weight is set to.
float identity_gain(GainConvention c);

// The type folded values are rounded to before they are stored (block types: fp32, their input).
enum class FoldTarget { kF32, kF16, kBF16 };

// Rounds an fp64 value once to fp32 / f16 / bf16 (no double rounding: fp64 -> fp32 uses
// round-to-odd before the final round-to-nearest-even for the 16-bit types).
float round_to_f32(double v);
// fp64 -> fp32 with round-to-odd (truncate toward zero, set the last bit if inexact): a later
// round-to-nearest-even to f16/bf16 of this value equals one rounding of v (Boldo & Melquiond,
// "When double rounding is odd", 2005).
float round_to_odd_f32(double v);
uint16_t round_to_f16(double v);
uint16_t round_to_bf16(double v);

// The fold in fp64: out[r * cols + c] = w[r * cols + c] * gain[c] for a row-major w [rows, cols]
// (gain: [cols]); what fold/ range-checks (check_folded_range) before rounding.
std::vector<double> fold_matrix(std::span<const float> w, size_t rows, size_t cols,
                                std::span<const double> gain);

// The fold, rounded once: out[r * cols + c] = round(w[r * cols + c] * gain[c]) with the product in
// fp64 (gain: [cols], or empty: w itself, rounded the same way). `out` has w.size() elements:
//   uint16_t: the f16 / bf16 bits of `target` (kF16 or kBF16; kF32 is an error);
//   float:    kF32: fp32 nearest even; kF16 / kBF16: round_to_odd_f32, the fp32 carrier whose
//             later nearest-even rounding to the 16-bit type (a writer's) equals one rounding.
// Errors: flashnorm::Error when cols is 0 or does not divide w.size(), gain is neither empty nor
// [cols], out's size differs from w's, or uint16_t output is asked for kF32.
void fold_gain(std::span<const float> w, size_t cols, std::span<const double> gain,
               FoldTarget target, std::span<float> out);
void fold_gain(std::span<const float> w, size_t cols, std::span<const double> gain,
               FoldTarget target, std::span<uint16_t> out);

// Folded fp64 values (fold_matrix's) rounded once per `target`, as fold_gain rounds them.
// Errors: as fold_gain's for the output size and type.
void round_folded(std::span<const double> v, FoldTarget target, std::span<float> out);
void round_folded(std::span<const double> v, FoldTarget target, std::span<uint16_t> out);

}  // namespace flashnorm
