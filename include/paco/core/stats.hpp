#pragma once
// stats: the few summary statistics the benchmarks and tools report — the median, and Spearman's
// rank correlation (how well one quantity orders items as another does: a cost model's predicted
// times against measured ones).

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <numeric>
#include <vector>

namespace paco::stats {

// The median of v (the mean of the two middle values for an even count); 0 for an empty v.
inline double median(std::vector<double> v) {
  if (v.empty()) return 0;
  std::sort(v.begin(), v.end());
  const std::size_t n = v.size();
  return n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

// The ranks of v, 1 … n, ties given the mean of the ranks they span.
inline std::vector<double> ranks(const std::vector<double>& v) {
  std::vector<std::size_t> idx(v.size());
  std::iota(idx.begin(), idx.end(), std::size_t{0});
  std::sort(idx.begin(), idx.end(), [&](std::size_t a, std::size_t b) { return v[a] < v[b]; });
  std::vector<double> r(v.size());
  for (std::size_t i = 0; i < idx.size();) {
    std::size_t j = i;
    while (j + 1 < idx.size() && v[idx[j + 1]] == v[idx[i]]) ++j;
    for (std::size_t k = i; k <= j; ++k) r[idx[k]] = 0.5 * double(i + j) + 1;
    i = j + 1;
  }
  return r;
}

// Spearman's ρ of x and y: the Pearson correlation of their ranks (ties averaged). Requires:
// x.size() == y.size(). Returns NaN with fewer than 2 items or when either is constant.
inline double spearman(const std::vector<double>& x, const std::vector<double>& y) {
  const std::size_t n = x.size();
  if (n < 2 || y.size() != n) return std::nan("");
  const auto rx = ranks(x), ry = ranks(y);
  const double mean = 0.5 * double(n + 1);
  double sxy = 0, sxx = 0, syy = 0;
  for (std::size_t i = 0; i < n; ++i) {
    sxy += (rx[i] - mean) * (ry[i] - mean);
    sxx += (rx[i] - mean) * (rx[i] - mean);
    syy += (ry[i] - mean) * (ry[i] - mean);
  }
  return sxx > 0 && syy > 0 ? sxy / std::sqrt(sxx * syy) : std::nan("");
}

}  // namespace paco::stats
