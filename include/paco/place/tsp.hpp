#pragma once
// tsp: exact shortest Hamiltonian path ("open-loop TSP", no return edge) by the Held-Karp dynamic
// programme over (visited set, last node), with every node allowed as the start — the DT-FM
// `open_loop_tsp` run from each start node, minimum taken (ALGORITHMS.md §1.2 step 3). A closed
// tour (return to the start) is available for ring orders.

#include <cstddef>
#include <cstdint>
#include <limits>
#include <span>
#include <vector>

namespace paco::place {

// A Hamiltonian path (or tour) and its length.
struct tsp_path {
  double cost = 0;
  std::vector<int> path;  // (n) a permutation of 0..n-1, in visiting order
};

// Reusable scratch space for held_karp (n * 2^n doubles and ints).
struct tsp_workspace {
  std::vector<double> dp;
  std::vector<std::int8_t> parent;
};

// Exact open path or closed tour over n nodes with weights w (row-major, w[i*n+j] = cost of
// i -> j, may be asymmetric).
// Requires: 1 <= n <= 20, w.size() == n*n. closed == false: any start, no return edge;
// closed == true: the tour returns to its start (path[0] == 0 by convention).
// Ensures: cost == sum of w along `path` (+ the return edge when closed) and is minimal over all
// n! orders; ties are broken towards the lexicographically first state (deterministic).
// Cost: O(n^2 2^n) time, O(n 2^n) memory.
inline tsp_path held_karp(std::span<const double> w, int n, bool closed, tsp_workspace& ws) {
  tsp_path r;
  if (n <= 0) return r;
  const auto un = static_cast<std::size_t>(n);
  if (n == 1) {
    r.path = {0};
    r.cost = 0.0;
    return r;
  }
  const std::size_t full = (std::size_t{1} << un) - 1;
  constexpr double inf = std::numeric_limits<double>::infinity();
  ws.dp.assign((full + 1) * un, inf);
  ws.parent.assign((full + 1) * un, -1);
  auto at = [&](std::size_t mask, std::size_t last) { return mask * un + last; };
  if (closed) {
    ws.dp[at(1, 0)] = 0;
  } else {
    for (std::size_t s = 0; s < un; ++s) ws.dp[at(std::size_t{1} << s, s)] = 0;
  }
  for (std::size_t mask = 1; mask <= full; ++mask) {
    if (closed && !(mask & 1)) continue;
    for (std::size_t last = 0; last < un; ++last) {
      if (!(mask >> last & 1)) continue;
      double cur = ws.dp[at(mask, last)];
      if (cur == inf) continue;
      for (std::size_t next = 0; next < un; ++next) {
        if (mask >> next & 1) continue;
        std::size_t m2 = mask | (std::size_t{1} << next);
        double c = cur + w[last * un + next];
        if (c < ws.dp[at(m2, next)]) {
          ws.dp[at(m2, next)] = c;
          ws.parent[at(m2, next)] = static_cast<std::int8_t>(last);
        }
      }
    }
  }
  double best = inf;
  std::size_t best_last = 0;
  for (std::size_t last = 0; last < un; ++last) {
    double c = ws.dp[at(full, last)];
    if (closed) c += w[last * un + 0];
    if (c < best) {
      best = c;
      best_last = last;
    }
  }
  r.cost = best;
  r.path.resize(un);
  std::size_t mask = full, last = best_last;
  for (std::size_t k = un; k-- > 0;) {
    r.path[k] = static_cast<int>(last);
    int p = ws.parent[at(mask, last)];
    mask &= ~(std::size_t{1} << last);
    last = p < 0 ? 0 : static_cast<std::size_t>(p);
  }
  return r;
}

// Open-loop TSP (shortest Hamiltonian path over all start nodes), as DT-FM's `open_loop_tsp`.
// Requires/Ensures: as held_karp with closed == false. Cost: O(n^2 2^n).
inline tsp_path open_loop_tsp(std::span<const double> w, int n, tsp_workspace& ws) {
  return held_karp(w, n, false, ws);
}

// Convenience overload with its own workspace.
inline tsp_path open_loop_tsp(std::span<const double> w, int n) {
  tsp_workspace ws;
  return held_karp(w, n, false, ws);
}

}  // namespace paco::place
