#pragma once
// The reduction step of the ring collectives: dst = op(dst, src), optionally checksumming src's
// bytes (to verify a received chunk) and the reduced dst's (to send it on) in the same pass.
// A float sum on a CPU with AVX-512 and VPCLMULQDQ runs as one fused loop: each 256-byte block
// is loaded once, added, stored and folded into both CRC-32Cs from registers, so the
// carry-less multiplications overlap the memory traffic the reduction waits on anyway. Other
// types, operators and CPUs reduce in L1-sized blocks and checksum each block while it is in L1.

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <type_traits>

#include "paco/collectives/options.hpp"
#include "paco/net/crc32c.hpp"

namespace paco::collectives::detail {

// dst[i] = op(dst[i], src[i]). Cost: one vectorisable pass.
template <class V, class Op>
inline void reduce_into(V* __restrict dst, const V* __restrict src, std::size_t n, Op op) noexcept {
  for (std::size_t i = 0; i < n; ++i) dst[i] = op(dst[i], src[i]);
}

#ifdef PACO_CRC32C_X86
// dst[i..i+64) += src[i..i+64); the 256 bytes of src in s, of the sums in r.
PACO_CRC32C_FOLD_TARGET inline void add_block_f32(float* __restrict dst,
                                                  const float* __restrict src, __m512i (&s)[4],
                                                  __m512i (&r)[4]) noexcept {
  for (int k = 0; k < 4; ++k) {
    __m512 a = _mm512_loadu_ps(src + 16 * k);
    __m512 b = _mm512_add_ps(_mm512_loadu_ps(dst + 16 * k), a);
    _mm512_storeu_ps(dst + 16 * k, b);
    s[k] = _mm512_castps_si512(a);
    r[k] = _mm512_castps_si512(b);
  }
}

// The fused float sum. Requires: n >= 64 (one 256-byte block); crc32c_has_fold().
// Ensures: as reduce_into_crc (the sums are the scalar loop's: one IEEE addition each).
template <bool WithDst>
PACO_CRC32C_FOLD_TARGET inline void reduce_sum_f32_crc(float* __restrict dst,
                                                       const float* __restrict src, std::size_t n,
                                                       std::uint32_t* crc_src,
                                                       std::uint32_t* crc_dst) noexcept {
  namespace nd = net::detail;
  __m512i s[4], r[4];
  add_block_f32(dst, src, s, r);
  auto fs = nd::crc32c_fold_begin(~*crc_src, s[0], s[1], s[2], s[3]);
  nd::crc32c_fold_state fd{};
  if constexpr (WithDst) fd = nd::crc32c_fold_begin(~*crc_dst, r[0], r[1], r[2], r[3]);
  std::size_t i = 64;
  for (; i + 64 <= n; i += 64) {
    add_block_f32(dst + i, src + i, s, r);
    nd::crc32c_fold_step(fs, s[0], s[1], s[2], s[3]);
    if constexpr (WithDst) nd::crc32c_fold_step(fd, r[0], r[1], r[2], r[3]);
  }
  reduce_into(dst + i, src + i, n - i, sum{});
  const std::size_t tail = (n - i) * sizeof(float);
  *crc_src = ~nd::crc32c_fold_end(fs, reinterpret_cast<const unsigned char*>(src + i), tail);
  if constexpr (WithDst)
    *crc_dst = ~nd::crc32c_fold_end(fd, reinterpret_cast<const unsigned char*>(dst + i), tail);
}
#endif

// reduce_into that also checksums: *crc_src continues the CRC-32C over src's bytes and, when
// crc_dst is given, *crc_dst over the reduced dst's.
// Ensures: dst as reduce_into; the CRCs equal net::crc32c over the same bytes.
// Cost: one pass over memory, as reduce_into.
template <class V, class Op>
inline void reduce_into_crc(V* __restrict dst, const V* __restrict src, std::size_t n, Op op,
                            std::uint32_t* crc_src, std::uint32_t* crc_dst) noexcept {
#ifdef PACO_CRC32C_X86
  if constexpr (std::is_same_v<V, float> && std::is_same_v<Op, sum>)
    if (n >= 64 && net::detail::crc32c_has_fold()) {
      if (crc_dst)
        reduce_sum_f32_crc<true>(dst, src, n, crc_src, crc_dst);
      else
        reduce_sum_f32_crc<false>(dst, src, n, crc_src, nullptr);
      return;
    }
#endif
  constexpr std::size_t block = std::max<std::size_t>(1, (std::size_t(16) << 10) / sizeof(V));
  for (std::size_t i = 0; i < n; i += block) {
    const std::size_t m = std::min(block, n - i);
    reduce_into(dst + i, src + i, m, op);
    const auto* s = reinterpret_cast<const std::byte*>(src + i);
    const auto* d = reinterpret_cast<const std::byte*>(dst + i);
    *crc_src = net::crc32c(*crc_src, {s, m * sizeof(V)});
    if (crc_dst) *crc_dst = net::crc32c(*crc_dst, {d, m * sizeof(V)});
  }
}

}  // namespace paco::collectives::detail
