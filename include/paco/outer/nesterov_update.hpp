#pragma once
// nesterov_update: the outer Nesterov step over slices, the host twin of the CUDA kernel
// kernels::nesterov_update (kernels/paco/elementwise.cuh). It runs the trainer's own code,
// outer::nesterov::step, and the kernel calls the same PACO_HD formula (outer/formulas.hpp), so
// the kernel is tested against what the trainer computes.
//
// Legend: n elements; θ parameters, b outer momentum, Δ pseudo-gradient, μ momentum, η lr.

#include "paco/core/error.hpp"
#include "paco/core/slice.hpp"
#include "paco/outer/nesterov.hpp"

namespace paco::outer {

// b ← μ·b + Δ; θ ← θ − η·(Δ + μ·b), as outer::nesterov{.lr = η, .momentum = μ}.
// Requires: θ, b, Δ of equal size (else errc::mismatch, nothing written).
// Ensures: θ and b are outer::nesterov::step's, bit for bit. Cost: reads 12n, writes 8n bytes.
inline status nesterov_update(slice<float> theta, slice<float> b, slice<const float> delta,
                              float mu, float eta) {
  if (theta.size() != b.size() || theta.size() != delta.size())
    return {errc::mismatch, "nesterov_update: θ, b and Δ differ in size"};
  nesterov{.lr = eta, .momentum = mu}.step(theta.span(), delta.span(), b.span());
  return {};
}

}  // namespace paco::outer
