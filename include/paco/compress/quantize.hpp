#pragma once
// quantize: blockwise uniform quantisation to 2..8 bits with one fp32 scale per block
// (absmax, symmetric) or a scale and a minimum per block (min-max, asymmetric), deterministic or
// stochastic rounding. All-gathered on the wire (per-worker scales do not sum).
//
// Payload (little-endian), nb = ceil(n / block):
//   scales  f32[nb]                 s_b = absmax_b / qmax  or  (max_b − min_b) / qmax
//   mins    f32[nb]                 only for min-max
//   codes   ceil(n·bits/8) bytes    element i at bit (i·bits) mod 8 of byte i·bits/8, low bits
//                                   first; 8-bit absmax codes are int8 two's complement, other
//                                   absmax codes are stored offset by 2^(bits−1); min-max codes
//                                   are unsigned. Padding bits of the last byte are zero.

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <string>
#include <vector>

#include "paco/compress/concepts.hpp"
#include "paco/compress/detail/formulas.hpp"
#include "paco/compress/detail/wire.hpp"
#include "paco/core/rng.hpp"

#if defined(__AVX512F__) && defined(__AVX512BW__) && defined(__AVX512DQ__) && !defined(__CUDACC__)
#include <immintrin.h>
#define PACO_COMPRESS_AVX512 1
#if defined(__BMI2__)
#define PACO_COMPRESS_PEXT 1  // 2, 3, 5, 6, 7 bits: codes packed 8 at a time by pext / pdep
#endif
#endif

// GCC 12 warns falsely inside AVX-512 intrinsics (_mm512_undefined_*) at -O2.
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#pragma GCC diagnostic ignored "-Wuninitialized"
#endif

namespace paco::compress {

enum class scale_mode { absmax, minmax };

struct quantize_config {
  int bits = 8;             // default level: 2..8 bits (AVX-512 paths for all; BMI2 for 2,3,5,6,7)
  std::size_t block = 256;  // elements per scale; multiple of 16 in [16, 2^20]
  scale_mode scale = scale_mode::absmax;
  bool stochastic = false;      // floor(v + u), u ~ U[0,1) from a seeded key per encode
  std::uint64_t seed = 0x5eed;  // seeds the paco::rng that draws each encode's key
};

// Ensures: ok iff 2 <= bits <= 8 and block is a multiple of 16 in [16, 2^20].
inline status validate(const quantize_config& c) {
  if (c.bits < 2 || c.bits > 8)
    return {errc::invalid_argument,
            "quantize: bits = " + std::to_string(c.bits) + ", accepted 2 to 8"};
  if (c.block < 16 || c.block > (std::size_t{1} << 20) || c.block % 16 != 0)
    return {errc::invalid_argument, "quantize: block = " + std::to_string(c.block) +
                                        ", accepted a multiple of 16 in [16, 1048576]"};
  return {};
}

// quantize: blockwise int2..int8 codec. The level is the bit width.
// Cost: encode reads 4n bytes and writes n·bits/8 + 4·nb (8·nb min-max); decode the reverse.
class quantize {
 public:
  using compressor_concept = compressor_tag;
  using level_type = int;  // bits: 2..8
  static constexpr wire_reduction reduction = wire_reduction::gather;

  quantize() = default;
  // Requires: validate(c) (checked again by encode/decode, which return its error).
  explicit quantize(quantize_config c) : cfg_(c), rng_(c.seed) {}
  const quantize_config& config() const noexcept { return cfg_; }

  int default_level() const { return cfg_.bits; }

  // Scale blocks of an n-element span (0 for an invalid block size, which encode/decode refuse).
  std::size_t blocks(std::size_t n) const {
    return cfg_.block ? (n + cfg_.block - 1) / cfg_.block : 0;
  }
  // Ensures: nb·4·(1 or 2) + ceil(n·bits/8).
  std::size_t wire_bytes(std::size_t n, const int& bits) const {
    const std::size_t per = cfg_.scale == scale_mode::minmax ? 8 : 4;
    return blocks(n) * per + (n * static_cast<std::size_t>(bits) + 7) / 8;
  }

