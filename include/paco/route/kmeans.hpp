#pragma once
// kmeans_router: generative routing (DiPaCo Eq. 1): r(z) = argmin_i ‖z − c_i‖², centroids fitted
// by Lloyd's algorithm from a k-means++ initialisation (seeded). Features are rows of a (n, D)
// row-major matrix. Also ranks all centroids for top-n overlapping shards.

#include <algorithm>
#include <cstdint>
#include <limits>
#include <numeric>
#include <vector>

#include "paco/core/error.hpp"
#include "paco/core/rng.hpp"
#include "paco/route/concepts.hpp"

namespace paco::route {

struct kmeans_options {
  int k = 4;
  int iterations = 50;
  std::uint64_t seed = 1;
  std::vector<float> init;  // (k, D) starting centroids; empty: k-means++ from the seed
};

class kmeans_router {
 public:
  using router_tag = void;

  kmeans_router() = default;
  kmeans_router(int k, int dim, std::vector<float> centroids)
      : k_(k), dim_(dim), c_(std::move(centroids)) {}

  // Fits k centroids to n points of dimension D (Lloyd's iterations from o.init, or from a
  // k-means++ initialisation). Errors: invalid_argument if n < k, k < 1, or o.init is not (k, D).
  // Ensures: an empty cluster is re-seeded with the point farthest from its centroid (taken from
  // a cluster of two or more), and every centroid is then the mean of the points assigned to it
  // in that iteration.
  static result<kmeans_router> fit(const std::vector<float>& x, int n, int D, kmeans_options o) {
    if (o.k < 1 || n < o.k)
      return error(errc::invalid_argument,
                   "kmeans: need 1 ≤ k ≤ points, got k = " + std::to_string(o.k) +
                       ", points = " + std::to_string(n));
    if (!o.init.empty() && o.init.size() != std::size_t(o.k) * std::size_t(D))
      return error(errc::invalid_argument, "kmeans: init holds " + std::to_string(o.init.size()) +
                                               " values, k × D = " + std::to_string(o.k * D));
    std::vector<float> c = o.init.empty() ? plus_plus(x, n, D, o.k, o.seed) : o.init;
    kmeans_router m(o.k, D, std::move(c));
    std::vector<int> assign(n, -1);
    for (int it = 0; it < o.iterations; ++it) {
      bool changed = false;
      for (int i = 0; i < n; ++i) {
        int a = m.route(&x[std::size_t(i) * D]);
        changed |= a != assign[i];
        assign[i] = a;
      }
      std::vector<double> sum(std::size_t(o.k) * D, 0.0);
      std::vector<int> count(o.k, 0);
      for (int i = 0; i < n; ++i) {
        ++count[assign[i]];
        for (int d = 0; d < D; ++d)
          sum[std::size_t(assign[i]) * D + d] += x[std::size_t(i) * D + d];
      }
      for (int j = 0; j < o.k; ++j) {
        if (count[j] > 0) continue;
        // Re-seed from the worst-fitted point of a cluster that can spare it; it leaves its
        // old cluster's sum and count.
        int far = -1;
        double best = -1;
        for (int i = 0; i < n; ++i) {
          double dd = dist2(&x[std::size_t(i) * D], &m.c_[std::size_t(assign[i]) * D], D);
          if (dd > best && count[assign[i]] > 1) best = dd, far = i;
        }
        if (far < 0) break;  // every point is alone in its cluster: nothing to move
        const int old = assign[far];
        for (int d = 0; d < D; ++d) {
          sum[std::size_t(old) * D + d] -= x[std::size_t(far) * D + d];
          sum[std::size_t(j) * D + d] = x[std::size_t(far) * D + d];
        }
        --count[old];
        assign[far] = j;
        count[j] = 1;
        changed = true;
      }
      for (int j = 0; j < o.k; ++j)
        if (count[j] > 0)
          for (int d = 0; d < D; ++d)
            m.c_[std::size_t(j) * D + d] = float(sum[std::size_t(j) * D + d] / count[j]);
      if (!changed) break;
    }
    return m;
  }

  int k() const noexcept { return k_; }
  int dim() const noexcept { return dim_; }
  const std::vector<float>& centroids() const noexcept { return c_; }

