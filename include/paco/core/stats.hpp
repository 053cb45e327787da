#pragma once
// stats: the few summary statistics the benchmarks and tools report — the median, and Spearman's
// rank correlation (how well one quantity orders items as another does: a cost model's predicted
// times against measured ones) — and recent_median, the median of the last values in a window,
// kept up to date as each is added (the store's grace window, store/server.hpp, and push pace,
// store/push_pace.hpp).

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

// recent_median: the median of the last `window` values added, kept as each is added (reading it
// costs nothing); of an even count the lower or the upper middle value, as chosen (not their
// mean: a value that occurred). Not thread-safe: its owner guards it.
//
//   stats::recent_median spread(8, stats::recent_median::upper);
//   spread.add(0.2);  spread.add(0.4);   // spread.value() == 0.4
class recent_median {
 public:
  enum side { lower, upper };

  // Requires: window ≥ 1.
  recent_median(std::size_t window, side s) : window_(window), side_(s) {}

  // The median of v (Requires: v not empty): its middle value, of an even count the lower or
  // the upper one.
  static double of(std::vector<double> v, side s) {
    const std::size_t k = s == lower ? (v.size() - 1) / 2 : v.size() / 2;
    std::nth_element(v.begin(), v.begin() + long(k), v.end());
    return v[k];
  }

  // Adds v; the oldest value leaves once the window is full.
  void add(double v) {
    values_.push_back(v);
    if (values_.size() > window_) values_.erase(values_.begin());
    median_ = of(values_, side_);
  }
  bool empty() const noexcept { return values_.empty(); }
  // Ensures: the median of the last window values added; 0 before any.
  double value() const noexcept { return median_; }

 private:
  std::size_t window_;
  side side_;
  std::vector<double> values_;
  double median_ = 0;
};

}  // namespace paco::stats
