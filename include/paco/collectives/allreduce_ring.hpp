#pragma once
// allreduce_ring: in-place all-reduce over any Transport as a ring reduce-scatter followed by a
// ring all-gather, chunked and pipelined (Gloo's allreduce_ring; Patarasuk & Yuan 2009).

#include "paco/collectives/detail/ring.hpp"

namespace paco::collectives {

// allreduce_ring(t, data, options, op): every rank's `data` becomes op-reduced over all ranks.
// Requires: every rank of t calls it with the same data.size(), options.tag, chunk_bytes and
//   order (a permutation of 0..p-1, or empty); V trivially copyable; op associative.
// Ensures: on ok, data is bit-identical on every rank (each element is reduced once, on one
//   rank, in ring order, then copied); on error (timeout at options.until, peer_lost, ...) the
//   status names the step and peer, data is unspecified, and the call returned by the
//   deadline. The transport is then unusable for further collectives of this group.
// Cost: 2(p-1) steps; each rank sends 2(p-1)·ceil(bytes/p) bytes and reduces
//   (p-1)·ceil(n/p) elements; scratch 2·ceil(n/p) elements.
struct allreduce_ring_fn {
  static constexpr wire_cost cost(std::size_t bytes, int p) noexcept {
    if (p <= 1 || bytes == 0) return {};
    std::size_t up = static_cast<std::size_t>(p);
    return {2 * (up - 1), 2 * (up - 1) * ((bytes + up - 1) / up)};
  }
  template <net::Transport T, class V, class Op = sum>
  status operator()(T& t, slice<V> data, const collective_options& o = {}, Op op = {}) const {
    return detail::ring_steps("allreduce_ring", t, data, o, op, 0, 2 * (t.size() - 1));
  }
  template <net::Transport T, class V, class Op = sum>
  status operator()(T& t, std::span<V> data, const collective_options& o = {}, Op op = {}) const {
    return (*this)(t, slice<V>(data), o, op);
  }
};
inline constexpr allreduce_ring_fn allreduce_ring{};

}  // namespace paco::collectives
