#pragma once
// outer::sgd: θ ← θ − lr·Δ. With lr = 1 the new θ is the (weighted) mean of the workers' θ_end:
// DiLoCo with this outer optimizer is FedAvg.

#include <cstddef>
#include <span>

#include "paco/core/error.hpp"
#include "paco/outer/concepts.hpp"

namespace paco::outer {

struct sgd {
  using outer_optimizer_tag = void;
  float lr = 1.0f;

  status validate() const {
    if (!(lr > 0)) return {errc::invalid_argument, "outer sgd.lr must be > 0"};
    return {};
  }
  std::size_t state_size(std::size_t) const { return 0; }
  // Requires: theta.size() == delta.size().
  void step(std::span<float> theta, std::span<const float> delta, std::span<float>) const {
    for (std::size_t i = 0; i < theta.size(); ++i) theta[i] -= lr * delta[i];
  }
};
static_assert(OuterOptimizer<sgd>);

}  // namespace paco::outer
