// The two readers of a model's hyperparameters into ModelConfig: a Hugging Face config.json
// (hf_config.cpp) and the "<arch>.*" keys of a GGUF file (gguf_config.cpp). Both are allow-lists:
// every key either is read, is known not to change the forward pass, or must hold its neutral
// value; anything else is refused with one line naming it, because computing without it would be
// a different model than the file describes.
#pragma once

#include <nlohmann/json.hpp>
#include <string>

#include "flashnorm/model/arch.h"
#include "flashnorm/model/model.h"

namespace flashnorm {
namespace io {
class GgufFile;
}

// config.json (`c`, named `where` in messages, e.g. "dir/config.json") -> every ModelConfig field
// but vocab, tied_head and folded (the loader takes those from the tensors). Sources: transformers
// 5 configuration_{llama,gemma3,qwen2,qwen3,mistral}.py and modeling_rope_utils.py; legacy
// rope_theta / rope_scaling / rope_local_base_freq / sliding_window_pattern as transformers 4 wrote
// them. Errors: flashnorm::Error "<where>: <key path> ..." for a missing, mistyped, out-of-range,
// unsupported or unknown key.
void read_hf_config(const nlohmann::json& c, const ArchDescription& a, const std::string& where,
                    ModelConfig& cfg);

// config.json's quantization_config (`q`): compressed-tensors' FP8 dynamic scheme (one group
// targeting Linear; weights float8 per channel, static; input activations float8 per token,
// dynamic; lm_head ignored) -> cfg.fp8. Errors: flashnorm::Error
// "<where>: quantization_config.<path>: ..." for anything else.
void read_compressed_tensors(const nlohmann::json& q, const std::string& where, ModelConfig& cfg);

// tie_word_embeddings when config.json has none (transformers' default for the architecture:
// true for Gemma 3, false for Llama, Qwen 2, Qwen 3 and Mistral).
bool hf_default_tied(const ArchDescription& a);

// The GGUF "<arch>.*" keys -> the same fields; `biases` from the tensors: the description's, plus
// each optional one (attn_biases, mlp_biases) that layer 0 has. Sources: llama.cpp gguf-py
// constants.py (Keys.LLM, Keys.Attention, Keys.Rope). Errors: FormatError naming the key and its
// byte offset.
void read_gguf_config(const io::GgufFile& f, const ArchDescription& a, ModelConfig& cfg);

// A float hyperparameter must be finite and inside [lo, hi] (lo excluded when open_lo): the
// message saying it is not, or nothing.
std::optional<std::string> out_of_range(double v, double lo, double hi, bool open_lo,
                                        std::string_view what);

// 1 <= v <= 2^24 as an int, else Error "<src>: <key> = <v> is out of range".
int positive_int(uint64_t v, std::string_view key, std::string_view src);

}  // namespace flashnorm
