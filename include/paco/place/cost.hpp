#pragma once
// cost: the DT-FM communication cost of an assignment (ALGORITHMS.md §1.2, exactly as the code's
// compute_data_parallel_cost / compute_pipeline_parallel_cost / get_pipelines).
//
// Legend: N devices, K = D_PP stages, D = D_DP shards per stage; c_dp, c_pp payloads in GB;
// A latency (ms), B bandwidth (Gbit/s).
//
// An assignment is a permutation `order` of the N devices: partition s is the block
// order[s*D .. (s+1)*D). Each partition is the data-parallel group of one stage; which stage it
// serves, and which device of the next partition each device feeds, are chosen by the cost:
//
//   T_dp(d, C)  = sum_{d' in C, d' != d} 2 (A[d,d']/1e3 + c_dp*8 / (B[d,d'] * D))
//   COST_DP     = max_C max_{d in C} T_dp(d, C)
//   w(d, d')    = A[d,d']/1e3 + c_pp*8 / B[d,d']
//   E(Ci, Cj)   = min over perfect matchings M of max_{(d,d') in M} w(d,d')     (i < j, symmetric)
//   PP          = min over Hamiltonian paths of the K partitions of the sum of E along the path
//   COST        = COST_DP + 2 PP            (forward activations + backward gradients)
//
// For asymmetric matrices E(Ci,Cj) uses the direction Ci -> Cj with i < j, as the code does.

#include <algorithm>
#include <cstddef>
#include <span>
#include <string>
#include <vector>

#include "paco/core/error.hpp"
#include "paco/place/matching.hpp"
#include "paco/place/topology.hpp"
#include "paco/place/tsp.hpp"

namespace paco::place {

// Reusable scratch space for cost evaluation (one per thread).
struct cost_workspace {
  matching_workspace matching;
  tsp_workspace tsp;
  std::vector<double> block;  // (D,D) weights between two partitions
  std::vector<double> edges;  // (K,K) coarsened graph E
};

// The cost of an assignment and the concrete pipelines derived from it (get_pipelines).
struct plan {
  double dp_s = 0;                          // COST_DP, seconds
  double pp_s = 0;                          // PP (one direction), seconds
  double total_s = 0;                       // COST_DP + 2 PP, seconds
  std::vector<int> stage_partition;         // (K) stage s runs partition stage_partition[s]
  std::vector<std::vector<int>> pipelines;  // (D)(K) device at pipeline j, stage s
  std::vector<int> rank_of_device;          // (N) rank = pipeline * K + stage
};

// The DT-FM cost model bound to one topology and workload, with the edge weights precomputed.
// Requires: built by make(). Cost of a query: see each member.
class cost_model {
 public:
  // Validates the topology and the workload and precomputes the (N,N) weight tables.
  // Ensures: ok() iff validate(t) and validate(w, t.size()) pass; errors name the field.
  // Cost: O(N^2).
  static result<cost_model> make(const topology& t, const workload& w) {
    if (auto s = validate(t); !s) return s.error();
    if (auto s = validate(w, t.size()); !s) return s.error();
    cost_model m;
    m.n_ = t.size();
    m.d_pp_ = w.d_pp;
    m.d_dp_ = w.d_dp;
    m.load_ = w;
    const auto nn = static_cast<std::size_t>(m.n_) * static_cast<std::size_t>(m.n_);
    m.wpp_.assign(nn, 0.0);
    m.wgrad_.assign(nn, 0.0);
    m.dp_pair_.assign(nn, 0.0);
    for (int i = 0; i < m.n_; ++i)
      for (int j = 0; j < m.n_; ++j) {
        if (i == j) continue;
        const std::size_t k = static_cast<std::size_t>(i) * m.n_ + j;
        const double alpha = t.latency(i, j) / 1e3;
        const double b = t.bandwidth(i, j);
        m.wpp_[k] = alpha + w.c_pp_gb * 8.0 / b;
        m.wgrad_[k] = alpha + w.c_dp_gb * 8.0 / b;
        m.dp_pair_[k] = 2.0 * (alpha + w.c_dp_gb * 8.0 / (b * w.d_dp));
      }
    return m;
  }

  int size() const noexcept { return n_; }     // N
  int d_pp() const noexcept { return d_pp_; }  // K
  int d_dp() const noexcept { return d_dp_; }  // D
  const workload& load() const noexcept { return load_; }

