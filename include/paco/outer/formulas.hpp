#pragma once
// The element-wise formula of the outer Nesterov step, written once: outer::nesterov (the
// trainer's code), its host twin compress::nesterov_update and the kernel nesterov_update
// (kernels/paco/elementwise.cuh) all call it.
//
// Legend: θ parameter, b outer momentum, Δ pseudo-gradient, μ momentum, η learning rate.

#include "paco/core/host_device.hpp"

namespace paco::outer::formula {

// PyTorch SGD with nesterov=True: b ← μ·b + Δ; θ ← θ − η·(Δ + μ·b).
// Requires: nothing. Ensures: b and θ updated in place; plain multiply-adds, which the compiler
// may contract (GCC with FMA and nvcc fuse both into fma(μ, b, Δ) and fma(−η, ·, θ)).
// Cost: 4 flops.
PACO_HD inline void nesterov_step(float& theta, float& b, float delta, float mu, float eta) {
  const float bi = mu * b + delta;
  b = bi;
  theta -= eta * (delta + mu * bi);
}

}  // namespace paco::outer::formula
