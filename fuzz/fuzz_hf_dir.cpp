// libFuzzer target for Hugging Face model directories: config.json, model.safetensors.index.json
// and the shards (HfModelDir::open), then the model loader's reading of config.json and the
// tensor shapes (load_model with and without data). The input is split at each "\n--8<--\n"
// into parts: [0] config.json, [1] model.safetensors.index.json (not written when the part is
// empty), [2..5] shards. With an index, shard k of n is written as
// "model-0000k-of-0000n.safetensors" (the names transformers uses); without one, the first shard
// is written as "model.safetensors". Files go to a per-process directory under $TMPDIR (or /tmp;
// point it at a tmpfs such as /dev/shm for speed), emptied before every input and removed at exit.
// Anything but success or a flashnorm::Error is a bug (a crash, a sanitizer report, another
// exception type such as nlohmann::json's type_error).
// Seeds: fuzz/make_seeds.py (SmolLM2 / Gemma 3 configs and tensor names, tiny shapes).
#include <unistd.h>

#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <string>
#include <string_view>
#include <vector>

#include "flashnorm/error.h"
#include "flashnorm/io/safetensors.h"
#include "flashnorm/model/model.h"

namespace fs = std::filesystem;

namespace {

constexpr std::string_view kDelim = "\n--8<--\n";
constexpr size_t kMaxShards = 4;

// The scratch directory of this process, created on first use and removed at exit (the path is
// never destroyed, so the exit handler may still read it).
const fs::path& scratch_dir() {
  static const fs::path* dir = [] {
    const char* tmp = std::getenv("TMPDIR");
    auto* d = new fs::path(fs::path(tmp && *tmp ? tmp : "/tmp") /
                           ("fuzz_hf_dir." + std::to_string(getpid())));
    fs::create_directories(*d);
    std::atexit([] {
      std::error_code ec;
      fs::remove_all(scratch_dir(), ec);
    });
    return d;
  }();
  return *dir;
}

void write_file(const fs::path& p, std::string_view bytes) {
  std::ofstream out(p, std::ios::binary | std::ios::trunc);
  out.write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace flashnorm;
  const std::string_view in(reinterpret_cast<const char*>(data), size);
  std::vector<std::string_view> parts;
  for (size_t pos = 0;;) {
    const size_t next = in.find(kDelim, pos);
    if (next == std::string_view::npos || parts.size() == 2 + kMaxShards - 1) {
      parts.push_back(in.substr(pos));
      break;
    }
    parts.push_back(in.substr(pos, next - pos));
    pos = next + kDelim.size();
  }
  const fs::path& dir = scratch_dir();
  for (const auto& e : fs::directory_iterator(dir)) fs::remove_all(e.path());
  write_file(dir / "config.json", parts[0]);
  const bool has_index = parts.size() > 1 && !parts[1].empty();
  if (has_index) write_file(dir / "model.safetensors.index.json", parts[1]);
  const size_t n_shards = parts.size() > 2 ? parts.size() - 2 : 0;
  for (size_t k = 0; k < n_shards; ++k) {
    const std::string name = has_index ? "model-0000" + std::to_string(k + 1) + "-of-0000" +
                                             std::to_string(n_shards) + ".safetensors"
                                       : (k == 0 ? "model.safetensors" : "extra.safetensors");
    write_file(dir / name, parts[2 + k]);
  }
  try {
    const io::HfModelDir d = io::HfModelDir::open(dir);
    (void)d.config().dump();
    (void)d.metadata();
    for (const std::string& name : d.tensor_names()) {
      const io::SafetensorsFile* file = nullptr;
      const io::StTensorInfo* t = d.find(name, &file);
      if (!t || !file) __builtin_trap();
      if (t->dtype == io::StDtype::F32 || t->dtype == io::StDtype::F16 ||
          t->dtype == io::StDtype::BF16) {
        if (d.load_fp32(name).size() != t->n_elements()) __builtin_trap();
      }
    }
    (void)load_model(dir, /*with_data=*/false);
    const Model m = load_model(dir, /*with_data=*/true);
    if (std::getenv("FUZZ_VERBOSE"))
      std::fprintf(stderr, "loaded: %zu tensors\n", m.tensors.size());
  } catch (const Error& e) {
    // Refused input (FormatError derives from Error): expected.
    // FUZZ_VERBOSE=1: say why (to check that seeds get past the parser).
    if (std::getenv("FUZZ_VERBOSE")) std::fprintf(stderr, "refused: %s\n", e.what());
  }
  return 0;
}
