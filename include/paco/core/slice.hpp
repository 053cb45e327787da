#pragma once
// slice<T,B>: a non-owning view of n contiguous elements of T in backend B's memory.
// The unit of compression and transport (a module's parameters, gradients, pseudo-gradient).

#include <cstddef>
#include <span>
#include <type_traits>

#include "paco/core/backend.hpp"
#include "paco/core/error.hpp"

namespace paco {

template <class T, Backend B = host>
struct slice {
  using element_type = T;
  using backend = B;

  T* ptr = nullptr;
  std::size_t n = 0;

  constexpr slice() = default;
  constexpr slice(T* p, std::size_t count) : ptr(p), n(count) {}
  // A slice of const T from a slice of T.
  // clang-format off
  template <class U>
    requires(std::is_same_v<const U, T> && !std::is_same_v<U, T>)
  constexpr slice(slice<U, B> s) : ptr(s.ptr), n(s.n) {}
  // Host slices convert from and to std::span.
  template <class U, std::size_t E>
    requires(std::is_same_v<B, host> && std::is_convertible_v<U (*)[], T (*)[]>)
  constexpr slice(std::span<U, E> s) : ptr(s.data()), n(s.size()) {}
  // clang-format on

  constexpr T* data() const noexcept { return ptr; }
  constexpr std::size_t size() const noexcept { return n; }
  constexpr std::size_t size_bytes() const noexcept { return n * sizeof(T); }
  constexpr bool empty() const noexcept { return n == 0; }

  // Requires: B is host; i < size().
  // clang-format off
  constexpr T& operator[](std::size_t i) const noexcept
    requires std::is_same_v<B, host>
  {
    return ptr[i];
  }
  constexpr T* begin() const noexcept
    requires std::is_same_v<B, host>
  {
    return ptr;
  }
  constexpr T* end() const noexcept
    requires std::is_same_v<B, host>
  {
    return ptr + n;
  }
  // clang-format on

  // Requires: offset + count <= size().
  constexpr slice sub(std::size_t offset, std::size_t count) const {
    PACO_ASSERT(offset + count <= n, "slice::sub out of range");
    return {ptr + offset, count};
  }
  // clang-format off
  constexpr std::span<T> span() const noexcept
    requires std::is_same_v<B, host>
  {
    return {ptr, n};
  }
  // clang-format on
};

template <class T>
using host_slice = slice<T, host>;

}  // namespace paco
