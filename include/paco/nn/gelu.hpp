#pragma once
// gelu: the tanh approximation of GPT-2 (PyTorch nn.GELU(approximate="tanh")), element-wise.
// No parameters, no cache.

#include <cmath>

#include "paco/nn/concepts.hpp"

namespace paco::nn {

struct gelu {
  int C = 0;

  std::size_t param_count() const { return 0; }
  int in_width() const { return C; }
  int out_width() const { return C; }
  std::size_t cache_size(dims) const { return 0; }
  std::size_t scratch_bytes(dims) const { return 0; }
  template <class T>
  void init(T*, rng&) const {}

  static constexpr double k0 = 0.7978845608028654;  // sqrt(2/π)
  static constexpr double k1 = 0.044715;

  template <class T>
  void forward(const T*, const T* x, T* y, T*, dims d, context&) const {
    const std::size_t n = std::size_t(d.rows()) * C;
    for (std::size_t i = 0; i < n; ++i) {
      T v = x[i];
      T u = T(k0) * (v + T(k1) * v * v * v);
      y[i] = T(0.5) * v * (T(1) + std::tanh(u));
    }
  }

  // dx += dy · gelu'(x).
  template <class T>
  void backward(const T*, const T* x, const T* dy, T* dx, T*, const T*, dims d, context&) const {
    if (!dx) return;
    const std::size_t n = std::size_t(d.rows()) * C;
    for (std::size_t i = 0; i < n; ++i) {
      T v = x[i];
      T u = T(k0) * (v + T(k1) * v * v * v);
      T t = std::tanh(u);
      T du = T(k0) * (T(1) + T(3 * k1) * v * v);
      dx[i] += dy[i] * (T(0.5) * (T(1) + t) + T(0.5) * v * (T(1) - t * t) * du);
    }
  }
};
static_assert(Module<gelu>);

}  // namespace paco::nn
