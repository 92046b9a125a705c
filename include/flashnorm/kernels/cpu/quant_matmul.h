// Matmuls straight from GGML blocks: y[M, N] = x[M, K] W[N, K]^T with W in its file's type
// (the bytes of a mapped GGUF tensor, never dequantized to a full fp32 copy).
// Quantized weights take x quantized to 16-bit integers in blocks of 32 (ActBlock) and compute
// each block's (or K-quant sub-block's) integer dot product exactly, the scales in fp32; F32, F16
// and BF16 weights take x in fp32. 16 bits rather than the 8 of the GGML runtime's Q8_0/Q8_K
// activations: measured on SmolLM2-135M Q4_1 (GPL-3 text, 255 positions), x rounded to 8 bits
// per block of 32 before every fp32 matmul moves perplexity by 2% and agrees with fp32 on 95% of
// next tokens (standard vs flashnorm order: 93%), where 16 bits agree on 100% with perplexity
// within 4e-5 (docs/quantized.md). Weight layouts: GGUF specification and ggml-common.h, as decoded
// by io/dequant.h (the tests compare against io::dequantize in fp64).
// Decode on AVX2: the block32 types four weight rows per pass over x, the weight rows ahead
// prefetched (quant_dot.h's QuantRowsFn); on AVX-512 eight rows per pass, each block's 32 codes in
// one 512-bit register.
// Activation quantization: per block of 32, amax = max |x|, d = amax / 32767,
// q = nearbyint(clamp(x * (1 / d), -32767, 32767)) (round to nearest even; all 0 when d is below
// FLT_MIN, i.e. amax under 4e-34, where 1 / d would overflow; a NaN element gives -32767), so each
// element is off by about d / 2 = amax / 65534 (plus the rounding of x * (1 / d)).
#pragma once

#include <cstdint>
#include <span>
#include <vector>

#include "flashnorm/io/ggml_types.h"
#include "flashnorm/kernels/cpu/thread_pool.h"

namespace flashnorm::kernels::cpu {

// Instruction sets a dot product can run with. kAvx2: AVX2 + FMA + F16C (x86-64, checked at run
// time with __builtin_cpu_supports); kAvx512: AVX-512 F + BW + VL + DQ besides kAvx2's (x86-64,
// checked likewise; no VNNI: plain vpmaddwd), the quantized types' decode kernels in 512 bits,
// F32/F16/BF16 weights, prefill tiles and the activation quantizer as kAvx2; kScalar: portable C++.
enum class QuantIsa { kScalar, kAvx2, kAvx512 };

// Whether this build and this CPU can run `isa`.
bool quant_isa_available(QuantIsa isa);
// The fastest available instruction set: kAvx512, else kAvx2, else kScalar.
QuantIsa best_quant_isa();
// "scalar" / "avx2" / "avx512".
const char* quant_isa_name(QuantIsa isa);
// The instruction set the engines use: the one the environment variable FLASHNORM_CPU_ISA names
// (scalar, avx2 or avx512), else kAvx2 where available (measured faster than the AVX-512 kernels
// on an AVX-512 CPU, docs/quantized.md), else kScalar. Errors: Error naming FLASHNORM_CPU_ISA for
// another value or one this build and CPU cannot run.
QuantIsa chosen_quant_isa();

// Whether quant_matmul computes from weights of `type` (F32, F16, BF16, Q4_0, Q4_1, Q5_0, Q5_1,
// Q8_0, Q4_K, Q5_K, Q6_K).
bool quant_matmul_supported(io::GgmlType type);

// One activation block: 32 elements x ~= d * qs; s = d * sum(qs) (for the types with an offset
// m: sum(m * x) = m * s).
struct ActBlock {
  float d;
  float s;
  int16_t qs[32];
};

// Quantizes one row of `k` values (k a multiple of 32) into k / 32 blocks by the rule in this
// header's comment.
void quantize_act_row(const float* x, int k, ActBlock* out);

// A weight matrix in GGML blocks: `rows` (N) rows of `cols` (K) elements, row-major, each row
// cols / block_elems whole blocks (a GGUF tensor with dims {K, N}). The bytes are borrowed.
struct QuantMatrix {
  io::GgmlType type = io::GgmlType::F32;
  const uint8_t* data = nullptr;
  int rows = 0;
  int cols = 0;
  // Bytes of one row. Errors: Error if the type is unknown or cols is not a multiple of its block.
  size_t row_bytes() const;
};

// The M rows of x prepared for the weight types' dot products: x' = x * row_scale[m] * gain[k]
// (either may be null: 1) kept in fp32 and quantized on first use, so one preparation serves
// every matrix that reads the same x (q|k|v, gate|up), whatever their types.
// Borrows nothing after prepare() returns.
class PreparedActs {
 public:
  // x[M, K] row-major (row stride K). Errors: none (sizes are checked by quant_matmul).
  void prepare(const float* x, int M, int K, const float* gain = nullptr,
               const float* row_scale = nullptr);
  int rows() const { return m_; }
  int cols() const { return k_; }
  const float* f32() const { return x_.data(); }
  // Row m quantized (computed for all rows on first call). K must be a multiple of 32.
  const ActBlock* q(int m);
  // Row m quantized, after a first q() call since prepare() (read-only: safe from several threads).
  const ActBlock* q_ready(int m) const;

 private:
  int m_ = 0, k_ = 0;
  std::vector<float> x_;
  std::vector<ActBlock> q_;
  bool have_q_ = false;
};

// From this many rows of x on (prefill), quant_matmul dequantizes W a tile of rows at a time to
// fp32 (io::dequantize; a tile, never the whole matrix) and multiplies it with x' in fp32 by BLAS
// sgemm, x' unquantized: the weights' unpacking is shared by all rows and the GEMM runs at BLAS
// speed.
inline constexpr int kQuantGemmRows = 16;

// y[m * ldy + n] = sum_k x'[m, k] W[n, k] for m < M, n < N (x' from `a`, quantized for W's type).
// Rows of W are spread over `pool` (null: the calling thread only). Errors: Error naming the type
// when it is unsupported, or `isa` unavailable, or a.cols() != w.cols, or K is not a multiple of
// the type's block. `gemm_rows`: from this many rows of x on, the tiled sgemm path (see
// kQuantGemmRows; INT_MAX: the integer path for every M).
void quant_matmul(const QuantMatrix& w, PreparedActs& a, float* y, int ldy, QuantIsa isa,
                  ThreadPool* pool = nullptr, int gemm_rows = kQuantGemmRows);

// Several matrices that read the same x (q|k|v, gate|up) in one pool loop: part i's outputs go to
// columns [c_i, c_i + rows_i) of y, c_i the rows of the parts before it; the parts may differ in
// type. Same errors as quant_matmul (checked for every part before any work).
void quant_matmul_parts(std::span<const QuantMatrix> parts, PreparedActs& a, float* y, int ldy,
                        QuantIsa isa, ThreadPool* pool = nullptr, int gemm_rows = kQuantGemmRows);

}  // namespace flashnorm::kernels::cpu
