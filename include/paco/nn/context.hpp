#pragma once
// context: per-thread working memory for module calls. A stack of scratch space: a module takes
// what its backward needs (reported by scratch_size) and gives it back on return, so nested
// modules share one buffer and nothing is allocated inside a training step.

#include <cstddef>

#include "paco/core/buffer.hpp"

namespace paco::nn {

class context {
 public:
  // Ensures: capacity() ≥ bytes; invalidates earlier scratch pointers (call between steps only).
  void reserve(std::size_t bytes) {
    if (bytes > mem_.size()) mem_.resize(bytes);
  }
  std::size_t capacity() const noexcept { return mem_.size(); }
  std::size_t high_water() const noexcept { return high_; }

  // A region of n elements of T, 64-byte aligned, contents unspecified.
  // Requires: the reserve covers it (modules report scratch_size; callers reserve the total).
  template <class T>
  T* take(std::size_t n) {
    std::size_t bytes = (n * sizeof(T) + 63) / 64 * 64;
    PACO_ASSERT(top_ + bytes <= mem_.size(), "context scratch exhausted: reserve scratch_size()");
    if (top_ + bytes > mem_.size()) throw std::bad_alloc();
    T* p = reinterpret_cast<T*>(mem_.data() + top_);
    top_ += bytes;
    if (top_ > high_) high_ = top_;
    return p;
  }
  // Scratch bytes n elements of T occupy (what scratch_size must count).
  template <class T>
  static constexpr std::size_t bytes_for(std::size_t n) {
    return (n * sizeof(T) + 63) / 64 * 64;
  }

  // RAII mark: everything taken after it is released at scope exit.
  class frame {
   public:
    explicit frame(context& c) : c_(c), mark_(c.top_) {}
    ~frame() { c_.top_ = mark_; }
    frame(const frame&) = delete;
    frame& operator=(const frame&) = delete;

   private:
    context& c_;
    std::size_t mark_;
  };

 private:
  buffer<unsigned char> mem_;
  std::size_t top_ = 0;
  std::size_t high_ = 0;
};

}  // namespace paco::nn
