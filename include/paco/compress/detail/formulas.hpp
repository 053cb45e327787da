#pragma once
// The element-wise formulas of compression, each written once as a PACO_HD function shared by the
// host implementations (include/paco/compress/*) and the CUDA kernels (kernels/paco/*.cuh), so the
// math is tested on the CPU in CI. The update steps' formulas are in optim/formulas.hpp (AdamW)
// and outer/formulas.hpp (outer Nesterov).
//
// Legend: x input element, q integer code, s block scale, lo block minimum, r error-feedback
// residual.

#include <cstdint>
#include <cstring>

#include "paco/core/host_device.hpp"

namespace paco::compress::formula {

// ---- bit casts usable on host and device ----

// Requires: nothing. Ensures: the bits of f.
PACO_HD inline std::uint32_t bits_of(float f) {
#if defined(__CUDA_ARCH__)
  return __float_as_uint(f);
#else
  std::uint32_t u;
  std::memcpy(&u, &f, 4);
  return u;
#endif
}

// Requires: nothing. Ensures: the float with bits u.
PACO_HD inline float float_of(std::uint32_t u) {
#if defined(__CUDA_ARCH__)
  return __uint_as_float(u);
#else
  float f;
  std::memcpy(&f, &u, 4);
  return f;
#endif
}

PACO_HD inline float min_f(float a, float b) {
  return b < a ? b : a;
}
PACO_HD inline float max_f(float a, float b) {
  return a < b ? b : a;
}
PACO_HD inline float abs_f(float a) {
  return float_of(bits_of(a) & 0x7fffffffu);
}

// Round to nearest, ties to even, for |v| < 2^22, without libm and without -ffast-math
// sensitivity on the host (the add/sub pair is not contractible); rintf on the device.
PACO_HD inline float round_even(float v) {
#if defined(__CUDA_ARCH__)
  return rintf(v);
#else
  const float m = 12582912.0f;  // 1.5·2^23: forces rounding at the unit place
  return (v + m) - m;
#endif
}

// Largest integer not above v, for |v| < 2^22.
PACO_HD inline float floor_small(float v) {
  const float r = round_even(v);
  return r > v ? r - 1.0f : r;
}

// ---- blockwise quantisation ----

// Largest code magnitude of a symmetric (absmax) code of `bits` bits: 127 (8), 7 (4), 1 (2).
PACO_HD inline int absmax_qmax(int bits) {
  return (1 << (bits - 1)) - 1;
}
// Largest code of an asymmetric (min-max) code of `bits` bits: 255 (8), 15 (4), 3 (2).
PACO_HD inline int minmax_qmax(int bits) {
  return (1 << bits) - 1;
}

// Scale of a block from its absolute maximum (absmax) or its range (min-max).
// Ensures: s = range / qmax (0 for an all-zero block).
PACO_HD inline float block_scale(float range, int qmax) {
  return range / static_cast<float>(qmax);
}
// Ensures: qmax/range, or 0 when range == 0 (an all-zero block encodes to code 0); capped at
// FLT_MAX so a block of denormal range never multiplies 0 by inf (it then encodes near zero).
PACO_HD inline float block_inverse(float range, int qmax) {
  if (!(range > 0.0f)) return 0.0f;
  const float inv = static_cast<float>(qmax) / range;
  return inv < 3.40282347e38f ? inv : 3.40282347e38f;
}

// Uniform u in [0, 1) for stochastic rounding of element `i` under `key` (counter-based, so host
// and device agree and elements can be coded in any order). SplitMix64 finaliser, top 24 bits.
PACO_HD inline float dither(std::uint64_t key, std::uint64_t i) {
  std::uint64_t z = key + (i + 1) * 0x9e3779b97f4a7c15ULL;
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
  z ^= z >> 31;
  return static_cast<float>(z >> 40) * 0x1.0p-24f;
}

// Symmetric code of x: round(clamp(x·inv, -qmax, qmax)); stochastic when u >= 0 (floor(v + u)).
// Requires: x finite. Ensures: |q| <= qmax; deterministic |x - q·s| <= s/2 (up to one ulp of
// x·inv).
PACO_HD inline int absmax_code(float x, float inv, int qmax, float u = -1.0f) {
  float v = min_f(max_f(x * inv, -static_cast<float>(qmax)), static_cast<float>(qmax));
  float r = u >= 0.0f ? floor_small(v + u) : round_even(v);
  r = min_f(max_f(r, -static_cast<float>(qmax)), static_cast<float>(qmax));
  return static_cast<int>(r);
}
// Decoded value of a symmetric code. Ensures: q·s.
PACO_HD inline float absmax_value(int q, float s) {
  return static_cast<float>(q) * s;
}
// The stored form of a symmetric code of `bits` bits: its two's-complement byte (8 bits), else
// q + 2^(bits-1) (so 0..2^bits-1). absmax_load is the inverse.
PACO_HD inline unsigned absmax_store(int q, int bits) {
  return bits == 8 ? static_cast<unsigned>(q) & 0xffu
                   : static_cast<unsigned>(q + (1 << (bits - 1)));
}
PACO_HD inline int absmax_load(unsigned c, int bits) {
  return bits == 8 ? static_cast<int>(static_cast<std::int8_t>(c))
                   : static_cast<int>(c) - (1 << (bits - 1));
}
// Whether a block's scale s and minimum lo (0 for absmax) can be decoded: s >= 0, both finite.
PACO_HD inline bool block_decodable(float s, float lo) {
  const auto finite = [](float v) { return (bits_of(v) & 0x7f800000u) != 0x7f800000u; };
  return s >= 0.0f && finite(s) && finite(lo);
}

// Asymmetric code of x: round(clamp((x - lo)·inv, 0, qmax)); stochastic when u >= 0.
// Requires: x finite. Ensures: 0 <= q <= qmax; deterministic |x - (lo + q·s)| <= s/2 (+ulps).
PACO_HD inline int minmax_code(float x, float lo, float inv, int qmax, float u = -1.0f) {
  float v = min_f(max_f((x - lo) * inv, 0.0f), static_cast<float>(qmax));
  float r = u >= 0.0f ? floor_small(v + u) : round_even(v);
  r = min_f(max_f(r, 0.0f), static_cast<float>(qmax));
  return static_cast<int>(r);
}
// Decoded value of an asymmetric code. Ensures: fma(q, s, lo) (one rounding, host and device).
PACO_HD inline float minmax_value(int q, float s, float lo) {
#if defined(__CUDA_ARCH__)
  return fmaf(static_cast<float>(q), s, lo);
#else
  return __builtin_fmaf(static_cast<float>(q), s, lo);
#endif
}

// ---- casts ----

// fp32 -> bf16 bits, round to nearest even; NaN stays a quiet NaN with its sign.
PACO_HD inline std::uint16_t to_bf16(float f) {
  const std::uint32_t u = bits_of(f);
  if ((u & 0x7fffffffu) > 0x7f800000u) return static_cast<std::uint16_t>((u >> 16) | 0x40u);
  const std::uint32_t r = u + 0x7fffu + ((u >> 16) & 1u);
  return static_cast<std::uint16_t>(r >> 16);
}
PACO_HD inline float from_bf16(std::uint16_t h) {
  return float_of(static_cast<std::uint32_t>(h) << 16);
}

// fp32 -> IEEE binary16 bits, round to nearest even, overflow to ±inf, subnormals kept,
// NaN stays a quiet NaN with its sign.
PACO_HD inline std::uint16_t to_fp16(float f) {
  const std::uint32_t u = bits_of(f);
  const std::uint32_t sign = (u >> 16) & 0x8000u;
  const std::uint32_t a = u & 0x7fffffffu;
  if (a > 0x7f800000u) return static_cast<std::uint16_t>(sign | 0x7e00u | ((a >> 13) & 0x3ffu));
  if (a >= 0x477ff000u) return static_cast<std::uint16_t>(sign | 0x7c00u);  // rounds to >= 65520
  if (a < 0x38800000u) {                                                    // below 2^-14
    if (a < 0x33000000u) return static_cast<std::uint16_t>(sign);           // below 2^-25
    const std::uint32_t e = a >> 23;
    const std::uint32_t m = (a & 0x7fffffu) | 0x800000u;
    const std::uint32_t shift = 126u - e;  // 14..24: m >> shift is the subnormal mantissa
    std::uint32_t h = m >> shift;
    const std::uint32_t rem = m & ((1u << shift) - 1u);
    const std::uint32_t half = 1u << (shift - 1u);
    if (rem > half || (rem == half && (h & 1u))) ++h;
    return static_cast<std::uint16_t>(sign | h);
  }
  std::uint32_t h = ((a - 0x38000000u) >> 13);  // rebias exponent 127 -> 15
  const std::uint32_t rem = a & 0x1fffu;
  if (rem > 0x1000u || (rem == 0x1000u && (h & 1u))) ++h;
  return static_cast<std::uint16_t>(sign | h);
}
PACO_HD inline float from_fp16(std::uint16_t h) {
  const std::uint32_t sign = static_cast<std::uint32_t>(h & 0x8000u) << 16;
  const std::uint32_t e = (h >> 10) & 0x1fu;
  const std::uint32_t m = h & 0x3ffu;
  if (e == 0x1fu) return float_of(sign | 0x7f800000u | (m << 13));
  if (e != 0) return float_of(sign | ((e + 112u) << 23) | (m << 13));
  if (m == 0) return float_of(sign);
  const float v = static_cast<float>(m) * 0x1.0p-24f;  // subnormal: m·2^-24, exact in fp32
  return sign ? -v : v;
}

// ---- error feedback ----

// Corrected gradient g̃ = g + r. Ensures: exactly g when r == 0 (so identity + error feedback is
// bit-identical to no compression, -0.0 included).
PACO_HD inline float ef_accumulate(float g, float r) {
  return r == 0.0f ? g : g + r;
}
// New residual r = g̃ - ĝ: what was not sent.
PACO_HD inline float ef_residual(float corrected, float sent) {
  return corrected - sent;
}

// ---- top-k ----

// Sort key of |x| (monotone in |x| for finite x and ±inf): the magnitude bits.
PACO_HD inline std::uint32_t magnitude_key(float x) {
  return bits_of(x) & 0x7fffffffu;
}

}  // namespace paco::compress::formula
