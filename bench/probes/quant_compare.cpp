// The added RMS error of io::quantize against another quantizer's output on the same tensors
// (scripts/quant_compare.sh runs it against llama.cpp's llama-quantize, which it only runs, never
// links). Two modes:
//   quant_compare --to-f32 IN.gguf OUT.gguf   every tensor of IN dequantized to F32 (the common
//                                             source both quantizers read)
//   quant_compare SRC_F32.gguf OTHER.gguf     for each tensor OTHER stores in a block type that
//                                             io::quantize writes, quantized from SRC's F32 values
//                                             by both: one JSON line per tensor with
//                                             {"tensor","type","n","ref_sq","other_sq","ours_sq"}
//                                             (sums of squares of the values and of each error,
//                                             fp64), then a summary line per type.
#include <fmt/format.h>

#include <cmath>
#include <cstring>
#include <map>

#include "flashnorm/io/dequant.h"
#include "flashnorm/io/gguf.h"

using namespace flashnorm;
using namespace flashnorm::io;

namespace {

std::vector<float> to_f32(const GgufFile& f, const GgufTensorInfo& t) {
  std::vector<float> v(t.n_elements);
  dequantize(t.type, f.tensor_data(t), v);
  return v;
}

int to_f32_file(const char* in, const char* out) {
  GgufFile f = GgufFile::open(in);
  std::vector<GgufTensorOut> outs;
  for (const auto& t : f.tensors()) {
    const std::vector<float> v = to_f32(f, t);
    GgufTensorOut o{t.name, t.dims, GgmlType::F32, std::vector<uint8_t>(v.size() * 4), {}};
    std::memcpy(o.bytes.data(), v.data(), o.bytes.size());
    outs.push_back(std::move(o));
  }
  const std::filesystem::path inputs[] = {in};
  write_gguf(out, f.kvs(), outs, inputs);
  return 0;
}

int compare(const char* src_path, const char* other_path) {
  GgufFile src = GgufFile::open(src_path), other = GgufFile::open(other_path);
  struct Sum {
    double ref = 0, oth = 0, ours = 0;
    size_t tensors = 0, better = 0;
  };
  std::map<std::string, Sum> by_type;
  for (const auto& t : other.tensors()) {
    const GgufTensorInfo* s = src.find_tensor(t.name);
    const auto traits = ggml_type_traits(uint32_t(t.type));
    if (!s || s->type != GgmlType::F32 || !quant_supported(t.type) || !traits ||
        traits->block_elems == 1) {
      continue;
    }
    const std::vector<float> x = to_f32(src, *s), theirs = to_f32(other, t);
    const std::vector<uint8_t> q = quantize(t.type, x);
    std::vector<float> ours(x.size());
    dequantize(t.type, q, ours);
    double ref = 0, eo = 0, eu = 0;
    for (size_t i = 0; i < x.size(); ++i) {
      ref += double(x[i]) * x[i];
      eo += (double(theirs[i]) - x[i]) * (double(theirs[i]) - x[i]);
      eu += (double(ours[i]) - x[i]) * (double(ours[i]) - x[i]);
    }
    const std::string type(ggml_type_name(uint32_t(t.type)));
    fmt::print(
        "{{\"tensor\":\"{}\",\"type\":\"{}\",\"n\":{},\"ref_sq\":{:.17g},\"other_sq\":{:.17g},"
        "\"ours_sq\":{:.17g}}}\n",
        t.name, type, x.size(), ref, eo, eu);
    Sum& sum = by_type[type];
    sum.ref += ref, sum.oth += eo, sum.ours += eu, ++sum.tensors, sum.better += eu <= eo;
  }
  for (const auto& [type, s] : by_type) {
    fmt::print(
        "{{\"summary\":\"{}\",\"tensors\":{},\"ours_no_worse\":{},\"other_rel_rms\":{:.6g},"
        "\"ours_rel_rms\":{:.6g},\"ours_over_other\":{:.6g}}}\n",
        type, s.tensors, s.better, std::sqrt(s.oth / s.ref), std::sqrt(s.ours / s.ref),
        std::sqrt(s.ours / s.oth));
  }
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  try {
    if (argc == 4 && std::string(argv[1]) == "--to-f32") return to_f32_file(argv[2], argv[3]);
    if (argc == 3) return compare(argv[1], argv[2]);
    fmt::print(stderr, "usage: quant_compare --to-f32 IN OUT | quant_compare SRC_F32 OTHER\n");
  } catch (const std::exception& e) {
    fmt::print(stderr, "quant_compare: {}\n", e.what());
  }
  return 1;
}
