// The planar layout of GGML blocks (io/ggml_planar.h).
#include "flashnorm/io/ggml_planar.h"

#include <cstring>

#include "flashnorm/error.h"

namespace flashnorm::io {
namespace {

struct Field {
  int offset, size;  // within the block
};

// The fields of a block in plane order, or one whole-block field.
std::vector<Field> fields(GgmlType type) {
  switch (type) {
    case GgmlType::Q4_0:
      return {{2, 16}, {0, 2}};
    case GgmlType::Q4_1:
      return {{4, 16}, {0, 4}};
    case GgmlType::Q5_0:
      return {{6, 16}, {2, 4}, {0, 2}};
    case GgmlType::Q8_0:
      return {{2, 32}, {0, 2}};
    case GgmlType::Q6_K:
      return {{0, 128}, {128, 64}, {192, 16}, {208, 2}};
    default: {
      const auto tr = ggml_type_traits(static_cast<uint32_t>(type));
      if (!tr) throw Error("planar layout: unknown GGML type " + ggml_type_name(uint32_t(type)));
      return {{0, static_cast<int>(tr->block_bytes)}};
    }
  }
}

// Blocks in `bytes`, which must be whole blocks of `type`.
size_t block_count(GgmlType type, size_t bytes) {
  const auto tr = ggml_type_traits(static_cast<uint32_t>(type));
  if (!tr || bytes % tr->block_bytes != 0)
    throw Error("planar layout: " + std::to_string(bytes) + " bytes are not whole blocks of " +
                ggml_type_name(uint32_t(type)));
  return bytes / tr->block_bytes;
}

// Copies between the two layouts: to_planes true reads blocks and writes planes.
std::vector<uint8_t> convert(GgmlType type, std::span<const uint8_t> src, bool to_planes) {
  const size_t nb = block_count(type, src.size());
  const std::vector<Field> fs = fields(type);
  int block_bytes = 0;
  for (const Field& f : fs) block_bytes += f.size;
  std::vector<uint8_t> out(src.size());
  size_t plane = 0;  // start of the current plane
  for (const Field& f : fs) {
    for (size_t i = 0; i < nb; ++i) {
      const size_t in_block = i * block_bytes + f.offset, in_plane = plane + i * f.size;
      if (to_planes)
        std::memcpy(out.data() + in_plane, src.data() + in_block, f.size);
      else
        std::memcpy(out.data() + in_block, src.data() + in_plane, f.size);
    }
    plane += nb * f.size;
  }
  return out;
}

}  // namespace

std::vector<int> planar_fields(GgmlType type) {
  std::vector<int> sizes;
  for (const Field& f : fields(type)) sizes.push_back(f.size);
  return sizes;
}

std::vector<uint8_t> to_planar(GgmlType type, std::span<const uint8_t> blocks) {
  return convert(type, blocks, true);
}

std::vector<uint8_t> from_planar(GgmlType type, std::span<const uint8_t> planes) {
  return convert(type, planes, false);
}

}  // namespace flashnorm::io
