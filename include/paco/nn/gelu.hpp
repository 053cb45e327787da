#pragma once
// gelu: the tanh approximation of GPT-2 (PyTorch nn.GELU(approximate="tanh")), element-wise.
// No parameters, no cache.

#include <algorithm>
#include <cmath>

#include <Eigen/Core>

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

  // Element-wise over Eigen arrays, so tanh is vectorised (Eigen's rational approximation for
  // float, std::tanh for double), in blocks that stay in L1.
  template <class T>
  void forward(const T*, const T* x, T* y, T*, dims d, context&) const {
    using arr = Eigen::Array<T, Eigen::Dynamic, 1>;
    const std::size_t n = std::size_t(d.rows()) * C;
    for (std::size_t i = 0; i < n; i += block) {
      const Eigen::Index m = Eigen::Index(std::min(block, n - i));
      Eigen::Map<const arr> v(x + i, m);
      Eigen::Map<arr> out(y + i, m);
      out = T(0.5) * v * (T(1) + (T(k0) * (v + T(k1) * v * v * v)).tanh());
    }
  }

  // dx += dy · gelu'(x).
  template <class T>
  void backward(const T*, const T* x, const T* dy, T* dx, T*, const T*, dims d, context&) const {
    if (!dx) return;
    using arr = Eigen::Array<T, Eigen::Dynamic, 1>;
    const std::size_t n = std::size_t(d.rows()) * C;
    alignas(64) T t[block];
    for (std::size_t i = 0; i < n; i += block) {
      const Eigen::Index m = Eigen::Index(std::min(block, n - i));
      Eigen::Map<const arr> v(x + i, m), g(dy + i, m);
      Eigen::Map<arr> out(dx + i, m), th(t, m);
      th = (T(k0) * (v + T(k1) * v * v * v)).tanh();
      out += g * (T(0.5) * (T(1) + th) +
                  T(0.5) * v * (T(1) - th * th) * (T(k0) * (T(1) + T(3 * k1) * v * v)));
    }
  }

 private:
  static constexpr std::size_t block = 1024;
};
static_assert(Module<gelu>);

}  // namespace paco::nn