  // Seconds to send the activation payload from i to j: A/1e3 + c_pp*8/B (0 when i == j).
  double pipeline_weight(int i, int j) const noexcept { return wpp_[idx(i, j)]; }
  // Seconds to send a whole stage gradient from i to j: A/1e3 + c_dp*8/B (0 when i == j).
  double gradient_weight(int i, int j) const noexcept { return wgrad_[idx(i, j)]; }

  // Checks that `order` is a permutation of 0..N-1.
  // Ensures: ok() iff it is; otherwise invalid_argument naming the first problem. Cost: O(N).
  status check_order(std::span<const int> order) const {
    if (static_cast<int>(order.size()) != n_)
      return {errc::invalid_argument, "assignment has " + std::to_string(order.size()) +
                                          " entries, expected N = " + std::to_string(n_)};
    std::vector<char> seen(static_cast<std::size_t>(n_), 0);
    for (int d : order) {
      if (d < 0 || d >= n_ || seen[static_cast<std::size_t>(d)])
        return {errc::invalid_argument, "assignment is not a permutation (device " +
                                            std::to_string(d) + " out of range or repeated)"};
      seen[static_cast<std::size_t>(d)] = 1;
    }
    return {};
  }

  // COST_DP of an assignment. Requires: check_order(order).ok().
  // Ensures: max over partitions C and d in C of T_dp(d, C). Cost: O(N D).
  double dp_cost(std::span<const int> order) const {
    double worst = 0;
    for (int s = 0; s < d_pp_; ++s) {
      const int* c = order.data() + static_cast<std::size_t>(s) * d_dp_;
      for (int i = 0; i < d_dp_; ++i) {
        double t = 0;
        for (int j = 0; j < d_dp_; ++j)
          if (i != j) t += dp_pair_[idx(c[i], c[j])];
        worst = std::max(worst, t);
      }
    }
    return worst;
  }

  // E(Ci, Cj) for partitions a and b (the direction a -> b).
  // Ensures: the bottleneck perfect matching value. Cost: O(D^2 log D + D^2 sqrt(D) log D).
  bottleneck_match partition_matching(std::span<const int> order, int a, int b,
                                      cost_workspace& ws) const {
    const int* ca = order.data() + static_cast<std::size_t>(a) * d_dp_;
    const int* cb = order.data() + static_cast<std::size_t>(b) * d_dp_;
    ws.block.resize(static_cast<std::size_t>(d_dp_) * d_dp_);
    for (int i = 0; i < d_dp_; ++i)
      for (int j = 0; j < d_dp_; ++j)
        ws.block[static_cast<std::size_t>(i) * d_dp_ + j] = wpp_[idx(ca[i], cb[j])];
    return bottleneck_matching(ws.block, d_dp_, ws.matching);
  }

  // PP of an assignment: open-loop TSP over the coarsened graph of bottleneck matchings.
  // Requires: check_order(order).ok(). Ensures: the PP of §1.2 (one direction).
  // Cost: K(K-1)/2 bottleneck matchings + O(K^2 2^K).
  double pp_cost(std::span<const int> order, cost_workspace& ws) const {
    return coarsened_tsp(order, ws, nullptr).cost;
  }

  // COST = COST_DP + 2 PP. Requires: check_order(order).ok(). Cost: as dp_cost + pp_cost.
  double total_cost(std::span<const int> order, cost_workspace& ws) const {
    return dp_cost(order) + 2.0 * pp_cost(order, ws);
  }
  double total_cost(std::span<const int> order) const {
    cost_workspace ws;
    return total_cost(order, ws);
  }

  // PP with the stage order fixed to partition order 0..K-1 and the j-th member of each
  // partition feeding the j-th member of the next (no matching): sum_s max_j w(C_s[j], C_s+1[j]).
  // This is how the random baseline (scheduler_random.py) and a rank-order launcher run.
  // Requires: check_order(order).ok(). Cost: O(N).
  double fixed_pp_cost(std::span<const int> order) const {
    double pp = 0;
    for (int s = 0; s + 1 < d_pp_; ++s) {
      double worst = 0;
      for (int j = 0; j < d_dp_; ++j)
        worst = std::max(worst, wpp_[idx(order[static_cast<std::size_t>(s) * d_dp_ + j],
                                         order[static_cast<std::size_t>(s + 1) * d_dp_ + j])]);
      pp += worst;
    }
    return pp;
  }

