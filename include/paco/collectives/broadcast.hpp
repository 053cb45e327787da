#pragma once
// broadcast: the root's data to every rank over any Transport, as a pipelined chain along the
// ring order (root -> next -> ... ), so each link carries the data once.

#include "paco/collectives/detail/ring.hpp"

namespace paco::collectives {

// broadcast(t, data, root, options): every rank's data becomes the root's.
// Requires: 0 <= root < p; same data.size(), tag, chunk_bytes and order on every rank.
// Ensures: on ok, data is bit-identical to the root's on every rank; on error, returns by the
//   deadline with the step and peer named.
// Cost: p-1+ceil(bytes/chunk)-1 pipelined steps; each rank sends at most `bytes` bytes.
struct broadcast_fn {
  static constexpr wire_cost cost(std::size_t bytes, int p) noexcept {
    if (p <= 1 || bytes == 0) return {};
    return {static_cast<std::size_t>(p - 1), bytes};
  }
  template <net::Transport T, class V>
  status operator()(T& t, slice<V> data, int root, const collective_options& o = {}) const {
    using req_t = typename T::request;
    const int p = t.size();
    if (root < 0 || root >= p)
      return {errc::invalid_argument,
              "broadcast: root " + std::to_string(root) + " outside 0.." + std::to_string(p - 1)};
    if (p == 1 || data.size() == 0) return {};
    auto ordr = detail::resolve_order(o.order, p);
    if (!ordr) return ordr.error();
    const auto& ord = ordr.value();
    int pos = 0, rpos = 0;
    for (int i = 0; i < p; ++i) {
      if (ord[static_cast<std::size_t>(i)] == t.rank()) pos = i;
      if (ord[static_cast<std::size_t>(i)] == root) rpos = i;
    }
    const int k = detail::mod(pos - rpos, p);  // distance from the root along the chain
    const int right = ord[static_cast<std::size_t>(detail::mod(pos + 1, p))];
    const int left = ord[static_cast<std::size_t>(detail::mod(pos - 1, p))];
    const std::size_t chunk = std::max<std::size_t>(1, o.chunk_bytes / sizeof(V));
    const std::size_t n = data.size();
    std::vector<req_t> recvs, sends;
    if (k > 0)
      for (std::size_t c = 0; c < n; c += chunk)
        recvs.push_back(
            t.recv(left, o.tag, detail::wbytes(data.data() + c, std::min(chunk, n - c)), o.until));
    std::size_t idx = 0;
    for (std::size_t c = 0; c < n; c += chunk, ++idx) {
      std::size_t m = std::min(chunk, n - c);
      if (k > 0)
        if (auto ec = recvs[idx].wait())
          return detail::op_error("broadcast", "recv from", left, static_cast<std::size_t>(k - 1),
                                  static_cast<std::size_t>(p - 1), ec);
      if (k < p - 1)
        sends.push_back(t.send(right, o.tag, detail::cbytes(data.data() + c, m), o.until));
    }
    for (auto& r : sends)
      if (auto ec = r.wait())
        return detail::op_error("broadcast", "send to", right, static_cast<std::size_t>(k),
                                static_cast<std::size_t>(p - 1), ec);
    return {};
  }
  template <net::Transport T, class V>
  status operator()(T& t, std::span<V> data, int root, const collective_options& o = {}) const {
    return (*this)(t, slice<V>(data), root, o);
  }
};
inline constexpr broadcast_fn broadcast{};

}  // namespace paco::collectives
