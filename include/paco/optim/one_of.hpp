#pragma once
// one_of<O...>: an inner optimizer that is one of several types, chosen per value at run time —
// so that one worker type serves a setting such as train.optimizer = "adamw" | "muon":
//
//   using inner_t = optim::one_of<optim::adamw, optim::muon>;
//   inner_t opt = use_muon ? inner_t(optim::muon_for(model, {...})) : inner_t(optim::adamw{...});
//
// A step dispatches once (no cost per element beyond the held optimizer's own) and runs on a
// pool as the held optimizer would (optim::step_on), so the bits are the held optimizer's.

#include <type_traits>
#include <utility>
#include <variant>

#include "paco/core/arena.hpp"
#include "paco/core/error.hpp"
#include "paco/core/thread_pool.hpp"
#include "paco/optim/concepts.hpp"

namespace paco::optim {

template <InnerOptimizer... O>
class one_of {
  static_assert(sizeof...(O) >= 1, "one_of needs at least one inner optimizer");

 public:
  using inner_optimizer_tag = void;

  // The first alternative, default-constructed.
  one_of() = default;
  // Holds o. Implicit, as a variant's constructor is.
  template <class X>
  requires(std::is_same_v<std::remove_cvref_t<X>, O> || ...) one_of(X&& o)
      : v_(std::forward<X>(o)) {}

  void step(arena<host>& a, long t, float lr) const {
    std::visit([&](const auto& o) { o.step(a, t, lr); }, v_);
  }
  void step(arena<host>& a, long t, float lr, thread_pool& pool) const {
    std::visit([&](const auto& o) { step_on(pool, o, a, t, lr); }, v_);
  }
  status validate() const {
    return std::visit([](const auto& o) { return o.validate(); }, v_);
  }

  // The held optimizer, if it is an X.
  template <class X>
  const X* get_if() const noexcept {
    return std::get_if<X>(&v_);
  }

 private:
  std::variant<O...> v_;
};

}  // namespace paco::optim