  // Requires: x finite; out.size() == wire_bytes(x.size(), bits).
  // Ensures: deterministic rounding gives |x_i − x̂_i| <= s_b/2 (+ rounding of x·(1/s)).
  status encode(slice<const float> x, const int& bits, slice<std::byte> out) {
    if (auto s = check(bits); !s) return s;
    if (auto s = detail::check_out("quantize", out.size(), wire_bytes(x.size(), bits)); !s)
      return s;
    const std::uint64_t key = cfg_.stochastic ? rng_() : 0;
    encode_with_key(x, bits, key, out);
    return {};
  }

  // The encode of one given stochastic key (what the CUDA kernel reproduces). Requires: as encode.
  void encode_with_key(slice<const float> x, int bits, std::uint64_t key,
                       slice<std::byte> out) const {
    const std::size_t n = x.size(), nb = blocks(n);
    std::byte* scales = out.data();
    std::byte* mins = scales + 4 * nb;
    std::uint8_t* codes = reinterpret_cast<std::uint8_t*>(
        out.data() + nb * (cfg_.scale == scale_mode::minmax ? 8 : 4));
    const std::size_t code_bytes = (n * static_cast<std::size_t>(bits) + 7) / 8;
    if (code_bytes) codes[code_bytes - 1] = 0;  // padding bits are zero
    for (std::size_t b = 0; b < nb; ++b) {
      const std::size_t i0 = b * cfg_.block, len = std::min(cfg_.block, n - i0);
      encode_block(x.data() + i0, len, b, bits, key, scales, mins, codes);
    }
  }

  // Error feedback fused per block (used by error_feedback<quantize>): residual ← g + residual,
  // out = encode(residual), residual ← residual − decode(out), one block at a time while it is
  // in cache. Ensures: the same payload and residual as the three separate passes.
  // Requires: g.size() == residual.size(); out.size() == wire_bytes(g.size(), bits).
  status encode_feedback(slice<const float> g, slice<float> residual, const int& bits,
                         slice<std::byte> out) {
    if (auto s = check(bits); !s) return s;
    if (g.size() != residual.size())
      return {errc::mismatch, "quantize: residual and gradient differ in size"};
    if (auto s = detail::check_out("quantize", out.size(), wire_bytes(g.size(), bits)); !s)
      return s;
    const std::uint64_t key = cfg_.stochastic ? rng_() : 0;
    const std::size_t n = g.size(), nb = blocks(n);
    const bool mm = cfg_.scale == scale_mode::minmax;
    std::byte* scales = out.data();
    std::byte* mins = scales + 4 * nb;
    std::uint8_t* codes = reinterpret_cast<std::uint8_t*>(out.data() + nb * (mm ? 8 : 4));
    const std::size_t code_bytes = (n * static_cast<std::size_t>(bits) + 7) / 8;
    if (code_bytes) codes[code_bytes - 1] = 0;
    if (sent_.size() < cfg_.block) sent_.resize(cfg_.block);
    for (std::size_t b = 0; b < nb; ++b) {
      const std::size_t i0 = b * cfg_.block, len = std::min(cfg_.block, n - i0);
      float* r = residual.data() + i0;
      const float* gb = g.data() + i0;
      for (std::size_t j = 0; j < len; ++j) r[j] = formula::ef_accumulate(gb[j], r[j]);
      encode_block(r, len, b, bits, key, scales, mins, codes);
      const float s = detail::load<float>(scales + 4 * b);
      if (mm)
        decode_minmax(codes, codes + code_bytes, i0, len, bits, s,
                      detail::load<float>(mins + 4 * b), sent_.data());
      else
        decode_absmax(codes, codes + code_bytes, i0, len, bits, s, sent_.data());
      for (std::size_t j = 0; j < len; ++j) r[j] = formula::ef_residual(r[j], sent_[j]);
    }
    return {};
  }

