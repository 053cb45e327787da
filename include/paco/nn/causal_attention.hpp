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
  int tile = 64;                // query rows per causal tile (blocks above the diagonal skipped)

  linear qkv() const { return {.in = C, .out = 3 * C, .init_std = init_std}; }
  linear proj() const { return {.in = C, .out = C, .init_std = proj_init_std}; }

  std::size_t param_count() const { return qkv().param_count() + proj().param_count(); }
  int in_width() const { return C; }
  int out_width() const { return C; }
  std::size_t cache_size(dims d) const {
    const std::size_t N = d.rows();
    return N * 3 * C + std::size_t(d.B) * NH * d.T * d.T + N * C;
  }
  // Covers the backward on either backend: the host takes dS for one head, the device twin
  // (kernels/paco/nn/attention.cuh) for all NH heads of a sequence, in floats, 256-aligned.
  std::size_t scratch_bytes(dims d) const {
    const std::size_t N = d.rows(), TT = std::size_t(d.T) * d.T;
    const std::size_t host = context::bytes_for<double>(N * 3 * C) +
                             context::bytes_for<double>(N * C) + context::bytes_for<double>(TT);
    const std::size_t device = 4 * (N * 4 * C + NH * TT) + 3 * 256;
    return std::max(host, device);
  }

  template <class T>
  void init(T* theta, rng& r) const {
    qkv().init(theta, r);
    proj().init(theta + qkv().param_count(), r);
  }

  // Cost: 8·N·C² + ≈ 2·B·NH·T²·hs·(1 + tile/T) flops (projections + causal scores + mixing).
  template <class T>
  void forward(const T* theta, const T* x, T* y, T* cache, dims d, context& ctx) const {
    PACO_ASSERT(C % NH == 0, "channels must divide by heads");
    const int T_ = d.T, hs = C / NH, C3 = 3 * C;
    const std::size_t N = d.rows();
    T* qkv_ = cache;                               // (B,T,3C)
    T* att = cache + N * C3;                       // (B,NH,T,T)
    T* a = att + std::size_t(d.B) * NH * T_ * T_;  // (B,T,C)
    qkv().forward(theta, x, qkv_, static_cast<T*>(nullptr), d, ctx);
    const T scale = T(1) / std::sqrt(T(hs));
    for (int b = 0; b < d.B; ++b)
      for (int h = 0; h < NH; ++h) {
        const T* q = qkv_ + std::size_t(b) * T_ * C3 + h * hs;
        const T* k = q + C;
        const T* v = q + 2 * C;
        T* P = att + (std::size_t(b) * NH + h) * T_ * T_;
        // Row tiles of `tile` queries: tile [r0, r1) only sees keys [0, r1) (causal), so the
        // blocks above the diagonal are never computed.
        for (int r0 = 0; r0 < T_; r0 += tile) {
          const int r1 = std::min(T_, r0 + tile), rows = r1 - r0;
          // S[r0:r1, 0:r1] = q[r0:r1] k[0:r1]ᵀ · scale
          gemm<T>(trans::no, trans::yes, rows, r1, hs, scale, q + std::size_t(r0) * C3, C3, k, C3,
                  T(0), P + std::size_t(r0) * T_, T_);
          for (int t = r0; t < r1; ++t) {  // causal softmax over j ≤ t; zero above
            T* row = P + std::size_t(t) * T_;
            Eigen::Map<Eigen::Array<T, Eigen::Dynamic, 1>> r(row, t + 1);
            r = (r - r.maxCoeff()).exp();
            r *= T(1) / r.sum();
            std::fill(row + t + 1, row + T_, T(0));
          }
          // a[b, r0:r1, h] = P[r0:r1, 0:r1] v[0:r1]
          T* ah = a + (std::size_t(b) * T_ + r0) * C + h * hs;
          gemm<T>(trans::no, trans::no, rows, hs, r1, T(1), P + std::size_t(r0) * T_, T_, v, C3,
                  T(0), ah, C);
        }
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
        for (int r0 = 0; r0 < T_; r0 += tile) {
          const int r1 = std::min(T_, r0 + tile), rows = r1 - r0;
          const T* Pr = P + std::size_t(r0) * T_;
          T* dSr = dS + std::size_t(r0) * T_;
          const T* dar = dah + std::size_t(r0) * C;
          // dP[r0:r1, 0:r1] = da[r0:r1] v[0:r1]ᵀ;  dv[0:r1] += P[r0:r1, 0:r1]ᵀ da[r0:r1]
          gemm<T>(trans::no, trans::yes, rows, r1, hs, T(1), dar, C, v, C3, T(0), dSr, T_);
          gemm<T>(trans::yes, trans::no, r1, hs, rows, T(1), Pr, T_, dar, C, T(1), dv, C3);
          // dS = P ⊙ (dP − Σ_j P dP) · scale over j ≤ t, zero above (within the tile's keys)
          for (int t = r0; t < r1; ++t) {
            using arr = Eigen::Array<T, Eigen::Dynamic, 1>;
            Eigen::Map<const arr> p(P + std::size_t(t) * T_, t + 1);
            Eigen::Map<arr> g(dS + std::size_t(t) * T_, t + 1);
            const T dot = (p * g).sum();
            g = p * (g - dot) * scale;
            std::fill(dS + std::size_t(t) * T_ + t + 1, dS + std::size_t(t) * T_ + r1, T(0));
          }
          // dq[r0:r1] += dS[r0:r1, 0:r1] k[0:r1];  dk[0:r1] += dS[r0:r1, 0:r1]ᵀ q[r0:r1]
          gemm<T>(trans::no, trans::no, rows, hs, r1, T(1), dSr, T_, k, C3, T(1),
                  dq + std::size_t(r0) * C3, C3);
          gemm<T>(trans::yes, trans::no, r1, hs, rows, T(1), dSr, T_, q + std::size_t(r0) * C3, C3,
                  T(1), dk, C3);
        }
      }
    qkv().backward(theta, x, dqkv, dx, dtheta, static_cast<T*>(nullptr), d, ctx);
  }
};
static_assert(Module<causal_attention>);

}  // namespace paco::nn
