#pragma once
// diloco_allreduce: DiLoCo without a store, for k replicas joined by any Transport (a cluster
// over MPI, or ranks over asio_tcp). Every rank keeps the global θ (the anchor plane) and the
// outer optimizer state itself; a round is
//   H inner steps → Δ = θ_start − θ_end → ring all-reduce of Δ (sum) → Δ /= k →
//   θ ← OuterOpt(θ_start, Δ) on every rank → check that every rank holds the same θ (hash)
// Because the all-reduce result is bit-identical on every rank and the outer step is
// deterministic, replicas stay bit-identical; the hash check verifies it every round.

#include <cstdint>
#include <span>
#include <vector>

#include "paco/core/hash.hpp"
#include "paco/sync/collectives.hpp"
#include "paco/sync/path_worker.hpp"

namespace paco::sync {

struct diloco_options {
  collective_options collective{};  // deadline, tag, chunking, ring order of the all-reduce
};

// One DiLoCo round for this rank. Requires: every rank of t calls it with the same round and
// options; worker's arena holds the current global θ in its param plane (set before the first
// round, identical on every rank). outer_state: OuterOpt::state_size(total) floats.
// Ensures: on ok, the param plane holds the new global θ, bit-identical on every rank.
// Errors: the all-reduce's (timeout, peer_lost …), or mismatch if the replicas' θ differ.
// Cost: one ring all-reduce of the model (2(k−1)/k · 4·params bytes sent per rank) and one
// all-gather of 8-byte hashes.
template <net::Transport T, class Model, class InnerOpt, class OuterOpt>
status diloco_round(T& t, path_worker<Model, InnerOpt>& worker, const OuterOpt& outer,
                    std::span<float> outer_state, const diloco_options& o = {}) {
  auto& a = worker.state();
  auto th = a.get(plane::param);
  auto an = a.get(plane::anchor);
  std::copy(th.begin(), th.end(), an.begin());  // θ_start
  worker.train();
  std::vector<float> delta(th.size());
  for (std::size_t i = 0; i < th.size(); ++i) delta[i] = an[i] - th[i];
  if (auto s = allreduce_ring(t, std::span<float>(delta), o.collective); !s) return s;
  const float inv_k = 1.0f / float(t.size());
  for (auto& v : delta) v *= inv_k;
  std::copy(an.begin(), an.end(), th.begin());
  outer.step(std::span<float>(th.data(), th.size()), std::span<const float>(delta), outer_state);
  // Every rank must now hold the same θ.
  std::vector<std::uint64_t> hashes(std::size_t(t.size()), 0);
  hashes[std::size_t(t.rank())] = hash64(th.data(), th.size_bytes());
  auto co = o.collective;
  co.tag = o.collective.tag + 1;
  if (auto s = allreduce_ring(t, std::span<std::uint64_t>(hashes), co); !s) return s;
  for (auto h : hashes)
    if (h != hashes[0])
      return {errc::mismatch, "DiLoCo replicas diverged: θ hashes differ after the outer step"};
  return {};
}

}  // namespace paco::sync
