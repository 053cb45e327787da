#pragma once
// identity: sends the fp32 values as they are. The reference every other codec is compared to.

#include <cstring>

#include "paco/compress/concepts.hpp"
#include "paco/compress/detail/wire.hpp"

namespace paco::compress {

// identity: payload = the n floats, little-endian. Summable on the wire.
// Cost: one copy of 4n bytes each way.
struct identity {
  using compressor_concept = compressor_tag;
  using level_type = int;  // bits per element; always 32
  static constexpr wire_reduction reduction = wire_reduction::sum;

  int default_level() const { return 32; }
  // Ensures: 4n.
  std::size_t wire_bytes(std::size_t n, const int& = 32) const { return 4 * n; }
  // Requires: out.size() == wire_bytes(x.size()). Ensures: out holds x bit for bit.
  status encode(slice<const float> x, const int& l, slice<std::byte> out) {
    if (auto s = detail::check_out("identity", out.size(), wire_bytes(x.size(), l)); !s) return s;
    if (x.size()) std::memcpy(out.data(), x.data(), x.size_bytes());
    return {};
  }
  // Ensures: y holds the payload's floats; corrupt if in.size() != 4·y.size().
  status decode(slice<const std::byte> in, const int& l, slice<float> y) const {
    if (auto s = detail::check_in("identity", in.size(), wire_bytes(y.size(), l)); !s) return s;
    if (y.size()) std::memcpy(y.data(), in.data(), y.size_bytes());
    return {};
  }
  // Ensures: 0 (lossless).
  double error(const int&, slice<const float>) { return 0.0; }
};
static_assert(Compressor<identity>);

}  // namespace paco::compress
