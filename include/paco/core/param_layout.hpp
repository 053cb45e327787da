#pragma once
// param_layout: the offset table of one flat arena. Each entry is a module (a name, an offset
// and a size, in elements); offsets are aligned to 16 floats (64 bytes) so every module's span
// starts on a cache line. Parameters, gradients, optimizer moments, outer momentum and
// error-feedback residuals all use the same table, so module m's pseudo-gradient is one
// contiguous span: the unit of compression and transport.

#include <cstddef>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "paco/core/error.hpp"

namespace paco {

struct layout_entry {
  std::string name;
  std::size_t offset = 0;  // elements from the start of the arena
  std::size_t size = 0;    // elements
};

// A named tensor inside an arena plane: a (PyTorch-style) name, its offset and shape.
struct named_tensor {
  std::string name;
  std::size_t offset = 0;  // elements from the start of the plane
  std::vector<std::size_t> shape;
  std::size_t size() const {
    std::size_t n = 1;
    for (auto s : shape) n *= s;
    return n;
  }
};

class param_layout {
 public:
  static constexpr std::size_t alignment = 16;  // elements (floats): 64 bytes

  // Appends a module of `size` elements. Requires: name not already present.
  // Ensures: returns its id (0, 1, ...); entry(id).offset % alignment == 0.
  std::size_t add(std::string name, std::size_t size) {
    PACO_ASSERT(!find(name), "duplicate module name in param_layout: " + name);
    std::size_t off = total_;
    entries_.push_back({std::move(name), off, size});
    total_ = round_up(off + size);
    return entries_.size() - 1;
  }

  std::size_t count() const noexcept { return entries_.size(); }
  // Elements an arena plane needs (with alignment padding).
  std::size_t total() const noexcept { return total_; }
  // Elements in use (without padding).
  std::size_t used() const noexcept {
    std::size_t n = 0;
    for (auto& e : entries_) n += e.size;
    return n;
  }
  const layout_entry& entry(std::size_t id) const { return entries_.at(id); }
  const std::vector<layout_entry>& entries() const noexcept { return entries_; }
  std::optional<std::size_t> find(std::string_view name) const {
    for (std::size_t i = 0; i < entries_.size(); ++i)
      if (entries_[i].name == name) return i;
    return std::nullopt;
  }

  friend bool operator==(const param_layout& a, const param_layout& b) {
    if (a.total_ != b.total_ || a.entries_.size() != b.entries_.size()) return false;
    for (std::size_t i = 0; i < a.entries_.size(); ++i) {
      const auto &x = a.entries_[i], &y = b.entries_[i];
      if (x.name != y.name || x.offset != y.offset || x.size != y.size) return false;
    }
    return true;
  }

 private:
  static std::size_t round_up(std::size_t n) { return (n + alignment - 1) / alignment * alignment; }
  std::vector<layout_entry> entries_;
  std::size_t total_ = 0;
};

}  // namespace paco
