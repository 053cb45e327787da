#pragma once
// Test vectors and slice views shared by the tests of paco/compress.

#include <cstddef>
#include <cstdint>
#include <vector>

#include "paco/core/rng.hpp"
#include "paco/core/slice.hpp"

namespace compress_test {

// n normal samples times scale, deterministic in seed.
inline std::vector<float> gaussian(std::size_t n, std::uint64_t seed, float scale = 1.0f) {
  paco::rng g(seed);
  std::vector<float> v(n);
  for (auto& x : v) x = static_cast<float>(g.normal()) * scale;
  return v;
}
inline paco::slice<const float> cv(const std::vector<float>& v) {
  return {v.data(), v.size()};
}
inline paco::slice<float> mv(std::vector<float>& v) {
  return {v.data(), v.size()};
}
inline paco::slice<std::byte> mb(std::vector<std::byte>& v) {
  return {v.data(), v.size()};
}
inline paco::slice<const std::byte> cb(const std::vector<std::byte>& v) {
  return {v.data(), v.size()};
}

}  // namespace compress_test
