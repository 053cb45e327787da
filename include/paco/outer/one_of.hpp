#pragma once
// one_of<O...>: an outer optimizer that is one of several types, chosen per value — so that one
// store (whose modules share one optimizer type) can run different outer optimizers on
// different modules or levels, e.g. Nesterov on the shared level and plain averaging (sgd, lr 1)
// on the expert levels:
//
//   using outer_t = outer::one_of<outer::nesterov, outer::sgd>;
//   cfg.outer_per_level = {outer_t(outer::nesterov{0.7f, 0.9f}), outer_t(outer::sgd{1.0f})};
//
// Each module's state is sized by the type it holds; a step dispatches once per module and
// round (no cost per element beyond the held optimizer's own).

#include <cstddef>
#include <span>
#include <type_traits>
#include <utility>
#include <variant>

#include "paco/core/error.hpp"
#include "paco/outer/concepts.hpp"

namespace paco::outer {

// X (less reference and const) is one of Os.
template <class X, class... Os>
concept among = (std::is_same_v<std::remove_cvref_t<X>, Os> || ...);

template <OuterOptimizer... O>
class one_of {
  static_assert(sizeof...(O) >= 1, "one_of needs at least one outer optimizer");

 public:
  using outer_optimizer_tag = void;

  // The first alternative, default-constructed.
  one_of() = default;
  // Holds o. Implicit, as a variant's constructor is.
  template <among<O...> X>
  one_of(X&& o) : v_(std::forward<X>(o)) {}

  std::size_t state_size(std::size_t n) const {
    return std::visit([n](const auto& o) { return std::size_t(o.state_size(n)); }, v_);
  }
  // Requires: as the held optimizer's step.
  void step(std::span<float> theta, std::span<const float> delta, std::span<float> state) const {
    std::visit([&](const auto& o) { o.step(theta, delta, state); }, v_);
  }
  // The held optimizer's validate().
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

}  // namespace paco::outer
