#pragma once
// gcma: the DT-FM scheduler, a hybrid genetic algorithm with cyclic-partitioning local search
// (Kim & Moon style memetic search for balanced multiway partitioning; ALGORITHMS.md §1.3).
//
//   population <- `population` random permutations of the devices (blocks of D = partitions)
//   repeat `trials` times:
//     p1, p2 <- uniform indices of the active population
//     child  <- five_point_crossover(p1, p2) + balance repair
//     child  <- cyclic_partitioning(child)              (local search, one pass of move cycles)
//     s      <- COST(child)                             (the full cost model of cost.hpp)
//     if s is worse than both parents: archive the child
//     else: the child replaces the worse parent in the active population; archive that parent
//   return the best assignment ever scored
//
// Defects of the DT-FM code and how this file handles them:
//   1. `random.seed = i` never seeded anything: here an explicit paco::rng seeded by `seed`.
//   2. The replacement test compared the child with parent 1 only: the intended rule above.
//   3. Parents come from the first `population` slots of a growing list: kept on purpose — those
//      slots are the active population, the rest is an archive (only its best is kept).
//   4. The "pipeline" gain is built from edge *costs* yet maximised: both sign conventions are
//      selectable (gain_sign::as_written, gain_sign::affinity) and benchmarked.
//   5. The final "best prefix of cycles" loop never considered the last cycle: it does here.

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <limits>
#include <span>
#include <string>
#include <vector>

#include "paco/core/error.hpp"
#include "paco/core/rng.hpp"
#include "paco/place/cost.hpp"

namespace paco::place {

// Which gain drives the cyclic-partitioning local search.
enum class gain_mode {
  pipeline,  // scheduler.py (the paper's): min pipeline weight to own partition, mean to others
  hybrid,    // scheduler_baseline.py: sum over a partition of (w_pp - w_grad)
};

// Sign of the gain table.
enum class gain_sign {
  as_written,  // the code's sign (for `pipeline`: moves towards *expensive* partitions)
  affinity,    // negated: higher gain = better connected
};

// GCMA hyper-parameters. Defaults: DT-FM __main__ (population 100, 4900 trials, 5 points).
struct gcma_config {
  int population = 100;      // active population size, >= 1
  int trials = 4900;         // offspring generated (population + trials candidates scored)
  int crossover_points = 5;  // positions copied from parent 1, in [0, N]
  bool local_search = true;  // run cyclic partitioning on every offspring
  gain_mode mode = gain_mode::pipeline;
  gain_sign sign = gain_sign::as_written;
  std::uint64_t seed = 1;  // paco::rng seed; same seed, same result
};

// Outcome of a GCMA search.
struct gcma_result {
  std::vector<int> best_order;      // (N) best assignment found
  double best_cost = 0;             // COST(best_order), seconds
  double best_initial_cost = 0;     // best COST among the initial population
  std::vector<double> best_so_far;  // (population + trials) best COST after each candidate
  long long evaluations = 0;        // candidates scored
};

// Called after each trial with (trials done, trials total, best cost so far).
using gcma_progress = std::function<void(int, int, double)>;

// Checks a config against a model. Ensures: ok() iff population >= 1, trials >= 0,
// 0 <= crossover_points <= N; else invalid_argument naming the field. Cost: O(1).
inline status validate(const gcma_config& c, const cost_model& m) {
  if (c.population < 1)
    return {errc::invalid_argument,
            "gcma.population = " + std::to_string(c.population) + ": must be >= 1"};
  if (c.trials < 0)
    return {errc::invalid_argument, "gcma.trials = " + std::to_string(c.trials) + ": must be >= 0"};
  if (c.crossover_points < 0 || c.crossover_points > m.size())
    return {errc::invalid_argument,
            "gcma.crossover_points = " + std::to_string(c.crossover_points) + ": must be in [0, " +
                std::to_string(m.size()) + "]"};
  return {};
}

// Uniformly random permutation of 0..n-1 (Fisher-Yates). Ensures: a permutation. Cost: O(n).
inline std::vector<int> random_order(int n, rng& g) {
  std::vector<int> v(static_cast<std::size_t>(n));
  for (int i = 0; i < n; ++i) v[static_cast<std::size_t>(i)] = i;
  for (int i = n - 1; i > 0; --i)
    std::swap(v[static_cast<std::size_t>(i)],
              v[static_cast<std::size_t>(g.below(static_cast<std::uint64_t>(i) + 1))]);
  return v;
}

// Partition label of every device: label[order[i]] = i / D. Cost: O(N).
inline std::vector<int> labels_of(std::span<const int> order, int d_dp) {
  std::vector<int> label(order.size());
  for (std::size_t i = 0; i < order.size(); ++i)
    label[static_cast<std::size_t>(order[i])] = static_cast<int>(i) / d_dp;
  return label;
}

// The assignment of balanced labels: partition q = devices labelled q, in increasing id.
// Requires: every label in [0, K) used exactly D times. Cost: O(N K).
inline std::vector<int> order_of(std::span<const int> label, int d_pp) {
  std::vector<int> order;
  order.reserve(label.size());
  for (int q = 0; q < d_pp; ++q)
    for (std::size_t v = 0; v < label.size(); ++v)
      if (label[v] == q) order.push_back(static_cast<int>(v));
  return order;
}

// FIVE_POINT_CROSSOVER: copy parent 1's labels at `points` random devices into parent 2's
// labels, then repair balance (a device of an over-full partition moves to the first
// under-full partition, scanning devices in id order).
// Requires: both parents are permutations of 0..N-1. Ensures: balanced labels (D per label).
// Cost: O(N K).
inline std::vector<int> five_point_crossover(std::span<const int> p1, std::span<const int> p2,
                                             int d_pp, int d_dp, int points, rng& g) {
  const int n = static_cast<int>(p1.size());
  std::vector<int> l1 = labels_of(p1, d_dp);
  std::vector<int> child = labels_of(p2, d_dp);
  std::vector<int> pos(static_cast<std::size_t>(n));
  for (int i = 0; i < n; ++i) pos[static_cast<std::size_t>(i)] = i;
  for (int k = 0; k < points && k < n; ++k) {  // partial Fisher-Yates: `points` distinct devices
    auto r = static_cast<std::size_t>(k) +
             static_cast<std::size_t>(g.below(static_cast<std::uint64_t>(n - k)));
    std::swap(pos[static_cast<std::size_t>(k)], pos[r]);
    auto v = static_cast<std::size_t>(pos[static_cast<std::size_t>(k)]);
    child[v] = l1[v];
  }
  std::vector<int> sizes(static_cast<std::size_t>(d_pp), 0);
  for (int q : child) ++sizes[static_cast<std::size_t>(q)];
  for (std::size_t v = 0; v < child.size(); ++v) {
    auto& own = sizes[static_cast<std::size_t>(child[v])];
    if (own <= d_dp) continue;
    for (int q = 0; q < d_pp; ++q)
      if (sizes[static_cast<std::size_t>(q)] < d_dp) {
        --own;
        ++sizes[static_cast<std::size_t>(q)];
        child[v] = q;
        break;
      }
  }
  return child;
}

// CYCLIC_PARTITIONING: one pass of Kim-Moon move cycles over balanced labels (§1.3 steps 1-6).
// Keeps incremental per-(device, partition) weight sums so a move costs O(N) and a gain
// recomputation O(N (K + D)).
class cyclic_partitioning {
 public:
  // Requires: m outlives this object.
  cyclic_partitioning(const cost_model& m, gain_mode mode, gain_sign sign)
      : m_(m), mode_(mode), sign_(sign == gain_sign::as_written ? 1.0 : -1.0) {}

