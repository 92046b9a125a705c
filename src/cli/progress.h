// A one-line progress indicator on stderr, shown only when stderr is a terminal.
#pragma once

#include <unistd.h>

#include <cstdio>
#include <string>

namespace flashnorm::cli {

class Progress {
 public:
  explicit Progress(std::string label) : label_(std::move(label)), tty_(::isatty(2)) {}
  ~Progress() {
    if (tty_ && shown_) std::fprintf(stderr, "\r\033[K");
  }
  void operator()(size_t done, size_t total) {
    if (!tty_) return;
    shown_ = true;
    std::fprintf(stderr, "\r\033[K%s %zu/%zu", label_.c_str(), done, total);
    std::fflush(stderr);
  }

 private:
  std::string label_;
  bool tty_, shown_ = false;
};

}  // namespace flashnorm::cli
