#pragma once
// residual<M>: y = x + M(x).  θ and cache are M's. Requires: M.in_width() == M.out_width().

#include "paco/nn/concepts.hpp"
#include "paco/nn/dispatch.hpp"

namespace paco::nn {

template <Module M>
struct residual {
  M inner;

  std::size_t param_count() const { return inner.param_count(); }
  int in_width() const { return inner.in_width(); }
  int out_width() const { return inner.out_width(); }
  std::size_t cache_size(dims d) const { return inner.cache_size(d); }
  std::size_t scratch_bytes(dims d) const { return inner.scratch_bytes(d); }
  template <class T>
  void init(T* theta, rng& r) const {
    inner.init(theta, r);
  }

  template <class T, class Ctx>
  void forward(const T* theta, const T* x, T* y, T* cache, dims d, Ctx& ctx) const {
    module_forward(inner, theta, x, y, cache, d, ctx);
    accumulate(ctx, y, x, std::size_t(d.rows()) * out_width());
  }

  // dx += dy + M'ᵀ dy.
  template <class T, class Ctx>
  void backward(const T* theta, const T* x, const T* dy, T* dx, T* dtheta, const T* cache, dims d,
                Ctx& ctx) const {
    if (dx) accumulate(ctx, dx, dy, std::size_t(d.rows()) * out_width());
    module_backward(inner, theta, x, dy, dx, dtheta, cache, d, ctx);
  }
};

}  // namespace paco::nn
