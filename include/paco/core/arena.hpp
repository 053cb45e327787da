#pragma once
// arena: the flat memory of one model replica. A set of planes (parameters, gradients, AdamW
// moments, outer anchor and momentum, error-feedback residuals), each total() floats laid out
// by the same param_layout. Planes are allocated on first use and zero-initialised.

#include <array>
#include <cstddef>
#include <string_view>

#include "paco/core/buffer.hpp"
#include "paco/core/param_layout.hpp"

namespace paco {

enum class plane : int {
  param = 0,    // θ
  grad = 1,     // ∇θ (backward accumulates here)
  moment1 = 2,  // AdamW m / SGD momentum
  moment2 = 3,  // AdamW v
  anchor = 4,   // θ_start of the current outer round
  outer_momentum = 5,
  residual = 6,  // error-feedback residual of compression
};
inline constexpr int plane_count = 7;

inline constexpr std::string_view plane_name(plane p) {
  constexpr std::string_view names[plane_count] = {"param",  "grad",           "moment1", "moment2",
                                                   "anchor", "outer_momentum", "residual"};
  return names[static_cast<int>(p)];
}

template <Backend B = host>
class arena;

template <>
class arena<host> {
 public:
  arena() = default;
  explicit arena(param_layout layout) : layout_(std::move(layout)) {}

  const param_layout& layout() const noexcept { return layout_; }

  // The whole plane. Ensures: size() == layout().total(); allocated (zeros) on first use.
  slice<float> get(plane p) {
    auto& b = planes_[static_cast<int>(p)];
    if (b.size() != layout_.total()) b.resize(layout_.total());
    return b.view();
  }
  slice<const float> get(plane p) const {
    auto& b = planes_[static_cast<int>(p)];
    PACO_ASSERT(b.size() == layout_.total(), "arena plane read before it was allocated");
    return b.view();
  }
  // Module `id`'s span of a plane. Requires: id < layout().count().
  slice<float> get(plane p, std::size_t id) {
    auto& e = layout_.entry(id);
    return get(p).sub(e.offset, e.size);
  }
  slice<const float> get(plane p, std::size_t id) const {
    auto& e = layout_.entry(id);
    return get(p).sub(e.offset, e.size);
  }
  bool has(plane p) const noexcept {
    return planes_[static_cast<int>(p)].size() == layout_.total() && layout_.total() > 0;
  }
  // Ensures: every element of plane p is zero.
  void zero(plane p) {
    auto s = get(p);
    std::memset(s.data(), 0, s.size_bytes());
  }

 private:
  param_layout layout_;
  mutable std::array<buffer<float>, plane_count> planes_;
};

}  // namespace paco
