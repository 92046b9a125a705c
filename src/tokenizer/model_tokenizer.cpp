// The tokenizer and chat template of a model; see include/flashnorm/tokenizer/model_tokenizer.h.
#include "flashnorm/tokenizer/model_tokenizer.h"

#include <fmt/format.h>

#include <vector>

#include "flashnorm/error.h"
#include "flashnorm/io/gguf.h"
#include "flashnorm/tokenizer/chat.h"
#include "flashnorm/tokenizer/tokenizer_json.h"

namespace flashnorm {

bool has_gguf_vocabulary(const io::GgufFile& f) {
  for (const auto& kv : f.kvs()) {
    if (kv.key.starts_with("tokenizer.ggml.")) return true;
  }
  return false;
}

void check_vocab_fits(const Tokenizer& tok, int model_vocab, const std::string& vocab_source,
                      const std::string& model) {
  if (tok.vocab_size() != static_cast<size_t>(model_vocab)) {
    throw Error(fmt::format(
        "{}: the vocabulary has {} tokens but {} has {} embedding rows: this tokenizer does not "
        "fit the model",
        vocab_source, tok.vocab_size(), model, model_vocab));
  }
}

namespace fs = std::filesystem;

namespace {

constexpr std::string_view kFormats = "--chat-format chatml|gemma|llama3";

ModelTokenizer from_hf_dir(const fs::path& dir, size_t rows) {
  if (!fs::exists(dir / "tokenizer.json")) {
    throw Error(
        fmt::format("{} has no tokenizer.json: give --tokenizer FILE.gguf or a directory with one",
                    dir.string()));
  }
  TokenizerVocab v = read_hf_tokenizer(dir);
  if (v.tokens.size() > rows) {
    throw Error(fmt::format(
        "{}: tokenizer.json names {} token ids but the model has {} embedding rows: this "
        "tokenizer does not fit the model",
        (dir / "tokenizer.json").string(), v.tokens.size(), rows));
  }
  v.pad_to(rows);
  return {Tokenizer::from_vocab(std::move(v)), dir.string(), read_hf_chat_template(dir), false};
}

ModelTokenizer from_gguf(const fs::path& file, size_t rows) {
  io::GgufFile f = io::GgufFile::open(file);
  ModelTokenizer t{Tokenizer::from_gguf(f), file.string(), std::nullopt, false};
  // the model may be another file (--tokenizer): name it by its role, not by this file
  check_vocab_fits(t.tok, static_cast<int>(rows), t.source, "the model");
  t.chat_template = gguf_chat_template(f);
  if (!t.chat_template) {
    // Pre-trained Gemma 3 GGUFs (gemma-3-270m) carry no template; their instruction-tuned
    // siblings use the Gemma turn format.
    std::optional<std::string> arch = f.get_string_opt("general.architecture");
    t.gemma_turns_without_template = arch && arch->starts_with("gemma");
  }
  return t;
}

}  // namespace

ModelTokenizer load_model_tokenizer(const fs::path& model, const fs::path& tokenizer, size_t rows) {
  const fs::path& src = tokenizer.empty() ? model : tokenizer;
  return fs::is_directory(src) ? from_hf_dir(src, rows) : from_gguf(src, rows);
}

std::string model_chat_prompt(const ModelTokenizer& t, std::string_view chat_format,
                              std::span<const ChatMessage> messages) {
  const std::string_view tmpl = t.chat_template ? std::string_view(*t.chat_template) : "";
  ChatStyle style;
  if (!chat_format.empty()) {
    style = chat_style_from_name(chat_format);
  } else if (t.chat_template) {
    try {
      style = detect_chat_style(tmpl);
    } catch (const Error& e) {
      throw Error(fmt::format("{}: {}; name the family with {}", t.source, e.what(), kFormats));
    }
  } else if (t.gemma_turns_without_template) {
    style = ChatStyle::kGemma;
  } else {
    throw Error(
        fmt::format("{} has no chat template: name its family with {}", t.source, kFormats));
  }
  if (auto p = chat_order_problem(messages)) {
    throw Error(fmt::format("messages[{}]: {}", p->index, p->message));
  }
  try {
    return format_chat(style, tmpl, messages, chat_today());
  } catch (const Error& e) {
    throw Error(fmt::format("{}: {}; name another family with {}", t.source, e.what(), kFormats));
  }
}

std::string model_chat_prompt(const ModelTokenizer& t, std::string_view chat_format,
                              std::string_view user, std::optional<std::string_view> system) {
  std::vector<ChatMessage> messages;
  if (system) messages.push_back({"system", std::string(*system)});
  messages.push_back({"user", std::string(user)});
  return model_chat_prompt(t, chat_format, messages);
}

}  // namespace flashnorm
