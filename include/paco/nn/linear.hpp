#pragma once
// linear: y = x Wᵀ + b.   θ = [W (out,in) | b (out)]  (PyTorch nn.Linear layout)

#include <cmath>

#include "paco/nn/concepts.hpp"
#include "paco/nn/gemm.hpp"

namespace paco::nn {

struct linear {
  int in = 0;
  int out = 0;
  bool bias = true;
  float init_std = 0.02f;  // N(0, init_std²) weights, zero bias

  std::size_t param_count() const { return std::size_t(in) * out + (bias ? out : 0); }
  int in_width() const { return in; }
  int out_width() const { return out; }
  std::size_t cache_size(dims) const { return 0; }
  std::size_t scratch_bytes(dims) const { return 0; }

  template <class T>
  void init(T* theta, rng& r) const {
    for (std::size_t i = 0; i < std::size_t(in) * out; ++i) theta[i] = T(init_std * r.normal());
    if (bias)
      for (int i = 0; i < out; ++i) theta[std::size_t(in) * out + i] = T(0);
  }

  // x (N,in) → y (N,out).  Cost: 2·N·in·out flops.
  template <class T>
  void forward(const T* theta, const T* x, T* y, T*, dims d, context&) const {
    const int N = d.rows();
    const T* W = theta;  // (out,in)
    if (bias) {
      const T* b = theta + std::size_t(in) * out;
      for (int n = 0; n < N; ++n)
        for (int o = 0; o < out; ++o) y[std::size_t(n) * out + o] = b[o];
    }
    gemm<T>(trans::no, trans::yes, N, out, in, T(1), x, in, W, in, bias ? T(1) : T(0), y, out);
  }

  // dx (N,in) += dy W;  dW += dyᵀ x;  db += Σ_n dy.   Cost: 4·N·in·out flops.
  template <class T>
  void backward(const T* theta, const T* x, const T* dy, T* dx, T* dtheta, const T*, dims d,
                context&) const {
    const int N = d.rows();
    if (dx) gemm<T>(trans::no, trans::no, N, in, out, T(1), dy, out, theta, in, T(1), dx, in);
    gemm<T>(trans::yes, trans::no, out, in, N, T(1), dy, out, x, in, T(1), dtheta, in);
    if (bias) {
      T* db = dtheta + std::size_t(in) * out;
      for (int n = 0; n < N; ++n)
        for (int o = 0; o < out; ++o) db[o] += dy[std::size_t(n) * out + o];
    }
  }
};
static_assert(Module<linear>);

}  // namespace paco::nn
