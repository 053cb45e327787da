#pragma once
// The OuterOptimizer concept: updates a module's global parameters θ from its (averaged)
// pseudo-gradient Δ = θ_start − θ_end, with per-module state of state_size(n) floats.
//   step(θ, Δ, state): θ ← OuterOpt(θ, Δ)

#include <concepts>
#include <cstddef>
#include <span>

namespace paco::outer {

template <class O>
concept OuterOptimizer = requires(const O& o, std::span<float> theta, std::span<const float> delta,
                                  std::span<float> state, std::size_t n) {
  { o.state_size(n) } -> std::convertible_to<std::size_t>;
  o.step(theta, delta, state);
};

}  // namespace paco::outer
