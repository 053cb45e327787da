#pragma once
// repeat<M>: n copies of one module type in sequence (n is a run-time value).
// θ = n × M's θ back to back; cache = [n × M's cache | boundary activations (n−1) × (N,C)].
// Requires: M.in_width() == M.out_width().

#include <algorithm>
#include <vector>

#include "paco/nn/concepts.hpp"
#include "paco/nn/dispatch.hpp"

namespace paco::nn {

template <Module M>
struct repeat {
  M block;
  int n = 1;

  std::size_t param_count() const { return std::size_t(n) * block.param_count(); }
  int in_width() const { return block.in_width(); }
  int out_width() const { return block.out_width(); }
  std::size_t cache_size(dims d) const {
    return std::size_t(n) * block.cache_size(d) + std::size_t(n - 1) * act(d);
  }
  std::size_t scratch_bytes(dims d) const {
    return 2 * context::bytes_for<double>(act(d)) + block.scratch_bytes(d);
  }
  template <class T>
  void init(T* theta, rng& r) const {
    for (int i = 0; i < n; ++i) block.init(theta + i * block.param_count(), r);
  }

  template <class T, class Ctx>
  void forward(const T* theta, const T* x, T* y, T* cache, dims d, Ctx& ctx) const {
    if (n == 0) return copy(ctx, y, x, act(d));
    const std::size_t P = block.param_count(), K = block.cache_size(d);
    T* acts = cache + std::size_t(n) * K;
    const T* in = x;
    for (int i = 0; i < n; ++i) {
      T* out = i + 1 == n ? y : acts + std::size_t(i) * act(d);
      module_forward(block, theta + i * P, in, out, cache + i * K, d, ctx);
      in = out;
    }
  }

  template <class T, class Ctx>
  void backward(const T* theta, const T* x, const T* dy, T* dx, T* dtheta, const T* cache, dims d,
                Ctx& ctx) const {
    if (n == 0) {
      if (dx) accumulate(ctx, dx, dy, act(d));
      return;
    }
    typename Ctx::frame f(ctx);
    const std::size_t P = block.param_count(), K = block.cache_size(d);
    const T* acts = cache + std::size_t(n) * K;
    T* buf[2] = {ctx.template take<T>(act(d)), ctx.template take<T>(act(d))};
    const T* g = dy;
    for (int i = n - 1; i >= 0; --i) {
      const T* in = i == 0 ? x : acts + std::size_t(i - 1) * act(d);
      T* din = i == 0 ? dx : buf[i % 2];
      if (i > 0) zero(ctx, din, act(d));
      module_backward(block, theta + i * P, in, g, din, dtheta + i * P, cache + i * K, d, ctx);
      g = din;
    }
  }

 private:
  std::size_t act(dims d) const { return std::size_t(d.rows()) * block.out_width(); }
};

}  // namespace paco::nn