  // argmin_i ‖z − c_i‖². Requires: z has dim() elements.
  int route(const float* z) const {
    int best = 0;
    double bd = std::numeric_limits<double>::infinity();
    for (int j = 0; j < k_; ++j) {
      double d = dist2(z, &c_[std::size_t(j) * dim_], dim_);
      if (d < bd) bd = d, best = j;
    }
    return best;
  }
  // The n nearest centroids, nearest first (top-n overlapping shards).
  std::vector<int> rank(const float* z, int n) const {
    std::vector<double> d(k_);
    for (int j = 0; j < k_; ++j) d[j] = dist2(z, &c_[std::size_t(j) * dim_], dim_);
    std::vector<int> idx(k_);
    std::iota(idx.begin(), idx.end(), 0);
    std::stable_sort(idx.begin(), idx.end(), [&](int a, int b) { return d[a] < d[b]; });
    idx.resize(std::min(n, k_));
    return idx;
  }

 private:
  // k-means++: the first centroid uniform, then each proportional to squared distance.
  static std::vector<float> plus_plus(const std::vector<float>& x, int n, int D, int k,
                                      std::uint64_t seed) {
    rng r(seed);
    std::vector<float> c(std::size_t(k) * D);
    std::vector<double> d2(n, std::numeric_limits<double>::infinity());
    int first = int(r.below(std::uint64_t(n)));
    std::copy_n(&x[std::size_t(first) * D], D, &c[0]);
    for (int j = 1; j < k; ++j) {
      double total = 0;
      for (int i = 0; i < n; ++i) {
        d2[i] = std::min(d2[i], dist2(&x[std::size_t(i) * D], &c[std::size_t(j - 1) * D], D));
        total += d2[i];
      }
      double u = r.uniform() * total;
      int pick = n - 1;
      for (int i = 0; i < n; ++i) {
        u -= d2[i];
        if (u <= 0) {
          pick = i;
          break;
        }
      }
      std::copy_n(&x[std::size_t(pick) * D], D, &c[std::size_t(j) * D]);
    }
    return c;
  }
  static double dist2(const float* a, const float* b, int D) {
    double s = 0;
    for (int d = 0; d < D; ++d) s += double(a[d] - b[d]) * (a[d] - b[d]);
    return s;
  }
  int k_ = 0, dim_ = 0;
  std::vector<float> c_;
};

// product_kmeans_router: z = [z1 | z2] split in halves, one k-means per half, shard (i, j)
// → i·k2 + j: k1·k2 shards from k1 + k2 centroids.
class product_kmeans_router {
 public:
  using router_tag = void;

  static result<product_kmeans_router> fit(const std::vector<float>& x, int n, int D, int k1,
                                           int k2, kmeans_options o = {}) {
    if (D < 2) return error(errc::invalid_argument, "product_kmeans: dimension must be ≥ 2");
    const int h = D / 2;
    std::vector<float> a(std::size_t(n) * h), b(std::size_t(n) * (D - h));
    for (int i = 0; i < n; ++i) {
      std::copy_n(&x[std::size_t(i) * D], h, &a[std::size_t(i) * h]);
      std::copy_n(&x[std::size_t(i) * D + h], D - h, &b[std::size_t(i) * (D - h)]);
    }
    o.k = k1;
    auto r1 = kmeans_router::fit(a, n, h, o);
    if (!r1) return r1.error();
    o.k = k2;
    o.seed += 1;
    auto r2 = kmeans_router::fit(b, n, D - h, o);
    if (!r2) return r2.error();
    product_kmeans_router p;
    p.a_ = std::move(*r1);
    p.b_ = std::move(*r2);
    p.h_ = h;
    return p;
  }
  int k() const noexcept { return a_.k() * b_.k(); }
  int route(const float* z) const { return a_.route(z) * b_.k() + b_.route(z + h_); }
  const kmeans_router& first() const { return a_; }
  const kmeans_router& second() const { return b_; }

 private:
  kmeans_router a_, b_;
  int h_ = 0;
};

static_assert(RankingRouter<kmeans_router>);
static_assert(Router<product_kmeans_router>);

}  // namespace paco::route
