#pragma once
// activation_codec: how activations (and, in global backprop, their gradients) cross a link
// between stages, through compress/'s codecs:
//   fp32  4 bytes a value, exact
//   bf16  2 bytes a value (compress::cast: round to nearest even)
//   int8  1 byte a value plus one fp32 scale per 256 (compress::quantize, absmax, deterministic
//         rounding), without error feedback: a residual carried from one batch's activations
//         into the next batch's would add one batch's rounding to another's inputs
// The receiving stage computes on decode(encode(x)); the one-process reference does the same
// (round_trip), so local losses stay bit-identical to it with any format.

#include <cstddef>
#include <cstring>
#include <string>
#include <vector>

#include "paco/compress/cast.hpp"
#include "paco/compress/quantize.hpp"
#include "paco/core/error.hpp"

namespace paco::pipeline {

enum class wire_format { fp32, bf16, int8 };

inline const char* name(wire_format f) {
  return f == wire_format::fp32 ? "fp32" : f == wire_format::bf16 ? "bf16" : "int8";
}
// Ensures: the format named s, or invalid_argument naming `field` and the accepted names.
inline result<wire_format> parse_wire_format(const std::string& s,
                                             const std::string& field = "pipeline.activations") {
  if (s == "fp32") return wire_format::fp32;
  if (s == "bf16") return wire_format::bf16;
  if (s == "int8") return wire_format::int8;
  return paco::error(errc::invalid_argument,
                     field + ": '" + s + "' is not an activation format (fp32, bf16 or int8)");
}

class activation_codec {
 public:
  // A codec for messages of n floats.
  activation_codec(wire_format f, std::size_t n) : f_(f), n_(n), q_({.bits = 8, .block = 256}) {}

  wire_format format() const noexcept { return f_; }
  std::size_t size() const noexcept { return n_; }
  // Bytes of one message on the wire.
  std::size_t wire_bytes() const {
    switch (f_) {
      case wire_format::fp32: return n_ * sizeof(float);
      case wire_format::bf16: return cast_.wire_bytes(n_);
      case wire_format::int8: return q_.wire_bytes(n_, 8);
    }
    return 0;
  }
  // Ensures: out (wire_bytes() bytes) holds x (n floats). Requires: x finite (int8).
  status encode(const float* x, std::byte* out) {
    switch (f_) {
      case wire_format::fp32: std::memcpy(out, x, n_ * sizeof(float)); return {};
      case wire_format::bf16: return cast_.encode({x, n_}, 16, {out, wire_bytes()});
      case wire_format::int8: return q_.encode({x, n_}, 8, {out, wire_bytes()});
    }
    return {};
  }
  // Ensures: y (n floats) holds the message; corrupt on a malformed payload.
  status decode(const std::byte* in, float* y) const {
    switch (f_) {
      case wire_format::fp32: std::memcpy(y, in, n_ * sizeof(float)); return {};
      case wire_format::bf16: return cast_.decode({in, wire_bytes()}, 16, {y, n_});
      case wire_format::int8: return q_.decode({in, wire_bytes()}, 8, {y, n_});
    }
    return {};
  }
  // y ← decode(encode(x)): what a receiving stage computes on. y may alias x.
  status round_trip(const float* x, float* y) {
    if (f_ == wire_format::fp32) {
      if (x != y) std::memcpy(y, x, n_ * sizeof(float));
      return {};
    }
    scratch_.resize(wire_bytes());
    if (auto s = encode(x, scratch_.data()); !s) return s;
    return decode(scratch_.data(), y);
  }

 private:
  wire_format f_;
  std::size_t n_;
  compress::cast cast_;
  compress::quantize q_;
  std::vector<std::byte> scratch_;
};

}  // namespace paco::pipeline
