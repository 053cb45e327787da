#pragma once
// outer::nesterov: SGD with Nesterov momentum in PyTorch's convention (torch.optim.SGD with
// nesterov=True), DiLoCo's outer optimizer with lr 0.7 and momentum 0.9:
//   b ← μ·b + Δ;   θ ← θ − η·(Δ + μ·b)        (b starts at 0, so the first b is Δ)
// State: b, one float per parameter (the arena's outer_momentum plane). The element formula is
// outer/formulas.hpp, shared with the CUDA kernel.

#include <cstddef>
#include <span>

#include "paco/core/error.hpp"
#include "paco/outer/concepts.hpp"
#include "paco/outer/formulas.hpp"

namespace paco::outer {

struct nesterov {
  using outer_optimizer_tag = void;
  float lr = 0.7f;
  float momentum = 0.9f;

  status validate() const {
    if (!(lr > 0)) return {errc::invalid_argument, "outer nesterov.lr must be > 0"};
    if (!(momentum >= 0 && momentum < 1))
      return {errc::invalid_argument, "outer nesterov.momentum must be in [0, 1)"};
    return {};
  }
  std::size_t state_size(std::size_t n) const { return n; }
  // Requires: theta, delta, state of equal size. Cost: 4 flops, 20 bytes moved per element.
  void step(std::span<float> theta, std::span<const float> delta, std::span<float> b) const {
    const float mu = momentum, eta = lr;  // locals: stores to θ and b cannot change them
    for (std::size_t i = 0; i < theta.size(); ++i)
      formula::nesterov_step(theta[i], b[i], delta[i], mu, eta);
  }
};
static_assert(OuterOptimizer<nesterov>);

}  // namespace paco::outer
