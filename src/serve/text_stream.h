// The text of one generation, built token by token as `flashnorm generate` prints it (the
// concatenated Tokenizer::piece of each token, released in complete UTF-8 sequences) and cut at
// the first OpenAI `stop` string (which is not part of the result). Text that could still turn
// into a stop string is held back until it cannot.
#pragma once

#include <string>
#include <vector>

namespace flashnorm::serve {

class TextStream {
 public:
  explicit TextStream(std::vector<std::string> stop) : stop_(std::move(stop)) {}
  // Appends a token's bytes; returns the text now safe to send (possibly empty).
  std::string push(const std::string& piece);
  // True once a stop string appeared (nothing more is ever released).
  bool stopped() const { return stopped_; }
  // What is held back, at the end of the generation (possibly an incomplete UTF-8 tail, as
  // generate writes it).
  std::string flush();
  // Everything released so far.
  const std::string& text() const { return sent_; }

 private:
  std::vector<std::string> stop_;
  std::string held_, sent_;
  bool stopped_ = false;
};

}  // namespace flashnorm::serve