  // Ensures: y_i = q_i·s_b (absmax) or fma(q_i, s_b, min_b) (min-max). corrupt if the size is
  // not wire_bytes(y.size(), bits) or a scale is negative/non-finite or a minimum non-finite.
  status decode(slice<const std::byte> in, const int& bits, slice<float> y) const {
    if (auto s = check(bits); !s) return s;
    if (auto s = detail::check_in("quantize", in.size(), wire_bytes(y.size(), bits)); !s) return s;
    const std::size_t n = y.size(), nb = blocks(n);
    const bool mm = cfg_.scale == scale_mode::minmax;
    const std::byte* scales = in.data();
    const std::byte* mins = scales + 4 * nb;
    const std::uint8_t* codes =
        reinterpret_cast<const std::uint8_t*>(in.data() + nb * (mm ? 8 : 4));
    const std::uint8_t* end = codes + (n * static_cast<std::size_t>(bits) + 7) / 8;
    for (std::size_t b = 0; b < nb; ++b) {
      const float s = detail::load<float>(scales + 4 * b);
      const float lo = mm ? detail::load<float>(mins + 4 * b) : 0.0f;
      if (!formula::block_decodable(s, lo))
        return {errc::corrupt, "quantize: block " + std::to_string(b) +
                                   " has a negative or non-finite scale or minimum"};
      const std::size_t i0 = b * cfg_.block, len = std::min(cfg_.block, n - i0);
      if (mm)
        decode_minmax(codes, end, i0, len, bits, s, lo, y.data() + i0);
      else
        decode_absmax(codes, end, i0, len, bits, s, y.data() + i0);
    }
    return {};
  }

  // Ensures: ‖x − decode(encode(x))‖₂ under deterministic rounding, without allocating.
  double error(const int& bits, slice<const float> x) {
    if (!check(bits)) return INFINITY;
    double e = 0;
    const std::size_t n = x.size();
    for (std::size_t i0 = 0; i0 < n; i0 += cfg_.block) {
      const std::size_t len = std::min(cfg_.block, n - i0);
      const float* xb = x.data() + i0;
      if (cfg_.scale == scale_mode::absmax) {
        const int qmax = formula::absmax_qmax(bits);
        const float amax = absmax_of(xb, len);
        const float s = formula::block_scale(amax, qmax), inv = formula::block_inverse(amax, qmax);
        for (std::size_t j = 0; j < len; ++j) {
          const double d = xb[j] - formula::absmax_value(formula::absmax_code(xb[j], inv, qmax), s);
          e += d * d;
        }
      } else {
        const int qmax = formula::minmax_qmax(bits);
        float lo, hi;
        minmax_of(xb, len, lo, hi);
        const float s = formula::block_scale(hi - lo, qmax);
        const float inv = formula::block_inverse(hi - lo, qmax);
        for (std::size_t j = 0; j < len; ++j) {
          const double d =
              xb[j] - formula::minmax_value(formula::minmax_code(xb[j], lo, inv, qmax), s, lo);
          e += d * d;
        }
      }
    }
    return std::sqrt(e);
  }

 private:
  // Scale (and minimum) and codes of block b, elements xb[0, len).
  void encode_block(const float* xb, std::size_t len, std::size_t b, int bits, std::uint64_t key,
                    std::byte* scales, std::byte* mins, std::uint8_t* codes) const {
    const std::size_t i0 = b * cfg_.block;
    if (cfg_.scale == scale_mode::absmax) {
      const int qmax = formula::absmax_qmax(bits);
      const float amax = absmax_of(xb, len);
      detail::store(scales + 4 * b, formula::block_scale(amax, qmax));
      encode_absmax(xb, len, i0, bits, formula::block_inverse(amax, qmax), key, codes);
    } else {
      const int qmax = formula::minmax_qmax(bits);
      float lo, hi;
      minmax_of(xb, len, lo, hi);
      detail::store(scales + 4 * b, formula::block_scale(hi - lo, qmax));
      detail::store(mins + 4 * b, lo);
      encode_minmax(xb, len, i0, bits, lo, formula::block_inverse(hi - lo, qmax), key, codes);
    }
  }

  status check(int bits) const {
    quantize_config c = cfg_;
    c.bits = bits;
    return validate(c);
  }

