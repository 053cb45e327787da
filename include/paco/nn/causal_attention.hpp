#pragma once
// causal_attention: multi-head causal self-attention (GPT-2), including its two projections.
//   x (B,T,C) → qkv = x Wqkvᵀ + bqkv (B,T,3C) → per head h: P = softmax(mask(q kᵀ/√hs)) (T,T),
//   a = P v (B,T,C) → y = a Wprojᵀ + bproj (B,T,C).       NH heads, hs = C/NH.
// θ = [Wqkv (3C,C) | bqkv (3C) | Wproj (C,C) | bproj (C)]      (PyTorch layout)
// cache = [qkv (B,T,3C) | P (B,NH,T,T) | a (B,T,C)]

#include <algorithm>
#include <cmath>
#include <limits>

#include <Eigen/Core>

#include "paco/nn/concepts.hpp"
#include "paco/nn/linear.hpp"

namespace paco::nn {

struct causal_attention {
  int C = 0;
  int NH = 1;
  float init_std = 0.02f;
  float proj_init_std = 0.02f;  // GPT-2 scales this by 1/√(2·layers)

  linear qkv() const { return {.in = C, .out = 3 * C, .init_std = init_std}; }
  linear proj() const { return {.in = C, .out = C, .init_std = proj_init_std}; }

  std::size_t param_count() const { return qkv().param_count() + proj().param_count(); }
  int in_width() const { return C; }
  int out_width() const { return C; }
  std::size_t cache_size(dims d) const {
    const std::size_t N = d.rows();
    return N * 3 * C + std::size_t(d.B) * NH * d.T * d.T + N * C;
  }
  std::size_t scratch_bytes(dims d) const {
    const std::size_t N = d.rows();
    return context::bytes_for<double>(N * 3 * C) + context::bytes_for<double>(N * C) +
           context::bytes_for<double>(std::size_t(d.T) * d.T);
  }

  template <class T>
  void init(T* theta, rng& r) const {
    qkv().init(theta, r);
    proj().init(theta + qkv().param_count(), r);
  }

  // Cost: 8·N·C² + 4·B·NH·T²·hs flops (projections + scores + mixing).
  template <class T>
  void forward(const T* theta, const T* x, T* y, T* cache, dims d, context& ctx) const {
    PACO_ASSERT(C % NH == 0, "channels must divide by heads");
    const int T_ = d.T, hs = C / NH, C3 = 3 * C;
    const std::size_t N = d.rows();
    T* qkv_ = cache;                                    // (B,T,3C)
    T* att = cache + N * C3;                            // (B,NH,T,T)
    T* a = att + std::size_t(d.B) * NH * T_ * T_;       // (B,T,C)
    qkv().forward(theta, x, qkv_, static_cast<T*>(nullptr), d, ctx);
    const T scale = T(1) / std::sqrt(T(hs));
    for (int b = 0; b < d.B; ++b)
      for (int h = 0; h < NH; ++h) {
        const T* q = qkv_ + std::size_t(b) * T_ * C3 + h * hs;
        const T* k = q + C;
        const T* v = q + 2 * C;
        T* P = att + (std::size_t(b) * NH + h) * T_ * T_;
        // S = q kᵀ · scale  (T,T)
        gemm<T>(trans::no, trans::yes, T_, T_, hs, scale, q, C3, k, C3, T(0), P, T_);
        for (int t = 0; t < T_; ++t) {  // causal softmax over j ≤ t; zero above
          T* row = P + std::size_t(t) * T_;
          Eigen::Map<Eigen::Array<T, Eigen::Dynamic, 1>> r(row, t + 1);
          r = (r - r.maxCoeff()).exp();
          r *= T(1) / r.sum();
          std::fill(row + t + 1, row + T_, T(0));
        }
        // a[b,:,h] = P v  (T,hs)
        T* ah = a + std::size_t(b) * T_ * C + h * hs;
        gemm<T>(trans::no, trans::no, T_, hs, T_, T(1), P, T_, v, C3, T(0), ah, C);
      }
    proj().forward(theta + qkv().param_count(), a, y, static_cast<T*>(nullptr), d, ctx);
  }

  template <class T>
  void backward(const T* theta, const T* x, const T* dy, T* dx, T* dtheta, const T* cache, dims d,
                context& ctx) const {
    context::frame f(ctx);
    const int T_ = d.T, hs = C / NH, C3 = 3 * C;
    const std::size_t N = d.rows();
    const T* qkv_ = cache;
    const T* att = cache + N * C3;
    const T* a = att + std::size_t(d.B) * NH * T_ * T_;
    const std::size_t pq = qkv().param_count();
    T* da = ctx.take<T>(N * C);
    T* dqkv = ctx.take<T>(N * C3);
    T* dS = ctx.take<T>(std::size_t(T_) * T_);
    std::fill(da, da + N * C, T(0));
    std::fill(dqkv, dqkv + N * C3, T(0));
    proj().backward(theta + pq, a, dy, da, dtheta + pq, static_cast<T*>(nullptr), d, ctx);
    const T scale = T(1) / std::sqrt(T(hs));
    for (int b = 0; b < d.B; ++b)
      for (int h = 0; h < NH; ++h) {
        const std::size_t off = std::size_t(b) * T_ * C3 + h * hs;
        const T *q = qkv_ + off, *k = q + C, *v = q + 2 * C;
        T *dq = dqkv + off, *dk = dq + C, *dv = dq + 2 * C;
        const T* P = att + (std::size_t(b) * NH + h) * T_ * T_;
        const T* dah = da + std::size_t(b) * T_ * C + h * hs;
        // dP = da vᵀ (T,T);  dv += Pᵀ da (T,hs)
        gemm<T>(trans::no, trans::yes, T_, T_, hs, T(1), dah, C, v, C3, T(0), dS, T_);
        gemm<T>(trans::yes, trans::no, T_, hs, T_, T(1), P, T_, dah, C, T(1), dv, C3);
        // dS = P ⊙ (dP − Σ_j P dP) · scale, causal
        for (int t = 0; t < T_; ++t) {
          using arr = Eigen::Array<T, Eigen::Dynamic, 1>;
          Eigen::Map<const arr> p(P + std::size_t(t) * T_, t + 1);
          Eigen::Map<arr> g(dS + std::size_t(t) * T_, t + 1);
          const T dot = (p * g).sum();
          g = p * (g - dot) * scale;
          std::fill(dS + std::size_t(t) * T_ + t + 1, dS + std::size_t(t + 1) * T_, T(0));
        }
        // dq += dS k;  dk += dSᵀ q
        gemm<T>(trans::no, trans::no, T_, hs, T_, T(1), dS, T_, k, C3, T(1), dq, C3);
        gemm<T>(trans::yes, trans::no, T_, hs, T_, T(1), dS, T_, q, C3, T(1), dk, C3);
      }
    qkv().backward(theta, x, dqkv, dx, dtheta, static_cast<T*>(nullptr), d, ctx);
  }
};
static_assert(Module<causal_attention>);

}  // namespace paco::nn
