#pragma once
// barrier: no rank leaves before every rank entered (dissemination barrier, Hensgen et al.):
// in round k rank r signals r+2^k and waits for r-2^k, with zero-byte messages.

#include "paco/collectives/detail/ring.hpp"

namespace paco::collectives {

// barrier(t, options): returns on every rank once all ranks have called it.
// Requires: every rank calls it with the same tag.
// Ensures: on ok, every rank entered before any returned; on error (a rank missing or lost),
//   returns by options.until with the round and peer named.
// Cost: ceil(log2 p) steps; zero payload bytes (one frame header per step on TCP).
struct barrier_fn {
  static constexpr wire_cost cost(std::size_t /*bytes*/, int p) noexcept {
    std::size_t steps = 0;
    for (int d = 1; d < p; d *= 2) ++steps;
    return {steps, 0};
  }
  template <net::Transport T>
  status operator()(T& t, const collective_options& o = {}) const {
    const int p = t.size(), r = t.rank();
    std::size_t rounds = cost(0, p).steps, k = 0;
    for (int d = 1; d < p; d *= 2, ++k) {
      int to = (r + d) % p, from = detail::mod(r - d, p);
      auto s = t.send(to, o.tag, {}, o.until);
      auto v = t.recv(from, o.tag, {}, o.until);
      if (auto ec = v.wait()) return detail::op_error("barrier", "recv from", from, k, rounds, ec);
      if (auto ec = s.wait()) return detail::op_error("barrier", "send to", to, k, rounds, ec);
    }
    return {};
  }
};
inline constexpr barrier_fn barrier{};

}  // namespace paco::collectives
