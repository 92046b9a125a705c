// libFuzzer target for the GGUF reader: parses arbitrary bytes as a GGUF image; anything but a
// clean parse or a flashnorm::FormatError is a bug (sanitizers report memory errors and UB).
// On a clean parse it walks the accessors and dequantizes small tensors, so every offset and
// size the reader accepted is exercised against the mapped bytes.
// Seeds: fuzz/corpus/fuzz_gguf (fuzz/make_seeds.py: real SmolLM2 / Gemma 3 metadata made small,
// plus tests/io/gguf_fuzz_seeds.py's synthetic files); run with scripts/fuzz.sh.
#include <cstddef>
#include <cstdint>
#include <span>
#include <vector>

#include "flashnorm/error.h"
#include "flashnorm/io/dequant.h"
#include "flashnorm/io/gguf.h"

namespace {

// Runs one typed accessor; a FormatError (the value does not have that type) is a clean refusal.
template <class Fn>
void refusal_ok(Fn&& fn) {
  try {
    fn();
  } catch (const flashnorm::FormatError&) {
  }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace flashnorm::io;
  try {
    const auto f = GgufFile::parse(std::span<const uint8_t>(data, size), "fuzz.gguf");
    for (const auto& kv : f.kvs()) {
      (void)f.find(kv.key);
      refusal_ok([&] { (void)f.get_uint_opt(kv.key); });
      refusal_ok([&] { (void)f.string_array(kv.key); });
      refusal_ok([&] { (void)f.int_array(kv.key); });
      refusal_ok([&] { (void)f.float_array(kv.key); });
      refusal_ok([&] { (void)f.get_float_opt(kv.key); });
      refusal_ok([&] { (void)f.get_string_opt(kv.key); });
      refusal_ok([&] { (void)f.get_bool_or(kv.key, false); });
    }
    std::vector<float> buf;
    for (const auto& t : f.tensors()) {
      const auto bytes = f.tensor_data(t);
      if (bytes.size() != t.n_bytes) __builtin_trap();
      if (t.n_elements <= (1u << 16) && dequant_supported(t.type)) {
        buf.resize(t.n_elements);
        dequantize(t.type, bytes, buf);
      }
    }
  } catch (const flashnorm::FormatError&) {
  }
  return 0;
}
