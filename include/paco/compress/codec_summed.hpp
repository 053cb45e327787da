#pragma once
// The summed protocol of module_codec (fp32, bf16, fp16 on an all-reduce): no header, only the
// element array of Δ (+ e) in the codec's element format, added element-wise on the wire; the
// receiver decodes the sum and divides it by the number of workers.

#include <cstddef>
#include <span>

#include "paco/compress/detail/codec_model.hpp"

namespace paco::compress::detail {

// Bytes of a summed payload of n elements (4n for fp32, 2n for bf16/fp16).
inline std::size_t summed_bytes(const message_model& m, std::size_t n) {
  return m.body_bytes(n, m.level(0));
}

// out = the element array of Δ + e; with a residual (error feedback; empty: none)
// e ← Δ + e − decode(out). Requires: out.size() == summed_bytes(m, delta.size()).
inline status encode_summed(message_model& m, slice<const float> delta, slice<float> residual,
                            std::span<std::byte> out) {
  return m.encode(delta, residual, m.level(0), out);
}

// y = decode(sum) / world. Requires: sum is the element-wise sum of `world` summed payloads of n
// elements. Errors: invalid_argument for world = 0 or y not of size n, the codec's own.
inline status decode_summed(const message_model& m, std::span<const std::byte> sum,
                            std::size_t world, std::size_t n, slice<float> y) {
  if (world < 1) return {errc::invalid_argument, "module_codec: world = 0, accepted >= 1"};
  if (y.size() != n) return {errc::invalid_argument, "module_codec: output size differs"};
  if (auto s = m.decode(sum, m.level(0), y); !s) return s;
  const float inv = 1.0f / static_cast<float>(world);
  for (auto& v : y.span()) v *= inv;
  return {};
}

}  // namespace paco::compress::detail
