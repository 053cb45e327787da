#pragma once
// crc32c: CRC-32C (Castagnoli, reflected polynomial 0x82F63B78), the checksum of every wire
// frame. Three implementations, chosen by what the CPU has; results are identical:
// - AVX-512 + VPCLMULQDQ: carry-less multiplication folds 256 bytes per step (16 lanes of 128
//   bits), then the crc32 instruction reduces the last 128 bits (Gopal et al., "Fast CRC
//   computation for generic polynomials using PCLMULQDQ", Intel 2009).
// - SSE4.2: the crc32 instruction on six interleaved streams (3-cycle latency, up to two a
//   cycle on recent cores), combined with precomputed shift tables.
// - otherwise a byte table.

#include <array>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <span>

#if defined(__x86_64__) || defined(__i386__)
#include <immintrin.h>
#define PACO_CRC32C_X86 1
#endif

namespace paco::net {

namespace detail {

inline constexpr std::uint32_t crc32c_poly = 0x82F63B78u;

inline constexpr int crc32c_ways = 6;                   // interleaved streams
inline constexpr std::size_t crc32c_block = 4096;       // bytes per stream, main loop
inline constexpr std::size_t crc32c_block_small = 256;  // bytes per stream, the tail

struct crc32c_tables {
  std::uint32_t byte[256];            // one byte at a time
  std::uint32_t shift[4][256];        // state after crc32c_block zero bytes, by byte of state
  std::uint32_t shift_small[4][256];  // same for crc32c_block_small zero bytes
};

// The raw (unconditioned) CRC state advanced over n bytes, bytewise. Cost: n table lookups.
inline std::uint32_t crc32c_raw_table(const std::uint32_t* t, std::uint32_t s,
                                      const unsigned char* p, std::size_t n) noexcept {
  for (std::size_t i = 0; i < n; ++i) s = t[(s ^ p[i]) & 0xffu] ^ (s >> 8);
  return s;
}

inline const crc32c_tables& crc32c_table() noexcept {
  static const crc32c_tables t = [] {
    crc32c_tables r{};
    for (std::uint32_t i = 0; i < 256; ++i) {
      std::uint32_t c = i;
      for (int k = 0; k < 8; ++k) c = (c & 1) ? (c >> 1) ^ crc32c_poly : c >> 1;
      r.byte[i] = c;
    }
    // The state map s -> raw(s, zeros(block)) is linear over GF(2): tabulate it from the 32
    // basis states, then by byte of the state.
    static const unsigned char zeros[crc32c_block] = {};
    auto tabulate = [&](std::uint32_t(&out)[4][256], std::size_t block) {
      std::uint32_t basis[32];
      for (int b = 0; b < 32; ++b) basis[b] = crc32c_raw_table(r.byte, 1u << b, zeros, block);
      for (int j = 0; j < 4; ++j)
        for (std::uint32_t v = 0; v < 256; ++v) {
          std::uint32_t acc = 0;
          for (int k = 0; k < 8; ++k)
            if (v & (1u << k)) acc ^= basis[8 * j + k];
          out[j][v] = acc;
        }
    };
    tabulate(r.shift, crc32c_block);
    tabulate(r.shift_small, crc32c_block_small);
    return r;
  }();
  return t;
}

// The raw state s advanced over the block of zero bytes that `shift` tabulates.
inline std::uint32_t crc32c_shift(const std::uint32_t (&shift)[4][256], std::uint32_t s) noexcept {
  return shift[0][s & 0xff] ^ shift[1][(s >> 8) & 0xff] ^ shift[2][(s >> 16) & 0xff] ^
         shift[3][s >> 24];
}

#ifdef PACO_CRC32C_X86
// Advances c over whole groups of crc32c_ways blocks of B bytes (the raw state of the stream
// that starts at p; streams 1.. start from 0 and are shifted in: raw(s, a ++ b) =
// shift_|b|(raw(s, a)) ^ raw(0, b)). Ensures: n < crc32c_ways * B afterwards.
template <std::size_t B>
__attribute__((target("sse4.2"))) inline std::uint64_t crc32c_raw_ways(
    std::uint64_t c, const unsigned char*& p, std::size_t& n,
    const std::uint32_t (&shift)[4][256]) noexcept {
  constexpr int K = crc32c_ways;
  while (n >= K * B) {
    std::uint64_t st[K] = {c};
    for (std::size_t i = 0; i < B; i += 8) {
#if !defined(__CUDACC__)  // nvcc warns on GCC pragmas; its translation units lose the hint only
#pragma GCC unroll 6
#endif
      for (int k = 0; k < K; ++k) {
        std::uint64_t v;
        std::memcpy(&v, p + static_cast<std::size_t>(k) * B + i, 8);
        st[k] = _mm_crc32_u64(st[k], v);
      }
    }
    std::uint32_t x = static_cast<std::uint32_t>(st[0]);
    for (int k = 1; k < K; ++k) x = crc32c_shift(shift, x) ^ static_cast<std::uint32_t>(st[k]);
    c = x;
    p += K * B;
    n -= K * B;
  }
  return c;
}

__attribute__((target("sse4.2"))) inline std::uint32_t crc32c_raw_hw(std::uint32_t s,
                                                                     const unsigned char* p,
                                                                     std::size_t n) noexcept {
  const auto& t = crc32c_table();
  std::uint64_t c0 = s;
  c0 = crc32c_raw_ways<crc32c_block>(c0, p, n, t.shift);
  c0 = crc32c_raw_ways<crc32c_block_small>(c0, p, n, t.shift_small);
  while (n >= 8) {
    std::uint64_t a;
    std::memcpy(&a, p, 8);
    c0 = _mm_crc32_u64(c0, a);
    p += 8;
    n -= 8;
  }
  std::uint32_t c = static_cast<std::uint32_t>(c0);
  while (n--) c = _mm_crc32_u8(c, *p++);
  return c;
}

// ---- folding with carry-less multiplication ----
// Bit j of a little-endian load is stream bit j, the coefficient of the highest power first.
// Folding a 128-bit block (halves lo, hi) forward by T bits multiplies lo by x^(64+T) and hi by
// x^T modulo P; with the constant reflect32(x^(e-1) mod P) << 32 the 128-bit product lands
// aligned with the destination block.

// x^n mod P, P = x^32 + 0x1EDC6F41 (CRC-32C unreflected).
constexpr std::uint32_t crc32c_xpow(unsigned n) noexcept {
  std::uint64_t r = 1;
  for (unsigned i = 0; i < n; ++i) {
    r <<= 1;
    if (r >> 32) r ^= 0x11EDC6F41ull;
  }
  return static_cast<std::uint32_t>(r);
}
constexpr std::uint32_t crc32c_reflect(std::uint32_t v) noexcept {
  std::uint32_t r = 0;
  for (int i = 0; i < 32; ++i)
    if ((v >> i) & 1u) r |= 1u << (31 - i);
  return r;
}
// The multiplier of a fold by T bits for the low (`lo` true) or high 64-bit half.
constexpr std::uint64_t crc32c_fold_k(unsigned t, bool lo) noexcept {
  return static_cast<std::uint64_t>(crc32c_reflect(crc32c_xpow((lo ? 64 : 0) + t - 1))) << 32;
}

inline constexpr std::size_t crc32c_fold_min = 256;  // bytes; shorter inputs use crc32

// The instruction sets of the fold (also used by code fusing it with other work).
#define PACO_CRC32C_FOLD_TARGET __attribute__((target("avx512f,avx512vl,vpclmulqdq,pclmul,sse4.2")))

// a folded forward (per 128-bit lane, by the distance of k), xor d.
PACO_CRC32C_FOLD_TARGET inline __m512i crc32c_fold512(__m512i a, __m512i k, __m512i d) noexcept {
  return _mm512_ternarylogic_epi64(_mm512_clmulepi64_epi128(a, k, 0x00),
                                   _mm512_clmulepi64_epi128(a, k, 0x11), d, 0x96);
}
// The multipliers of one fold distance in every 128-bit lane.
PACO_CRC32C_FOLD_TARGET inline __m512i crc32c_k512(std::uint64_t l, std::uint64_t h) noexcept {
  auto ll = static_cast<long long>(l), hh = static_cast<long long>(h);
  return _mm512_set_epi64(hh, ll, hh, ll, hh, ll, hh, ll);
}

// The fold's running state: four accumulators of 64 bytes over the last 256 bytes folded in
// (for code that checksums bytes it holds in registers anyway, e.g. a fused reduction).
struct crc32c_fold_state {
  __m512i a0, a1, a2, a3;
};

// Starts a fold from raw state s with the first 256 bytes, d0..d3 (64 bytes each, in order).
PACO_CRC32C_FOLD_TARGET inline crc32c_fold_state crc32c_fold_begin(std::uint32_t s, __m512i d0,
                                                                   __m512i d1, __m512i d2,
                                                                   __m512i d3) noexcept {
  d0 = _mm512_xor_si512(
      d0, _mm512_set_epi32(0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, static_cast<int>(s)));
  return {d0, d1, d2, d3};
}

// Folds the next 256 bytes, d0..d3, into f.
PACO_CRC32C_FOLD_TARGET inline void crc32c_fold_step(crc32c_fold_state& f, __m512i d0, __m512i d1,
                                                     __m512i d2, __m512i d3) noexcept {
  static constexpr std::uint64_t k2048l = crc32c_fold_k(2048, true),
                                 k2048h = crc32c_fold_k(2048, false);
  const __m512i k2048 = crc32c_k512(k2048l, k2048h);
  f.a0 = crc32c_fold512(f.a0, k2048, d0);
  f.a1 = crc32c_fold512(f.a1, k2048, d1);
  f.a2 = crc32c_fold512(f.a2, k2048, d2);
  f.a3 = crc32c_fold512(f.a3, k2048, d3);
}

// The raw state after f and then the n < 256 bytes at p.
PACO_CRC32C_FOLD_TARGET inline std::uint32_t crc32c_fold_end(const crc32c_fold_state& f,
                                                             const unsigned char* p,
                                                             std::size_t n) noexcept {
  using u64 = std::uint64_t;
  static constexpr u64 k512l = crc32c_fold_k(512, true), k512h = crc32c_fold_k(512, false);
  static constexpr u64 k384l = crc32c_fold_k(384, true), k384h = crc32c_fold_k(384, false);
  static constexpr u64 k256l = crc32c_fold_k(256, true), k256h = crc32c_fold_k(256, false);
  static constexpr u64 k128l = crc32c_fold_k(128, true), k128h = crc32c_fold_k(128, false);
  const __m512i k512 = crc32c_k512(k512l, k512h);
  __m512i a1 = crc32c_fold512(f.a0, k512, f.a1);
  __m512i a2 = crc32c_fold512(a1, k512, f.a2);
  __m512i a3 = crc32c_fold512(a2, k512, f.a3);
  // Lanes 0, 1, 2 of a3 folded by 384, 256, 128 bits onto lane 3.
  const __m512i kl =
      _mm512_set_epi64(0, 0, static_cast<long long>(k128h), static_cast<long long>(k128l),
                       static_cast<long long>(k256h), static_cast<long long>(k256l),
                       static_cast<long long>(k384h), static_cast<long long>(k384l));
  __m512i t = _mm512_xor_si512(_mm512_clmulepi64_epi128(a3, kl, 0x00),
                               _mm512_clmulepi64_epi128(a3, kl, 0x11));
  // (Through memory: g++ 12's lane extracts and casts warn of uninitialised values.)
  alignas(64) u64 la[8], lt[8];
  _mm512_store_si512(la, a3);
  _mm512_store_si512(lt, t);
  auto ld = [](const u64* q) { return _mm_load_si128(reinterpret_cast<const __m128i*>(q)); };
  __m128i x = _mm_ternarylogic_epi64(ld(la + 6), ld(lt), ld(lt + 2), 0x96);
  x = _mm_xor_si128(x, ld(lt + 4));
  const __m128i k128 = _mm_set_epi64x(static_cast<long long>(k128h), static_cast<long long>(k128l));
  while (n >= 16) {
    __m128i d = _mm_loadu_si128(reinterpret_cast<const __m128i*>(p));
    x = _mm_ternarylogic_epi64(_mm_clmulepi64_si128(x, k128, 0x00),
                               _mm_clmulepi64_si128(x, k128, 0x11), d, 0x96);
    p += 16;
    n -= 16;
  }
  // x has the remainder of everything so far: its CRC from state 0, then the last bytes.
  u64 c = _mm_crc32_u64(0, static_cast<u64>(_mm_cvtsi128_si64(x)));
  c = _mm_crc32_u64(c, static_cast<u64>(_mm_extract_epi64(x, 1)));
  std::uint32_t r = static_cast<std::uint32_t>(c);
  while (n--) r = _mm_crc32_u8(r, *p++);
  return r;
}

// The raw state s advanced over n >= crc32c_fold_min bytes.
// Requires: AVX-512F/VL, VPCLMULQDQ, SSE4.2 (crc32c_has_fold()).
PACO_CRC32C_FOLD_TARGET inline std::uint32_t crc32c_raw_fold(std::uint32_t s,
                                                             const unsigned char* p,
                                                             std::size_t n) noexcept {
  // (No lambdas here: they would not inherit the target.)
  auto f = crc32c_fold_begin(s, _mm512_loadu_si512(p), _mm512_loadu_si512(p + 64),
                             _mm512_loadu_si512(p + 128), _mm512_loadu_si512(p + 192));
  p += 256;
  n -= 256;
  for (; n >= 256; p += 256, n -= 256)
    crc32c_fold_step(f, _mm512_loadu_si512(p), _mm512_loadu_si512(p + 64),
                     _mm512_loadu_si512(p + 128), _mm512_loadu_si512(p + 192));
  return crc32c_fold_end(f, p, n);
}

inline bool crc32c_has_fold() noexcept {
  static const bool h = __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512vl") &&
                        __builtin_cpu_supports("vpclmulqdq") && __builtin_cpu_supports("sse4.2");
  return h;
}

inline bool crc32c_has_hw() noexcept {
  static const bool h = __builtin_cpu_supports("sse4.2");
  return h;
}
#endif

}  // namespace detail

// Continues a CRC-32C over `data`: crc32c(crc32c(0, a), b) == crc32c(0, a ++ b).
// Ensures: crc32c(0, "123456789") == 0xE3069283. Cost: one pass over data.
inline std::uint32_t crc32c(std::uint32_t crc, std::span<const std::byte> data) noexcept {
  auto p = reinterpret_cast<const unsigned char*>(data.data());
  std::uint32_t s = ~crc;
#ifdef PACO_CRC32C_X86
  if (data.size() >= detail::crc32c_fold_min && detail::crc32c_has_fold())
    return ~detail::crc32c_raw_fold(s, p, data.size());
  if (detail::crc32c_has_hw()) return ~detail::crc32c_raw_hw(s, p, data.size());
#endif
  return ~detail::crc32c_raw_table(detail::crc32c_table().byte, s, p, data.size());
}

// CRC-32C of `data` computed bytewise without the CPU instruction (the reference in tests).
inline std::uint32_t crc32c_reference(std::uint32_t crc, std::span<const std::byte> data) noexcept {
  auto p = reinterpret_cast<const unsigned char*>(data.data());
  return ~detail::crc32c_raw_table(detail::crc32c_table().byte, ~crc, p, data.size());
}

// The CRC-32C of a ++ b from crc_a = crc32c(0, a), crc_b = crc32c(0, b) and b's length, without
// the bytes (the CRC of a message striped over several streams, from its pieces').
// Ensures: crc32c_combine(crc32c(0, a), crc32c(0, b), b.size()) == crc32c(0, a ++ b).
// Cost: O(log len_b) products of 32x32 bit matrices (as zlib's crc32_combine).
inline std::uint32_t crc32c_combine(std::uint32_t crc_a, std::uint32_t crc_b,
                                    std::size_t len_b) noexcept {
  if (len_b == 0) return crc_a;
  using mat = std::array<std::uint32_t, 32>;  // column i: the image of bit i
  auto times = [](const mat& m, std::uint32_t v) {
    std::uint32_t r = 0;
    for (int i = 0; v; ++i, v >>= 1)
      if (v & 1) r ^= m[static_cast<std::size_t>(i)];
    return r;
  };
  auto square = [&](const mat& m) {
    mat r;
    for (std::size_t i = 0; i < 32; ++i) r[i] = times(m, m[i]);
    return r;
  };
  mat odd, even;  // odd: one zero bit fed through the register; even: two, then four, ...
  odd[0] = detail::crc32c_poly;
  for (std::size_t i = 1; i < 32; ++i) odd[i] = std::uint32_t(1) << (i - 1);
  even = square(odd);  // two zero bits
  odd = square(even);  // four
  // Feed len_b zero bytes through crc_a's register: crc(a ++ 0^n) ^ crc(0^n) ^ crc(b).
  std::uint32_t a = crc_a;
  std::size_t n = len_b;
  do {
    even = square(odd);  // first pass: one zero byte
    if (n & 1) a = times(even, a);
    n >>= 1;
    if (!n) break;
    odd = square(even);
    if (n & 1) a = times(odd, a);
    n >>= 1;
  } while (n);
  return a ^ crc_b;
}

}  // namespace paco::net
