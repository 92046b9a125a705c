// Weight folding of model files (docs/design.md section 1; the fold of one matrix and its
// rounding: fold/fold_gain.h): for every RMSNorm whose output feeds linear
// layers, W*[:, i] = g_i * W[:, i] for each consumer W [N, K], computed in fp64 from the original
// values and rounded once to the stored type; the norm's gain is then set to its identity
// (1 for plain gains, 0 for `1 + w` gains); a tied LM head is untied so the embedding lookup
// stays unfolded; the output carries the metadata key flashnorm.folded and a folded input is
// refused. Outputs go through a temporary file and a rename; an input is never overwritten.
#pragma once

#include <cstdint>
#include <filesystem>
#include <functional>
#include <map>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "flashnorm/fold/fold_gain.h"
#include "flashnorm/io/ggml_types.h"
#include "flashnorm/model/arch.h"

namespace flashnorm {

// Safetensors metadata key of a folded Hugging Face directory (every shard): the dtypes of the
// whole model as JSON, {"folded": {dtype: tensors}, "other": {dtype: tensors}}, e.g.
// {"folded":{"F32":16},"other":{"BF16":14}} for a 3-layer bf16 Llama folded with the default
// --dtype.
inline constexpr std::string_view kDtypesKey = "flashnorm.dtypes";

struct FoldOptions {
  // Stored type of the rewritten (folded) tensors only: F32, F16 or BF16; F32 by default whatever
  // the input's dtype, so a bf16 or f16 checkpoint folds losslessly (its values are rounded once,
  // from the fp64 product). Every other tensor keeps its bytes. Ignored with requantize.
  io::GgmlType dtype = io::GgmlType::F32;
  // GGUF only: store each folded tensor as a GGML type (io::quantize) instead of opt.dtype:
  // requantize_type, or with none ("same") the tensor's original type. A k-quant type (256 per
  // block) for a tensor whose rows are not a multiple of 256 falls back as llama.cpp's quantizer
  // does (Q4_K -> Q5_0, Q5_K -> Q5_1, Q6_K -> Q8_0; FoldedTensor::requested_type records it).
  // A type io::quantize does not support is refused with an error naming the tensor and type.
  bool requantize = false;
  std::optional<io::GgmlType> requantize_type;
  // GGUF only: when the LM head is tied to the embedding, leave the final norm's gain in the file
  // and the head tied (no untied vocab x hidden copy) and mark the file with kFinalNormKeptKey.
  // Refused when the file has an untied head.
  bool keep_tied_head = false;
  // Overrides the gain convention the file format implies (GGUF: plain; HF Gemma: 1 + w).
  // Only for experiments and for tests that prove a wrong convention is caught; never guessed.
  std::optional<GainConvention> assume_gains;
  // Called with (done, total) as tensors are folded (for a progress line); may be empty.
  std::function<void(size_t, size_t)> progress;
};

struct FoldedTensor {
  std::string name;      // name in the output file
  std::string kind;      // e.g. "attn_q", "ffn_gate", "output"
  std::string out_type;  // stored type name
  // The --requantize type asked for when out_type is its fallback (rows not a multiple of the
  // k-quant block), else empty.
  std::string requested_type;
  // Requantized outputs: ||deq(q(W*)) - W*||_2 / ||W*||_2; 0 for float outputs.
  double requant_rel_rms = 0;
  double sum_sq_err = 0, sum_sq_ref = 0;
};

struct FoldReport {
  std::string arch;
  std::vector<std::string> folded_norms;  // norms set to identity
  std::vector<FoldedTensor> tensors;      // every consumer rewritten
  bool untied_head = false;
  bool kept_tied_head = false;  // keep_tied_head applied: final norm gain and tied head kept
  // Per tensor kind: relative RMS error added by requantization (only when requantize).
  std::map<std::string, double> requant_rel_rms_by_kind() const;
};

// Folds a GGUF file. Every tensor that is not rewritten keeps its bytes, and every KV is kept in
// order, so unmodified GGUF tools load the output. Adds flashnorm.folded (bool true),
// flashnorm.fold_type (the --dtype name, or "requantized" / "requantized:TYPE") and, with
// keep_tied_head, kFinalNormKeptKey (bool true).
// Errors: Error / FormatError for malformed input, an unsupported architecture, a model already
// folded, a consumer whose input width differs from its norm, an unsupported requantize type,
// keep_tied_head with an untied head, or `out` naming the input.
FoldReport fold_gguf(const std::filesystem::path& in, const std::filesystem::path& out,
                     const FoldOptions& opt = {});

// Folds a Hugging Face safetensors directory into a new directory with the same config (except
// tie_word_embeddings, always false: the output has its own folded LM head), the same number of
// shards, the other files copied, and __metadata__ flashnorm.folded = "true" and kDtypesKey. The
// rewritten tensors (consumers and the untied head) are stored as opt.dtype; the folded norms keep
// their dtype (their identity value is exact in each); every other tensor keeps its bytes. The
// config's `dtype` / `torch_dtype` (what transformers loads the model as by default) is kept; a
// config with neither gets the other tensors' dtype when it differs from opt.dtype (a mixed output
// would otherwise load as whichever dtype transformers meets first). A config with
// tie_word_embeddings true and an lm_head tensor that differs from the embedding is refused
// (transformers would ignore that tensor). Folded values are checked (check_folded_range).
// The type llama.cpp's quantizer stores instead of k-quant `type` in a tensor whose rows are not
// a multiple of 256 (Q4_K -> Q5_0, Q5_K -> Q5_1, Q6_K -> Q8_0; source: llama.cpp
// src/llama-quant.cpp, "fallback"); `type` itself for every other type.
io::GgmlType requantize_fallback(io::GgmlType type);

// Requantize and keep_tied_head are GGUF options: fold_hf refuses them (one line naming it).
FoldReport fold_hf(const std::filesystem::path& in_dir, const std::filesystem::path& out_dir,
                   const FoldOptions& opt = {});

// The largest fraction of a tensor's non-zero folded values that may be stored as zero (flushed
// by rounding: a tiny gain times a small weight below the type's smallest subnormal, or a
// requantized block whose scale underflows): 0.1%. A fold that loses more is refused.
inline constexpr double kMaxFlushedFraction = 0.001;

// Errors: flashnorm::Error naming `tensor` and the element when a folded value is not finite (a
// NaN or infinite weight) or overflows `target` once rounded (e.g. f16 above 65504: a large
// gain times a large weight), and naming `tensor` when rounding to `target` turns more than
// kMaxFlushedFraction of its non-zero values into zero; instead of writing a model that computes
// NaN or silently loses its weights.
void check_folded_range(std::span<const double> v, FoldTarget target, std::string_view tensor);

// The same checks on the values a requantized tensor actually stores: `back` is the requantized
// `type` tensor dequantized again, `v` the folded values it encodes, in blocks of `block_elems`.
// Errors: flashnorm::Error naming `tensor`, the element and the type when a stored value is not
// finite (a block scale that overflows the type's f16 scale), or when more than
// kMaxFlushedFraction of the non-zero values lie in blocks that read back as all zero (a block
// scale that underflows).
void check_requantized(std::span<const double> v, std::span<const float> back, size_t block_elems,
                       std::string_view type, std::string_view tensor);

}  // namespace flashnorm
