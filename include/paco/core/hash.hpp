#pragma once
// hash64: a fast 64-bit content hash (four independent multiply-rotate lanes over 8-byte words,
// then an avalanche). Used to check that replicas and module copies are bit-identical; not
// cryptographic. The same bytes give the same hash on every little-endian machine.

#include <cstddef>
#include <cstdint>
#include <cstring>

namespace paco {

inline std::uint64_t hash64(const void* data, std::size_t n, std::uint64_t seed = 0) {
  constexpr std::uint64_t p1 = 0x9E3779B185EBCA87ULL, p2 = 0xC2B2AE3D27D4EB4FULL;
  auto rotl = [](std::uint64_t x, int r) { return (x << r) | (x >> (64 - r)); };
  const unsigned char* p = static_cast<const unsigned char*>(data);
  std::uint64_t v[4] = {seed + p1 + p2, seed + p2, seed, seed - p1};
  std::size_t i = 0;
  for (; i + 32 <= n; i += 32)
    for (int k = 0; k < 4; ++k) {
      std::uint64_t w;
      std::memcpy(&w, p + i + 8 * k, 8);
      v[k] = rotl(v[k] + w * p2, 31) * p1;
    }
  std::uint64_t h = rotl(v[0], 1) + rotl(v[1], 7) + rotl(v[2], 12) + rotl(v[3], 18) + n;
  for (; i + 8 <= n; i += 8) {
    std::uint64_t w;
    std::memcpy(&w, p + i, 8);
    h = rotl(h ^ (rotl(w * p2, 31) * p1), 27) * p1 + 0x85EBCA77C2B2AE63ULL;
  }
  for (; i < n; ++i) h = rotl(h ^ (p[i] * 0x27D4EB2F165667C5ULL), 11) * p1;
  h ^= h >> 33;
  h *= p2;
  h ^= h >> 29;
  h *= 0x165667B19E3779F9ULL;
  h ^= h >> 32;
  return h;
}

}  // namespace paco
