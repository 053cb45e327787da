#pragma once
// reduce_scatter: in-place ring reduce-scatter over any Transport (the first half of
// allreduce_ring). Rank r ends with the reduction of its block, block_of(n, p, r).

#include "paco/collectives/detail/ring.hpp"

namespace paco::collectives {

// reduce_scatter(t, data, options, op): data's block_of(n, p, rank) becomes the op-reduction of
// that block over all ranks.
// Requires: same data.size(), tag, chunk_bytes and order on every rank.
// Ensures: on ok, rank r's block is bit-identical to what allreduce_ring gives for that block;
//   the rest of data is unspecified. On error the status names step and peer, by the deadline.
// Cost: p-1 steps; each rank sends (p-1)·bytes/p bytes (blocks are whole elements: exact
//   when p divides the element count, else at most (p-1)·ceil(n/p) elements).
struct reduce_scatter_fn {
  static constexpr wire_cost cost(std::size_t bytes, int p) noexcept {
    if (p <= 1 || bytes == 0) return {};
    std::size_t up = static_cast<std::size_t>(p);
    return {up - 1, (up - 1) * ((bytes + up - 1) / up)};
  }
  template <net::Transport T, class V, class Op = sum>
  status operator()(T& t, slice<V> data, const collective_options& o = {}, Op op = {}) const {
    return detail::ring_steps("reduce_scatter", t, data, o, op, 0, t.size() - 1);
  }
  template <net::Transport T, class V, class Op = sum>
  status operator()(T& t, std::span<V> data, const collective_options& o = {}, Op op = {}) const {
    return (*this)(t, slice<V>(data), o, op);
  }
};
inline constexpr reduce_scatter_fn reduce_scatter{};

}  // namespace paco::collectives
