// The planar layout of GGML blocks: the device layout that the CUDA engine's quantized kernels
// read (kernels/cuda/quant_gemv.h, quant_dequant.h). The bytes of every block are split by field,
// and each field of all the blocks is stored contiguously, one plane per field, blocks in file
// order (row n's block b is block n * blocks_per_row + b). No value changes: the planes hold
// exactly the file's bytes, rearranged, and from_planar restores them. Field order and sizes per
// block (block layouts: ggml-common.h):
//   Q4_0 (18 bytes): qs[16], d[2]            Q4_1 (20): qs[16], d|m[4]
//   Q5_0 (22): qs[16], qh[4], d[2]           Q8_0 (34): qs[32], d[2]
//   Q6_K (210): ql[128], qh[64], scales[16], d[2]
// With a 16-byte aligned base each plane starts at a multiple of its field size (up to 16: the
// fields come in decreasing size), so every field of a block is one aligned load, the codes one
// 16- or 32-byte piece: the file's odd block sizes (18, 20, 22, 34, 210) allow only 2-byte loads.
// Other types (Q4_K: 144-byte blocks whose fields are already 16-byte aligned) keep the file
// layout: one plane of whole blocks.
#pragma once

#include <cstdint>
#include <span>
#include <vector>

#include "flashnorm/io/ggml_types.h"

namespace flashnorm::io {

// Bytes per block of each plane of `type`, in plane order ({block_bytes} for a type kept whole).
// Errors: throws Error for a type without fixed-size blocks (unknown id).
std::vector<int> planar_fields(GgmlType type);

// The planar layout of `blocks` (whole blocks of `type`, in file order); same size.
// Errors: throws Error when blocks.size() is not a multiple of the type's block bytes.
std::vector<uint8_t> to_planar(GgmlType type, std::span<const uint8_t> blocks);

// The inverse of to_planar: the blocks in file order. Same errors.
std::vector<uint8_t> from_planar(GgmlType type, std::span<const uint8_t> planes);

}  // namespace flashnorm::io
