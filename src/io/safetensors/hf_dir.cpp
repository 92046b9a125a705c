// Hugging Face model directories: config.json plus model.safetensors, or
// model.safetensors.index.json ({"metadata": {...}, "weight_map": {tensor: shard file}}) and the
// shards it names (the layout transformers' save_pretrained writes with safe_serialization).
#include <fmt/format.h>
#include <unistd.h>

#include <algorithm>
#include <fstream>
#include <set>
#include <sstream>

#include "flashnorm/error.h"
#include "flashnorm/io/atomic_file.h"
#include "flashnorm/io/safetensors.h"
#include "flashnorm/io/side_file.h"
#include "internal.h"

namespace flashnorm::io {
namespace fs = std::filesystem;
using st_detail::quote;

namespace {

constexpr const char* kConfig = "config.json";
constexpr const char* kSingle = "model.safetensors";
constexpr const char* kIndex = "model.safetensors.index.json";

std::string read_text(const fs::path& p) {
  std::optional<std::string> text = read_side_file(p);
  if (!text) throw Error(fmt::format("{}: missing", p.string()));
  return std::move(*text);
}

// True if `rel` (a shard path from an index) stays inside the directory: relative, not empty,
// no ".." component. Checked lexically only: the Hugging Face cache stores shards as symbolic
// links into a blobs folder outside the snapshot directory, so links are allowed.
bool stays_inside(const std::string& rel) {
  if (rel.empty() || rel.find('\0') != std::string::npos) return false;
  fs::path p(rel);
  if (p.is_absolute() || p.has_root_name() || p.has_root_directory()) return false;
  for (const auto& part : p) {
    if (part == "..") return false;
  }
  return !p.filename().empty();
}

// Files of a source directory that write_hf_dir must not copy: weights (which the new tensors
// replace) and the index; config.json is written from the given config.
bool is_weight_file(const fs::path& p) {
  const std::string name = p.filename().string();
  static const char* kExt[] = {".safetensors", ".bin",     ".pt",   ".pth", ".ckpt",
                               ".h5",          ".msgpack", ".gguf", ".onnx"};
  for (const char* e : kExt) {
    if (p.extension() == e) return true;
  }
  return name == kConfig || name.ends_with(".index.json");
}

void copy_file_atomic(const fs::path& from, const fs::path& to, const fs::path& input_dir) {
  std::ifstream in(from, std::ios::binary);
  if (!in) throw Error(fmt::format("cannot open {}", from.string()));
  const fs::path inputs[] = {input_dir, from};
  AtomicFile out(to, inputs);
  std::vector<char> buf(1 << 20);
  while (in) {
    in.read(buf.data(), static_cast<std::streamsize>(buf.size()));
    out.write(buf.data(), static_cast<size_t>(in.gcount()));
  }
  if (in.bad()) throw Error(fmt::format("cannot read {}", from.string()));
  out.commit();
}

void write_text(const fs::path& p, const std::string& text, std::span<const fs::path> inputs) {
  AtomicFile out(p, inputs);
  out.write(text.data(), text.size());
  out.commit();
}

}  // namespace

struct HfModelDir::Impl {
  fs::path dir;
  nlohmann::json config;
  std::vector<SafetensorsFile> shards;
  // tensor name -> (shard index, info inside that shard)
  std::map<std::string, std::pair<size_t, const StTensorInfo*>, std::less<>> where;
};

HfModelDir::HfModelDir(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
HfModelDir::HfModelDir(HfModelDir&&) noexcept = default;
HfModelDir& HfModelDir::operator=(HfModelDir&&) noexcept = default;
HfModelDir::~HfModelDir() = default;

HfModelDir HfModelDir::open(const fs::path& dir) {
  std::error_code ec;
  if (!fs::is_directory(dir, ec)) throw Error(fmt::format("{} is not a directory", dir.string()));
  auto impl = std::make_unique<Impl>();
  impl->dir = dir;

  const fs::path config_path = dir / kConfig;
  if (!fs::exists(config_path, ec)) {
    throw Error(fmt::format("{}: missing {}", dir.string(), kConfig));
  }
  {
    const std::string text = read_text(config_path);
    auto parsed = st_detail::parse_json_strict(text, config_path.string(), 0);
    if (!parsed.is_object()) {
      throw FormatError(config_path.string(), "config", 0, "config.json is not a JSON object");
    }
    impl->config = nlohmann::json::parse(text);
  }

  const fs::path index_path = dir / kIndex;
  // Both a single file and an index: transformers loads model.safetensors, an index reader the
  // shards; which weights are meant is ambiguous, so neither is guessed.
  if (fs::exists(index_path, ec) && fs::exists(dir / kSingle, ec)) {
    throw Error(fmt::format("{}: holds both {} and {}: refusing to guess which weights are meant",
                            dir.string(), kSingle, kIndex));
  }
  if (fs::exists(index_path, ec)) {
    const std::string file = index_path.string();
    const std::string text = read_text(index_path);
    const auto index = st_detail::parse_json_strict(text, file, 0);
    if (!index.is_object()) throw FormatError(file, "index", 0, "index is not a JSON object");
    auto wm = index.find("weight_map");
    if (wm == index.end()) throw FormatError(file, "weight_map", 0, "missing weight_map");
    if (!wm->is_object()) {
      throw FormatError(file, "weight_map", st_detail::key_offset(text, "weight_map", 0),
                        "weight_map is not an object");
    }
    // Validate every entry and open each shard once, in order of first mention.
    std::map<std::string, size_t> shard_of_file;
    std::map<std::string, std::string> assigned;  // tensor -> shard file
    for (const auto& item : wm->items()) {
      const std::string& tensor = item.key();  // (clang 14 cannot capture a structured binding)
      const auto& shard = item.value();
      const std::string field = fmt::format("weight_map[{}]", quote(tensor));
      auto off = [&] { return st_detail::key_offset(text, tensor, 0); };
      if (!shard.is_string()) throw FormatError(file, field, off(), "shard name is not a string");
      const std::string rel = shard.get<std::string>();
      if (!stays_inside(rel)) {
        throw FormatError(file, field, off(),
                          fmt::format("shard path {} escapes the model directory", quote(rel)));
      }
      assigned.emplace(tensor, rel);
      if (shard_of_file.count(rel)) continue;
      const fs::path shard_path = dir / rel;
      if (!fs::is_regular_file(shard_path, ec)) {
        throw FormatError(file, field, off(), fmt::format("shard {} does not exist", quote(rel)));
      }
      shard_of_file.emplace(rel, impl->shards.size());
      impl->shards.push_back(SafetensorsFile::open(shard_path));
    }
    for (const auto& [tensor, rel] : assigned) {
      const size_t s = shard_of_file.at(rel);
      const StTensorInfo* info = impl->shards[s].find(tensor);
      if (!info) {
        throw FormatError(file, fmt::format("weight_map[{}]", quote(tensor)),
                          st_detail::key_offset(text, tensor, 0),
                          fmt::format("tensor is absent from shard {}", quote(rel)));
      }
      impl->where.emplace(tensor, std::make_pair(s, info));
    }
    // Every tensor of every shard must be where the index says it is.
    for (const auto& [rel, s] : shard_of_file) {
      for (const auto& t : impl->shards[s].tensors()) {
        auto it = assigned.find(t.name);
        if (it == assigned.end()) {
          throw FormatError(file, "weight_map", 0,
                            fmt::format("tensor {} of shard {} is not in the weight_map",
                                        quote(t.name), quote(rel)));
        }
        if (it->second != rel) {
          throw FormatError(file, fmt::format("weight_map[{}]", quote(t.name)),
                            st_detail::key_offset(text, t.name, 0),
                            fmt::format("tensor is also in shard {}, not only in {}", quote(rel),
                                        quote(it->second)));
        }
      }
    }
  } else if (fs::exists(dir / kSingle, ec)) {
    impl->shards.push_back(SafetensorsFile::open(dir / kSingle));
    for (const auto& t : impl->shards[0].tensors()) {
      impl->where.emplace(t.name, std::make_pair(size_t{0}, &t));
    }
  } else {
    throw Error(fmt::format("{}: neither {} nor {} exists", dir.string(), kSingle, kIndex));
  }
  return HfModelDir(std::move(impl));
}

const fs::path& HfModelDir::dir() const { return impl_->dir; }
const nlohmann::json& HfModelDir::config() const { return impl_->config; }
const std::vector<SafetensorsFile>& HfModelDir::shards() const { return impl_->shards; }

std::vector<std::string> HfModelDir::tensor_names() const {
  std::vector<std::string> names;
  names.reserve(impl_->where.size());
  for (const auto& [name, loc] : impl_->where) names.push_back(name);
  return names;  // std::map keeps them sorted
}

const StTensorInfo* HfModelDir::find(std::string_view name, const SafetensorsFile** file) const {
  auto it = impl_->where.find(name);
  if (it == impl_->where.end()) return nullptr;
  if (file) *file = &impl_->shards[it->second.first];
  return it->second.second;
}

std::vector<float> HfModelDir::load_fp32(std::string_view name) const {
  const SafetensorsFile* file = nullptr;
  const StTensorInfo* info = find(name, &file);
  if (!info) {
    throw Error(fmt::format("{}: no tensor {}", impl_->dir.string(), quote(name)));
  }
  try {
    return st_to_fp32(info->dtype, file->data(*info));
  } catch (const FormatError&) {
    throw;
  } catch (const Error& e) {
    throw Error(fmt::format("{}: tensor {}: {}", file->name(), quote(name), e.what()));
  }
}

const std::map<std::string, std::string>& HfModelDir::metadata() const {
  static const std::map<std::string, std::string> kEmpty;
  return impl_->shards.empty() ? kEmpty : impl_->shards[0].metadata();
}

namespace {
void write_hf_dir_files(const fs::path& dir, const nlohmann::json& config,
                        const std::vector<StTensorOut>& tensors,
                        const std::map<std::string, std::string>& metadata, int n_shards,
                        const fs::path& copy_from, const std::vector<fs::path>& inputs);
void write_module_folders(const fs::path& dir, const fs::path& copy_from,
                          const HfModuleFolders& modules, const std::vector<fs::path>& inputs);
}  // namespace

void write_hf_dir(const fs::path& dir, const nlohmann::json& config,
                  const std::vector<StTensorOut>& tensors,
                  const std::map<std::string, std::string>& metadata, int n_shards,
                  const fs::path& copy_from, const HfModuleFolders& modules) {
  if (n_shards < 1) throw Error(fmt::format("n_shards must be at least 1, not {}", n_shards));
  if (static_cast<size_t>(n_shards) > std::max<size_t>(tensors.size(), 1)) {
    throw Error(fmt::format("cannot split {} tensors into {} shards", tensors.size(), n_shards));
  }
  if (!config.is_object()) throw Error("config must be a JSON object");
  if (copy_from.empty() && (!modules.folders.empty() || !modules.rewritten.empty()))
    throw Error("module folders need the directory they are copied from");
  std::vector<fs::path> inputs;
  if (!copy_from.empty()) {
    if (!fs::is_directory(copy_from)) {
      throw Error(fmt::format("{} is not a directory", copy_from.string()));
    }
    inputs.push_back(copy_from);
  }
  refuse_overwrite(dir, inputs);
  // The directory is built under a temporary name and renamed into place when complete, so a
  // failed or interrupted write never leaves a half-written model, and never mixes with (or
  // replaces) the files of an existing directory, which is refused unless empty.
  StagingDir staging(dir);
  write_hf_dir_files(staging.path(), config, tensors, metadata, n_shards, copy_from, inputs);
  write_module_folders(staging.path(), copy_from, modules, inputs);
  staging.commit();
}

namespace {

// Writes the files of a Hugging Face directory into `dir` (a new, empty staging directory).
void write_hf_dir_files(const fs::path& dir, const nlohmann::json& config,
                        const std::vector<StTensorOut>& tensors,
                        const std::map<std::string, std::string>& metadata, int n_shards,
                        const fs::path& copy_from, const std::vector<fs::path>& inputs) {
  // Shards: contiguous runs of tensors, as equal in count as possible.
  nlohmann::json weight_map = nlohmann::json::object();
  uint64_t total_size = 0;
  for (int s = 0; s < n_shards; ++s) {
    const size_t lo = tensors.size() * s / n_shards, hi = tensors.size() * (s + 1) / n_shards;
    std::vector<StTensorOut> part(tensors.begin() + lo, tensors.begin() + hi);
    const std::string name =
        n_shards == 1 ? std::string(kSingle)
                      : fmt::format("model-{:05d}-of-{:05d}.safetensors", s + 1, n_shards);
    write_safetensors(dir / name, part, metadata, inputs);
    for (const auto& t : part) {
      weight_map[t.name] = name;
      total_size += t.byte_size();
    }
  }
  if (n_shards > 1) {
    nlohmann::json index = {{"metadata", {{"total_size", total_size}}}, {"weight_map", weight_map}};
    write_text(dir / kIndex, index.dump(2) + "\n", inputs);
  }
  write_text(dir / kConfig, config.dump(2) + "\n", inputs);

  // Copy the other files of the source directory (tokenizer, generation config, ...).
  if (!copy_from.empty()) {
    for (const auto& entry : fs::directory_iterator(copy_from)) {
      if (!entry.is_regular_file() || is_weight_file(entry.path())) continue;
      copy_file_atomic(entry.path(), dir / entry.path().filename(), copy_from);
    }
  }
}

void write_module_folders(const fs::path& dir, const fs::path& copy_from,
                          const HfModuleFolders& modules, const std::vector<fs::path>& inputs) {
  std::set<std::string> written;
  for (const std::string& f : modules.folders) {
    const fs::path rel(f);
    if (f.empty() || rel.is_absolute() || std::distance(rel.begin(), rel.end()) != 1 || f == "." ||
        f == "..") {
      throw Error(
          fmt::format("{}: module folder '{}' is not one folder name", copy_from.string(), f));
    }
    const fs::path from = copy_from / rel;
    if (!fs::is_directory(from))
      throw Error(fmt::format("{}: module folder '{}' is not a directory", copy_from.string(), f));
    if (!fs::create_directory(dir / rel)) continue;  // listed twice: copied once
    for (const auto& entry : fs::directory_iterator(from)) {
      if (!entry.is_regular_file()) continue;
      const std::string name = f + "/" + entry.path().filename().string();
      if (auto it = modules.rewritten.find(name); it != modules.rewritten.end()) {
        write_safetensors(dir / name, it->second, {}, inputs);
        written.insert(name);
      } else {
        copy_file_atomic(entry.path(), dir / name, copy_from);
      }
    }
  }
  for (const auto& [name, tensors] : modules.rewritten) {
    if (!written.count(name))
      throw Error(fmt::format("{}: '{}' is not a file of a module folder written",
                              copy_from.string(), name));
  }
}

}  // namespace

}  // namespace flashnorm::io
