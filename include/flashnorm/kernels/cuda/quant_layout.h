// The device layout of GGML blocks that quant_gemv and quant_dequantize read (quant_gemv.h,
// quant_dequant.h): the bytes of every block split by field, each field of all the blocks stored
// contiguously, one plane per field, blocks in file order (row n's block b is block
// n * blocks_per_row + b). No value changes: the planes hold exactly the file's bits, rearranged,
// and from_device_layout restores them. Field order and sizes per block (block layouts:
// ggml-common.h):
//   Q4_0 (18 bytes): qs[16], d[2]            Q4_1 (20): qs[16], d|m[4]
//   Q5_0 (22): qs[16], qh[4], d[2]           Q8_0 (34): qs[32], d[2]
//     (Q5_0's qh with its bits permuted: the fifth bit of element e = 8p + j, bit e of the file's
//     little-endian qh, is bit p + 4 (j / 4) of byte j % 4, so that the kernel's lane p finds its
//     8 bits with two shifts and masks)
//   Q6_K (210): ql[128], qh[64], scales[16], d[2]
//   Q4_K (144): the whole block, as in the file (its fields are 16-byte aligned already)
// With a 16-byte aligned base each plane starts at a multiple of its field size (up to 16: the
// fields come in decreasing size), so every field of a block is one aligned load, the codes one
// 16- or 32-byte piece: the file's odd block sizes (18, 20, 22, 34, 210) allow only 2-byte loads.
// Host code only (no GPU needed).
#pragma once

#include <cstdint>
#include <span>
#include <vector>

#include "flashnorm/kernels/cuda/quant_gemv.h"

namespace flashnorm::kernels::cuda {

// Bytes per block of each plane of `type`, in plane order (they sum to quant_block_bytes).
std::vector<int> quant_planes(QuantType type);

// The device layout of `blocks` (whole blocks of `type`, in file order); same size.
// Errors: throws flashnorm::Error when blocks.size() is not a multiple of the block bytes.
std::vector<uint8_t> to_device_layout(QuantType type, std::span<const uint8_t> blocks);

// The inverse of to_device_layout: the blocks in file order. Same errors.
std::vector<uint8_t> from_device_layout(QuantType type, std::span<const uint8_t> planes);

}  // namespace flashnorm::kernels::cuda
