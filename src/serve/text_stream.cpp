#include "text_stream.h"

#include <algorithm>

#include "flashnorm/tokenizer/utf8_text.h"

namespace flashnorm::serve {

std::string TextStream::push(const std::string& piece) {
  if (stopped_) return "";
  held_ += piece;
  // The earliest stop string ends the text.
  size_t cut = std::string::npos;
  for (const std::string& s : stop_) cut = std::min(cut, held_.find(s));
  if (cut != std::string::npos) {
    held_.resize(cut);
    stopped_ = true;
    std::string out = std::move(held_);
    held_.clear();
    sent_ += out;
    return out;
  }
  // Hold back the longest tail that begins some stop string, and an incomplete UTF-8 tail.
  size_t keep = 0;
  for (const std::string& s : stop_) {
    for (size_t k = std::min(s.size() - 1, held_.size()); k > keep; --k) {
      if (held_.compare(held_.size() - k, k, s, 0, k) == 0) {
        keep = k;
        break;
      }
    }
  }
  size_t n = complete_utf8_prefix(held_.substr(0, held_.size() - keep));
  std::string out = held_.substr(0, n);
  held_.erase(0, n);
  sent_ += out;
  return out;
}

std::string TextStream::flush() {
  std::string out = stopped_ ? "" : std::move(held_);
  held_.clear();
  sent_ += out;
  return out;
}

}  // namespace flashnorm::serve
