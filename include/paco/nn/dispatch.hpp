#pragma once
// The calls a composite module (seq, residual, repeat, block_lm) makes, routed by the context
// type, so that one composition runs on every backend (docs/gpu.md):
//   module_forward / module_backward   a child's pass: the module's own member when it takes
//                                      this context (every module takes nn::context; composites
//                                      take any), else an overload for the context's backend
//                                      found by argument-dependent lookup (kernels/paco/nn/
//                                      dispatch.cuh gives the leaves' cuda_context overloads)
//   zero, accumulate, copy             the composites' own elementwise work on activations
//   loss_and_grad                      cross-entropy over logits, the gradient in place
// Composites call these unqualified. A context type provides take<T>(n) and a frame type (an
// RAII mark of its scratch stack), as nn::context does.

#include <algorithm>
#include <cstddef>
#include <cstdint>

#include "paco/nn/concepts.hpp"
#include "paco/nn/cross_entropy.hpp"

namespace paco::nn {

// clang-format off
template <class M, class T, class X, class Ctx>
  requires requires(const M& m, const T* theta, const X* x, T* y, T* cache, dims d, Ctx& ctx) {
    m.forward(theta, x, y, cache, d, ctx);
  }
void module_forward(const M& m, const T* theta, const X* x, T* y, T* cache, dims d, Ctx& ctx) {
  m.forward(theta, x, y, cache, d, ctx);
}

template <class M, class T, class X, class Ctx>
  requires requires(const M& m, const T* theta, const X* x, const T* dy, T* dx, T* dtheta,
                    const T* cache, dims d, Ctx& ctx) {
    m.backward(theta, x, dy, dx, dtheta, cache, d, ctx);
  }
void module_backward(const M& m, const T* theta, const X* x, const T* dy, T* dx, T* dtheta,
                     const T* cache, dims d, Ctx& ctx) {
  m.backward(theta, x, dy, dx, dtheta, cache, d, ctx);
}
// clang-format on

// p[0, n) = 0.
template <class T>
void zero(context&, T* p, std::size_t n) {
  std::fill(p, p + n, T(0));
}
// y[i] += x[i] for i < n.
template <class T>
void accumulate(context&, T* y, const T* x, std::size_t n) {
  for (std::size_t i = 0; i < n; ++i) y[i] += x[i];
}
// y[0, n) = x[0, n).
template <class T>
void copy(context&, T* y, const T* x, std::size_t n) {
  std::copy(x, x + n, y);
}

// The mean cross-entropy (nats) of logits (N, V) against targets; with dlogits (may alias
// logits) it writes ∂(scale · mean loss)/∂logits there. See nn/cross_entropy.hpp.
inline double loss_and_grad(context&, const float* logits, const std::int32_t* targets,
                            float* dlogits, int N, int V, float scale = 1.0f) {
  return cross_entropy<float>(logits, targets, dlogits, N, V, scale);
}

}  // namespace paco::nn
