#pragma once
// The element-wise formulas of the outer steps, written once. Nesterov's: outer::nesterov (the
// trainer's code), its host twin outer::nesterov_update (outer/nesterov_update.hpp) and the
// kernel nesterov_update (kernels/paco/elementwise.cuh) all call it.
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

// CO2's momentum update (Sun et al. 2024, fairscale-CO2's _perform_local_optimization):
// m ← β·m + Δ/p, with the staleness-gap penalty p given as its inverse inv_p = 1/p.
// Cost: 2 flops.
PACO_HD inline void co2_momentum(float& m, float delta, float beta, float inv_p) {
  m = beta * m + inv_p * delta;
}

}  // namespace paco::outer::formula
