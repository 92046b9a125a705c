// Readers of GGML block fields shared by the dequantizers (io/dequant.h) and the CPU matmuls
// from blocks (kernels/cpu/quant_matmul.h). Layouts: ggml-common.h.
#pragma once

#include <cstdint>
#include <cstring>

namespace flashnorm::io {

// Little-endian 16/32-bit fields at any alignment (fp16 scales, Q5 high bits).
inline uint16_t load_u16(const uint8_t* p) {
  uint16_t v;
  std::memcpy(&v, p, 2);
  return v;
}
inline uint32_t load_u32(const uint8_t* p) {
  uint32_t v;
  std::memcpy(&v, p, 4);
  return v;
}

// 6-bit scale and min number j (0..7) of a Q4_K/Q5_K super-block from its 12 packed bytes `q`:
// j < 4 in the low 6 bits of bytes j and j + 4; j >= 4 split between the low/high nibbles of
// byte j + 4 and the top 2 bits of bytes j - 4 and j (ggml get_scale_min_k4).
inline void k_scale_min(int j, const uint8_t* q, uint8_t* sc, uint8_t* m) {
  if (j < 4) {
    *sc = q[j] & 63;
    *m = q[j + 4] & 63;
  } else {
    *sc = (q[j + 4] & 0x0f) | ((q[j - 4] >> 6) << 4);
    *m = (q[j + 4] >> 4) | ((q[j] >> 6) << 4);
  }
}

}  // namespace flashnorm::io
