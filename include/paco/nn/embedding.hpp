#pragma once
// embedding: token plus learned position embedding.  x = token ids (B,T) → y (B,T,C)
// y[b,t] = wte[x[b,t]] + wpe[t].   θ = [wte (V,C) | wpe (ctx,C)]

#include <cstdint>

#include "paco/nn/concepts.hpp"

namespace paco::nn {

struct embedding {
  static constexpr bool takes_tokens = true;
  int V = 256;  // vocabulary
  int ctx = 0;  // maximum sequence length
  int C = 0;    // channels
  float init_std = 0.02f;

  std::size_t param_count() const { return std::size_t(V + ctx) * C; }
  int in_width() const { return 1; }
  int out_width() const { return C; }
  std::size_t cache_size(dims) const { return 0; }
  std::size_t scratch_bytes(dims) const { return 0; }

  template <class T>
  void init(T* theta, rng& r) const {
    for (std::size_t i = 0; i < param_count(); ++i) theta[i] = T(init_std * r.normal());
  }

  // Requires: 0 ≤ x < V; d.T ≤ ctx.
  template <class T>
  void forward(const T* theta, const std::int32_t* x, T* y, T*, dims d, context&) const {
    PACO_ASSERT(d.T <= ctx, "sequence longer than the embedding's context");
    const T* wte = theta;
    const T* wpe = theta + std::size_t(V) * C;
    for (int b = 0; b < d.B; ++b)
      for (int t = 0; t < d.T; ++t) {
        const std::size_t n = std::size_t(b) * d.T + t;
        const T* e = wte + std::size_t(x[n]) * C;
        const T* p = wpe + std::size_t(t) * C;
        T* yr = y + n * C;
        for (int c = 0; c < C; ++c) yr[c] = e[c] + p[c];
      }
  }

  // dwte[x] += dy;  dwpe[t] += dy.  (No dx: the input is ids.)
  template <class T>
  void backward(const T*, const std::int32_t* x, const T* dy, T*, T* dtheta, const T*, dims d,
                context&) const {
    T* dwte = dtheta;
    T* dwpe = dtheta + std::size_t(V) * C;
    for (int b = 0; b < d.B; ++b)
      for (int t = 0; t < d.T; ++t) {
        const std::size_t n = std::size_t(b) * d.T + t;
        const T* g = dy + n * C;
        T* e = dwte + std::size_t(x[n]) * C;
        T* p = dwpe + std::size_t(t) * C;
        for (int c = 0; c < C; ++c) e[c] += g[c], p[c] += g[c];
      }
  }
};
static_assert(Module<embedding>);

}  // namespace paco::nn
