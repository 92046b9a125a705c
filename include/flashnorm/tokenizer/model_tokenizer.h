// The tokenizer and chat template that go with a model: a GGUF file's own vocabulary, a Hugging
// Face directory's tokenizer.json (+ tokenizer_config.json, chat_template.jinja), or those of a
// separately named GGUF file or directory. What `generate` and `verify` load.
#pragma once

#include <filesystem>
#include <optional>
#include <span>
#include <string>
#include <string_view>

#include "flashnorm/tokenizer/chat.h"
#include "flashnorm/tokenizer/tokenizer.h"

namespace flashnorm {

namespace io {
class GgufFile;
}

// True when a GGUF file carries a vocabulary (any "tokenizer.ggml.*" key). A file without one can
// still be run with another file's vocabulary (`generate --tokenizer`), as a HF directory is.
bool has_gguf_vocabulary(const io::GgufFile& f);

// Refuses a tokenizer whose vocabulary size differs from the model's embedding rows (token ids
// would fall outside the embedding or the tokenizer). `vocab_source` names the file the
// vocabulary came from, `model` the model. Errors: Error naming both and both sizes.
void check_vocab_fits(const Tokenizer& tok, int model_vocab, const std::string& vocab_source,
                      const std::string& model);

struct ModelTokenizer {
  Tokenizer tok;
  std::string source;                         // file or directory the vocabulary came from
  std::optional<std::string> chat_template;   // the template text, when the source has one
  bool gemma_turns_without_template = false;  // a gemma* GGUF without a template (pre-trained)
};

// `tokenizer` empty: the model's own (a GGUF file's vocabulary; a directory's tokenizer.json);
// else a GGUF file or a directory holding tokenizer.json. `rows`: the model's embedding rows. A
// tokenizer.json that names fewer ids than `rows` (Qwen pads its embeddings to a multiple of 128)
// is padded with unused, empty tokens, which decode to nothing; a GGUF vocabulary must have
// exactly `rows` tokens (check_vocab_fits).
// Errors: Error naming the directory when it has no tokenizer.json ("give --tokenizer"), the
// tokenizer readers' errors, and a vocabulary that does not fit `rows` (both sizes named).
ModelTokenizer load_model_tokenizer(const std::filesystem::path& model,
                                    const std::filesystem::path& tokenizer, size_t rows);

// The chat prompt for one user (and optional system) message: the family named by `chat_format`
// ("chatml", "gemma", "llama3"; the template, when there is one, still supplies its defaults), else
// the family recognised in the source's template (never executed), else Gemma turns for a
// pre-trained gemma* GGUF. Errors: Error for an unknown family name, a template of no known family
// or no template at all, each saying that --chat-format names the family.
std::string model_chat_prompt(const ModelTokenizer& t, std::string_view chat_format,
                              std::string_view user, std::optional<std::string_view> system);

// The same for a whole conversation (chat.h's format_chat order: optional system, then user and
// assistant alternating, ending with user). Errors: as above, and Error naming messages[i] for a
// message out of that order.
std::string model_chat_prompt(const ModelTokenizer& t, std::string_view chat_format,
                              std::span<const ChatMessage> messages);

}  // namespace flashnorm
