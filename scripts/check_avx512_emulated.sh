#!/usr/bin/env bash
# Runs kernels_quant_matmul_test against the AVX-512 kernels (src/kernels/cpu/quant_dot_avx512.cpp)
# on a CPU without AVX-512: that file is compiled with its 512-bit intrinsics mapped onto SIMDe's
# portable implementations (Debian's libsimde-dev 0.7.4, unpacked under $SIMDE, no install) and
# four that SIMDe 0.7.4 lacks written out below, quant_matmul.cpp is compiled with the AVX-512
# CPU check replaced by `true`, and the test is linked against those objects and the rest of an
# existing release build (BUILD, default build/release, with kernels_quant_matmul_test built).
# A check of the kernels' logic (lane orders, masks, shuffles), not of the compiler's AVX-512 code:
# run the real test on an AVX-512 CPU for that. Usage: scripts/check_avx512_emulated.sh [gtest
# args]; env BUILD, SIMDE (an unpacked libsimde-dev: SIMDE/usr/include/simde), WORK (scratch dir).
set -euo pipefail
ROOT=$(cd "$(dirname "$0")/.." && pwd)
BUILD=${BUILD:-$ROOT/build/release}
WORK=${WORK:-/tmp/flashnorm_avx512_emu}
SIMDE=${SIMDE:-$WORK/simde}
CXX=${CXX:-c++}
mkdir -p "$WORK/inc"
if [ ! -d "$SIMDE/usr/include/simde" ]; then
  mkdir -p "$SIMDE"
  (cd "$WORK" && apt-get download libsimde-dev && dpkg -x libsimde-dev_*.deb "$SIMDE")
fi
# <immintrin.h> for the AVX-512 file: the compiler's (SSE-AVX2 native), then SIMDe's AVX-512
cat > "$WORK/inc/immintrin.h" <<'H'
#pragma once
#include_next <immintrin.h>
#include <simde/x86/avx512.h>

#include <cstdint>
#include <cstring>
// SIMDe 0.7.4 lacks these four: Intel's definitions, lane by lane
static inline simde__m512 emu_cvtepi32_ps(simde__m512i a) {
  int32_t i[16];
  float f[16];
  std::memcpy(i, &a, 64);
  for (int k = 0; k < 16; ++k) f[k] = static_cast<float>(i[k]);  // round to nearest, as MXCSR
  simde__m512 r;
  std::memcpy(&r, f, 64);
  return r;
}
static inline simde__m512i emu_cvtepu8_epi16(__m256i a) {  // word j = zero-extended byte j
  uint8_t b[32];
  uint16_t w[32];
  std::memcpy(b, &a, 32);
  for (int k = 0; k < 32; ++k) w[k] = b[k];
  simde__m512i r;
  std::memcpy(&r, w, 64);
  return r;
}
static inline __m256 emu_extractf32x8_ps(simde__m512 a, int imm) {  // lanes 8 imm .. 8 imm + 7
  float f[16];
  std::memcpy(f, &a, 64);
  __m256 r;
  std::memcpy(&r, f + 8 * (imm & 1), 32);
  return r;
}
static inline simde__mmask32 emu_test_epi8_mask(__m256i a, __m256i b) {  // bit j: a_j & b_j != 0
  uint8_t x[32], y[32];
  std::memcpy(x, &a, 32);
  std::memcpy(y, &b, 32);
  simde__mmask32 m = 0;
  for (int k = 0; k < 32; ++k) m |= simde__mmask32((x[k] & y[k]) != 0) << k;
  return m;
}
#define __m512 simde__m512
#define __m512i simde__m512i
#define __mmask16 simde__mmask16
#define __mmask32 simde__mmask32
#define _mm512_cvtepi32_ps emu_cvtepi32_ps
#define _mm512_cvtepu8_epi16 emu_cvtepu8_epi16
#define _mm512_extractf32x8_ps emu_extractf32x8_ps
#define _mm256_test_epi8_mask emu_test_epi8_mask
H
for f in $(grep -o '_mm512_[a-z0-9_]*' "$ROOT/src/kernels/cpu/quant_dot_avx512.cpp" | sort -u); do
  grep -q "define $f " "$WORK/inc/immintrin.h" || echo "#define $f simde$f" >> "$WORK/inc/immintrin.h"
done
sed 's/__builtin_cpu_supports("avx512[a-z]*")/true/g' "$ROOT/src/kernels/cpu/quant_matmul.cpp" \
  > "$WORK/quant_matmul_emu.cpp"
DEFS="-DFLASHNORM_HAVE_AVX2_KERNELS -DFLASHNORM_HAVE_AVX512_KERNELS -DFMT_SHARED"
INC="-I$ROOT/include -I$ROOT/src/kernels/cpu"
$CXX -O2 -std=c++20 $DEFS $INC -I"$WORK/inc" -I"$SIMDE/usr/include" -mavx2 -mfma -mf16c \
  -ffp-contract=off -w -c "$ROOT/src/kernels/cpu/quant_dot_avx512.cpp" -o "$WORK/avx512_emu.o"
$CXX -O2 -std=c++20 $DEFS $INC -c "$WORK/quant_matmul_emu.cpp" -o "$WORK/quant_matmul_emu.o"
$CXX -O2 -std=c++20 -DGTEST_HAS_PTHREAD=1 -I"$ROOT/tests" -I"$ROOT/include" \
  -c "$ROOT/tests/kernels/test_quant_matmul.cpp" -o "$WORK/test.o"
OBJ=$BUILD/src/CMakeFiles/flashnorm.dir/kernels/cpu
LIB=/usr/lib/x86_64-linux-gnu
$CXX -o "$WORK/kernels_quant_matmul_test_emu" "$WORK/test.o" "$WORK/quant_matmul_emu.o" \
  "$WORK/avx512_emu.o" "$OBJ/quant_dot_scalar.cpp.o" "$OBJ/quant_dot_avx2.cpp.o" \
  "$OBJ/thread_pool.cpp.o" "$BUILD/src/libflashnorm.a" "$BUILD/tests/libflashnorm_test_support.a" \
  $LIB/libgtest.a $LIB/libgtest_main.a "$BUILD/src/libflashnorm.a" "$BUILD/src/libflashnorm_core.a" \
  $LIB/libopenblas.so $LIB/libpcre2-8.so $LIB/libicuuc.so -ldl \
  "$BUILD/src/kernels/cpu/libflashnorm_kcpu.a" $LIB/libfmt.so.9 $LIB/libgtest.a -lpthread
"$WORK/kernels_quant_matmul_test_emu" "$@"
