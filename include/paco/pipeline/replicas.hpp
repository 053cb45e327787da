#pragma once
// replicas: pipelines side by side (data parallelism over pipeline stages, DT-FM's D_DP × D_PP):
// the replicas of one stage average their gradients each step before the clip and the optimizer
// step, which makes D pipelines on batches of B equal to one pipeline on the global batch of
// D·B (float tolerance: the sums run in another order).
//
//   net::subgroup pipe(world, {j*K, j*K + 1});       // pipeline j: stage k = its rank k
//   net::subgroup reps(world, {s, K + s});            // stage s of every pipeline
//   pipeline::stage_runner<model_t, net::subgroup<net::asio_tcp>> run(model, plan, o, B, T, pipe,
//   seed); run.reduce_gradients_with(pipeline::replica_mean(reps));

#include <chrono>
#include <span>
#include <string>

#include "paco/collectives/allreduce_ring.hpp"
#include "paco/core/error.hpp"
#include "paco/net/concepts.hpp"

namespace paco::pipeline {

// A gradient reducer (stage_runner::reduce_gradients_with): the mean over the ranks of `group`
// (every replica of this stage), by ring all-reduce with tags from tag_base (one per step).
// Requires: group outlives the runner; every replica calls it at the same steps.
template <net::Transport G>
auto replica_mean(G& group, std::chrono::milliseconds timeout = std::chrono::milliseconds(60000),
                  net::tag_t tag_base = 0x60000000) {
  return [&group, timeout, tag_base](std::span<float> g, long t) -> status {
    if (group.size() == 1) return {};
    if (auto s = collectives::allreduce_ring(
            group, g, {.until = net::after(timeout), .tag = tag_base + net::tag_t(t & 0xFFFF)});
        !s)
      return status(paco::error(s.error().code, "the replicas' gradient mean at step " +
                                                    std::to_string(t) + ": " + s.error().message));
    const float inv = 1.0f / float(group.size());
    for (float& v : g) v *= inv;
    return {};
  };
}

}  // namespace paco::pipeline
