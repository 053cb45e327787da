#pragma once
// baselines: the two placements GCMA is compared with.
//  - random_baseline (DT-FM scheduler_random.py): `samples` random permutations; each is scored
//    with COST_DP + 2 * fixed_pp_cost (stage order 0..K-1, j-th member feeds j-th member, no
//    matching and no TSP); the best sample is kept.
//  - rank_order_baseline: what a Megatron-style launcher does with ranks = device ids: data-
//    parallel groups are contiguous blocks (stage s = devices [s*D, (s+1)*D)), pipeline j =
//    devices {j, D + j, 2D + j, ...}; scored the same way (the launcher does no matching).

#include <cstdint>
#include <limits>
#include <numeric>
#include <vector>

#include "paco/core/rng.hpp"
#include "paco/place/cost.hpp"
#include "paco/place/gcma.hpp"

namespace paco::place {

// Random-baseline settings. Defaults: DT-FM (5000 samples).
struct random_baseline_config {
  int samples = 5000;      // random permutations scored, >= 1
  std::uint64_t seed = 1;  // paco::rng seed
};

// A baseline placement and its cost under the baseline's own (fixed-pairing) pipeline model.
struct baseline_result {
  std::vector<int> order;  // (N) the assignment (blocks of D = stages in order)
  double dp_s = 0;         // COST_DP
  double pp_s = 0;         // fixed_pp_cost (one direction)
  double cost_s = 0;       // dp_s + 2 pp_s
};

// Scores one assignment the baseline way. Requires: m.check_order(order).ok(). Cost: O(N D).
inline baseline_result score_fixed(const cost_model& m, std::vector<int> order) {
  baseline_result r;
  r.dp_s = m.dp_cost(order);
  r.pp_s = m.fixed_pp_cost(order);
  r.cost_s = r.dp_s + 2.0 * r.pp_s;
  r.order = std::move(order);
  return r;
}

// Best of `samples` random permutations (scheduler_random.py).
// Requires: c.samples >= 1 (else invalid_argument). Ensures: cost_s is the minimum over the
// samples; for its order, m.total_cost(order) <= cost_s (matching + TSP never do worse than
// the fixed pairing). Cost: samples * O(N D).
inline result<baseline_result> random_baseline(const cost_model& m,
                                               const random_baseline_config& c = {}) {
  if (c.samples < 1)
    return {errc::invalid_argument,
            "random_baseline.samples = " + std::to_string(c.samples) + ": must be >= 1"};
  rng g(c.seed);
  baseline_result best;
  best.cost_s = std::numeric_limits<double>::infinity();
  for (int i = 0; i < c.samples; ++i) {
    baseline_result r = score_fixed(m, random_order(m.size(), g));
    if (r.cost_s < best.cost_s) best = std::move(r);
  }
  return best;
}

// Contiguous (rank-order) placement: order = 0..N-1.
// Ensures: order is the identity; cost_s = dp_cost + 2 fixed_pp_cost of it. Cost: O(N D).
inline baseline_result rank_order_baseline(const cost_model& m) {
  std::vector<int> order(static_cast<std::size_t>(m.size()));
  std::iota(order.begin(), order.end(), 0);
  return score_fixed(m, std::move(order));
}

}  // namespace paco::place
