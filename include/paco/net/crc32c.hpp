#pragma once
// crc32c: CRC-32C (Castagnoli, reflected polynomial 0x82F63B78), the checksum of every wire
// frame. Uses the SSE4.2 crc32 instruction on three interleaved streams when the CPU has it
// (combined with a precomputed shift table), a byte table otherwise. Results are identical.

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

struct crc32c_tables {
  std::uint32_t byte[256];      // one byte at a time
  std::uint32_t shift[4][256];  // state after crc32c_block zero bytes, by byte of state
};

// The raw (unconditioned) CRC state advanced over n bytes, bytewise. Cost: n table lookups.
inline std::uint32_t crc32c_raw_table(const std::uint32_t* t, std::uint32_t s,
                                      const unsigned char* p, std::size_t n) noexcept {
  for (std::size_t i = 0; i < n; ++i) s = t[(s ^ p[i]) & 0xffu] ^ (s >> 8);
  return s;
}

inline constexpr std::size_t crc32c_block = 4096;  // bytes per stream in the 3-way loop

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
    std::uint32_t basis[32];
    for (int b = 0; b < 32; ++b) basis[b] = crc32c_raw_table(r.byte, 1u << b, zeros, crc32c_block);
    for (int j = 0; j < 4; ++j)
      for (std::uint32_t v = 0; v < 256; ++v) {
        std::uint32_t acc = 0;
        for (int k = 0; k < 8; ++k)
          if (v & (1u << k)) acc ^= basis[8 * j + k];
        r.shift[j][v] = acc;
      }
    return r;
  }();
  return t;
}

inline std::uint32_t crc32c_shift(const crc32c_tables& t, std::uint32_t s) noexcept {
  return t.shift[0][s & 0xff] ^ t.shift[1][(s >> 8) & 0xff] ^ t.shift[2][(s >> 16) & 0xff] ^
         t.shift[3][s >> 24];
}

#ifdef PACO_CRC32C_X86
__attribute__((target("sse4.2"))) inline std::uint32_t crc32c_raw_hw(std::uint32_t s,
                                                                     const unsigned char* p,
                                                                     std::size_t n) noexcept {
  const auto& t = crc32c_table();
  std::uint64_t c0 = s;
  while (n >= 3 * crc32c_block) {
    std::uint64_t c1 = 0, c2 = 0;
    const unsigned char* p1 = p + crc32c_block;
    const unsigned char* p2 = p + 2 * crc32c_block;
    for (std::size_t i = 0; i < crc32c_block; i += 8) {
      std::uint64_t a, b, c;
      std::memcpy(&a, p + i, 8);
      std::memcpy(&b, p1 + i, 8);
      std::memcpy(&c, p2 + i, 8);
      c0 = _mm_crc32_u64(c0, a);
      c1 = _mm_crc32_u64(c1, b);
      c2 = _mm_crc32_u64(c2, c);
    }
    std::uint32_t x =
        crc32c_shift(t, static_cast<std::uint32_t>(c0)) ^ static_cast<std::uint32_t>(c1);
    c0 = crc32c_shift(t, x) ^ static_cast<std::uint32_t>(c2);
    p += 3 * crc32c_block;
    n -= 3 * crc32c_block;
  }
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
  if (detail::crc32c_has_hw()) return ~detail::crc32c_raw_hw(s, p, data.size());
#endif
  return ~detail::crc32c_raw_table(detail::crc32c_table().byte, s, p, data.size());
}

// CRC-32C of `data` computed bytewise without the CPU instruction (the reference in tests).
inline std::uint32_t crc32c_reference(std::uint32_t crc, std::span<const std::byte> data) noexcept {
  auto p = reinterpret_cast<const unsigned char*>(data.data());
  return ~detail::crc32c_raw_table(detail::crc32c_table().byte, ~crc, p, data.size());
}

}  // namespace paco::net