  static float absmax_of(const float* x, std::size_t len) {
    std::size_t j = 0;
    float m = 0.0f;
#if defined(PACO_COMPRESS_AVX512)
    __m512 m0 = _mm512_setzero_ps(), m1 = m0, m2 = m0, m3 = m0;
    for (; j + 64 <= len; j += 64) {
      m0 = _mm512_max_ps(m0, _mm512_abs_ps(_mm512_loadu_ps(x + j)));
      m1 = _mm512_max_ps(m1, _mm512_abs_ps(_mm512_loadu_ps(x + j + 16)));
      m2 = _mm512_max_ps(m2, _mm512_abs_ps(_mm512_loadu_ps(x + j + 32)));
      m3 = _mm512_max_ps(m3, _mm512_abs_ps(_mm512_loadu_ps(x + j + 48)));
    }
    for (; j + 16 <= len; j += 16) m0 = _mm512_max_ps(m0, _mm512_abs_ps(_mm512_loadu_ps(x + j)));
    m = _mm512_reduce_max_ps(_mm512_max_ps(_mm512_max_ps(m0, m1), _mm512_max_ps(m2, m3)));
#endif
    for (; j < len; ++j) m = formula::max_f(m, formula::abs_f(x[j]));
    return m;
  }

  static void minmax_of(const float* x, std::size_t len, float& lo, float& hi) {
    std::size_t j = 0;
    lo = x[0];
    hi = x[0];
#if defined(PACO_COMPRESS_AVX512)
    __m512 l0 = _mm512_set1_ps(x[0]), l1 = l0, h0 = l0, h1 = l0;
    for (; j + 32 <= len; j += 32) {
      const __m512 a = _mm512_loadu_ps(x + j), b = _mm512_loadu_ps(x + j + 16);
      l0 = _mm512_min_ps(l0, a);
      h0 = _mm512_max_ps(h0, a);
      l1 = _mm512_min_ps(l1, b);
      h1 = _mm512_max_ps(h1, b);
    }
    lo = _mm512_reduce_min_ps(_mm512_min_ps(l0, l1));
    hi = _mm512_reduce_max_ps(_mm512_max_ps(h0, h1));
#endif
    for (; j < len; ++j) {
      lo = formula::min_f(lo, x[j]);
      hi = formula::max_f(hi, x[j]);
    }
  }

  // Writes code c (already offset/unsigned, < 2^bits) of element i into zero-or-stale storage.
  // A code of 3, 5, 6 or 7 bits may straddle two bytes (its second byte exists: the codes take
  // ceil(n·bits/8) bytes).
  static void put_code(std::uint8_t* codes, std::size_t i, int bits, unsigned c) {
    if (bits == 8) {
      codes[i] = static_cast<std::uint8_t>(c);
      return;
    }
    const std::size_t bit = i * static_cast<std::size_t>(bits);
    const unsigned shift = static_cast<unsigned>(bit % 8), mask = ((1u << bits) - 1u) << shift;
    std::uint8_t& byte = codes[bit / 8];
    byte = static_cast<std::uint8_t>((byte & ~mask) | ((c << shift) & 0xffu));
    if (shift + static_cast<unsigned>(bits) > 8) {
      std::uint8_t& next = codes[bit / 8 + 1];
      const unsigned hi = mask >> 8;
      next = static_cast<std::uint8_t>((next & ~hi) | (c >> (8 - shift)));
    }
  }
  static unsigned get_code(const std::uint8_t* codes, std::size_t i, int bits) {
    if (bits == 8) return codes[i];
    const std::size_t bit = i * static_cast<std::size_t>(bits);
    const unsigned shift = static_cast<unsigned>(bit % 8);
    unsigned v = codes[bit / 8] >> shift;
    if (shift + static_cast<unsigned>(bits) > 8)
      v |= static_cast<unsigned>(codes[bit / 8 + 1]) << (8 - shift);
    return v & ((1u << bits) - 1u);
  }

