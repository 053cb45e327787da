#pragma once
// adamw: Adam with decoupled weight decay and bias correction, PyTorch torch.optim.AdamW semantics:
//   θ ← θ·(1 − lr·wd);  m ← β1·m + (1−β1)·g;  v ← β2·v + (1−β2)·g²
//   θ ← θ − (lr / (1−β1^t)) · m / (√v / √(1−β2^t) + ε)
// State (m, v) lives in the arena's moment planes; the step count is the caller's. The element
// formula is optim/formulas.hpp, shared with the CUDA kernel.

#include <cstddef>

#include "paco/core/arena.hpp"
#include "paco/optim/concepts.hpp"
#include "paco/optim/formulas.hpp"

namespace paco::optim {

struct adamw {
  using inner_optimizer_tag = void;

  float lr = 4e-4f;
  float beta1 = 0.9f;
  float beta2 = 0.95f;
  float eps = 1e-8f;
  float weight_decay = 0.1f;

  status validate() const {
    auto bad = [](const char* f, const char* r) {
      return status(errc::invalid_argument, std::string("adamw.") + f + " must be in " + r);
    };
    if (!(lr >= 0)) return bad("lr", "[0, inf)");
    if (!(beta1 >= 0 && beta1 < 1)) return bad("beta1", "[0, 1)");
    if (!(beta2 >= 0 && beta2 < 1)) return bad("beta2", "[0, 1)");
    if (!(eps > 0)) return bad("eps", "(0, inf)");
    if (!(weight_decay >= 0)) return bad("weight_decay", "[0, inf)");
    return {};
  }

  // One step of the planes at step t ≥ 1 with learning rate lr_t (formula::adamw_step per element).
  // Requires: all arrays have n elements. Cost: ≈ 12 flops, 28 bytes moved per element.
  void step(float* theta, const float* g, float* m, float* v, std::size_t n, long t,
            float lr_t) const {
    const auto k = formula::make_adamw_scalars(lr_t, beta1, beta2, eps, weight_decay, t);
    for (std::size_t i = 0; i < n; ++i) formula::adamw_step(theta[i], m[i], v[i], g[i], k);
  }

  // Step over elements [begin, end) of the arena's planes: θ (plane::param) from ∇ (plane::grad)
  // with moments in moment1/moment2. Disjoint ranges may run in parallel.
  void step(arena<host>& a, std::size_t begin, std::size_t end, long t, float lr_t) const {
    step(a.get(plane::param).data() + begin, a.get(plane::grad).data() + begin,
         a.get(plane::moment1).data() + begin, a.get(plane::moment2).data() + begin, end - begin, t,
         lr_t);
  }
  // Whole-arena step.
  void step(arena<host>& a, long t, float lr_t) const {
    step(a, 0, a.get(plane::param).size(), t, lr_t);
  }
};

static_assert(RangedInnerOptimizer<adamw>);

}  // namespace paco::optim
