#pragma once
// lm_head: logits = x Wᵀ (no bias).  x (N,C) → logits (N,V).   θ = W (V,C)
// With weight tying the head has no θ of its own (param_count() == 0): the caller passes the
// token embedding table wte (V,C) as θ and its gradient as dθ (backward accumulates into it).

#include "paco/nn/concepts.hpp"
#include "paco/nn/linear.hpp"

namespace paco::nn {

struct lm_head {
  int C = 0;
  int V = 256;
  bool tied = false;
  float init_std = 0.02f;

  linear map() const { return {.in = C, .out = V, .bias = false, .init_std = init_std}; }
  std::size_t param_count() const { return tied ? 0 : map().param_count(); }
  int in_width() const { return C; }
  int out_width() const { return V; }
  std::size_t cache_size(dims) const { return 0; }
  std::size_t scratch_bytes(dims) const { return 0; }
  template <class T>
  void init(T* theta, rng& r) const {
    if (!tied) map().init(theta, r);
  }
  template <class T>
  void forward(const T* theta, const T* x, T* y, T*, dims d, context& ctx) const {
    map().forward(theta, x, y, static_cast<T*>(nullptr), d, ctx);
  }
  template <class T>
  void backward(const T* theta, const T* x, const T* dy, T* dx, T* dtheta, const T*, dims d,
                context& ctx) const {
    map().backward(theta, x, dy, dx, dtheta, static_cast<T*>(nullptr), d, ctx);
  }
};
static_assert(Module<lm_head>);

}  // namespace paco::nn
