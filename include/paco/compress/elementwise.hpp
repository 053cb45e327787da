#pragma once
// Host twins of the element-wise CUDA kernels in kernels/paco/: the fused outer Nesterov update,
// the fused AdamW step and the error-feedback passes. The update steps are the trainer's own code:
// nesterov_update runs outer::nesterov, adamw_update loops over optim::formula::adamw_step as
// optim::adamw does, and the kernels call the same PACO_HD formulas (optim/formulas.hpp,
// outer/formulas.hpp), so the kernel is tested against what the trainer computes.
//
// Legend: n elements; θ parameters, b outer momentum, Δ pseudo-gradient, m/v AdamW moments.

#include "paco/core/error.hpp"
#include "paco/core/slice.hpp"
#include "paco/optim/formulas.hpp"
#include "paco/outer/nesterov.hpp"

namespace paco::compress {

using optim::formula::adamw_scalars;
using optim::formula::make_adamw_scalars;

// Fused outer Nesterov (outer::nesterov): b ← μ·b + Δ; θ ← θ − η·(Δ + μ·b).
// Requires: θ, b, Δ of equal size. Cost: reads 12n, writes 8n bytes.
inline status nesterov_update(slice<float> theta, slice<float> b, slice<const float> delta,
                              float mu, float eta) {
  if (theta.size() != b.size() || theta.size() != delta.size())
    return {errc::mismatch, "nesterov_update: θ, b and Δ differ in size"};
  outer::nesterov{.lr = eta, .momentum = mu}.step(theta.span(), delta.span(), b.span());
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
  for (std::size_t i = 0; i < theta.size(); ++i)
    optim::formula::adamw_step(t[i], mm[i], vv[i], gg[i], k);
  return {};
}

}  // namespace paco::compress
