#pragma once
// learning_curve: a training run's losses (per inner step, or per outer round) averaged over
// consecutive windows of `every` — the curve a benchmark row reports next to its final score.

#include <span>
#include <vector>

namespace paco::train {

// The mean of every complete window of `every` losses, in order; a partial last window is left
// out. Requires: every ≥ 1. Ensures: size() == losses.size() / every; point i is the sum of
// losses[i·every … (i+1)·every), added in order, divided by every.
inline std::vector<double> window_means(std::span<const double> losses, int every) {
  std::vector<double> curve;
  double window = 0;
  for (std::size_t i = 0; i < losses.size(); ++i) {
    window += losses[i];
    if ((i + 1) % std::size_t(every) == 0) curve.push_back(window / every), window = 0;
  }
  return curve;
}

}  // namespace paco::train
