#pragma once
// adamw_update: the AdamW step over slices, the host twin of the CUDA kernel
// kernels::adamw_update (kernels/paco/elementwise.cuh). It loops over formula::adamw_step as
// optim::adamw::step does, and the kernel calls the same PACO_HD formula (optim/formulas.hpp),
// so the kernel is tested against what the trainer computes.
//
// Legend: n elements; θ parameters, m/v first and second moments, g gradient.

#include <cstddef>

#include "paco/core/error.hpp"
#include "paco/core/slice.hpp"
#include "paco/optim/formulas.hpp"

namespace paco::optim {

// One AdamW step with the per-step scalars k (formula::make_adamw_scalars).
// Requires: θ, m, v, g of equal size (else errc::mismatch, nothing written); v ≥ 0.
// Ensures: θ, m, v are optim::adamw::step's with the same scalars, bit for bit.
// Cost: reads 16n, writes 12n bytes.
inline status adamw_update(slice<float> theta, slice<float> m, slice<float> v, slice<const float> g,
                           const formula::adamw_scalars& k) {
  if (theta.size() != m.size() || theta.size() != v.size() || theta.size() != g.size())
    return {errc::mismatch, "adamw_update: θ, m, v and g differ in size"};
  float* t = theta.data();
  float* mm = m.data();
  float* vv = v.data();
  const float* gg = g.data();
  for (std::size_t i = 0; i < theta.size(); ++i) formula::adamw_step(t[i], mm[i], vv[i], gg[i], k);
  return {};
}

}  // namespace paco::optim
