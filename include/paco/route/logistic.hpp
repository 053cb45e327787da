#pragma once
// logistic_router: DiPaCo's discriminative router. A K-class multinomial logistic regression on
// standardised features, fitted to labels (the path with the best log-likelihood on each
// held-out document), then a bias fitted so the routed document-to-path distribution matches a
// target (uniform by default): no path is left empty.

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <numeric>
#include <vector>

#include "paco/core/error.hpp"
#include "paco/core/rng.hpp"
#include "paco/route/concepts.hpp"

namespace paco::route {

struct logistic_options {
  int k = 4;
  int epochs = 300;  // full-batch gradient steps
  double lr = 0.5;
  double l2 = 1e-3;
  int bias_iterations = 500;   // rounds of bias fitting to the target distribution
  std::vector<double> target;  // target fraction per path (empty: uniform)
  std::uint64_t seed = 1;
};

class logistic_router {
 public:
  using router_tag = void;

  // x: (n, D) features; labels in [0, k). Errors: invalid_argument on empty data, bad labels or
  // a target of the wrong size.
  static result<logistic_router> fit(const std::vector<float>& x, int n, int D,
                                     const std::vector<int>& labels, logistic_options o) {
    if (n < 1 || D < 1 || o.k < 1 || int(labels.size()) != n)
      return error(errc::invalid_argument, "logistic_router: need n ≥ 1 labelled points");
    for (int y : labels)
      if (y < 0 || y >= o.k)
        return error(errc::invalid_argument, "logistic_router: label " + std::to_string(y) +
                                                 " outside [0, " + std::to_string(o.k) + ")");
    if (!o.target.empty() && int(o.target.size()) != o.k)
      return error(errc::invalid_argument, "logistic_router: target needs k entries");
    logistic_router m;
    m.k_ = o.k;
    m.d_ = D;
    m.mean_.assign(D, 0.0);
    m.inv_std_.assign(D, 0.0);
    for (int i = 0; i < n; ++i)
      for (int d = 0; d < D; ++d) m.mean_[d] += x[std::size_t(i) * D + d] / double(n);
    for (int i = 0; i < n; ++i)
      for (int d = 0; d < D; ++d) {
        double v = x[std::size_t(i) * D + d] - m.mean_[d];
        m.inv_std_[d] += v * v / double(n);
      }
    for (auto& v : m.inv_std_) v = 1.0 / std::sqrt(v + 1e-8);
    std::vector<double> z(std::size_t(n) * D);
    for (int i = 0; i < n; ++i)
      for (int d = 0; d < D; ++d)
        z[std::size_t(i) * D + d] = (x[std::size_t(i) * D + d] - m.mean_[d]) * m.inv_std_[d];
    // Small random weights (seeded) so paths with no labels still differ from each other.
    rng r(o.seed);
    m.w_.resize(std::size_t(o.k) * D);
    for (auto& w : m.w_) w = 0.01 * r.normal();
    m.b_.assign(o.k, 0.0);
    std::vector<double> gw(m.w_.size()), gb(o.k), p(o.k);
    for (int e = 0; e < o.epochs; ++e) {
      std::fill(gw.begin(), gw.end(), 0.0);
      std::fill(gb.begin(), gb.end(), 0.0);
      for (int i = 0; i < n; ++i) {
        m.probs(&z[std::size_t(i) * D], p.data());
        p[labels[i]] -= 1.0;
        for (int c = 0; c < o.k; ++c) {
          gb[c] += p[c] / n;
          for (int d = 0; d < D; ++d)
            gw[std::size_t(c) * D + d] += p[c] * z[std::size_t(i) * D + d] / n;
        }
      }
      for (std::size_t j = 0; j < m.w_.size(); ++j) m.w_[j] -= o.lr * (gw[j] + o.l2 * m.w_[j]);
      for (int c = 0; c < o.k; ++c) m.b_[c] -= o.lr * gb[c];
    }
    // Bias fitting: nudge b_c by the (decaying) log ratio of target to routed fraction, then
    // make sure no path is empty: an empty path's bias is raised until it wins the point where
    // it is closest to winning.
    std::vector<double> target = o.target;
    if (target.empty()) target.assign(o.k, 1.0 / o.k);
    std::vector<double> score(std::size_t(n) * o.k);
    auto scores = [&] {
      for (int i = 0; i < n; ++i)
        for (int c = 0; c < o.k; ++c) {
          double s = m.b_[c];
          for (int d = 0; d < D; ++d) s += m.w_[std::size_t(c) * D + d] * z[std::size_t(i) * D + d];
          score[std::size_t(i) * o.k + c] = s;
        }
    };
    auto counts = [&] {
      scores();
      std::vector<int> count(o.k, 0);
      for (int i = 0; i < n; ++i)
        ++count[std::max_element(&score[std::size_t(i) * o.k], &score[std::size_t(i + 1) * o.k]) -
                &score[std::size_t(i) * o.k]];
      return count;
    };
    // Soft marginal matching (a Sinkhorn-style fixed point): b_c += log(target_c / mean_i p_ic)
    // until the mean routing probabilities hit the target; hard counts then follow closely.
    std::vector<double> pm(o.k);
    for (int it = 0; it < o.bias_iterations; ++it) {
      std::fill(pm.begin(), pm.end(), 0.0);
      for (int i = 0; i < n; ++i) {
        m.probs(&z[std::size_t(i) * D], p.data());
        for (int c = 0; c < o.k; ++c) pm[c] += p[c] / n;
      }
      double worst = 0;
      for (int c = 0; c < o.k; ++c) {
        worst = std::max(worst, std::abs(pm[c] - target[c]));
        m.b_[c] += std::log(target[c] / std::max(pm[c], 1e-300));
      }
      if (worst < 1e-4) break;
    }
    for (int round = 0; round < 4 * o.k; ++round) {
      auto count = counts();
      int empty = int(std::find(count.begin(), count.end(), 0) - count.begin());
      if (empty == o.k || n < o.k) break;
      // The cheapest point to take over: its winner keeps at least one other point.
      double best_gap = 1e300;
      for (int i = 0; i < n; ++i) {
        const double* s = &score[std::size_t(i) * o.k];
        const int w = int(std::max_element(s, s + o.k) - s);
        if (w != empty && count[w] > 1) best_gap = std::min(best_gap, s[w] - s[empty]);
      }
      if (best_gap >= 1e300) break;
      m.b_[empty] += best_gap + 1e-9 + 1e-6 * std::abs(best_gap);
    }
    return m;
  }

