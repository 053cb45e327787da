#pragma once
// outer::co2: the outer step of CO2 (Sun et al., ICLR 2024; ALGORITHMS.md §2): heavy-ball
// momentum on the pseudo-gradient scaled by the staleness-gap penalty p, then clipped:
//   m ← β·m + Δ/p;   m ← clip(m, φ);   θ ← θ − α·m
// In CO2 the Δ it is given is one round stale (train::round_loop with the train::co2 rule
// applies round t−1's mean Δ while round t's all-reduce runs); any OuterOptimizer can be
// applied that way, this one is the paper's. Defaults are the official code's: α = 1, β = 0.5,
// p = 1, clipping off (its GPT-2 script turns element clipping on with φ = 1).
//
// Clipping: element clamps each entry of m to [−φ, φ] (what the official code means to do: its
// torch.clamp result is discarded, so there it is a no-op; here it is applied); norm scales m by
// min(1, φ/‖m‖₂) over the span step() is given (the whole plane for all-reduce replicas, one
// module under a store). The paper's data-dependent gap Λ_t could not be recovered from the
// paper or code, so p is the code's constant.
// State: m, one float per parameter.

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <span>
#include <string>

#include "paco/core/error.hpp"
#include "paco/outer/concepts.hpp"
#include "paco/outer/formulas.hpp"

namespace paco::outer {

struct co2 {
  using outer_optimizer_tag = void;
  enum class clip_mode { none, element, norm };

  float lr = 1.0f;           // α
  float momentum = 0.5f;     // β
  float gap_penalty = 1.0f;  // p: the stale Δ enters the momentum as Δ/p
  clip_mode clip = clip_mode::none;
  float clip_threshold = 1.0f;  // φ

  status validate() const {
    if (!(lr > 0)) return {errc::invalid_argument, "outer co2.lr must be > 0"};
    if (!(momentum >= 0 && momentum < 1))
      return {errc::invalid_argument, "outer co2.momentum must be in [0, 1)"};
    if (!(gap_penalty > 0) || !std::isfinite(gap_penalty))
      return {errc::invalid_argument, "outer co2.gap_penalty must be finite and > 0"};
    if (clip != clip_mode::none && !(clip_threshold > 0))
      return {errc::invalid_argument, "outer co2.clip_threshold must be > 0 when clipping"};
    return {};
  }
  std::size_t state_size(std::size_t n) const { return n; }

  // Requires: theta, delta, m of equal size. Cost: 5 flops, 20 bytes moved per element (norm
  // clipping: a second pass over m).
  void step(std::span<float> theta, std::span<const float> delta, std::span<float> m) const {
    const float beta = momentum, inv_p = 1.0f / gap_penalty, phi = clip_threshold, a = lr;
    const std::size_t n = theta.size();
    for (std::size_t i = 0; i < n; ++i) formula::co2_momentum(m[i], delta[i], beta, inv_p);
    if (clip == clip_mode::element) {
      for (std::size_t i = 0; i < n; ++i) m[i] = std::clamp(m[i], -phi, phi);
    } else if (clip == clip_mode::norm) {
      double ss = 0;
      for (std::size_t i = 0; i < n; ++i) ss += double(m[i]) * double(m[i]);
      const double norm = std::sqrt(ss);
      if (norm > double(phi)) {
        const float s = float(double(phi) / norm);
        for (std::size_t i = 0; i < n; ++i) m[i] *= s;
      }
    }
    for (std::size_t i = 0; i < n; ++i) theta[i] -= a * m[i];
  }
};
static_assert(OuterOptimizer<co2>);

// "none" | "element" | "norm". Errors: invalid_argument naming the accepted values.
inline result<co2::clip_mode> parse_co2_clip(const std::string& s) {
  if (s == "none") return co2::clip_mode::none;
  if (s == "element") return co2::clip_mode::element;
  if (s == "norm") return co2::clip_mode::norm;
  return paco::error{errc::invalid_argument,
                     "outer co2 clip: '" + s + "' is not one of none, element, norm"};
}

}  // namespace paco::outer