  // The full cost and the concrete pipelines (get_pipelines): walk the TSP path, chain the
  // matchings between consecutive partitions; pipeline j starts at member j of the first stage.
  // Requires: check_order(order).ok().
  // Ensures: total_s == dp_s + 2 pp_s == total_cost(order); every device appears exactly once
  // in `pipelines`; rank_of_device is a permutation with rank = pipeline * K + stage; the
  // largest w between consecutive stages of any pipeline, summed over stages, equals pp_s.
  // Cost: as total_cost, plus O(N).
  plan evaluate(std::span<const int> order) const {
    cost_workspace ws;
    std::vector<bottleneck_match> matches(static_cast<std::size_t>(d_pp_) * d_pp_);
    tsp_path path = coarsened_tsp(order, ws, &matches);
    plan p;
    p.dp_s = dp_cost(order);
    p.pp_s = path.cost;
    p.total_s = p.dp_s + 2.0 * p.pp_s;
    p.stage_partition = path.path;
    const auto K = static_cast<std::size_t>(d_pp_);
    const auto D = static_cast<std::size_t>(d_dp_);
    p.pipelines.assign(D, std::vector<int>(K, -1));
    p.rank_of_device.assign(static_cast<std::size_t>(n_), -1);
    std::vector<int> member(D);  // member index (inside its partition) of pipeline j's device
    for (std::size_t j = 0; j < D; ++j) member[j] = static_cast<int>(j);
    std::vector<int> inverse(D);
    for (std::size_t s = 0; s < K; ++s) {
      const int part = path.path[s];
      if (s > 0) {
        const int prev = path.path[s - 1];
        if (prev < part) {
          const auto& m = matches[static_cast<std::size_t>(prev) * K + part].col_of_row;
          for (std::size_t j = 0; j < D; ++j) member[j] = m[static_cast<std::size_t>(member[j])];
        } else {
          const auto& m = matches[static_cast<std::size_t>(part) * K + prev].col_of_row;
          for (std::size_t r = 0; r < D; ++r)
            inverse[static_cast<std::size_t>(m[r])] = static_cast<int>(r);
          for (std::size_t j = 0; j < D; ++j)
            member[j] = inverse[static_cast<std::size_t>(member[j])];
        }
      }
      for (std::size_t j = 0; j < D; ++j) {
        const int dev = order[static_cast<std::size_t>(part) * D + member[j]];
        p.pipelines[j][s] = dev;
        p.rank_of_device[static_cast<std::size_t>(dev)] = static_cast<int>(j * K + s);
      }
    }
    return p;
  }

 private:
  cost_model() = default;
  std::size_t idx(int i, int j) const noexcept {
    return static_cast<std::size_t>(i) * static_cast<std::size_t>(n_) + static_cast<std::size_t>(j);
  }

  // Bottleneck matchings for every partition pair (a < b), then the open-loop TSP over them.
  // Stores the matchings in (*matches)[a*K+b] when matches is non-null.
  tsp_path coarsened_tsp(std::span<const int> order, cost_workspace& ws,
                         std::vector<bottleneck_match>* matches) const {
    const auto K = static_cast<std::size_t>(d_pp_);
    ws.edges.assign(K * K, 0.0);
    for (int a = 0; a < d_pp_; ++a)
      for (int b = a + 1; b < d_pp_; ++b) {
        bottleneck_match m = partition_matching(order, a, b, ws);
        ws.edges[static_cast<std::size_t>(a) * K + b] = m.value;
        ws.edges[static_cast<std::size_t>(b) * K + a] = m.value;
        if (matches) (*matches)[static_cast<std::size_t>(a) * K + b] = std::move(m);
      }
    return open_loop_tsp(ws.edges, d_pp_, ws.tsp);
  }

  int n_ = 0, d_pp_ = 0, d_dp_ = 0;
  workload load_;
  std::vector<double> wpp_;      // (N,N) A/1e3 + c_pp*8/B
  std::vector<double> wgrad_;    // (N,N) A/1e3 + c_dp*8/B
  std::vector<double> dp_pair_;  // (N,N) 2 (A/1e3 + c_dp*8/(B D))
};

}  // namespace paco::place
