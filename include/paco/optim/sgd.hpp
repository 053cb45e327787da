#pragma once
// sgd: stochastic gradient descent with optional momentum (PyTorch torch.optim.SGD semantics):
//   g ← g + wd·θ;  b ← μ·b + g (b = g on the first step);  θ ← θ − lr·(nesterov ? g + μ·b : b)

#include <cstddef>

#include "paco/core/arena.hpp"
#include "paco/optim/concepts.hpp"

namespace paco::optim {

struct sgd {
  using inner_optimizer_tag = void;

  float lr = 0.1f;
  float momentum = 0.0f;
  float weight_decay = 0.0f;
  bool nesterov = false;

  status validate() const {
    if (!(lr >= 0)) return {errc::invalid_argument, "sgd.lr must be in [0, inf)"};
    if (!(momentum >= 0 && momentum < 1))
      return {errc::invalid_argument, "sgd.momentum must be in [0, 1)"};
    if (!(weight_decay >= 0)) return {errc::invalid_argument, "sgd.weight_decay must be ≥ 0"};
    return {};
  }

  // One step at step t ≥ 1 (t == 1 initialises the momentum buffer with g).
  void step(float* theta, const float* grad, float* buf, std::size_t n, long t, float lr_t) const {
    for (std::size_t i = 0; i < n; ++i) {
      float g = grad[i] + weight_decay * theta[i];
      if (momentum > 0) {
        float b = t <= 1 ? g : momentum * buf[i] + g;
        buf[i] = b;
        g = nesterov ? g + momentum * b : b;
      }
      theta[i] -= lr_t * g;
    }
  }
  // Step over elements [begin, end) of the arena's planes (momentum in moment1). Disjoint
  // ranges may run in parallel.
  void step(arena<host>& a, std::size_t begin, std::size_t end, long t, float lr_t) const {
    step(a.get(plane::param).data() + begin, a.get(plane::grad).data() + begin,
         momentum > 0 ? a.get(plane::moment1).data() + begin : nullptr, end - begin, t, lr_t);
  }
  // Whole-arena step.
  void step(arena<host>& a, long t, float lr_t) const {
    step(a, 0, a.get(plane::param).size(), t, lr_t);
  }
};

static_assert(RangedInnerOptimizer<sgd>);

}  // namespace paco::optim
