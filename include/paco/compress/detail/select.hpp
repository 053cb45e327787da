#pragma once
// Magnitude selection shared by topk and sign_prune: the k elements of largest |x|, ties broken
// by the lowest index (what a stable descending radix sort on |x| gives, so the CUDA top-k
// selects the same set). Two histogram passes over the magnitude bits (16 high, 16 low) find the
// k-th largest key exactly; no sort, no allocation after the first call.

#include <bit>
#include <cstdint>
#include <cstring>
#include <vector>

#include "paco/compress/detail/formulas.hpp"

#if defined(__AVX512F__) && !defined(__CUDACC__)
#include <immintrin.h>
#define PACO_COMPRESS_HOST_AVX512 1
#endif

#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"  // GCC 12, inside AVX-512 intrinsics
#pragma GCC diagnostic ignored "-Wuninitialized"
#endif

namespace paco::compress::detail {

// The selection rule: keep key > threshold, and the first `ties` elements with key == threshold.
struct magnitude_cut {
  std::uint32_t threshold = 0;
  std::size_t ties = 0;
  bool all = false;  // k >= n: keep everything
  bool none = true;  // k == 0: keep nothing
};

// Scratch of one selector: a 65536-bin histogram (256 KiB), allocated on the first call.
class magnitude_selector {
 public:
  // Requires: x finite or ±inf (NaN ordering is unspecified). Ensures: applying the returned
  // cut in index order keeps exactly min(k, n) elements, those of largest |x|.
  // Cost: two passes over x.
  magnitude_cut select(const float* x, std::size_t n, std::size_t k) {
    magnitude_cut cut;
    if (k == 0 || n == 0) return cut;
    cut.none = false;
    if (k >= n) {
      cut.all = true;
      return cut;
    }
    hist_.assign(65536, 0);
    for (std::size_t i = 0; i < n; ++i) ++hist_[formula::magnitude_key(x[i]) >> 16];
    std::size_t above = 0;
    std::uint32_t hi = 65535;
    for (;; --hi) {
      if (above + hist_[hi] >= k) break;
      above += hist_[hi];
    }
    hist_.assign(65536, 0);
    for (std::size_t i = 0; i < n; ++i) {
      const std::uint32_t key = formula::magnitude_key(x[i]);
      if ((key >> 16) == hi) ++hist_[key & 0xffffu];
    }
    std::uint32_t lo = 65535;
    for (;; --lo) {
      if (above + hist_[lo] >= k) break;
      above += hist_[lo];
    }
    cut.threshold = (hi << 16) | lo;
    cut.ties = k - above;
    return cut;
  }

 private:
  std::vector<std::uint32_t> hist_;
};

// Calls keep(i) for each kept index in increasing order and drop(i) for the others.
template <class Keep, class Drop>
inline void apply_cut(const float* x, std::size_t n, magnitude_cut cut, Keep&& keep, Drop&& drop) {
  std::size_t ties = cut.ties;
  for (std::size_t i = 0; i < n; ++i) {
    const std::uint32_t key = formula::magnitude_key(x[i]);
    const bool k = !cut.none && (cut.all || key > cut.threshold ||
                                 (key == cut.threshold && ties > 0 && (--ties, true)));
    if (k)
      keep(i);
    else
      drop(i);
  }
}

// Writes the kept elements of x in index order: values (f32, unaligned) and, when non-null,
// their indices (u32) and a keep-bitmap (bit i%8 of byte i/8; the caller zeroes it). Branch-free
// per element (AVX-512 compress where available). Ensures: returns the number written.
inline std::size_t compact_cut(const float* x, std::size_t n, magnitude_cut cut, std::byte* values,
                               std::byte* indices, std::uint8_t* bitmap) {
  if (cut.none) return 0;
  std::size_t j = 0, i = 0, ties = cut.ties;
  const std::uint32_t thr = cut.all ? 0u : cut.threshold;
#if defined(PACO_COMPRESS_HOST_AVX512)
  const __m512i abs_mask = _mm512_set1_epi32(0x7fffffff),
                vthr = _mm512_set1_epi32(static_cast<int>(thr));
  const __m512i lane = _mm512_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15);
  for (; i + 16 <= n; i += 16) {
    const __m512 v = _mm512_loadu_ps(x + i);
    const __m512i key = _mm512_and_si512(_mm512_castps_si512(v), abs_mask);
    __mmask16 keep = cut.all ? __mmask16(0xffff) : _mm512_cmpgt_epu32_mask(key, vthr);
    if (!cut.all) {
      __mmask16 eq = _mm512_cmpeq_epu32_mask(key, vthr);
      while (eq && ties) {  // rare: elements equal to the threshold, lowest index first
        const unsigned t = static_cast<unsigned>(std::countr_zero(static_cast<unsigned>(eq)));
        keep = static_cast<__mmask16>(keep | (1u << t));
        eq = static_cast<__mmask16>(eq & (eq - 1));
        --ties;
      }
    }
    const unsigned cnt = static_cast<unsigned>(std::popcount(static_cast<unsigned>(keep)));
    const __mmask16 first = static_cast<__mmask16>((1u << cnt) - 1u);
    _mm512_mask_storeu_ps(values + 4 * j, first, _mm512_maskz_compress_ps(keep, v));
    if (indices) {
      const __m512i idx = _mm512_add_epi32(_mm512_set1_epi32(static_cast<int>(i)), lane);
      _mm512_mask_storeu_epi32(indices + 4 * j, first, _mm512_maskz_compress_epi32(keep, idx));
    }
    if (bitmap) {
      const std::uint16_t m16 = static_cast<std::uint16_t>(keep);
      bitmap[i / 8] = static_cast<std::uint8_t>(bitmap[i / 8] | (m16 & 0xffu));
      bitmap[i / 8 + 1] = static_cast<std::uint8_t>(bitmap[i / 8 + 1] | (m16 >> 8));
    }
    j += cnt;
  }
#endif
  for (; i < n; ++i) {
    const float v = x[i];
    const std::uint32_t key = formula::magnitude_key(v);
    bool keep = cut.all || key > thr;
    if (!cut.all && key == thr && ties) {
      keep = true;
      --ties;
    }
    if (!keep) continue;
    std::memcpy(values + 4 * j, &v, 4);
    if (indices) {
      const std::uint32_t u = static_cast<std::uint32_t>(i);
      std::memcpy(indices + 4 * j, &u, 4);
    }
    if (bitmap) bitmap[i / 8] = static_cast<std::uint8_t>(bitmap[i / 8] | (1u << (i % 8)));
    ++j;
  }
  return j;
}

}  // namespace paco::compress::detail

#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic pop
#endif
