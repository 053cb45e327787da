#pragma once
// buffer<T,B>: owning, 64-byte aligned storage of n elements in backend B's memory.
// The host model lives here; the cuda model is in kernels/paco/cuda_buffer.cuh.

#include <cstddef>
#include <cstdlib>
#include <cstring>
#include <new>
#include <utility>

#include "paco/core/slice.hpp"

namespace paco {

template <class T, Backend B = host>
class buffer;

template <class T>
class buffer<T, host> {
  static_assert(std::is_trivially_copyable_v<T>, "buffer holds trivially copyable elements");

 public:
  static constexpr std::size_t alignment = 64;

  buffer() = default;
  // Ensures: size() == n; elements zero-initialised.
  explicit buffer(std::size_t n) { resize(n); }
  buffer(const buffer& o) : buffer(o.n_) {
    if (n_) std::memcpy(p_, o.p_, n_ * sizeof(T));
  }
  buffer(buffer&& o) noexcept : p_(std::exchange(o.p_, nullptr)), n_(std::exchange(o.n_, 0)) {}
  buffer& operator=(buffer o) noexcept {
    std::swap(p_, o.p_);
    std::swap(n_, o.n_);
    return *this;
  }
  ~buffer() { std::free(p_); }

  // Ensures: size() == n; all elements zero (previous contents are discarded).
  void resize(std::size_t n) {
    std::free(p_);
    p_ = nullptr;
    n_ = n;
    if (n == 0) return;
    std::size_t bytes = (n * sizeof(T) + alignment - 1) / alignment * alignment;
    p_ = static_cast<T*>(std::aligned_alloc(alignment, bytes));
    if (!p_) throw std::bad_alloc();
    std::memset(static_cast<void*>(p_), 0, bytes);
  }

  T* data() noexcept { return p_; }
  const T* data() const noexcept { return p_; }
  std::size_t size() const noexcept { return n_; }
  T& operator[](std::size_t i) noexcept { return p_[i]; }
  const T& operator[](std::size_t i) const noexcept { return p_[i]; }
  T* begin() noexcept { return p_; }
  T* end() noexcept { return p_ + n_; }
  const T* begin() const noexcept { return p_; }
  const T* end() const noexcept { return p_ + n_; }

  slice<T, host> view() noexcept { return {p_, n_}; }
  slice<const T, host> view() const noexcept { return {p_, n_}; }
  operator slice<T, host>() noexcept { return view(); }
  operator slice<const T, host>() const noexcept { return view(); }

 private:
  T* p_ = nullptr;
  std::size_t n_ = 0;
};

template <class T>
using host_buffer = buffer<T, host>;

}  // namespace paco
