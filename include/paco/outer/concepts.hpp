#pragma once
// The OuterOptimizer concept: updates a module's global parameters θ from its (averaged)
// pseudo-gradient Δ = θ_start − θ_end, with per-module state of state_size(n) floats (kept by
// the store beside θ, checkpointed with it). validate() names a bad hyper-parameter.
//   step(θ, Δ, state): θ ← OuterOpt(θ, Δ)
// Opt in with `using outer_optimizer_tag = void;`. Models: sgd (FedAvg at lr 1), nesterov,
// one_of<O...>. The device side of an update (kernels/paco/elementwise.cuh) calls the same
// formula (outer/formulas.hpp) on device spans.

#include <concepts>
#include <cstddef>
#include <span>

#include "paco/core/error.hpp"

namespace paco::outer {

template <class O>
concept OuterOptimizer = std::copy_constructible<O> &&
    requires(const O& o, std::span<float> theta, std::span<const float> delta,
             std::span<float> state, std::size_t n) {
  typename O::outer_optimizer_tag;
  { o.state_size(n) } -> std::convertible_to<std::size_t>;
  o.step(theta, delta, state);
  { o.validate() } -> std::same_as<status>;
};

}  // namespace paco::outer