  void encode_absmax(const float* x, std::size_t len, std::size_t i0, int bits, float inv,
                     std::uint64_t key, std::uint8_t* codes) const {
    const int qmax = formula::absmax_qmax(bits);
    std::size_t j = 0;
#if defined(PACO_COMPRESS_AVX512)
    if (bits == 8 && !cfg_.stochastic) {
      const __m512 vinv = _mm512_set1_ps(inv);
      std::int8_t* c = reinterpret_cast<std::int8_t*>(codes + i0);
      for (; j + 32 <= len; j += 32) {
        // |x·inv| <= qmax·(1 + ulp): rounding stays in [-qmax, qmax], no clamp needed.
        const __m512i a = _mm512_cvtps_epi32(_mm512_mul_ps(_mm512_loadu_ps(x + j), vinv));
        const __m512i b = _mm512_cvtps_epi32(_mm512_mul_ps(_mm512_loadu_ps(x + j + 16), vinv));
        _mm_storeu_si128(reinterpret_cast<__m128i*>(c + j), _mm512_cvtsepi32_epi8(a));
        _mm_storeu_si128(reinterpret_cast<__m128i*>(c + j + 16), _mm512_cvtsepi32_epi8(b));
      }
    }
    if (vector_width(bits)) {
      const __m512 vinv = _mm512_set1_ps(inv);
      const __m512 top = _mm512_set1_ps(static_cast<float>(qmax));
      const __m512 bottom = _mm512_set1_ps(-static_cast<float>(qmax));
      // Stored codes: 8 bits two's complement (the low byte), narrower ones offset.
      const __m512i off = _mm512_set1_epi32(bits == 8 ? 0 : 1 << (bits - 1));
      for (; j + 16 <= len; j += 16) {
        __m512 v = _mm512_mul_ps(_mm512_loadu_ps(x + j), vinv);
        v = _mm512_min_ps(_mm512_max_ps(v, bottom), top);
        if (cfg_.stochastic)
          v = _mm512_roundscale_ps(_mm512_add_ps(v, dither16(key, i0 + j)),
                                   _MM_FROUND_TO_NEG_INF | _MM_FROUND_NO_EXC);
        v = _mm512_min_ps(_mm512_max_ps(v, bottom), top);
        store16(codes, i0 + j, bits, _mm512_add_epi32(_mm512_cvtps_epi32(v), off));
      }
    }
#endif
    for (; j < len; ++j) {
      const float u = cfg_.stochastic ? formula::dither(key, i0 + j) : -1.0f;
      put_code(codes, i0 + j, bits,
               formula::absmax_store(formula::absmax_code(x[j], inv, qmax, u), bits));
    }
  }

