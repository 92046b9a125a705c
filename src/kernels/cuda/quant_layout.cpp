// The device layout of GGML blocks (quant_layout.h).
#include "flashnorm/kernels/cuda/quant_layout.h"

#include <cstring>
#include <string>

#include "flashnorm/error.h"

namespace flashnorm::kernels::cuda {
namespace {

// Offset within the file's block of the field that plane j holds (ggml-common.h).
int field_offset(QuantType type, int j) {
  switch (type) {
    case QuantType::kQ4_0:  // d, qs[16]
      return j == 0 ? 2 : 0;
    case QuantType::kQ4_1:  // d, m, qs[16]
      return j == 0 ? 4 : 0;
    case QuantType::kQ5_0:  // d, qh[4], qs[16]
      return j == 0 ? 6 : (j == 1 ? 2 : 0);
    case QuantType::kQ8_0:  // d, qs[32]
      return j == 0 ? 2 : 0;
    case QuantType::kQ6_K:  // ql[128], qh[64], scales[16], d
      return j == 0 ? 0 : (j == 1 ? 128 : (j == 2 ? 192 : 208));
    default:  // the whole block
      return 0;
  }
}

const char* name(QuantType type) {
  switch (type) {
    case QuantType::kQ4_0:
      return "Q4_0";
    case QuantType::kQ4_1:
      return "Q4_1";
    case QuantType::kQ5_0:
      return "Q5_0";
    case QuantType::kQ8_0:
      return "Q8_0";
    case QuantType::kQ4_K:
      return "Q4_K";
    default:
      return "Q6_K";
  }
}

// Q5_0's fifth bits: element e = 8p + j (bit e of the file's qh) at bit p + 4 (j / 4) of byte
// j % 4 of the device qh.
int q5_0_qh_bit(int e) { return 8 * (e % 8 % 4) + e / 8 + 4 * (e % 8 / 4); }
void permute_qh(uint8_t* qh, bool to_device) {
  uint32_t in = 0, out = 0;
  std::memcpy(&in, qh, 4);  // little-endian, as the file stores it
  for (int e = 0; e < 32; ++e) {
    const int from = to_device ? e : q5_0_qh_bit(e), to = to_device ? q5_0_qh_bit(e) : e;
    out |= ((in >> from) & 1u) << to;
  }
  std::memcpy(qh, &out, 4);
}

// Copies between the two layouts: to_planes true reads blocks and writes planes.
std::vector<uint8_t> convert(QuantType type, std::span<const uint8_t> src, bool to_planes) {
  const size_t block_bytes = quant_block_bytes(type);
  if (src.size() % block_bytes != 0)
    throw Error("quant device layout: " + std::to_string(src.size()) +
                " bytes are not whole blocks of " + name(type));
  const size_t nb = src.size() / block_bytes;
  std::vector<uint8_t> out(src.size());
  for (int j = 0; j < quant_plane_count(type); ++j) {
    const size_t size = quant_plane_bytes(type, j), plane = nb * quant_plane_before(type, j);
    const size_t offset = field_offset(type, j);
    const bool qh = type == QuantType::kQ5_0 && j == 1;
    for (size_t i = 0; i < nb; ++i) {
      const size_t in_block = i * block_bytes + offset, in_plane = plane + i * size;
      if (to_planes) {
        std::memcpy(out.data() + in_plane, src.data() + in_block, size);
        if (qh) permute_qh(out.data() + in_plane, true);
      } else {
        std::memcpy(out.data() + in_block, src.data() + in_plane, size);
        if (qh) permute_qh(out.data() + in_block, false);
      }
    }
  }
  return out;
}

}  // namespace

std::vector<int> quant_planes(QuantType type) {
  std::vector<int> sizes;
  for (int j = 0; j < quant_plane_count(type); ++j) sizes.push_back(quant_plane_bytes(type, j));
  return sizes;
}

std::vector<uint8_t> to_device_layout(QuantType type, std::span<const uint8_t> blocks) {
  return convert(type, blocks, true);
}

std::vector<uint8_t> from_device_layout(QuantType type, std::span<const uint8_t> planes) {
  return convert(type, planes, false);
}

}  // namespace flashnorm::kernels::cuda
