// kernels/cuda/quant_layout.h: the device layout of quant_gemv against the block layouts of the
// GGUF specification (ggml-common.h: block_q4_0 {d; qs[16]}, block_q4_1 {d; m; qs[16]}, block_q5_0
// {d; qh[4]; qs[16]}, block_q8_0 {d; qs[32]}, block_q6_K {ql[128]; qh[64]; scales[16]; d}), the
// offsets written here from the spec: each plane holds one field of every block in file order
// (Q5_0's qh with its bits permuted as quant_layout.h states), the inverse restores the file's
// bytes, Q4_K stays as it is, and sizes that are not whole blocks are refused.
#include "flashnorm/kernels/cuda/quant_layout.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cstring>
#include <random>

#include "flashnorm/error.h"

namespace flashnorm::kernels::cuda {
namespace {

struct SpecField {
  int offset, size;
};
struct SpecCase {
  QuantType type;
  int block_bytes;
  std::vector<SpecField> planes;  // in plane order: codes, then the rest
};

std::vector<uint8_t> random_bytes(size_t n, uint32_t seed) {
  std::mt19937 rng(seed);
  std::vector<uint8_t> b(n);
  for (uint8_t& v : b) v = static_cast<uint8_t>(rng());
  return b;
}

TEST(QuantLayout, PlanesHoldEachFieldOfEveryBlockInFileOrder) {
  const std::vector<SpecCase> cases = {
      {QuantType::kQ4_0, 18, {{2, 16}, {0, 2}}},
      {QuantType::kQ4_1, 20, {{4, 16}, {0, 4}}},
      {QuantType::kQ5_0, 22, {{6, 16}, {2, 4}, {0, 2}}},
      {QuantType::kQ8_0, 34, {{2, 32}, {0, 2}}},
      {QuantType::kQ6_K, 210, {{0, 128}, {128, 64}, {192, 16}, {208, 2}}},
  };
  for (const SpecCase& c : cases) {
    SCOPED_TRACE(c.block_bytes);
    const size_t nb = 37;  // odd: a plane's end is not a multiple of 16 in general
    const std::vector<uint8_t> blocks = random_bytes(nb * c.block_bytes, 7 + c.block_bytes);
    const std::vector<uint8_t> planes = to_device_layout(c.type, blocks);
    ASSERT_EQ(planes.size(), blocks.size());
    std::vector<int> sizes;
    size_t start = 0;
    for (const SpecField& f : c.planes) {
      const bool qh = c.type == QuantType::kQ5_0 && f.offset == 2;
      for (size_t i = 0; i < nb; ++i) {
        const uint8_t* dev = planes.data() + start + i * f.size;
        const uint8_t* file = blocks.data() + i * c.block_bytes + f.offset;
        if (!qh) {
          ASSERT_EQ(0, std::memcmp(dev, file, f.size)) << "block " << i << " field at " << f.offset;
          continue;
        }
        // Q5_0's qh: the fifth bit of element 8p + j (bit 8p + j of the file's little-endian
        // word) is bit p + 4 (j / 4) of device byte j % 4
        for (int part = 0; part < 4; ++part)
          for (int j = 0; j < 8; ++j) {
            const int e = 8 * part + j;
            const int file_bit = (file[e / 8] >> (e % 8)) & 1;
            const int dev_bit = (dev[j % 4] >> (part + 4 * (j / 4))) & 1;
            ASSERT_EQ(file_bit, dev_bit) << "block " << i << " element " << e;
          }
      }
      start += nb * f.size;
      sizes.push_back(f.size);
    }
    EXPECT_EQ(quant_planes(c.type), sizes);
    EXPECT_EQ(from_device_layout(c.type, planes), blocks);
    // for any block count, each plane starts at a multiple of its field size (at most 16): an
    // aligned base makes every field an aligned load
    int before = 0;
    for (int size : sizes) {
      EXPECT_EQ(before % std::min(size, 16), 0) << "field of " << size << " bytes";
      before += size;
    }
  }
}

TEST(QuantLayout, Q4_KKeepsTheFileLayout) {
  const std::vector<uint8_t> blocks = random_bytes(5 * 144, 3);
  EXPECT_EQ(to_device_layout(QuantType::kQ4_K, blocks), blocks);
  EXPECT_EQ(quant_planes(QuantType::kQ4_K), std::vector<int>{144});
}

TEST(QuantLayout, RefusesPartialBlocks) {
  const std::vector<uint8_t> bytes(35);
  try {
    to_device_layout(QuantType::kQ8_0, bytes);
    FAIL() << "35 bytes of Q8_0 accepted";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("35 bytes are not whole blocks of Q8_0"),
              std::string::npos)
        << e.what();
  }
  EXPECT_THROW(from_device_layout(QuantType::kQ6_K, std::vector<uint8_t>(211)), Error);
}

}  // namespace
}  // namespace flashnorm::kernels::cuda