  int k() const noexcept { return k_; }
  // argmax_c w_c·ẑ + b_c. Requires: z has the fitted dimension.
  int route(const float* x) const {
    std::vector<double> z(d_);
    for (int d = 0; d < d_; ++d) z[d] = (x[d] - mean_[d]) * inv_std_[d];
    return route_standardised(z.data());
  }
  // The n most likely paths, most likely first (top-n overlapping shards).
  // Requires: x has the fitted dimension. Ensures: min(n, k()) distinct paths; rank(x, 1)[0]
  // is route(x).
  std::vector<int> rank(const float* x, int n) const {
    std::vector<double> z(d_), s(k_);
    for (int d = 0; d < d_; ++d) z[d] = (x[d] - mean_[d]) * inv_std_[d];
    for (int c = 0; c < k_; ++c) {
      s[c] = b_[c];
      for (int d = 0; d < d_; ++d) s[c] += w_[std::size_t(c) * d_ + d] * z[d];
    }
    std::vector<int> idx(k_);
    std::iota(idx.begin(), idx.end(), 0);
    std::stable_sort(idx.begin(), idx.end(), [&](int a, int b) { return s[a] > s[b]; });
    idx.resize(std::size_t(std::clamp(n, 0, k_)));
    return idx;
  }

 private:
  int route_standardised(const double* z) const {
    int best = 0;
    double bs = -1e300;
    for (int c = 0; c < k_; ++c) {
      double s = b_[c];
      for (int d = 0; d < d_; ++d) s += w_[std::size_t(c) * d_ + d] * z[d];
      if (s > bs) bs = s, best = c;
    }
    return best;
  }
  void probs(const double* z, double* p) const {
    double mx = -1e300;
    for (int c = 0; c < k_; ++c) {
      double s = b_[c];
      for (int d = 0; d < d_; ++d) s += w_[std::size_t(c) * d_ + d] * z[d];
      p[c] = s;
      mx = std::max(mx, s);
    }
    double sum = 0;
    for (int c = 0; c < k_; ++c) sum += (p[c] = std::exp(p[c] - mx));
    for (int c = 0; c < k_; ++c) p[c] /= sum;
  }

  int k_ = 0, d_ = 0;
  std::vector<double> mean_, inv_std_, w_, b_;
};

static_assert(RankingRouter<logistic_router>);

}  // namespace paco::route
