#pragma once
// Global gradient-norm clipping (PyTorch clip_grad_norm_): if ‖g‖₂ > max_norm, g ←
// g·max_norm/(‖g‖₂+1e-6).

#include <cmath>
#include <cstddef>

namespace paco::optim {

// Returns the norm before clipping. max_norm ≤ 0 disables clipping.
inline double clip_grad_norm(float* g, std::size_t n, double max_norm) {
  double s = 0;
  for (std::size_t i = 0; i < n; ++i) s += double(g[i]) * g[i];
  const double norm = std::sqrt(s);
  if (max_norm > 0 && norm > max_norm) {
    const float c = float(max_norm / (norm + 1e-6));
    for (std::size_t i = 0; i < n; ++i) g[i] *= c;
  }
  return norm;
}

}  // namespace paco::optim
