// Test support: the message a call throws, for asserting on what an error names.
#pragma once

#include <functional>
#include <string>

#include "flashnorm/error.h"

namespace flashnorm::testing {

// The what() of the flashnorm::Error `fn` throws ("" when it does not throw).
inline std::string error_of(const std::function<void()>& fn) {
  try {
    fn();
  } catch (const Error& e) {
    return e.what();
  }
  return "";
}

}  // namespace flashnorm::testing
