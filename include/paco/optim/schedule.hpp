#pragma once
// Learning-rate schedule: linear warmup, then cosine decay to min_lr at total steps.

#include <algorithm>
#include <cmath>

namespace paco::optim {

struct warmup_cosine {
  float lr = 4e-4f;
  float min_lr = 4e-5f;
  long warmup = 100;
  long total = 1000;

  // lr at step t (1-based). Ensures: lr_at(warmup) == lr; lr_at(t ≥ total) == min_lr.
  float lr_at(long t) const {
    if (warmup > 0 && t < warmup) return lr * float(t) / float(warmup);
    if (t >= total) return min_lr;
    const double p = double(t - warmup) / double(std::max(1L, total - warmup));
    return float(min_lr + 0.5 * (lr - min_lr) * (1.0 + std::cos(3.141592653589793 * p)));
  }

  // lr at step t when training ends at a fraction of a budget rather than a step count (e.g. a
  // wall-clock budget): warmup over the first `warmup` steps, cosine over frac ∈ [0, 1].
  float lr_at_fraction(long t, double frac) const {
    if (warmup > 0 && t < warmup) return lr * float(t) / float(warmup);
    const double p = std::clamp(frac, 0.0, 1.0);
    return float(min_lr + 0.5 * (lr - min_lr) * (1.0 + std::cos(3.141592653589793 * p)));
  }
};

}  // namespace paco::optim
