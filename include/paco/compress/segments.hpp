#pragma once
// segments: how a module's span (one contiguous run of the arena) splits into the tensors a
// codec treats one at a time: L-GreCo's layers (one level each) and PowerSGD's matrices. Each
// tensor of the span is a segment with its shape seen as (shape[0], rest), as the PyTorch hook
// views it; alignment padding between tensors becomes a vector segment, so the segments tile the
// span in order and decode writes every element.

#include <algorithm>
#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include "paco/compress/concepts.hpp"
#include "paco/core/hash.hpp"
#include "paco/core/param_layout.hpp"

namespace paco::compress {

// One segment of a module span. A vector is (1, n).
struct segment {
  std::size_t offset = 0;  // elements from the start of the module span
  matrix_shape shape{};
  std::size_t size() const noexcept { return shape.size(); }
  bool is_matrix() const noexcept { return shape.rows > 1 && shape.cols > 1; }
  friend bool operator==(const segment&, const segment&) = default;
};

// Requires: nothing. Ensures: one vector segment covering n elements (none for n = 0).
inline std::vector<segment> whole_span(std::size_t n) {
  if (n == 0) return {};
  return {segment{0, {1, n}}};
}

// The segments of the span [offset, offset + size) of an arena plane: every tensor inside it
// with its shape, gaps as vector segments. Ensures: segments are ordered, disjoint and tile the
// span exactly. Errors: invalid_argument naming a tensor that straddles the span's boundary or
// overlaps another.
inline result<std::vector<segment>> segments_of(std::span<const named_tensor> tensors,
                                                std::size_t offset, std::size_t size) {
  std::vector<const named_tensor*> in;
  for (auto& t : tensors) {
    const std::size_t b = t.offset, e = t.offset + t.size();
    if (e <= offset || b >= offset + size || t.size() == 0) continue;
    if (b < offset || e > offset + size)
      return error(errc::invalid_argument,
                   "segments_of: tensor '" + t.name + "' straddles the boundary of the span [" +
                       std::to_string(offset) + ", " + std::to_string(offset + size) + ")");
    in.push_back(&t);
  }
  std::sort(in.begin(), in.end(), [](auto* a, auto* b) { return a->offset < b->offset; });
  std::vector<segment> out;
  std::size_t at = 0;  // relative to offset
  for (auto* t : in) {
    const std::size_t b = t->offset - offset;
    if (b < at)
      return error(errc::invalid_argument,
                   "segments_of: tensor '" + t->name + "' overlaps another");
    if (b > at) out.push_back({at, {1, b - at}});
    const std::size_t rows = t->shape.empty() ? 1 : t->shape[0];
    out.push_back({b, {rows, t->size() / std::max<std::size_t>(rows, 1)}});
    if (t->shape.size() == 1) out.back().shape = {1, t->size()};
    at = b + t->size();
  }
  if (at < size) out.push_back({at, {1, size - at}});
  return out;
}

// A 64-bit fingerprint of a segment table (offsets and shapes): sender and receiver must agree.
inline std::uint64_t layout_hash(std::span<const segment> s) {
  std::vector<std::uint64_t> w;
  w.reserve(3 * s.size());
  for (auto& x : s) {
    w.push_back(x.offset);
    w.push_back(x.shape.rows);
    w.push_back(x.shape.cols);
  }
  return hash64(w.data(), w.size() * sizeof(std::uint64_t), 0x5e6);
}

}  // namespace paco::compress
