// A model's weights in fp32, held in memory under canonical (GGUF) tensor names, with the
// hyperparameters the engine needs. Loaded from a GGUF file (every supported type dequantized)
// or a Hugging Face safetensors directory (names mapped through the ArchDescription).
#pragma once

#include <cstdint>
#include <filesystem>
#include <map>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "flashnorm/io/ggml_types.h"
#include "flashnorm/model/arch.h"

namespace flashnorm {
namespace io {
class HfModelDir;
class GgufFile;
}  // namespace io

// Row-major fp32 tensor. Matrices are [N, K] = [out, in] (a GGUF tensor with dims {K, N}).
// A matrix loaded with WeightStorage::kNative keeps its file bytes instead: `raw` (rows of whole
// GGML blocks of `type`, inside Model::file's mapping) and empty `data`.
struct Tensor {
  std::vector<uint64_t> shape;
  std::vector<float> data;
  io::GgmlType type = io::GgmlType::F32;  // the file's type (raw's type when raw is set)
  std::span<const uint8_t> raw;           // native weights, or empty
  uint64_t rows() const { return shape.size() == 2 ? shape[0] : 1; }
  uint64_t cols() const { return shape.empty() ? 0 : shape.back(); }
};

// RoPE frequency scaling: HF rope_parameters (legacy rope_scaling) "rope_type", GGUF
// rope.scaling.type. Source: transformers modeling_rope_utils.py
// (_compute_linear_scaling_rope_parameters, _compute_llama3_parameters).
//   linear: every frequency divided by `factor`;
//   llama3: wavelengths above original_context / low_freq_factor divided by `factor`, below
//           original_context / high_freq_factor kept, smoothly interpolated in between.
struct RopeScaling {
  enum class Kind { kNone, kLinear, kLlama3 };
  Kind kind = Kind::kNone;
  double factor = 1.0;
  double low_freq_factor = 1.0;    // llama3
  double high_freq_factor = 4.0;   // llama3
  double original_context = 8192;  // llama3: original_max_position_embeddings
};

// The rotary frequencies of one kind of layer: base (rope_theta) and scaling.
struct RopeFrequencies {
  double base = 10000;
  RopeScaling scaling;
};

// Hyperparameters (GGUF "<arch>.*" keys; HF config.json fields in comments).
struct ModelConfig {
  std::string arch;             // general.architecture / "architectures"[0] mapped
  int n_layer = 0;              // block_count / num_hidden_layers
  int hidden = 0;               // embedding_length / hidden_size
  int ffn = 0;                  // feed_forward_length / intermediate_size
  int n_head = 0;               // attention.head_count / num_attention_heads
  int n_head_kv = 0;            // attention.head_count_kv / num_key_value_heads
  int head_dim = 0;             // rope.dimension_count or key_length / head_dim or hidden/n_head
  int vocab = 0;                // rows of token_embd / vocab_size
  int context = 0;              // context_length / max_position_embeddings
  RopeFrequencies rope_global;  // rope.freq_base + rope.scaling.* / rope_parameters
  float eps = 1e-5f;            // attention.layer_norm_rms_epsilon / rms_norm_eps
  int sliding_window = 0;       // attention.sliding_window / sliding_window (0: none)
  // Per layer: 1 where the layer attends through the sliding window (HF layer_types
  // "sliding_attention"; Gemma 3's pattern; Mistral: every layer); empty: no such layer.
  std::vector<uint8_t> layer_local;
  RopeFrequencies rope_local;  // sliding layers: rope.local_freq_base / rope_local_base_freq
  float attn_scale = 0;        // 1/sqrt(query_pre_attn_scalar) or 1/sqrt(head_dim)
  // Final logit soft-capping (Gemma 3 final_logit_softcapping; 0: none): every logit the LM head
  // produces becomes cap * tanh(logit / cap) (transformers Gemma3ForCausalLM.forward).
  float final_softcap = 0;
  RopeLayout rope = RopeLayout::Adjacent;
  // Bias tensors the model has, as patterns ("blk.{L}.attn_q.bias"): the description's `biases`
  // plus config.json's attention_bias / mlp_bias groups, or (GGUF) the optional ones present.
  std::vector<std::string> biases;
  GainConvention gains = GainConvention::Plain;
  bool tied_head = false;  // no separate LM head tensor: the embedding is reused
  bool folded = false;     // flashnorm.folded metadata present
  // flashnorm.final_norm_kept (GGUF, `fold --keep-tied-head`): the final norm keeps its gain and
  // the head is tied; only in a folded file with a tied head (else the file is refused).
  bool final_norm_kept = false;
  // A Hugging Face base-model class (Qwen3Model, Gemma3TextModel, ...: how sentence-transformers
  // saves an embedding model's transformer): tensors named without "model.", no LM head; the model
  // computes hidden states (Engine::encode), never logits.
  bool headless = false;
  // config.json's quantization_config: compressed-tensors' FP8 dynamic scheme. The decoder
  // layers' projections are float8_e4m3 weights with a per-row weight_scale (dequantized at load,
  // W[n, :] = fp8 * scale[n], as transformers decompresses them) whose inputs are quantized per
  // token: x' = fp8(x / s) * s, s = max|x| / 448 (compressed-tensors' dynamic activations).
  bool fp8 = false;
  // false (config.json is_causal false; Gemma 3: use_bidirectional_attention true): every
  // position attends to every position of its input, on sliding-window layers to
  // those less than sliding_window away (Gemma 3's use_bidirectional_attention, as transformers'
  // _bidirectional_window_overlay; sliding_window then holds config.json's value // 2 + 1, as
  // Gemma3TextConfig sets it); such a model computes hidden states only.
  bool causal = true;
  // GGUF <arch>.pooling_type (llama.cpp's enum: 0 none, 1 mean, 2 cls, 3 last, 4 rank), which
  // makes the file an embedding model (model/embedding.h); -1 when absent (HF: always).
  int gguf_pooling = -1;
};

struct Model {
  ModelConfig cfg;
  const ArchDescription* arch = nullptr;
  std::map<std::string, Tensor, std::less<>> tensors;
  std::filesystem::path source;
  // The mapped GGUF file that native tensors' `raw` bytes point into (WeightStorage::kNative).
  std::shared_ptr<const io::GgufFile> file;