  // One pass over `label` (balanced). Ensures: the returned labels are balanced (D per label);
  // it is the prefix of move cycles with the largest positive cumulative gain (the input if
  // none). Cost: O(K * N * N (K + D)) worst case; typically a few moves per cycle.
  std::vector<int> run(std::vector<int> label) {
    const int n = m_.size(), K = m_.d_pp();
    const auto un = static_cast<std::size_t>(n);
    const auto uk = static_cast<std::size_t>(K);
    if (K < 2) return label;  // one partition: nothing to move
    label_ = std::move(label);
    sizes_.assign(uk, 0);
    for (int q : label_) ++sizes_[static_cast<std::size_t>(q)];
    sum_pp_.assign(un * uk, 0.0);
    sum_hy_.assign(un * uk, 0.0);
    for (int v = 0; v < n; ++v)
      for (int u = 0; u < n; ++u) {
        if (u == v) continue;
        const auto k = static_cast<std::size_t>(v) * uk + static_cast<std::size_t>(label_[u]);
        sum_pp_[k] += m_.pipeline_weight(v, u);
        sum_hy_[k] += m_.pipeline_weight(v, u) - m_.gradient_weight(v, u);
      }
    locked_v_.assign(un, 0);
    std::vector<char> locked_p(uk, 0);
    std::vector<std::vector<int>> snapshots = {label_};
    std::vector<double> cycle_gain;
    struct move {
      int v, from, to;
    };
    std::vector<move> moves;
    std::vector<double> eps, tau;
    for (int cycle = 0; cycle < K; ++cycle) {
      moves.clear();
      eps.clear();
      tau.clear();
      compute_gains();
      int s0 = 0;
      for (int i = 1; i < K; ++i)
        if (gi_[static_cast<std::size_t>(i)] > gi_[static_cast<std::size_t>(s0)]) s0 = i;
      if (trace_v_[static_cast<std::size_t>(s0)] < 0) break;  // no unlocked candidate anywhere
      int si = s0;
      for (int step = 0; step < n; ++step) {
        int v = trace_v_[static_cast<std::size_t>(si)];
        int to = trace_q_[static_cast<std::size_t>(si)];
        if (v < 0) {  // no candidate in S_i: close the cycle with the last moved vertex
          v = moves.back().v;
          to = s0;
        }
        eps.push_back(gi_[static_cast<std::size_t>(si)]);
        tau.push_back(gij_[static_cast<std::size_t>(si) * uk + static_cast<std::size_t>(s0)]);
        moves.push_back({v, si, to});
        relabel(v, to);
        locked_v_[static_cast<std::size_t>(v)] = 1;
        locked_p[static_cast<std::size_t>(to)] = 1;
        si = to;
        if (si == s0) break;
        compute_gains();
      }
      // Best prefix l: maximise sum_{k<l} eps_k + tau_l (l = 0 leaves the partition unchanged).
      double best = 0;
      std::size_t l = 0;
      double prefix = 0;
      for (std::size_t i = 1; i < eps.size(); ++i) {
        prefix += eps[i - 1];
        if (prefix + tau[i] > best) {
          best = prefix + tau[i];
          l = i;
        }
      }
      for (std::size_t i = moves.size(); i-- > l + 1;) relabel(moves[i].v, moves[i].from);
      relabel(moves[l].v, s0);  // the l-th vertex goes to S0 instead: sizes stay balanced
      snapshots.push_back(label_);
      cycle_gain.push_back(best);
      if (std::all_of(locked_p.begin(), locked_p.end(), [](char c) { return c != 0; })) break;
    }
    // Keep the prefix of cycles with the largest cumulative gain (0 cycles if none is positive).
    double best = 0, run_sum = 0;
    std::size_t keep = 0;
    for (std::size_t c = 0; c < cycle_gain.size(); ++c) {
      run_sum += cycle_gain[c];
      if (run_sum > best) {
        best = run_sum;
        keep = c + 1;
      }
    }
    return std::move(snapshots[keep]);
  }

