#pragma once
// ring_order: a bandwidth-aware order of ranks for a ring all-reduce. As PCCL does, the order
// is the open-loop TSP (shortest Hamiltonian path) over edge costs 1/B[i][j] (seconds per bit),
// so consecutive ranks sit on fast links; optionally the closing edge last -> first is counted
// too (a closed tour). Exact Held-Karp up to `exact_max_ranks`, otherwise nearest neighbour from
// every start plus 2-opt. The result is a permutation of 0..n-1 to hand to a ring collective as
// its ring order (position k sends to position k+1).

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <limits>
#include <span>
#include <string>
#include <vector>

#include "paco/core/error.hpp"
#include "paco/place/tsp.hpp"

namespace paco::place {

// Ring-order settings.
struct ring_order_config {
  bool include_closing_edge = false;  // false: open-loop TSP (PCCL); true: closed tour
  int exact_max_ranks = 16;           // Held-Karp (n^2 2^n) up to this many ranks, in [1, 20]
  int two_opt_passes = 50;            // improvement passes of the heuristic above that size
};

// Sum of 1/B along `order` (+ the closing edge when closed): the objective ring_order minimises.
// Requires: order is a permutation of 0..n-1, B > 0 off the diagonal. Cost: O(n).
inline double ring_cost(std::span<const double> bandwidth, int n, std::span<const int> order,
                        bool closed) {
  const auto un = static_cast<std::size_t>(n);
  double c = 0;
  for (std::size_t k = 0; k + 1 < order.size(); ++k)
    c +=
        1.0 /
        bandwidth[static_cast<std::size_t>(order[k]) * un + static_cast<std::size_t>(order[k + 1])];
  if (closed && order.size() > 1)
    c += 1.0 / bandwidth[static_cast<std::size_t>(order.back()) * un +
                         static_cast<std::size_t>(order.front())];
  return c;
}

// The bandwidth-aware ring order of n ranks.
// Requires: bandwidth is (n,n) row-major, finite and > 0 off the diagonal (the diagonal is
// ignored); n >= 1. Ensures: a permutation of 0..n-1; when n <= exact_max_ranks its ring_cost is
// minimal over all n! orders; otherwise no worse than the best nearest-neighbour order.
// Errors: invalid_argument naming the entry or field. Cost: O(n^2 2^n) exact; O(n^3) per 2-opt
// pass otherwise.
inline result<std::vector<int>> ring_order(std::span<const double> bandwidth, int n,
                                           const ring_order_config& c = {}) {
  if (n < 1)
    return {errc::invalid_argument,
            "ring_order: n = " + std::to_string(n) + ": need at least 1 rank"};
  const auto un = static_cast<std::size_t>(n);
  if (bandwidth.size() != un * un)
    return {errc::invalid_argument, "ring_order: bandwidth has " +
                                        std::to_string(bandwidth.size()) +
                                        " entries, expected n*n = " + std::to_string(un * un)};
  if (c.exact_max_ranks < 1 || c.exact_max_ranks > 20)
    return {errc::invalid_argument, "ring_order.exact_max_ranks = " +
                                        std::to_string(c.exact_max_ranks) + ": must be in [1, 20]"};
  std::vector<double> w(un * un, 0.0);
  for (std::size_t i = 0; i < un; ++i)
    for (std::size_t j = 0; j < un; ++j) {
      if (i == j) continue;
      const double b = bandwidth[i * un + j];
      if (!std::isfinite(b) || b <= 0)
        return {errc::invalid_argument, "ring_order: bandwidth[" + std::to_string(i) + "][" +
                                            std::to_string(j) + "] = " + std::to_string(b) +
                                            ": must be finite and > 0"};
      w[i * un + j] = 1.0 / b;
    }
  const bool closed = c.include_closing_edge;
  if (n <= c.exact_max_ranks) {
    tsp_workspace ws;
    return held_karp(w, n, closed, ws).path;
  }
  // Nearest neighbour from every start, keep the best.
  std::vector<int> best;
  double best_cost = std::numeric_limits<double>::infinity();
  std::vector<char> used(un);
  for (int s = 0; s < n; ++s) {
    std::fill(used.begin(), used.end(), 0);
    std::vector<int> path = {s};
    used[static_cast<std::size_t>(s)] = 1;
    for (int k = 1; k < n; ++k) {
      const auto last = static_cast<std::size_t>(path.back());
      int next = -1;
      for (std::size_t j = 0; j < un; ++j)
        if (!used[j] &&
            (next < 0 || w[last * un + j] < w[last * un + static_cast<std::size_t>(next)]))
          next = static_cast<int>(j);
      used[static_cast<std::size_t>(next)] = 1;
      path.push_back(next);
    }
    const double cost = ring_cost(bandwidth, n, path, closed);
    if (cost < best_cost) {
      best_cost = cost;
      best = std::move(path);
    }
  }
  // 2-opt: reverse a segment when that lowers the (possibly asymmetric) cost.
  for (int pass = 0; pass < c.two_opt_passes; ++pass) {
    bool improved = false;
    for (std::size_t i = 0; i + 1 < un; ++i)
      for (std::size_t j = i + 1; j < un; ++j) {
        std::reverse(best.begin() + static_cast<std::ptrdiff_t>(i),
                     best.begin() + static_cast<std::ptrdiff_t>(j) + 1);
        const double cost = ring_cost(bandwidth, n, best, closed);
        if (cost < best_cost - 1e-12 * best_cost) {
          best_cost = cost;
          improved = true;
        } else {
          std::reverse(best.begin() + static_cast<std::ptrdiff_t>(i),
                       best.begin() + static_cast<std::ptrdiff_t>(j) + 1);
        }
      }
    if (!improved) break;
  }
  return best;
}

}  // namespace paco::place
