#pragma once
// tensor_view<T,R>: a row-major view of rank R over contiguous memory, with its shape.

#include <array>
#include <cstddef>

#include "paco/core/slice.hpp"

namespace paco {

template <class T, std::size_t R, Backend B = host>
struct tensor_view {
  T* ptr = nullptr;
  std::array<std::size_t, R> shape{};

  constexpr std::size_t size() const noexcept {
    std::size_t n = 1;
    for (auto d : shape) n *= d;
    return n;
  }
  constexpr slice<T, B> flat() const noexcept { return {ptr, size()}; }

  // Requires: each index < its extent.
  // clang-format off
  template <class... I>
    requires(sizeof...(I) == R)
  constexpr T& operator()(I... idx) const noexcept {
    // clang-format on
    std::size_t ix[R] = {static_cast<std::size_t>(idx)...};
    std::size_t off = 0;
    for (std::size_t d = 0; d < R; ++d) {
      PACO_ASSERT(ix[d] < shape[d], "tensor_view index out of range");
      off = off * shape[d] + ix[d];
    }
    return ptr[off];
  }
};

}  // namespace paco
