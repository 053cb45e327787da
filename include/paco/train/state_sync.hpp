#pragma once
// state_sync: the inner optimizer's states averaged over the group on their own periods, the
// idea of DES-LOC (Iacob et al., "Desynced Low Communication Adaptive Optimizers", arXiv
// 2505.22549): parameters every K_x steps, Adam's first moment every K_u, the second every K_v,
// each replaced by the workers' mean. In paco the parameters sync through the DiLoCo round (K_x
// = H, by the outer optimizer: with outer SGD at rate 1 that is DES-LOC's plain mean) and the
// moments on periods that are whole numbers of rounds (K_u = a·H, K_v = b·H): averaged after
// round k·a, before the next round's first inner step (train::round_loop), so that a run ending
// there sends nothing for them. (The paper's formula averages m_{t−1} before step t with
// t mod K_u = 0, one inner step earlier; paco keeps the round whole.) A period of 0 never averages
// (DiLoCo's local states). What a
// state is depends on the inner optimizer: AdamW's m (moment1) and v (moment2); Muon's momentum on
// its matrices (moment1, with AdamW's m elsewhere).
//
// Legend: K ranks, n floats a plane.

#include <chrono>
#include <cstddef>
#include <span>
#include <string>

#include "paco/collectives/allreduce_ring.hpp"
#include "paco/collectives/counted.hpp"
#include "paco/core/arena.hpp"
#include "paco/core/error.hpp"
#include "paco/net/concepts.hpp"

namespace paco::train {

struct state_periods {
  long moment1 = 0;  // rounds between averages of plane::moment1; 0: never
  long moment2 = 0;  // rounds between averages of plane::moment2; 0: never

  bool any() const noexcept { return moment1 > 0 || moment2 > 0; }
  status validate() const {
    if (moment1 < 0 || moment2 < 0)
      return {errc::invalid_argument,
              "state periods must be ≥ 0 rounds (0: never), got moment1 = " +
                  std::to_string(moment1) + ", moment2 = " + std::to_string(moment2)};
    return {};
  }
  // Whether plane p is averaged once `round` rounds are done (1, 2, …).
  bool due(plane p, long round) const noexcept {
    const long k = p == plane::moment1 ? moment1 : p == plane::moment2 ? moment2 : 0;
    return k > 0 && round % k == 0;
  }
};

// Replaces plane p of a by its mean over the ranks of t (the fp32 ring all-reduce); bytes grows
// by what this rank sent. Requires: every rank calls it with the same plane size and options.
// Ensures on ok: plane p is bit-identical on every rank. Errors: the all-reduce's.
template <net::Transport T>
status average_plane(T& t, arena<host>& a, plane p, const collectives::collective_options& co,
                     std::size_t& bytes) {
  auto s = a.get(p);
  collectives::counted<T> ct(t);
  if (auto r = collectives::allreduce_ring(ct, std::span<float>(s.data(), s.size()), co); !r)
    return r;
  const float inv = 1.0f / float(t.size());
  for (auto& x : s) x *= inv;
  bytes += ct.bytes();
  return {};
}

// The states due once `round` rounds are done, averaged (moment1 first). Tags: co.tag.
template <net::Transport T>
status sync_states(T& t, arena<host>& a, const state_periods& k, long round,
                   std::chrono::steady_clock::duration deadline, std::size_t& bytes) {
  collectives::collective_options co;
  co.until = net::after(deadline);
  co.tag = 0x70000010u;  // beside the round's flights (0x70000000 …)
  for (plane p : {plane::moment1, plane::moment2})
    if (k.due(p, round))
      if (auto s = average_plane(t, a, p, co, bytes); !s) return s;
  return {};
}

}  // namespace paco::train
