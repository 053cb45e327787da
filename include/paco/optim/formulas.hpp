#pragma once
// The element-wise formula of the AdamW step, written once: optim::adamw (the trainer's code), its
// host twin optim::adamw_update (optim/adamw_update.hpp) and the kernel adamw_update
// (kernels/paco/elementwise.cuh) all call it, with the per-step scalars from make_adamw_scalars.
//
// Legend: θ parameter, g gradient, m/v first and second moments, t step (≥ 1), η learning rate,
// λ weight decay.

#include <cmath>

#include "paco/core/host_device.hpp"

namespace paco::optim::formula {

// Per-step scalars of AdamW, computed once on the host for step t ≥ 1.
struct adamw_scalars {
  float beta1, beta2;                      // β1, β2
  float one_minus_beta1, one_minus_beta2;  // 1 − β1, 1 − β2
  float eps;                               // ε
  float decay;                             // 1 − η·λ (decoupled weight decay factor)
  float step_size;                         // η / (1 − β1^t)
  float inv_sqrt_bc2;                      // 1 / sqrt(1 − β2^t)
};

// The scalars at step t with learning rate lr (PyTorch semantics: decoupled decay, bias
// correction), in float as the trainer has always computed them.
// Requires: t ≥ 1; 0 ≤ β1, β2 < 1. Ensures: step_size = lr/(1−β1^t),
// inv_sqrt_bc2 = 1/sqrt(1−β2^t), decay = 1 − lr·λ.
inline adamw_scalars make_adamw_scalars(float lr, float beta1, float beta2, float eps,
                                        float weight_decay, long t) {
  const float bc1 = 1.0f - std::pow(beta1, float(t));
  const float bc2 = 1.0f - std::pow(beta2, float(t));
  return {.beta1 = beta1,
          .beta2 = beta2,
          .one_minus_beta1 = 1.0f - beta1,
          .one_minus_beta2 = 1.0f - beta2,
          .eps = eps,
          .decay = 1.0f - lr * weight_decay,
          .step_size = lr / bc1,
          .inv_sqrt_bc2 = 1.0f / std::sqrt(bc2)};
}

// Square root on host and device (the host one is std::sqrt, as the trainer has always called it).
PACO_HD inline float sqrt_f(float x) {
#if defined(__CUDA_ARCH__)
  return sqrtf(x);
#else
  return std::sqrt(x);
#endif
}

// m ← β1·m + (1−β1)·g;  v ← β2·v + (1−β2)·g²;
// θ ← θ·(1 − ηλ) − step_size · m / (sqrt(v) · inv_sqrt_bc2 + ε).
// Requires: v ≥ 0. Ensures: θ, m, v updated in place. Cost: ≈ 12 flops and one square root.
// The operation order is the trainer's and part of its results: θ·(1 − ηλ) is evaluated before the
// square root, whose errno check ends a basic block, so GCC does not fuse it with the subtraction;
// computing the root first lets GCC fuse them and changes the last bit of θ.
PACO_HD inline void adamw_step(float& theta, float& m, float& v, float g, const adamw_scalars& k) {
  const float mi = k.beta1 * m + k.one_minus_beta1 * g;
  const float vi = k.beta2 * v + k.one_minus_beta2 * g * g;
  m = mi;
  v = vi;
  theta = theta * k.decay - k.step_size * mi / (sqrt_f(vi) * k.inv_sqrt_bc2 + k.eps);
}

}  // namespace paco::optim::formula