  void encode_minmax(const float* x, std::size_t len, std::size_t i0, int bits, float lo, float inv,
                     std::uint64_t key, std::uint8_t* codes) const {
    const int qmax = formula::minmax_qmax(bits);
    std::size_t j = 0;
#if defined(PACO_COMPRESS_AVX512)
    if (vector_width(bits)) {
      const __m512 vinv = _mm512_set1_ps(inv), vlo = _mm512_set1_ps(lo);
      const __m512 zero = _mm512_setzero_ps(), top = _mm512_set1_ps(static_cast<float>(qmax));
      for (; j + 16 <= len; j += 16) {
        __m512 v = _mm512_mul_ps(_mm512_sub_ps(_mm512_loadu_ps(x + j), vlo), vinv);
        v = _mm512_min_ps(_mm512_max_ps(v, zero), top);
        if (cfg_.stochastic) {
          v = _mm512_roundscale_ps(_mm512_add_ps(v, dither16(key, i0 + j)),
                                   _MM_FROUND_TO_NEG_INF | _MM_FROUND_NO_EXC);
          v = _mm512_min_ps(_mm512_max_ps(v, zero), top);
        }
        store16(codes, i0 + j, bits, _mm512_cvtps_epi32(v));
      }
    }
#endif
    for (; j < len; ++j) {
      const float u = cfg_.stochastic ? formula::dither(key, i0 + j) : -1.0f;
      put_code(codes, i0 + j, bits,
               static_cast<unsigned>(formula::minmax_code(x[j], lo, inv, qmax, u)));
    }
  }

#if defined(PACO_COMPRESS_AVX512)
  // 16 codes (< 16, in 32-bit lanes) -> 8 bytes, even element in the low nibble.
  static void store_nibbles(std::uint8_t* c, __m512i q) {
    q = _mm512_or_si512(q, _mm512_srli_epi64(q, 28));
    _mm_storel_epi64(reinterpret_cast<__m128i*>(c), _mm512_cvtepi64_epi8(q));
  }
#if defined(PACO_COMPRESS_PEXT)
  // The byte-lane mask of a width: bits low bits set in each of 8 bytes.
  static std::uint64_t lane_mask(int bits) {
    return 0x0101010101010101ULL * ((1ULL << bits) - 1ULL);
  }
  // 16 codes (< 2^bits, in 32-bit lanes) of elements i … i+15 -> 2·bits bytes at bit i·bits.
  // Requires: i % 16 == 0 (so i·bits is a whole byte).
  static void store_packed(std::uint8_t* codes, std::size_t i, int bits, __m512i q) {
    alignas(16) std::uint64_t b[2];
    _mm_store_si128(reinterpret_cast<__m128i*>(b), _mm512_cvtepi32_epi8(q));
    const std::uint64_t m = lane_mask(bits);
    const std::uint64_t lo = _pext_u64(b[0], m), hi = _pext_u64(b[1], m);
    std::uint8_t* c = codes + i * static_cast<std::size_t>(bits) / 8;
    std::memcpy(c, &lo, static_cast<std::size_t>(bits));  // little-endian: low bits first
    std::memcpy(c + bits, &hi, static_cast<std::size_t>(bits));
  }
  // The 16 codes of elements i … i+15 (i % 16 == 0), in 32-bit lanes. Reads 8 bytes at a time
  // where the codes buffer [codes, end) has them (pdep takes only the low 8·bits bits).
  static __m512i load_packed(const std::uint8_t* codes, const std::uint8_t* end, std::size_t i,
                             int bits) {
    const std::uint64_t m = lane_mask(bits);
    const std::uint8_t* c = codes + i * static_cast<std::size_t>(bits) / 8;
    std::uint64_t lo = 0, hi = 0;
    if (end - c >= bits + 8) {
      std::memcpy(&lo, c, 8);
      std::memcpy(&hi, c + bits, 8);
    } else {
      std::memcpy(&lo, c, static_cast<std::size_t>(bits));
      std::memcpy(&hi, c + bits, static_cast<std::size_t>(bits));
    }
    const __m128i b = _mm_set_epi64x(static_cast<long long>(_pdep_u64(hi, m)),
                                     static_cast<long long>(_pdep_u64(lo, m)));
    return _mm512_cvtepu8_epi32(b);
  }
#endif
  // Whether the vector paths take a width: 8 and 4 bits always, the others with BMI2.
  static constexpr bool vector_width(int bits) {
#if defined(PACO_COMPRESS_PEXT)
    return bits >= 2 && bits <= 8;
#else
    return bits == 4 || bits == 8;
#endif
  }
  // 16 stored codes (as put_code takes them, in 32-bit lanes; 8 bits: the low byte) of elements
  // i … i+15 into the code bytes. Requires: vector_width(bits); i % 16 == 0.
  static void store16(std::uint8_t* codes, std::size_t i, int bits, __m512i c) {
    if (bits == 8)
      _mm_storeu_si128(reinterpret_cast<__m128i*>(codes + i), _mm512_cvtepi32_epi8(c));
    else if (bits == 4)
      store_nibbles(codes + i / 2, c);
#if defined(PACO_COMPRESS_PEXT)
    else
      store_packed(codes, i, bits, c);
#endif
  }
  // The 16 stored codes (unsigned, as get_code reads them) of elements i … i+15, in 32-bit lanes.
  // Requires: vector_width(bits); i % 16 == 0; [codes, end) the code bytes.
  static __m512i load16(const std::uint8_t* codes, [[maybe_unused]] const std::uint8_t* end,
                        std::size_t i, int bits) {
    if (bits == 8)
      return _mm512_cvtepu8_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i*>(codes + i)));
    if (bits == 4) {  // 8 bytes, even element in the low nibble
      const __m512i nib = _mm512_set1_epi64(0xf);
      const __m512i b =
          _mm512_cvtepu8_epi64(_mm_loadl_epi64(reinterpret_cast<const __m128i*>(codes + i / 2)));
      return _mm512_or_si512(_mm512_and_si512(b, nib),
                             _mm512_slli_epi64(_mm512_and_si512(_mm512_srli_epi64(b, 4), nib), 32));
    }
#if defined(PACO_COMPRESS_PEXT)
    return load_packed(codes, end, i, bits);
#else
    return _mm512_setzero_si512();  // not reached: vector_width(bits)
#endif
  }
  // formula::dither(key, i + t) for t = 0..15.
  static __m512 dither16(std::uint64_t key, std::size_t i) {
    const __m512i golden = _mm512_set1_epi64(static_cast<long long>(0x9e3779b97f4a7c15ULL));
    const __m512i m1 = _mm512_set1_epi64(static_cast<long long>(0xbf58476d1ce4e5b9ULL));
    const __m512i m2 = _mm512_set1_epi64(static_cast<long long>(0x94d049bb133111ebULL));
    const __m512i vkey = _mm512_set1_epi64(static_cast<long long>(key));
    auto mix = [&](__m512i idx) {
      __m512i z = _mm512_add_epi64(vkey, _mm512_mullo_epi64(idx, golden));
      z = _mm512_mullo_epi64(_mm512_xor_si512(z, _mm512_srli_epi64(z, 30)), m1);
      z = _mm512_mullo_epi64(_mm512_xor_si512(z, _mm512_srli_epi64(z, 27)), m2);
      z = _mm512_xor_si512(z, _mm512_srli_epi64(z, 31));
      return _mm512_cvtepi64_epi32(_mm512_srli_epi64(z, 40));
    };
    const __m512i base = _mm512_set1_epi64(static_cast<long long>(i + 1));
    const __m512i a = _mm512_add_epi64(base, _mm512_setr_epi64(0, 1, 2, 3, 4, 5, 6, 7));
    const __m512i b = _mm512_add_epi64(base, _mm512_setr_epi64(8, 9, 10, 11, 12, 13, 14, 15));
    const __m512i u = _mm512_inserti64x4(_mm512_castsi256_si512(mix(a)), mix(b), 1);
    return _mm512_mul_ps(_mm512_cvtepi32_ps(u), _mm512_set1_ps(0x1.0p-24f));
  }