 private:
  void relabel(int u, int to) {
    const int from = label_[static_cast<std::size_t>(u)];
    if (from == to) return;
    const auto uk = static_cast<std::size_t>(m_.d_pp());
    for (int v = 0; v < m_.size(); ++v) {
      if (v == u) continue;
      const double wp = m_.pipeline_weight(v, u);
      const double wh = wp - m_.gradient_weight(v, u);
      const auto row = static_cast<std::size_t>(v) * uk;
      sum_pp_[row + static_cast<std::size_t>(from)] -= wp;
      sum_pp_[row + static_cast<std::size_t>(to)] += wp;
      sum_hy_[row + static_cast<std::size_t>(from)] -= wh;
      sum_hy_[row + static_cast<std::size_t>(to)] += wh;
    }
    --sizes_[static_cast<std::size_t>(from)];
    ++sizes_[static_cast<std::size_t>(to)];
    label_[static_cast<std::size_t>(u)] = to;
  }

  // gain[v][q] of an unlocked v (already multiplied by the sign).
  double gain(int v, int q, int own) const {
    const auto uk = static_cast<std::size_t>(m_.d_pp());
    const auto k = static_cast<std::size_t>(v) * uk + static_cast<std::size_t>(q);
    if (mode_ == gain_mode::hybrid) return sign_ * sum_hy_[k];
    if (q != own) {
      const int sz = sizes_[static_cast<std::size_t>(q)];
      return sz > 0 ? sign_ * sum_pp_[k] / sz : 0.0;
    }
    return sign_ * own_min_[static_cast<std::size_t>(v)];
  }

