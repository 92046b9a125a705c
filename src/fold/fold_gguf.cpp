#include <fmt/format.h>

#include <cmath>
#include <cstring>

#include "flashnorm/error.h"
#include "flashnorm/fold/fold.h"
#include "flashnorm/io/atomic_file.h"
#include "flashnorm/io/dequant.h"
#include "flashnorm/io/gguf.h"
#include "flashnorm/model/check.h"
#include "flashnorm/model/model.h"
#include "plan.h"

namespace flashnorm {
namespace {
using io::GgmlType;

std::vector<float> dequant(const io::GgufFile& f, const io::GgufTensorInfo& t) {
  if (!io::dequant_supported(t.type)) {
    throw Error(fmt::format("{}: tensor '{}' has type {}, which flashnorm cannot dequantize",
                            f.name(), t.name, io::ggml_type_name(uint32_t(t.type))));
  }
  std::vector<float> v(t.n_elements);
  io::dequantize(t.type, f.tensor_data(t), v);
  return v;
}

// Encodes folded fp64 values as `type`, rounding once. For block types, the fp64 values are
// first rounded to fp32 (the quantizer's input) and the added error is recorded in `rec`.
std::vector<uint8_t> encode(const std::vector<double>& v, GgmlType type, FoldedTensor& rec) {
  check_folded_range(v,
                     type == GgmlType::F16    ? FoldTarget::kF16
                     : type == GgmlType::BF16 ? FoldTarget::kBF16
                                              : FoldTarget::kF32,
                     rec.name);
  std::vector<uint8_t> out;
  switch (type) {
    case GgmlType::F32: {
      std::vector<float> f(v.size());
      round_folded(v, FoldTarget::kF32, f);
      out.resize(f.size() * 4);
      std::memcpy(out.data(), f.data(), out.size());
      return out;
    }
    case GgmlType::F16:
    case GgmlType::BF16: {
      std::vector<uint16_t> h(v.size());
      round_folded(v, type == GgmlType::F16 ? FoldTarget::kF16 : FoldTarget::kBF16, h);
      out.resize(h.size() * 2);
      std::memcpy(out.data(), h.data(), out.size());
      return out;
    }
    default: {
      std::vector<float> f(v.size());
      round_folded(v, FoldTarget::kF32, f);
      out = io::quantize(type, f);
      std::vector<float> back(v.size());
      io::dequantize(type, out, back);
      // what the file will hold: finite, and not flushed to zero
      check_requantized(v, back, io::ggml_type_traits(uint32_t(type))->block_elems,
                        io::ggml_type_name(uint32_t(type)), rec.name);
      for (size_t i = 0; i < v.size(); ++i) {
        const double e = double(back[i]) - v[i];
        rec.sum_sq_err += e * e;
        rec.sum_sq_ref += v[i] * v[i];
      }
      rec.requant_rel_rms = rec.sum_sq_ref > 0 ? std::sqrt(rec.sum_sq_err / rec.sum_sq_ref) : 0;
      return out;
    }
  }
}

}  // namespace

GgmlType requantize_fallback(GgmlType type) {
  switch (type) {
    case GgmlType::Q4_K:
      return GgmlType::Q5_0;
    case GgmlType::Q5_K:
      return GgmlType::Q5_1;
    case GgmlType::Q6_K:
      return GgmlType::Q8_0;
    default:
      return type;
  }
}

FoldReport fold_gguf(const std::filesystem::path& in, const std::filesystem::path& out,
                     const FoldOptions& opt) {
  const std::filesystem::path inputs[] = {in};
  io::check_output_file(out, inputs);  // before any work: a refused output costs nothing
  io::GgufFile f = io::GgufFile::open(in);
  if (f.get_bool_or(std::string(kFoldedKey), false)) {
    throw Error(fmt::format("{}: already folded ({} = true); refusing to fold twice", in.string(),
                            kFoldedKey));
  }
  // The checkpoint must be one `generate` runs: the same checks, before computing anything.
  check_model_file(in);
  if (opt.requantize_type && !io::quant_supported(*opt.requantize_type)) {
    throw Error(fmt::format("fold: --requantize {} is not a type flashnorm can quantize to",
                            io::ggml_type_name(uint32_t(*opt.requantize_type))));
  }
  if (!opt.requantize && opt.dtype != GgmlType::F32 && opt.dtype != GgmlType::F16 &&
      opt.dtype != GgmlType::BF16) {
    throw Error("fold: --dtype must be f32, f16 or bf16");
  }
  FoldReport rep;
  rep.arch = f.get_string("general.architecture");
  const ArchDescription& arch = arch_by_name(rep.arch);
  const uint64_t n_layer = f.get_uint(rep.arch + ".block_count");
  if (n_layer == 0 || n_layer > 4096) {
    throw Error(
        fmt::format("{}: {}.block_count = {} is out of range", in.string(), rep.arch, n_layer));
  }
  detail::FoldPlan plan = detail::make_fold_plan(arch, static_cast<int>(n_layer));
  if (opt.keep_tied_head) {
    if (f.find_tensor(arch.head)) {
      throw Error(
          fmt::format("{}: --keep-tied-head: the LM head '{}' is not tied to '{}'; fold without it",
                      in.string(), arch.head, arch.tied_source));
    }
    // The final norm keeps its gain and the head its tie: neither is rewritten.
    const std::string final_norm = plan.consumer_to_norm.at(arch.head);
    plan.consumer_to_norm.erase(arch.head);
    for (const auto& [c, n] : plan.consumer_to_norm) {
      if (n == final_norm) {
        throw Error(fmt::format("{}: --keep-tied-head: norm '{}' feeds '{}' too", in.string(),
                                final_norm, c));
      }
    }
    std::erase(plan.norms, final_norm);
    rep.kept_tied_head = true;
  } else if (f.find(rep.arch + ".pooling_type")) {
    // An embedding model: its pooling reads the final norm's output, so that norm keeps its gain
    // and no head is made (one the file has keeps its bytes).
    for (const NormSite& s : arch.final_norms) {
      std::erase_if(plan.consumer_to_norm, [&](const auto& c) { return c.second == s.norm; });
      std::erase(plan.norms, s.norm);
    }
  }

  // Gains of every foldable norm, as multipliers, checked to be vectors.
  std::map<std::string, std::vector<double>> gains;
  for (const auto& norm : plan.norms) {
    const io::GgufTensorInfo* t = f.find_tensor(norm);
    if (!t) throw Error(fmt::format("{}: missing norm tensor '{}'", in.string(), norm));
    if (t->dims.size() != 1) {
      throw Error(fmt::format("{}: norm tensor '{}' is not a vector", in.string(), norm));
    }
    gains.emplace(norm,
                  gain_multipliers(dequant(f, *t), opt.assume_gains.value_or(arch.gguf_gains)));
  }
  // Every consumer must exist (the LM head may be tied), with rows as long as its norm.
  const io::GgufTensorInfo* tied = nullptr;
  for (const auto& [consumer, norm] : plan.consumer_to_norm) {
    const io::GgufTensorInfo* t = f.find_tensor(consumer);
    if (!t && consumer == arch.head) {
      tied = f.find_tensor(arch.tied_source);
      t = tied;
      if (!t) throw Error(fmt::format("{}: missing '{}'", in.string(), arch.tied_source));
      rep.untied_head = true;
    }
    if (!t) throw Error(fmt::format("{}: missing tensor '{}'", in.string(), consumer));
    if (t->dims.size() != 2 || t->dims[0] != gains.at(norm).size()) {
      throw Error(fmt::format("{}: tensor '{}' has rows of {} elements but its norm '{}' has {}",
                              in.string(), t->name, t->dims[0], norm, gains.at(norm).size()));
    }
  }

  const size_t total = plan.consumer_to_norm.size();
  size_t done = 0;
  auto fold_one = [&](const io::GgufTensorInfo& t, const std::string& out_name,
                      const std::string& norm) {
    const GgmlType asked = opt.requantize ? opt.requantize_type.value_or(t.type) : opt.dtype;
    if (opt.requantize && !io::quant_supported(asked)) {
      throw Error(fmt::format("{}: cannot requantize '{}' to {}: not supported (use --dtype)",
                              in.string(), t.name, io::ggml_type_name(uint32_t(asked))));
    }
    const size_t row = t.dims[0];
    GgmlType type = asked;
    if (row % io::ggml_type_traits(uint32_t(type))->block_elems != 0) {
      type = requantize_fallback(type);
    }
    if (row % io::ggml_type_traits(uint32_t(type))->block_elems != 0) {
      throw Error(
          fmt::format("{}: cannot requantize '{}' to {}: its rows of {} elements are not "
                      "a multiple of the type's block of {}",
                      in.string(), t.name, io::ggml_type_name(uint32_t(type)), row,
                      io::ggml_type_traits(uint32_t(type))->block_elems));
    }
    std::vector<float> w = dequant(f, t);
    std::vector<double> folded = fold_matrix(w, t.dims[1], t.dims[0], gains.at(norm));
    FoldedTensor rec;
    rec.name = out_name;
    rec.kind = detail::tensor_kind(out_name);
    rec.out_type = io::ggml_type_name(uint32_t(type));
    if (type != asked) rec.requested_type = io::ggml_type_name(uint32_t(asked));
    io::GgufTensorOut o{out_name, t.dims, type, encode(folded, type, rec), {}};
    rep.tensors.push_back(rec);
    if (opt.progress) opt.progress(++done, total);
    return o;
  };

  std::vector<io::GgufTensorOut> outs;
  for (const auto& t : f.tensors()) {
    if (auto it = plan.consumer_to_norm.find(t.name); it != plan.consumer_to_norm.end()) {
      outs.push_back(fold_one(t, t.name, it->second));
    } else if (gains.count(t.name)) {
      std::vector<float> v(t.n_elements, identity_gain(opt.assume_gains.value_or(arch.gguf_gains)));
      io::GgufTensorOut o{t.name, t.dims, GgmlType::F32, {}, {}};
      o.bytes.resize(v.size() * 4);
      std::memcpy(o.bytes.data(), v.data(), o.bytes.size());
      outs.push_back(std::move(o));
      rep.folded_norms.push_back(t.name);
    } else {
      outs.push_back({t.name, t.dims, t.type, {}, f.tensor_data(t)});
    }
  }
  if (tied) outs.push_back(fold_one(*tied, arch.head, plan.consumer_to_norm.at(arch.head)));

  std::vector<io::GgufKv> kvs;
  for (const auto& kv : f.kvs()) {
    if (!kv.key.starts_with("flashnorm.")) kvs.push_back(kv);  // e.g. flashnorm.folded = false
  }
  kvs.push_back({std::string(kFoldedKey), io::GgufValue::make_bool(true), 0});
  const std::string fold_type =
      !opt.requantize ? std::string(io::ggml_type_name(uint32_t(opt.dtype)))
      : opt.requantize_type
          ? "requantized:" + std::string(io::ggml_type_name(uint32_t(*opt.requantize_type)))
          : std::string("requantized");
  kvs.push_back({"flashnorm.fold_type", io::GgufValue::make_string(fold_type), 0});
  if (opt.keep_tied_head) {
    kvs.push_back({std::string(kFinalNormKeptKey), io::GgufValue::make_bool(true), 0});
  }
  io::write_gguf(out, kvs, outs, inputs);
  return rep;
}

}  // namespace flashnorm
