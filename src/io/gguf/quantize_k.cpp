// fp32 -> Q4_K, Q5_K, Q6_K (quantize_k.h) with a least-squares scale search, flashnorm's own
// implementation. The block layouts are ggml-common.h's (the inverse of dequant.cpp's readers).
//
// Each sub-block (32 values for Q4_K/Q5_K: x ~ s * q + b with q in [0, nmax] and b <= 0; 16 values
// for Q6_K: x ~ s * q with q in [-32, 31]) is fitted by trying 21 candidate grids around the
// min/max (or signed absmax) grid, refitting s (and b) by least squares for the codes each grid
// gives, and keeping the smallest squared error; the best fit is then iterated (re-round the
// codes, refit) while it improves. The super-block then stores the sub-block scales (and mins)
// as 6-bit (Q4_K/Q5_K) or 8-bit (Q6_K) multiples of fp16 super-scales; the super-scales are
// refitted by least squares over all 256 values for the quantized sub-scales, and the codes are
// re-rounded against the scales exactly as they will be read back. Every fit minimizes the plain
// (unweighted) squared error, the figure `fold --requantize` reports.
#include "quantize_k.h"

#include <algorithm>
#include <cmath>
#include <cstring>

#include "flashnorm/io/dequant.h"

namespace flashnorm::io::kquant {
namespace {

constexpr int QK_K = 256;

// round(v) clamped to [lo, hi]; NaN gives lo (no undefined float -> int conversion).
inline int round_clamp(float v, int lo, int hi) {
  if (!(v > static_cast<float>(lo))) return lo;
  if (v >= static_cast<float>(hi)) return hi;
  return static_cast<int>(std::nearbyint(v));
}

// fp32 -> fp16 -> fp32: the value a stored fp16 scale reads back as.
inline float as_fp16(float v) { return fp16_to_fp32(fp32_to_fp16(v)); }

// ---- Q4_K / Q5_K: 8 sub-blocks of 32, x = (d * sc) * q - (dmin * m) ---------------------------

struct Affine {
  float s = 0, b = 0;  // x ~ s * q + b, s >= 0, b <= 0
  double err = 0;      // squared error of the fit
};

// Codes of x for x ~ s * q + b.
void affine_codes(const float* x, int n, int nmax, float s, float b, int* q) {
  const float is = s > 0 ? 1.0f / s : 0.0f;
  for (int i = 0; i < n; ++i) q[i] = is > 0 ? round_clamp((x[i] - b) * is, 0, nmax) : 0;
}

// The least-squares (s, b) for fixed codes q, with b <= 0 (the format stores -b >= 0) and s >= 0.
Affine affine_refit(const float* x, int n, const int* q) {
  double sq = 0, sqq = 0, sx = 0, sqx = 0, sxx = 0;
  for (int i = 0; i < n; ++i) {
    sq += q[i];
    sqq += double(q[i]) * q[i];
    sx += x[i];
    sqx += double(q[i]) * x[i];
    sxx += double(x[i]) * x[i];
  }
  double s = 0, b = 0;
  const double det = n * sqq - sq * sq;
  if (det > 0) {
    s = (n * sqx - sq * sx) / det;
    b = (sqq * sx - sq * sqx) / det;
  }
  if (det <= 0 || b > 0 || s < 0) {  // one free parameter left: s with b = 0, or b with s = 0
    b = 0;
    s = sqq > 0 ? std::max(0.0, sqx / sqq) : 0.0;
    if (s == 0) b = std::min(0.0, sx / n);
  }
  Affine f{static_cast<float>(s), static_cast<float>(b), 0};
  // squared error, expanded: sum (s q + b - x)^2
  f.err = s * s * sqq + b * b * n + sxx + 2 * s * b * sq - 2 * s * sqx - 2 * b * sx;
  f.err = std::max(f.err, 0.0);
  return f;
}

// The best (s, b) for one sub-block of n values with codes in [0, nmax].
Affine fit_affine(const float* x, int n, int nmax) {
  float lo = 0, hi = x[0];
  for (int i = 0; i < n; ++i) {
    lo = std::min(lo, x[i]);
    hi = std::max(hi, x[i]);
  }
  int q[32];
  if (!(hi > lo)) {  // constant block at lo <= 0 (or NaN): b alone
    std::fill(q, q + n, 0);
    return affine_refit(x, n, q);
  }
  Affine best;
  best.err = INFINITY;
  for (int t = -10; t <= 10; ++t) {
    const float s = (hi - lo) / (static_cast<float>(nmax) + 0.1f * static_cast<float>(t));
    affine_codes(x, n, nmax, s, lo, q);
    const Affine f = affine_refit(x, n, q);
    if (f.err < best.err) best = f;
  }
  for (int it = 0; it < 4; ++it) {  // alternate: codes for the fit, fit for the codes
    affine_codes(x, n, nmax, best.s, best.b, q);
    const Affine f = affine_refit(x, n, q);
    if (!(f.err < best.err)) break;
    best = f;
  }
  if (!(best.err < INFINITY)) best = Affine{};  // non-finite input
  return best;
}

// A Q4_K/Q5_K super-block in unpacked form.
struct KBlock {
  uint16_t d = 0, dmin = 0;  // fp16
  uint8_t sc[8] = {}, m[8] = {};
  uint8_t q[QK_K] = {};
};

// Codes of a super-block against its stored scales, as dequantize reads them back; returns the
// squared error.
double k_codes(const float* x, int nmax, KBlock& k) {
  const float d = fp16_to_fp32(k.d), dmin = fp16_to_fp32(k.dmin);
  double err = 0;
  for (int j = 0; j < 8; ++j) {
    const float d1 = d * static_cast<float>(k.sc[j]), m1 = dmin * static_cast<float>(k.m[j]);
    const float id = d1 != 0 ? 1.0f / d1 : 0.0f;
    for (int l = 0; l < 32; ++l) {
      const float v = x[32 * j + l];
      const int q = id != 0 ? round_clamp((v + m1) * id, 0, nmax) : 0;
      k.q[32 * j + l] = static_cast<uint8_t>(q);
      const double e = double(d1 * static_cast<float>(q) - m1) - v;
      err += e * e;
    }
  }
  return std::isfinite(err) ? err : INFINITY;
}

// 6-bit multiples of fp16 super-scales for the sub-block scales s[] and mins m[] (>= 0), the
// largest of each mapped to `top` (<= 63).
void k_scales(const float* s, const float* m, float top, KBlock& k) {
  const float smax = *std::max_element(s, s + 8), mmax = *std::max_element(m, m + 8);
  k.d = fp32_to_fp16(smax / top);
  k.dmin = fp32_to_fp16(mmax / top);
  const float d = fp16_to_fp32(k.d), dmin = fp16_to_fp32(k.dmin);
  for (int j = 0; j < 8; ++j) {
    k.sc[j] = static_cast<uint8_t>(d > 0 ? round_clamp(s[j] / d, 0, 63) : 0);
    k.m[j] = static_cast<uint8_t>(dmin > 0 ? round_clamp(m[j] / dmin, 0, 63) : 0);
  }
}

// Refits (d, dmin) by least squares over the 256 values for the block's codes and 6-bit scales:
// x ~ d * (sc q) - dmin * m. Returns false when the system is degenerate.
bool k_refit(const float* x, KBlock& k) {
  double aa = 0, ab = 0, bb = 0, ax = 0, bx = 0;
  for (int j = 0; j < 8; ++j) {
    for (int l = 0; l < 32; ++l) {
      const double a = double(k.sc[j]) * k.q[32 * j + l], b = -double(k.m[j]), v = x[32 * j + l];
      aa += a * a;
      ab += a * b;
      bb += b * b;
      ax += a * v;
      bx += b * v;
    }
  }
  const double det = aa * bb - ab * ab;
  double d, dmin;
  if (det > 1e-12 * aa * bb && det > 0) {
    d = (ax * bb - bx * ab) / det;
    dmin = (aa * bx - ab * ax) / det;
  } else if (aa > 0 && bb == 0) {
    d = ax / aa, dmin = 0;
  } else {
    return false;
  }
  if (!(d >= 0) || !(dmin >= 0)) return false;
  k.d = fp32_to_fp16(static_cast<float>(d));
  k.dmin = fp32_to_fp16(static_cast<float>(dmin));
  return true;
}

// The unpacked super-block of the 256 values x with codes in [0, nmax].
KBlock k_block(const float* x, int nmax) {
  float s[8], m[8];
  for (int j = 0; j < 8; ++j) {
    const Affine f = fit_affine(x + 32 * j, 32, nmax);
    s[j] = f.s;
    m[j] = -f.b;
  }
  // The largest scale at 6-bit code 63, or a little lower: an fp16 super-scale in the subnormal
  // range (small weights) is coarse, and another multiple can land closer to the fitted scales.
  KBlock best;
  double err = INFINITY;
  for (float top : {63.0f, 62.0f, 61.0f, 60.0f, 59.0f, 58.0f, 57.0f, 56.0f}) {
    KBlock k;
    k_scales(s, m, top, k);
    const double e = k_codes(x, nmax, k);
    if (e < err || top == 63.0f) best = k, err = e;
  }
  for (int it = 0; it < 3; ++it) {  // refit the super-scales, re-round the codes, while better
    KBlock k = best;
    if (!k_refit(x, k)) break;
    const double e = k_codes(x, nmax, k);
    if (!(e < err)) break;
    best = k, err = e;
  }
  return best;
}

// The 12 packed bytes of 6-bit scales and mins (the inverse of k_scale_min, ggml_blocks.h).
void pack_scales(const KBlock& k, uint8_t* p) {
  for (int j = 0; j < 4; ++j) {
    p[j] = static_cast<uint8_t>((k.sc[j] & 63) | ((k.sc[j + 4] >> 4) << 6));
    p[j + 4] = static_cast<uint8_t>((k.m[j] & 63) | ((k.m[j + 4] >> 4) << 6));
    p[j + 8] = static_cast<uint8_t>((k.sc[j + 4] & 15) | ((k.m[j + 4] & 15) << 4));
  }
}

void store_u16(uint8_t* p, uint16_t v) { std::memcpy(p, &v, 2); }

// ---- Q6_K: 16 sub-blocks of 16, x = (d * sc) * (q - 32) --------------------------------------

// The least-squares s of x ~ s * q for one sub-block of 16 (q in [-32, 31]).
float fit_symmetric(const float* x) {
  float vmax = 0;
  for (int i = 0; i < 16; ++i) {
    if (std::fabs(x[i]) > std::fabs(vmax)) vmax = x[i];
  }
  if (!(vmax != 0)) return 0;  // all zero, or NaN
  auto fit = [&](float s, double* err) {
    const float is = 1.0f / s;
    double sqx = 0, sqq = 0, sxx = 0;
    for (int i = 0; i < 16; ++i) {
      const int q = round_clamp(x[i] * is, -32, 31);
      sqx += double(q) * x[i];
      sqq += double(q) * q;
      sxx += double(x[i]) * x[i];
    }
    if (!(sqq > 0)) {
      *err = sxx;
      return 0.0f;
    }
    *err = std::max(0.0, sxx - sqx * sqx / sqq);
    return static_cast<float>(sqx / sqq);
  };
  float best = 0;
  double best_err = INFINITY;
  for (int t = -10; t <= 10; ++t) {
    // vmax mapped near -32 (the side with one more code) or near +31
    for (float target :
         {-32.0f + 0.1f * static_cast<float>(t), 31.0f + 0.1f * static_cast<float>(t)}) {
      double e;
      const float s = fit(vmax / target, &e);
      if (s != 0 && e < best_err) best = s, best_err = e;
    }
  }
  for (int it = 0; it < 4 && best != 0; ++it) {
    double e;
    const float s = fit(best, &e);
    if (!(s != 0 && e < best_err)) break;
    best = s, best_err = e;
  }
  return best;
}

struct Q6Block {
  uint16_t d = 0;
  int8_t sc[16] = {};
  uint8_t q[QK_K] = {};  // q + 32, in [0, 63]
};

// Codes against the stored scales, as read back; returns the squared error.
double q6_codes(const float* x, Q6Block& k) {
  const float d = fp16_to_fp32(k.d);
  double err = 0;
  for (int j = 0; j < 16; ++j) {
    const float d1 = d * static_cast<float>(k.sc[j]);
    const float id = d1 != 0 ? 1.0f / d1 : 0.0f;
    for (int l = 0; l < 16; ++l) {
      const float v = x[16 * j + l];
      const int q = id != 0 ? round_clamp(v * id, -32, 31) : 0;
      k.q[16 * j + l] = static_cast<uint8_t>(q + 32);
      const double e = double(d1 * static_cast<float>(q)) - v;
      err += e * e;
    }
  }
  return std::isfinite(err) ? err : INFINITY;
}

Q6Block q6_block(const float* x) {
  float s[16], smax = 0;
  for (int j = 0; j < 16; ++j) {
    s[j] = fit_symmetric(x + 16 * j);
    if (std::fabs(s[j]) > std::fabs(smax)) smax = s[j];
  }
  // The largest scale at 8-bit code -128, or a little nearer 0 (as for Q4_K: a coarse subnormal
  // fp16 d can be matched better by another multiple).
  Q6Block best;
  double err = INFINITY;
  for (int top = 128; top >= 112; top -= 2) {
    Q6Block k;
    k.d = fp32_to_fp16(smax / -static_cast<float>(top));
    const float d = fp16_to_fp32(k.d);
    for (int j = 0; j < 16; ++j) {
      k.sc[j] = static_cast<int8_t>(d != 0 ? round_clamp(s[j] / d, -128, 127) : 0);
    }
    const double e = q6_codes(x, k);
    if (e < err || top == 128) best = k, err = e;
  }
  for (int it = 0; it < 3; ++it) {  // refit d for the codes and 8-bit scales, while better
    double num = 0, den = 0;
    for (int i = 0; i < QK_K; ++i) {
      const double a = double(best.sc[i / 16]) * (int(best.q[i]) - 32);
      num += a * x[i];
      den += a * a;
    }
    if (!(den > 0)) break;
    Q6Block k = best;
    k.d = fp32_to_fp16(static_cast<float>(num / den));
    const double e = q6_codes(x, k);
    if (!(e < err)) break;
    best = k, err = e;
  }
  return best;
}

template <int kHighBits>
void k_quant(const float* x, size_t nb, uint8_t* out) {
  constexpr int nmax = kHighBits ? 31 : 15;
  constexpr int bytes = kHighBits ? 176 : 144;
  for (size_t i = 0; i < nb; ++i, x += QK_K, out += bytes) {
    const KBlock k = k_block(x, nmax);
    store_u16(out, k.d);
    store_u16(out + 2, k.dmin);
    pack_scales(k, out + 4);
    uint8_t* qh = out + 16;  // Q5_K only
    uint8_t* qs = out + (kHighBits ? 48 : 16);
    if (kHighBits) std::memset(qh, 0, 32);
    // 4 chunks of 64: sub-block 2c in the low nibbles, 2c + 1 in the high nibbles; Q5_K's fifth
    // bit of sub-block j is bit j of qh[l]
    for (int c = 0; c < 4; ++c) {
      for (int l = 0; l < 32; ++l) {
        const int a = k.q[64 * c + l], b = k.q[64 * c + 32 + l];
        qs[32 * c + l] = static_cast<uint8_t>((a & 15) | ((b & 15) << 4));
        if (kHighBits) {
          qh[l] = static_cast<uint8_t>(qh[l] | ((a >> 4) << (2 * c)) | ((b >> 4) << (2 * c + 1)));
        }
      }
    }
  }
}

}  // namespace

void q4_k(const float* x, size_t nb, uint8_t* out) { k_quant<0>(x, nb, out); }
void q5_k(const float* x, size_t nb, uint8_t* out) { k_quant<1>(x, nb, out); }

void q6_k(const float* x, size_t nb, uint8_t* out) {
  for (size_t i = 0; i < nb; ++i, x += QK_K, out += 210) {
    const Q6Block k = q6_block(x);
    uint8_t* ql = out;
    uint8_t* qh = out + 128;
    std::memset(out, 0, 192);
    // two halves of 128: element l, l + 32, l + 64, l + 96 (l < 32) share qh[l] (2 bits each);
    // l and l + 64 share ql[l] (low, high nibble), l + 32 and l + 96 share ql[l + 32]
    for (int h = 0; h < 2; ++h, ql += 64, qh += 32) {
      const uint8_t* q = k.q + 128 * h;
      for (int l = 0; l < 32; ++l) {
        ql[l] = static_cast<uint8_t>((q[l] & 15) | ((q[l + 64] & 15) << 4));
        ql[l + 32] = static_cast<uint8_t>((q[l + 32] & 15) | ((q[l + 96] & 15) << 4));
        qh[l] = static_cast<uint8_t>((q[l] >> 4) | ((q[l + 32] >> 4) << 2) |
                                     ((q[l + 64] >> 4) << 4) | ((q[l + 96] >> 4) << 6));
      }
    }
    // scales: sub-block j of 16 is scales[j] (dequant: sc[is + 0/2/4/6] per half, is = l / 16)
    std::memcpy(out + 192, k.sc, 16);
    store_u16(out + 208, k.d);
  }
}

}  // namespace flashnorm::io::kquant
