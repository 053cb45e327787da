#pragma once
// layer_norm: y = (x − mean) · rstd · γ + β over the last dimension.   θ = [γ (C) | β (C)]
// cache = [mean (N) | rstd (N)].

#include <cmath>

#include <Eigen/Core>

#include "paco/nn/concepts.hpp"

namespace paco::nn {

struct layer_norm {
  int C = 0;
  float eps = 1e-5f;

  std::size_t param_count() const { return 2 * std::size_t(C); }
  int in_width() const { return C; }
  int out_width() const { return C; }
  std::size_t cache_size(dims d) const { return 2 * std::size_t(d.rows()); }
  std::size_t scratch_bytes(dims) const { return 0; }

  template <class T>
  void init(T* theta, rng&) const {
    for (int i = 0; i < C; ++i) theta[i] = T(1), theta[C + i] = T(0);
  }

  // Cost: ≈ 8·N·C flops.
  template <class T>
  void forward(const T* theta, const T* x, T* y, T* cache, dims d, context&) const {
    const int N = d.rows();
    const T* g = theta;
    const T* b = theta + C;
    T* mean = cache;
    T* rstd = cache + N;
    using arr = Eigen::Array<T, Eigen::Dynamic, 1>;
    Eigen::Map<const arr> ga(g, C), ba(b, C);
    for (int n = 0; n < N; ++n) {
      Eigen::Map<const arr> xr(x + std::size_t(n) * C, C);
      Eigen::Map<arr> yr(y + std::size_t(n) * C, C);
      const T m = xr.sum() / T(C);
      const T v = (xr - m).square().sum() / T(C);
      const T s = T(1) / std::sqrt(v + T(eps));
      yr = (xr - m) * (s * ga) + ba;
      mean[n] = m;
      rstd[n] = s;
    }
  }

  // dx += rstd·(dx̂ − mean(dx̂) − x̂·mean(dx̂·x̂)), dx̂ = γ·dy;  dγ += Σ dy·x̂;  dβ += Σ dy.
  template <class T>
  void backward(const T* theta, const T* x, const T* dy, T* dx, T* dtheta, const T* cache, dims d,
                context&) const {
    const int N = d.rows();
    const T* g = theta;
    T* dg = dtheta;
    T* db = dtheta + C;
    const T* mean = cache;
    const T* rstd = cache + N;
    for (int n = 0; n < N; ++n) {
      const T* xr = x + std::size_t(n) * C;
      const T* dyr = dy + std::size_t(n) * C;
      const T m = mean[n], s = rstd[n];
      T sum_dn = 0, sum_dn_xh = 0;
      for (int c = 0; c < C; ++c) {
        T xh = (xr[c] - m) * s;
        T dn = g[c] * dyr[c];
        sum_dn += dn;
        sum_dn_xh += dn * xh;
        dg[c] += dyr[c] * xh;
        db[c] += dyr[c];
      }
      sum_dn /= T(C);
      sum_dn_xh /= T(C);
      if (!dx) continue;
      T* dxr = dx + std::size_t(n) * C;
      for (int c = 0; c < C; ++c) {
        T xh = (xr[c] - m) * s;
        dxr[c] += s * (g[c] * dyr[c] - sum_dn - xh * sum_dn_xh);
      }
    }
  }
};
static_assert(Module<layer_norm>);

}  // namespace paco::nn
