#pragma once
// arena<cuda>: one model replica's planes in device memory, laid out by the same param_layout as
// arena<host> (module `id` of plane p is at the same offset on both sides), and the copies
// between the two. Every copy is counted in a transfer_log, so a worker can show what crossed
// PCIe in a round (a device-resident round moves only encoded bytes).
//
//   arena<cuda> dev(model.layout());
//   transfer_log log;
//   upload(host_arena, dev, plane::param, stream, &log);    // θ once, at start
//   ... H inner steps on the device, Δ encoded on the device ...
//   log.d2h_bytes                                          // what came back
#include <cuda_runtime.h>

#include <array>
#include <cstdint>
#include <string>

#include "paco/core/arena.hpp"
#include "paco/cuda_buffer.cuh"
#include "paco/cuda_check.cuh"

namespace paco {

template <>
class arena<cuda> {
 public:
  arena() = default;
  explicit arena(param_layout layout) : layout_(std::move(layout)) {}

  const param_layout& layout() const noexcept { return layout_; }

  // The whole plane. Ensures: size() == layout().total(); allocated (zeros) on first use.
  // Throws std::bad_alloc when the device has no room for it.
  slice<float, cuda> get(plane p) {
    auto& b = planes_[static_cast<int>(p)];
    if (b.size() != layout_.total()) b.resize(layout_.total());
    return b.view();
  }
  slice<const float, cuda> get(plane p) const {
    auto& b = planes_[static_cast<int>(p)];
    PACO_ASSERT(b.size() == layout_.total(), "device arena plane read before it was allocated");
    return b.view();
  }
  // Module `id`'s span of a plane. Requires: id < layout().count().
  slice<float, cuda> get(plane p, std::size_t id) {
    auto& e = layout_.entry(id);
    return get(p).sub(e.offset, e.size);
  }
  slice<const float, cuda> get(plane p, std::size_t id) const {
    auto& e = layout_.entry(id);
    return get(p).sub(e.offset, e.size);
  }
  bool has(plane p) const noexcept {
    return planes_[static_cast<int>(p)].size() == layout_.total() && layout_.total() > 0;
  }
  // Ensures: every element of plane p is zero once `stream` reaches this point.
  status zero(plane p, cudaStream_t stream) {
    auto s = get(p);
    return kernels::cuda_status(cudaMemsetAsync(s.data(), 0, s.size_bytes(), stream),
                                "arena<cuda>::zero");
  }
  // Device bytes the allocated planes hold.
  std::size_t device_bytes() const noexcept {
    std::size_t n = 0;
    for (auto& b : planes_) n += b.size() * sizeof(float);
    return n;
  }

 private:
  param_layout layout_;
  mutable std::array<buffer<float, cuda>, plane_count> planes_;
};

// Bytes copied each way by upload/download (not thread-safe: one log per worker).
struct transfer_log {
  std::uint64_t h2d_bytes = 0;
  std::uint64_t d2h_bytes = 0;
  int h2d_copies = 0;
  int d2h_copies = 0;
};

// Host → device. Requires: src.size() == dst.size() (checked: mismatch). The copy is ordered on
// `stream`; src must stay valid until the stream reaches it (pageable memory: cudaMemcpyAsync
// returns once the source was staged).
inline status upload(slice<const float> src, slice<float, cuda> dst, cudaStream_t stream,
                     transfer_log* log = nullptr) {
  if (src.size() != dst.size())
    return {errc::mismatch, "upload: " + std::to_string(src.size()) + " host floats into " +
                                std::to_string(dst.size()) + " device floats"};
  if (auto s = kernels::cuda_status(
          cudaMemcpyAsync(dst.data(), src.data(), src.size_bytes(), cudaMemcpyHostToDevice, stream),
          "upload");
      !s)
    return s;
  if (log) log->h2d_bytes += src.size_bytes(), ++log->h2d_copies;
  return {};
}

// Device → host. Requires: src.size() == dst.size() (checked: mismatch). Ensures: dst holds the
// data once `stream` is synchronised.
inline status download(slice<const float, cuda> src, slice<float> dst, cudaStream_t stream,
                       transfer_log* log = nullptr) {
  if (src.size() != dst.size())
    return {errc::mismatch, "download: " + std::to_string(src.size()) + " device floats into " +
                                std::to_string(dst.size()) + " host floats"};
  if (auto s = kernels::cuda_status(
          cudaMemcpyAsync(dst.data(), src.data(), src.size_bytes(), cudaMemcpyDeviceToHost, stream),
          "download");
      !s)
    return s;
  if (log) log->d2h_bytes += src.size_bytes(), ++log->d2h_copies;
  return {};
}

namespace detail {
inline status same_layout(const char* what, const param_layout& host_l, const param_layout& dev_l) {
  if (host_l == dev_l) return {};
  return {errc::mismatch, std::string(what) + ": the host arena's layout (" +
                              std::to_string(host_l.count()) + " modules, " +
                              std::to_string(host_l.total()) + " floats) is not the device's (" +
                              std::to_string(dev_l.count()) + " modules, " +
                              std::to_string(dev_l.total()) + " floats)"};
}
}  // namespace detail

// A whole plane between arenas of the same layout (checked: mismatch naming both).
inline status upload(const arena<host>& src, arena<cuda>& dst, plane p, cudaStream_t stream,
                     transfer_log* log = nullptr) {
  if (auto s = detail::same_layout("upload", src.layout(), dst.layout()); !s) return s;
  return upload(src.get(p), dst.get(p), stream, log);
}
inline status download(const arena<cuda>& src, arena<host>& dst, plane p, cudaStream_t stream,
                       transfer_log* log = nullptr) {
  if (auto s = detail::same_layout("download", dst.layout(), src.layout()); !s) return s;
  return download(src.get(p), dst.get(p), stream, log);
}

}  // namespace paco
