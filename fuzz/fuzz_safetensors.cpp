// libFuzzer target for the safetensors reader (SafetensorsFile::parse) and st_to_fp32.
// Any input must either parse into tensors whose data lies inside the input, or throw
// flashnorm::Error; a crash, a sanitizer report or another exception type is a bug.
// Run: build/fuzz/fuzz/fuzz_safetensors -max_total_time=60 [corpus dir]
#include <cstdint>
#include <cstdlib>
#include <span>

#include "flashnorm/error.h"
#include "flashnorm/io/safetensors.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace flashnorm::io;
  try {
    SafetensorsFile f = SafetensorsFile::parse(std::span<const uint8_t>(data, size), "fuzz");
    uint64_t total = 0;
    for (const StTensorInfo& t : f.tensors()) {
      std::span<const uint8_t> bytes = f.data(t);
      // Invariants the reader promises: size matches shape x dtype, tensors tile the buffer.
      if (bytes.size() != t.n_elements() * st_dtype_size(t.dtype)) std::abort();
      if (f.find(t.name) != &t) std::abort();
      total += bytes.size();
      if (t.dtype == StDtype::F32 || t.dtype == StDtype::F16 || t.dtype == StDtype::BF16) {
        if (st_to_fp32(t.dtype, bytes).size() != t.n_elements()) std::abort();
      }
    }
    if (total > size) std::abort();
    for (const auto& [k, v] : f.metadata()) {
      if (k.size() + v.size() > size) std::abort();
    }
  } catch (const flashnorm::Error&) {
    // Refused input: expected.
  }
  return 0;
}
