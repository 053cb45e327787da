#pragma once
// all_gather: in-place ring all-gather over any Transport (the second half of allreduce_ring).
// Each rank contributes its block block_of(n, p, rank) of data; all ranks end with all blocks.
// Values are only copied, never combined, so any bytes (e.g. compressed payloads) work.

#include "paco/collectives/detail/ring.hpp"

namespace paco::collectives {

// all_gather(t, data, options): every rank's data becomes the concatenation of the ranks'
// blocks, rank r's block taken from rank r.
// Requires: same data.size(), tag, chunk_bytes and order on every rank.
// Ensures: on ok, data is bit-identical on every rank; on error, returns by the deadline.
// Cost: p-1 steps; each rank sends (p-1)·ceil(bytes/p) bytes; no scratch.
struct all_gather_fn {
  static constexpr wire_cost cost(std::size_t bytes, int p) noexcept {
    if (p <= 1 || bytes == 0) return {};
    std::size_t up = static_cast<std::size_t>(p);
    return {up - 1, (up - 1) * ((bytes + up - 1) / up)};
  }
  template <net::Transport T, class V>
  status operator()(T& t, slice<V> data, const collective_options& o = {}) const {
    int p = t.size();
    return detail::ring_steps("all_gather", t, data, o, sum{}, p - 1, 2 * (p - 1));
  }
  template <net::Transport T, class V>
  status operator()(T& t, std::span<V> data, const collective_options& o = {}) const {
    return (*this)(t, slice<V>(data), o);
  }
};
inline constexpr all_gather_fn all_gather{};

}  // namespace paco::collectives
