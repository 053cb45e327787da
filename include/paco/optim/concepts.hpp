#pragma once
// The InnerOptimizer concept: what the inner loop (train/inner_loop.hpp) asks of an optimizer.
// One step of the whole arena at step t ≥ 1 (the caller's global step count) with learning rate
// lr: θ (plane::param) from ∇ (plane::grad), its state in other planes of the same arena (so it
// travels with the worker's checkpoint and is never synchronised). validate() names a bad
// hyper-parameter. Opt in with `using inner_optimizer_tag = void;`.
//
// A model that also has step(arena, begin, end, t, lr) over element ranges (every update
// elementwise), or step(arena, t, lr, pool) (its own split of the work: Muon's matrices), gets
// its step run on the replica's threads (step_on).

#include <concepts>
#include <cstddef>

#include "paco/core/arena.hpp"
#include "paco/core/error.hpp"
#include "paco/core/thread_pool.hpp"

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

// An InnerOptimizer that splits its own step over a pool's threads.
template <class O>
concept PooledInnerOptimizer = InnerOptimizer<O> &&
    requires(const O& o, arena<host>& a, long t, float lr, thread_pool& p) {
  o.step(a, t, lr, p);
};

// One step of o on pool's threads: its own split (Pooled), disjoint element ranges (Ranged), or
// on the calling thread alone. Ensures: the same θ and state as o.step(a, t, lr).
template <InnerOptimizer O>
void step_on(thread_pool& pool, const O& o, arena<host>& a, long t, float lr) {
  if constexpr (PooledInnerOptimizer<O>) {
    o.step(a, t, lr, pool);
  } else if constexpr (RangedInnerOptimizer<O>) {
    if (pool.size() == 1) return o.step(a, t, lr);
    // An empty step on this thread first: the planes the optimizer keeps (allocated by the
    // arena on first use) exist before the threads touch them.
    o.step(a, 0, 0, t, lr);
    pool.for_ranges(a.get(plane::param).size(),
                    [&](std::size_t b, std::size_t e) { o.step(a, b, e, t, lr); });
  } else {
    o.step(a, t, lr);
  }
}

}  // namespace paco::optim
