#pragma once
// Minimal compiled archetypes of Compressor and MultiRoundCompressor: the least a model must
// provide. Generic code in compress/ is instantiated with them in tests to prove it asks for
// nothing more than the concepts promise.

#include <cstring>

#include "paco/compress/concepts.hpp"

namespace paco::compress {

// A Compressor that sends nothing and decodes zeros. Ensures: wire_bytes == 0.
struct compressor_archetype {
  using compressor_concept = compressor_tag;
  using level_type = int;
  static constexpr wire_reduction reduction = wire_reduction::gather;

  int default_level() const { return 0; }
  std::size_t wire_bytes(std::size_t, const int&) const { return 0; }
  status encode(slice<const float>, const int&, slice<std::byte> out) {
    if (!out.empty()) return {errc::invalid_argument, "archetype: out must be empty"};
    return {};
  }
  status decode(slice<const std::byte> in, const int&, slice<float> y) const {
    if (!in.empty()) return {errc::corrupt, "archetype: payload must be empty"};
    if (y.size()) std::memset(y.data(), 0, y.size_bytes());
    return {};
  }
  double error(const int&, slice<const float>) { return 0.0; }
};
static_assert(Compressor<compressor_archetype>);

// A MultiRoundCompressor of one round that sends nothing and decodes zeros.
struct multi_round_archetype {
  using compressor_concept = multi_round_tag;
  using level_type = int;
  struct state_type {};
  static constexpr int rounds = 1;
  static constexpr wire_reduction reduction = wire_reduction::sum;

  int default_level() const { return 0; }
  status init(state_type&, matrix_shape, const int&) { return {}; }
  std::size_t round_bytes(matrix_shape, const int&, int) const { return 0; }
  std::size_t wire_bytes(matrix_shape, const int&) const { return 0; }
  status encode_round(state_type&, int, slice<const float>, slice<const std::byte>,
                      slice<std::byte>) {
    return {};
  }
  status decode(state_type&, slice<const std::byte>, std::size_t, slice<float> y) {
    if (y.size()) std::memset(y.data(), 0, y.size_bytes());
    return {};
  }
  double error(matrix_shape, const int&, slice<const float>) { return 0.0; }
};
static_assert(MultiRoundCompressor<multi_round_archetype>);

}  // namespace paco::compress
