#pragma once
// drift_learner: a round-loop learner (train::Learner) whose inner step is exact arithmetic, for
// known-answer tests of the sync rules: θ ← θ − c at every step, c fixed per rank, so Δ of a
// round of H steps is H·c whatever θ is. θ starts at small integers and c is a multiple of
// 1/64, so every sum, mean and outer step with dyadic hyper-parameters is exact and closed forms
// (or another backend's result) compare with ==.

#include <cstddef>
#include <string>
#include <utility>
#include <vector>

#include "paco/core/arena.hpp"
#include "paco/core/param_layout.hpp"

namespace paco::testing {

struct drift_learner {
  param_layout layout;
  arena<host> a;
  std::vector<float> c;
  int h;
  // Requires: h ≥ 1. Ensures: θ_i = (i mod 7) − 3, c_i = (((5i + 3·rank) mod 9) − 4) / 64.
  drift_learner(param_layout l, int rank, int h_) : layout(std::move(l)), a(layout), h(h_) {
    auto th = a.get(plane::param);
    c.resize(th.size());
    for (std::size_t i = 0; i < th.size(); ++i) {
      th[i] = float(int(i % 7) - 3);
      c[i] = float(int((i * 5 + std::size_t(rank) * 3) % 9) - 4) / 64.0f;
    }
  }
  // `tensors` tensors t0, t1, … of 8 floats each.
  drift_learner(int rank, int h_, std::size_t tensors = 4)
      : drift_learner(make_layout(tensors), rank, h_) {}
  static param_layout make_layout(std::size_t tensors) {
    param_layout l;
    for (std::size_t t = 0; t < tensors; ++t) {
      std::string name = "t";  // (not "t" + to_string: GCC 12 warns -Wrestrict on it)
      name += std::to_string(t);
      l.add(name, 8);
    }
    return l;
  }
  arena<host>& state() { return a; }
  double train(int n) {
    auto th = a.get(plane::param);
    for (int s = 0; s < n; ++s)
      for (std::size_t i = 0; i < th.size(); ++i) th[i] -= c[i];
    return 0.0;
  }
  int steps_per_round() const { return h; }
};

}  // namespace paco::testing
