#pragma once
// scratch_arena: a bump allocator over caller-owned device memory, so launchers never call
// cudaMalloc on the hot path. Size it once with the launchers' *_workspace_bytes() functions,
// allocate it once (e.g. buffer<std::byte, cuda>), and reset() it between steps.
#include <concepts>
#include <cstddef>
#include <initializer_list>

namespace paco::kernels {

// A scratch allocator: take(bytes) returns device memory valid until the owner resets it, or
// nullptr when exhausted. Requires nothing else.
template <class S>
concept ScratchAllocator = requires(S& s, std::size_t bytes) {
  { s.take(bytes) } -> std::same_as<void*>;
};

class scratch_arena {
 public:
  static constexpr std::size_t alignment = 256;

  scratch_arena() = default;
  // Requires: base is device memory of `bytes` bytes, 256-byte aligned (cudaMalloc's is).
  scratch_arena(void* base, std::size_t bytes)
      : base_(static_cast<std::byte*>(base)), cap_(bytes) {}

  // Ensures: a 256-byte aligned pointer to `bytes` bytes, or nullptr if they do not fit.
  void* take(std::size_t bytes) {
    const std::size_t off = (used_ + alignment - 1) / alignment * alignment;
    if (off + bytes > cap_) return nullptr;
    used_ = off + bytes;
    return base_ + off;
  }
  void reset() noexcept { used_ = 0; }
  // A mark of the bytes in use, and the return to it: everything taken after mark() is given
  // back (a stack discipline; work already enqueued on one stream may still read it safely).
  std::size_t mark() const noexcept { return used_; }
  void rewind(std::size_t mark) noexcept { used_ = mark < used_ ? mark : used_; }
  std::size_t used() const noexcept { return used_; }
  std::size_t capacity() const noexcept { return cap_; }

  // Bytes a sequence of take() calls of these sizes needs (with alignment padding).
  static constexpr std::size_t footprint(std::initializer_list<std::size_t> sizes) {
    std::size_t total = 0;
    for (auto s : sizes) total += (s + alignment - 1) / alignment * alignment;
    return total;
  }

 private:
  std::byte* base_ = nullptr;
  std::size_t cap_ = 0;
  std::size_t used_ = 0;
};
static_assert(ScratchAllocator<scratch_arena>);

}  // namespace paco::kernels