  // Errors: throws Error naming the tensor when it is absent.
  const Tensor& get(std::string_view name) const;
  Tensor& get(std::string_view name);
  bool has(std::string_view name) const { return tensors.find(name) != tensors.end(); }
  // The LM head [vocab, hidden]: `output.weight`, or the embedding when tied.
  const Tensor& head() const;
};

// Loads a GGUF file or a HF directory (chosen by whether `path` is a directory).
// Validates hyperparameters against the tensors: every tensor the architecture needs exists
// with the expected shape; head counts divide; block_count within the tensors present. Every
// tensor must be one the architecture's forward pass uses: a tensor no layer owns (blk.30.* when
// block_count is 30, a bias the architecture and config do not declare, any unknown name) is
// refused naming it, instead of being computed without (HF: only rotary `inv_freq` buffers are
// skipped); a declared bias ([rows of its weight]) must be present in every layer. HF: config.json
// vocab_size, when present, must equal the embedding's rows; the flashnorm.folded metadata must be
// exactly "true" or "false" (see hf_folded_marker). With data, every weight must be finite
// (check_finite_weights). With with_data = false only hyperparameters and shapes are read (tensors
// keep empty data): the same validation except finiteness, without the cost of dequantizing
// (check_model_file in flashnorm/model/check.h adds finiteness tensor by tensor).
// Errors: flashnorm::Error / FormatError with the tensor or key name.
// How load_model holds matrices. kF32: every tensor dequantized to fp32 `data`. kNative (GGUF
// only): every 2-D tensor keeps its file bytes (Tensor::raw, the file mapped for the model's
// life) for kernels/cpu/quant_matmul.h; 1-D tensors (gains, biases) are still fp32. Errors
// (kNative): Error for a Hugging Face directory, or naming the first 2-D tensor whose type
// quant_matmul cannot read.
enum class WeightStorage { kF32, kNative };

// The storage a quantized file runs fastest from on the CPU: kNative for a GGUF file holding at
// least one block-quantized matrix (not F32/F16/BF16) whose every matrix the native path reads
// (kernels/cpu/quant_matmul.h); kF32 for a Hugging Face directory, an F32/F16/BF16 GGUF, or a GGUF
// with a matrix type only dequantization reads. Reads the GGUF header only. Errors: as
// io::GgufFile::open for an unreadable file.
WeightStorage cpu_default_storage(const std::filesystem::path& path);

Model load_model(const std::filesystem::path& path, bool with_data = true,
                 WeightStorage storage = WeightStorage::kF32);

// Refuses a non-finite weight: throws Error naming the model, the tensor (its name in the file)
// and the first NaN or infinite element ("m.gguf: tensor 'blk.0.attn_q.weight' element 17 is
// nan; ..."; norm tensors are called "norm gain"). Tensors in the order of m.tensors; a tensor
// whose data was not loaded (load_model with with_data = false) is read again from m.source and
// dequantized a chunk of rows at a time, so the whole model is never held in fp32.
void check_finite_weights(const Model& m);

// The flashnorm.folded marker of a HF directory's safetensors metadata: true for "true", false
// for "false" or no marker. Errors: Error naming the key and the shard file for any other value
// (e.g. "TRUE", "1"), or when shards disagree.
bool hf_folded_marker(const io::HfModelDir& d);

}  // namespace flashnorm
