#pragma once
// cast: fp32 → bf16 or fp16 (round to nearest even), 2 bytes per element. Summable on the wire
// in the narrow type (each hop of a ring adds one rounding of the partial sum).

#include <cmath>
#include <cstdint>

#include "paco/compress/concepts.hpp"
#include "paco/compress/detail/formulas.hpp"
#include "paco/compress/detail/wire.hpp"

#if defined(__AVX512F__) && !defined(__CUDACC__)
#include <immintrin.h>
#define PACO_COMPRESS_HOST_AVX512 1
#endif

#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#pragma GCC diagnostic ignored "-Wuninitialized"  // GCC 12, inside AVX-512 intrinsics
#endif

namespace paco::compress {

enum class half_format { bf16, fp16 };

struct cast_config {
  half_format format = half_format::bf16;
};

// cast: payload = n 16-bit values (bf16 or IEEE fp16). Cost: reads 4n, writes 2n bytes.
class cast {
 public:
  using compressor_concept = compressor_tag;
  using level_type = int;  // bits per element; always 16
  static constexpr wire_reduction reduction = wire_reduction::sum;

  cast() = default;
  explicit cast(cast_config c) : cfg_(c) {}
  const cast_config& config() const noexcept { return cfg_; }

  int default_level() const { return 16; }
  // Ensures: 2n.
  std::size_t wire_bytes(std::size_t n, const int& = 16) const { return 2 * n; }

  // Requires: out.size() == 2·x.size(). Ensures: out[i] = to_bf16(x[i]) or to_fp16(x[i]).
  status encode(slice<const float> x, const int& l, slice<std::byte> out) {
    if (auto s = detail::check_out("cast", out.size(), wire_bytes(x.size(), l)); !s) return s;
    encode_to(x.data(), x.size(), out.data());
    return {};
  }
  // Ensures: y[i] = the fp32 value of the i-th 16-bit code (exact). corrupt if sizes differ.
  status decode(slice<const std::byte> in, const int& l, slice<float> y) const {
    if (auto s = detail::check_in("cast", in.size(), wire_bytes(y.size(), l)); !s) return s;
    decode_from(in.data(), y.size(), y.data());
    return {};
  }
  // Ensures: ‖x − decode(encode(x))‖₂.
  double error(const int&, slice<const float> x) {
    double e = 0;
    for (std::size_t i = 0; i < x.size(); ++i) {
      const float r = cfg_.format == half_format::bf16 ? formula::from_bf16(formula::to_bf16(x[i]))
                                                       : formula::from_fp16(formula::to_fp16(x[i]));
      const double d = static_cast<double>(x[i]) - r;
      e += d * d;
    }
    return std::sqrt(e);
  }

 private:
  // h: 2n bytes, any alignment (vector stores are unaligned, scalar ones memcpy).
  void encode_to(const float* x, std::size_t n, std::byte* h) const {
    std::size_t i = 0;
#if defined(PACO_COMPRESS_HOST_AVX512)
    if (cfg_.format == half_format::fp16) {
      for (; i + 16 <= n; i += 16) {
        const __m256i r =
            _mm512_cvtps_ph(_mm512_loadu_ps(x + i), _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
        _mm256_storeu_si256(reinterpret_cast<__m256i*>(h + 2 * i), r);
      }
    } else {
      const __m512i abs_mask = _mm512_set1_epi32(0x7fffffff), inf = _mm512_set1_epi32(0x7f800000);
      const __m512i bias = _mm512_set1_epi32(0x7fff), one = _mm512_set1_epi32(1);
      const __m512i quiet = _mm512_set1_epi32(0x40);
      for (; i + 16 <= n; i += 16) {
        const __m512i u = _mm512_castps_si512(_mm512_loadu_ps(x + i));
        const __m512i odd = _mm512_and_si512(_mm512_srli_epi32(u, 16), one);
        __m512i r = _mm512_srli_epi32(_mm512_add_epi32(_mm512_add_epi32(u, bias), odd), 16);
        const __mmask16 nan = _mm512_cmpgt_epu32_mask(_mm512_and_si512(u, abs_mask), inf);
        r = _mm512_mask_or_epi32(r, nan, _mm512_srli_epi32(u, 16), quiet);
        _mm256_storeu_si256(reinterpret_cast<__m256i*>(h + 2 * i), _mm512_cvtepi32_epi16(r));
      }
    }
#endif
    if (cfg_.format == half_format::fp16)
      for (; i < n; ++i) detail::store(h + 2 * i, formula::to_fp16(x[i]));
    else
      for (; i < n; ++i) detail::store(h + 2 * i, formula::to_bf16(x[i]));
  }
  void decode_from(const std::byte* h, std::size_t n, float* y) const {
    std::size_t i = 0;
#if defined(PACO_COMPRESS_HOST_AVX512)
    if (cfg_.format == half_format::fp16) {
      for (; i + 16 <= n; i += 16)
        _mm512_storeu_ps(
            y + i,
            _mm512_cvtph_ps(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(h + 2 * i))));
    } else {
      for (; i + 16 <= n; i += 16) {
        const __m512i w =
            _mm512_cvtepu16_epi32(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(h + 2 * i)));
        _mm512_storeu_ps(y + i, _mm512_castsi512_ps(_mm512_slli_epi32(w, 16)));
      }
    }
#endif
    if (cfg_.format == half_format::fp16)
      for (; i < n; ++i) y[i] = formula::from_fp16(detail::load<std::uint16_t>(h + 2 * i));
    else
      for (; i < n; ++i) y[i] = formula::from_bf16(detail::load<std::uint16_t>(h + 2 * i));
  }

  cast_config cfg_{};
};
static_assert(Compressor<cast>);

// The ring all-reduce's reduction of cast payloads: a + b in fp32, rounded back to the narrow
// type (one rounding per hop). Ensures: to_half(from_half(a) + from_half(b)).
struct half_sum {
  half_format format = half_format::bf16;
  std::uint16_t operator()(std::uint16_t a, std::uint16_t b) const noexcept {
    if (format == half_format::bf16)
      return formula::to_bf16(formula::from_bf16(a) + formula::from_bf16(b));
    return formula::to_fp16(formula::from_fp16(a) + formula::from_fp16(b));
  }
};

}  // namespace paco::compress

#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic pop
#endif
