#pragma once
// Payload functions shared by the codecs: size checks with messages naming the sizes, and
// unaligned little-endian loads/stores of the fixed-width fields of a payload.

#include <bit>
#include <cstdint>
#include <cstring>
#include <string>

#include "paco/core/error.hpp"
#include "paco/core/slice.hpp"

namespace paco::compress::detail {

static_assert(std::endian::native == std::endian::little, "paco payloads are little-endian");

// Ensures: ok iff out.size() == expected; otherwise invalid_argument naming both sizes.
inline status check_out(const char* codec, std::size_t have, std::size_t expected) {
  if (have == expected) return {};
  return {errc::invalid_argument, std::string(codec) + ": output span is " + std::to_string(have) +
                                      " bytes, wire_bytes() is " + std::to_string(expected)};
}
// Ensures: ok iff the payload is exactly `expected` bytes; otherwise corrupt (truncated/oversized).
inline status check_in(const char* codec, std::size_t have, std::size_t expected) {
  if (have == expected) return {};
  return {errc::corrupt, std::string(codec) + ": payload is " + std::to_string(have) +
                             " bytes, expected " + std::to_string(expected) +
                             (have < expected ? " (truncated)" : " (oversized)")};
}

template <class T>
inline T load(const std::byte* p) {
  T v;
  std::memcpy(&v, p, sizeof(T));
  return v;
}
template <class T>
inline void store(std::byte* p, T v) {
  std::memcpy(p, &v, sizeof(T));
}

}  // namespace paco::compress::detail
