#pragma once
// matching: bottleneck perfect matching on a complete bipartite graph (n left, n right),
// the partition-to-partition edge weight E(C_i, C_j) of the DT-FM pipeline cost (ALGORITHMS.md
// §1.2): E = min over perfect matchings M of max over (d,d') in M of w(d,d').
// The DT-FM code forbids the heaviest edges one by one and reruns linear_sum_assignment; here a
// binary search over the sorted distinct weights with a Hopcroft-Karp perfect-matching check
// gives the same value.

#include <algorithm>
#include <cstddef>
#include <limits>
#include <span>
#include <vector>

namespace paco::place {

// A bottleneck perfect matching: `value` is the largest matched weight, `col_of_row[i]` the right
// vertex matched to left vertex i.
struct bottleneck_match {
  double value = 0;
  std::vector<int> col_of_row;  // (n)
};

// Reusable scratch space for bottleneck_matching (no allocation after the first call of a size).
struct matching_workspace {
  std::vector<double> sorted;
  std::vector<int> match_l, match_r, dist, queue, iter;
};

namespace detail {

// Hopcroft-Karp on the graph {(i,j) : w[i*n+j] <= t}. Fills ws.match_l (left -> right, -1 free).
// Ensures: returns true iff a perfect matching exists. Cost: O(n^2 sqrt(n)).
inline bool perfect_matching_below(std::span<const double> w, int n, double t,
                                   matching_workspace& ws) {
  const auto un = static_cast<std::size_t>(n);
  ws.match_l.assign(un, -1);
  ws.match_r.assign(un, -1);
  ws.dist.resize(un);
  ws.queue.resize(un);
  ws.iter.resize(un);
  constexpr int inf = 1 << 29;  // larger than any layer index, no overflow on +1
  auto edge = [&](int i, int j) { return w[static_cast<std::size_t>(i) * un + j] <= t; };
  int matched = 0;
  for (;;) {
    // BFS layers from the free left vertices.
    int head = 0, tail = 0;
    for (int i = 0; i < n; ++i) {
      if (ws.match_l[i] < 0) {
        ws.dist[i] = 0;
        ws.queue[tail++] = i;
      } else {
        ws.dist[i] = inf;
      }
    }
    bool found = false;
    while (head < tail) {
      int i = ws.queue[head++];
      for (int j = 0; j < n; ++j) {
        if (!edge(i, j)) continue;
        int k = ws.match_r[j];
        if (k < 0) {
          found = true;
        } else if (ws.dist[k] == inf) {
          ws.dist[k] = ws.dist[i] + 1;
          ws.queue[tail++] = k;
        }
      }
    }
    if (!found) break;
    // DFS along the layers (iterative over a small explicit recursion via lambda).
    for (int i = 0; i < n; ++i) ws.iter[i] = 0;
    auto augment = [&](auto&& self, int i) -> bool {
      for (int& j = ws.iter[i]; j < n; ++j) {
        if (!edge(i, j)) continue;
        int k = ws.match_r[j];
        if (k < 0 || (ws.dist[k] == ws.dist[i] + 1 && self(self, k))) {
          ws.match_l[i] = j;
          ws.match_r[j] = i;
          ++j;
          return true;
        }
      }
      ws.dist[i] = inf;
      return false;
    };
    for (int i = 0; i < n; ++i)
      if (ws.match_l[i] < 0 && augment(augment, i)) ++matched;
  }
  return matched == n;
}

}  // namespace detail

// Bottleneck perfect matching of a complete n x n bipartite graph with weights w (row-major).
// Requires: n >= 1, w.size() == n*n, weights not NaN.
// Ensures: value == min over permutations p of max_i w[i][p(i)]; col_of_row is a permutation
// achieving it. Cost: O(n^2 log n) sort + O(log n) Hopcroft-Karp runs of O(n^2 sqrt n).
inline bottleneck_match bottleneck_matching(std::span<const double> w, int n,
                                            matching_workspace& ws) {
  const auto un = static_cast<std::size_t>(n);
  // Any perfect matching uses one edge per row and per column: the bottleneck is at least the
  // largest row minimum and the largest column minimum.
  double lower = -std::numeric_limits<double>::infinity();
  for (std::size_t i = 0; i < un; ++i) {
    double row = std::numeric_limits<double>::infinity();
    double col = std::numeric_limits<double>::infinity();
    for (std::size_t j = 0; j < un; ++j) {
      row = std::min(row, w[i * un + j]);
      col = std::min(col, w[j * un + i]);
    }
    lower = std::max(lower, std::max(row, col));
  }
  ws.sorted.clear();
  for (double v : w)
    if (v >= lower) ws.sorted.push_back(v);
  std::sort(ws.sorted.begin(), ws.sorted.end());
  ws.sorted.erase(std::unique(ws.sorted.begin(), ws.sorted.end()), ws.sorted.end());
  // Smallest index whose threshold admits a perfect matching (the largest always does).
  std::size_t lo = 0, hi = ws.sorted.size() - 1;
  while (lo < hi) {
    std::size_t mid = lo + (hi - lo) / 2;
    if (detail::perfect_matching_below(w, n, ws.sorted[mid], ws))
      hi = mid;
    else
      lo = mid + 1;
  }
  bottleneck_match m;
  m.value = ws.sorted[lo];
  detail::perfect_matching_below(w, n, m.value, ws);
  m.col_of_row.assign(ws.match_l.begin(), ws.match_l.end());
  return m;
}

// Convenience overload with its own workspace.
inline bottleneck_match bottleneck_matching(std::span<const double> w, int n) {
  matching_workspace ws;
  return bottleneck_matching(w, n, ws);
}

}  // namespace paco::place
