#pragma once
// buffer<T, cuda>: owning device storage of n elements (cudaMalloc), the cuda model of
// paco::buffer. Allocation happens at construction/resize only: never inside a launcher.
#include <cuda_runtime.h>

#include <cstddef>
#include <new>
#include <utility>

#include "paco/core/buffer.hpp"

namespace paco {

template <class T>
class buffer<T, cuda> {
  static_assert(std::is_trivially_copyable_v<T>, "buffer holds trivially copyable elements");

 public:
  buffer() = default;
  // Ensures: size() == n, contents zero. Throws std::bad_alloc if cudaMalloc fails.
  explicit buffer(std::size_t n) { resize(n); }
  buffer(const buffer&) = delete;
  buffer& operator=(const buffer&) = delete;
  buffer(buffer&& o) noexcept : p_(std::exchange(o.p_, nullptr)), n_(std::exchange(o.n_, 0)) {}
  buffer& operator=(buffer&& o) noexcept {
    std::swap(p_, o.p_);
    std::swap(n_, o.n_);
    return *this;
  }
  ~buffer() {
    if (p_) cudaFree(p_);
  }

  // Ensures: size() == n, contents zero on return (previous contents discarded).
  void resize(std::size_t n) {
    if (p_) cudaFree(p_);
    p_ = nullptr;
    n_ = n;
    if (n == 0) return;
    void* p = nullptr;
    if (cudaMalloc(&p, n * sizeof(T)) != cudaSuccess) throw std::bad_alloc();
    p_ = static_cast<T*>(p);
    // Zeroed before returning: work on any stream (non-blocking ones included) that uses the
    // buffer afterwards cannot race with the memset on the default stream.
    cudaMemset(p_, 0, n * sizeof(T));
    cudaStreamSynchronize(nullptr);
  }
  T* data() noexcept { return p_; }
  const T* data() const noexcept { return p_; }
  std::size_t size() const noexcept { return n_; }
  slice<T, cuda> view() noexcept { return {p_, n_}; }
  slice<const T, cuda> view() const noexcept { return {p_, n_}; }

 private:
  T* p_ = nullptr;
  std::size_t n_ = 0;
};

}  // namespace paco