#endif

  static void decode_absmax(const std::uint8_t* codes, [[maybe_unused]] const std::uint8_t* end,
                            std::size_t i0, std::size_t len, int bits, float s, float* y) {
    std::size_t j = 0;
#if defined(PACO_COMPRESS_AVX512)
    const __m512 vs = _mm512_set1_ps(s);
    if (bits == 8) {  // two's complement codes: sign-extended, 32 per step
      const std::uint8_t* c = codes + i0;
      for (; j + 32 <= len; j += 32) {
        const __m512i a =
            _mm512_cvtepi8_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i*>(c + j)));
        const __m512i b =
            _mm512_cvtepi8_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i*>(c + j + 16)));
        _mm512_storeu_ps(y + j, _mm512_mul_ps(_mm512_cvtepi32_ps(a), vs));
        _mm512_storeu_ps(y + j + 16, _mm512_mul_ps(_mm512_cvtepi32_ps(b), vs));
      }
    } else if (vector_width(bits)) {
      const __m512i off = _mm512_set1_epi32(1 << (bits - 1));
      for (; j + 16 <= len; j += 16) {
        const __m512i q = _mm512_sub_epi32(load16(codes, end, i0 + j, bits), off);
        _mm512_storeu_ps(y + j, _mm512_mul_ps(_mm512_cvtepi32_ps(q), vs));
      }
    }
#endif
    for (; j < len; ++j)
      y[j] = formula::absmax_value(formula::absmax_load(get_code(codes, i0 + j, bits), bits), s);
  }

  static void decode_minmax(const std::uint8_t* codes, [[maybe_unused]] const std::uint8_t* end,
                            std::size_t i0, std::size_t len, int bits, float s, float lo,
                            float* y) {
    std::size_t j = 0;
#if defined(PACO_COMPRESS_AVX512)
    const __m512 vs = _mm512_set1_ps(s), vlo = _mm512_set1_ps(lo);
    if (vector_width(bits))
      for (; j + 16 <= len; j += 16)
        _mm512_storeu_ps(
            y + j, _mm512_fmadd_ps(_mm512_cvtepi32_ps(load16(codes, end, i0 + j, bits)), vs, vlo));
#endif
    for (; j < len; ++j)
      y[j] = formula::minmax_value(static_cast<int>(get_code(codes, i0 + j, bits)), s, lo);
  }

  quantize_config cfg_{};
  rng rng_{0x5eed};
  std::vector<float> sent_;  // one decoded block (encode_feedback)
};
static_assert(Compressor<quantize>);

}  // namespace paco::compress

#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic pop
#endif