  // G_ij, G_i and the traced (vertex, target) per partition (trace_v_ = -1: no candidate).
  void compute_gains() {
    const int n = m_.size(), K = m_.d_pp();
    const auto uk = static_cast<std::size_t>(K);
    constexpr double ninf = -std::numeric_limits<double>::infinity();
    constexpr double pinf = std::numeric_limits<double>::infinity();
    gij_.assign(uk * uk, ninf);
    gi_.assign(uk, ninf);
    trace_v_.assign(uk, -1);
    trace_q_.assign(uk, -1);
    if (mode_ == gain_mode::pipeline) {
      // Members per partition, then min pipeline weight to an own member (none: not a candidate).
      members_.assign(uk, {});
      for (int u = 0; u < n; ++u) members_[static_cast<std::size_t>(label_[u])].push_back(u);
      own_min_.assign(static_cast<std::size_t>(n), pinf);
      std::vector<double> cand_gain(uk, pinf);
      for (int v = 0; v < n; ++v) {
        if (locked_v_[static_cast<std::size_t>(v)]) continue;
        const int own = label_[static_cast<std::size_t>(v)];
        double mn = pinf;
        for (int u : members_[static_cast<std::size_t>(own)])
          if (u != v) mn = std::min(mn, m_.pipeline_weight(v, u));
        own_min_[static_cast<std::size_t>(v)] = mn;
        if (mn == pinf) continue;
        const double g = sign_ * mn;  // candidate of partition own: the v minimising gain[v][own]
        if (g < cand_gain[static_cast<std::size_t>(own)]) {
          cand_gain[static_cast<std::size_t>(own)] = g;
          trace_v_[static_cast<std::size_t>(own)] = v;
        }
      }
      for (int i = 0; i < K; ++i) {
        const int v = trace_v_[static_cast<std::size_t>(i)];
        if (v < 0) continue;
        const double gown = gain(v, i, i);
        for (int q = 0; q < K; ++q) {
          if (q == i) continue;
          const double g = gain(v, q, i) - gown;
          gij_[static_cast<std::size_t>(i) * uk + static_cast<std::size_t>(q)] = g;
          if (g > gi_[static_cast<std::size_t>(i)]) {
            gi_[static_cast<std::size_t>(i)] = g;
            trace_q_[static_cast<std::size_t>(i)] = q;
          }
        }
      }
    } else {
      for (int v = 0; v < n; ++v) {
        if (locked_v_[static_cast<std::size_t>(v)]) continue;
        const int i = label_[static_cast<std::size_t>(v)];
        const double gown = gain(v, i, i);
        for (int q = 0; q < K; ++q) {
          if (q == i) continue;
          const double g = gain(v, q, i) - gown;
          auto& cell = gij_[static_cast<std::size_t>(i) * uk + static_cast<std::size_t>(q)];
          cell = std::max(cell, g);
          if (g > gi_[static_cast<std::size_t>(i)]) {
            gi_[static_cast<std::size_t>(i)] = g;
            trace_v_[static_cast<std::size_t>(i)] = v;
            trace_q_[static_cast<std::size_t>(i)] = q;
          }
        }
      }
    }
  }

  const cost_model& m_;
  gain_mode mode_;
  double sign_;
  std::vector<int> label_, sizes_, trace_v_, trace_q_;
  std::vector<char> locked_v_;
  std::vector<double> sum_pp_, sum_hy_, own_min_, gij_, gi_;
  std::vector<std::vector<int>> members_;
};

// The GCMA search of §1.3 on a cost model.
// Requires: validate(c, m).ok() (else the error is returned).
// Ensures: best_cost == m.total_cost(best_order) <= best_initial_cost; best_so_far is
// non-increasing with population + trials entries; identical (m, c) give identical results.
// Cost: (population + trials) cost evaluations (each K(K-1)/2 bottleneck matchings +
// O(K^2 2^K)) plus one local-search pass per trial.
inline result<gcma_result> gcma(const cost_model& m, const gcma_config& c,
                                const gcma_progress& progress = {}) {
  if (auto s = validate(c, m); !s) return s.error();
  rng g(c.seed);
  cost_workspace ws;
  const int n = m.size(), K = m.d_pp(), D = m.d_dp();
  gcma_result r;
  std::vector<std::vector<int>> pop;
  std::vector<double> score;
  double best = std::numeric_limits<double>::infinity();
  auto record = [&](const std::vector<int>& order, double s) {
    ++r.evaluations;
    if (s < best) {
      best = s;
      r.best_order = order;
    }
    r.best_so_far.push_back(best);
  };
  for (int i = 0; i < c.population; ++i) {
    pop.push_back(random_order(n, g));
    score.push_back(m.total_cost(pop.back(), ws));
    record(pop.back(), score.back());
  }
  r.best_initial_cost = best;
  cyclic_partitioning local(m, c.mode, c.sign);
  const auto P = static_cast<std::uint64_t>(c.population);
  for (int t = 0; t < c.trials; ++t) {
    const auto a = static_cast<std::size_t>(g.below(P));
    const auto b = static_cast<std::size_t>(g.below(P));
    std::vector<int> label = five_point_crossover(pop[a], pop[b], K, D, c.crossover_points, g);
    if (c.local_search) label = local.run(std::move(label));
    std::vector<int> child = order_of(label, K);
    const double s = m.total_cost(child, ws);
    record(child, s);
    if (!(s > std::max(score[a], score[b]))) {  // not worse than both: replace the worse parent
      const std::size_t worse = score[a] >= score[b] ? a : b;
      pop[worse] = std::move(child);
      score[worse] = s;
    }
    if (progress) progress(t + 1, c.trials, best);
  }
  r.best_cost = best;
  return r;
}

}  // namespace paco::place
