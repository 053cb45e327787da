#pragma once
// The InnerOptimizer concept: what the inner loop (train/inner_loop.hpp) asks of an optimizer.
// One step of the whole arena at step t ≥ 1 (the caller's global step count) with learning rate
// lr: θ (plane::param) from ∇ (plane::grad), its state in other planes of the same arena (so it
// travels with the worker's checkpoint and is never synchronised). validate() names a bad
// hyper-parameter. Opt in with `using inner_optimizer_tag = void;`.
//
// A model that also has step(arena, begin, end, t, lr) over element ranges gets its step run on
// the replica's threads (every update elementwise).

#include <concepts>
#include <cstddef>

#include "paco/core/arena.hpp"
#include "paco/core/error.hpp"

namespace paco::optim {

template <class O>
concept InnerOptimizer = std::copy_constructible<O> &&
    requires(const O& o, arena<host>& a, long t, float lr) {
  typename O::inner_optimizer_tag;
  o.step(a, t, lr);
  { o.validate() } -> std::same_as<status>;
};

// An InnerOptimizer whose step can be split into disjoint element ranges.
template <class O>
concept RangedInnerOptimizer = InnerOptimizer<O> &&
    requires(const O& o, arena<host>& a, std::size_t b, long t, float lr) {
  o.step(a, b, b, t, lr);
};

}  // namespace paco::optim
