#pragma once
// Host twins of the element-wise CUDA kernels in kernels/paco/: the fused outer Nesterov update,
// the fused AdamW step and the error-feedback passes. Each loops over one PACO_HD formula of
// detail/formulas.hpp, the same function the kernel calls, so the math is tested on the CPU.
// (The outer/ and optim/ folders may call these or the formulas directly.)
//
// Legend: n elements; θ parameters, b outer momentum, Δ pseudo-gradient, m/v AdamW moments.

#include <cmath>

#include "paco/compress/detail/formulas.hpp"
#include "paco/core/error.hpp"
#include "paco/core/slice.hpp"

namespace paco::compress {

using formula::adamw_scalars;

// The per-step scalars of AdamW at step t (PyTorch semantics: decoupled decay, bias correction).
// Requires: t >= 1; 0 <= β1, β2 < 1. Ensures: step_size = lr/(1−β1^t), bc2_sqrt = sqrt(1−β2^t).
inline adamw_scalars make_adamw_scalars(float lr, float beta1, float beta2, float eps,
                                        float weight_decay, long t) {
  const double bc1 = 1.0 - std::pow(static_cast<double>(beta1), static_cast<double>(t));
  const double bc2 = 1.0 - std::pow(static_cast<double>(beta2), static_cast<double>(t));
  return {lr,
          beta1,
          beta2,
          eps,
          1.0f - lr * weight_decay,
          static_cast<float>(lr / bc1),
          static_cast<float>(std::sqrt(bc2))};
}

// Fused outer Nesterov: b ← μ·b + Δ; θ ← θ − η·(Δ + μ·b).
// Requires: θ, b, Δ of equal size. Cost: reads 12n, writes 8n bytes.
inline status nesterov_update(slice<float> theta, slice<float> b, slice<const float> delta,
                              float mu, float eta) {
  if (theta.size() != b.size() || theta.size() != delta.size())
    return {errc::mismatch, "nesterov_update: θ, b and Δ differ in size"};
  float* t = theta.data();
  float* m = b.data();
  const float* d = delta.data();
  for (std::size_t i = 0; i < theta.size(); ++i) formula::nesterov_step(t[i], m[i], d[i], mu, eta);
  return {};
}

// Fused AdamW step with scalars k (make_adamw_scalars). Requires: equal sizes.
// Cost: reads 16n, writes 12n bytes.
inline status adamw_update(slice<float> theta, slice<float> m, slice<float> v, slice<const float> g,
                           const adamw_scalars& k) {
  if (theta.size() != m.size() || theta.size() != v.size() || theta.size() != g.size())
    return {errc::mismatch, "adamw_update: θ, m, v and g differ in size"};
  float* t = theta.data();
  float* mm = m.data();
  float* vv = v.data();
  const float* gg = g.data();
  for (std::size_t i = 0; i < theta.size(); ++i) formula::adamw_step(t[i], mm[i], vv[i], gg[i], k);
  return {};
}

}  // namespace paco::compress
