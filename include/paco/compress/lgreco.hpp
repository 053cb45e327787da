#pragma once
// L-GreCo (ALGORITHMS.md §5): per-module choice of compression level (bits, density or rank)
// minimising the bytes sent under the error budget α·Σ_ℓ e_ℓ(default level), by the
// multiple-choice knapsack DP of §5.1 over discretised errors; re-run every F rounds from
// pseudo-gradients accumulated over the last A rounds before each adjustment.
//
// Differences from the reference code, all on the safe side of the budget: an option whose error
// alone exceeds the budget is excluded (the code clamps it to E+1 buckets); an error costs
// floor(e/bucket)+1 buckets (0 if e == 0) instead of clip(ceil(e/bucket), 1, D), so
// Σ e < Σ ê·bucket <= E holds for every DP answer; and the default levels are kept when they are
// within the budget and send fewer bytes than the discretised optimum.

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <limits>
#include <span>
#include <string>
#include <vector>

#include "paco/compress/concepts.hpp"
#include "paco/compress/detail/formulas.hpp"
#include "paco/core/buffer.hpp"

namespace paco::compress {

struct lgreco_config {
  double alpha = 1.0;           // α: error budget multiplier
  std::size_t period = 100;     // F: rounds between adjustments (adjust_freq)
  std::size_t window = 10;      // A: rounds accumulated before each adjustment (acc_iter), <= F
  double scale = 1e-2;          // δ: accumulated gradients are scaled by δ/A
  std::size_t buckets = 10000;  // D: error buckets of the DP
};

// Ensures: ok iff α > 0, 1 <= A <= F, δ > 0, 1 <= D <= 10^7.
inline status validate(const lgreco_config& c) {
  if (!(c.alpha > 0)) return {errc::invalid_argument, "lgreco: alpha must be > 0"};
  if (c.period < 1 || c.window < 1 || c.window > c.period)
    return {errc::invalid_argument, "lgreco: need 1 <= window (" + std::to_string(c.window) +
                                        ") <= period (" + std::to_string(c.period) + ")"};
  if (!(c.scale > 0)) return {errc::invalid_argument, "lgreco: scale must be > 0"};
  if (c.buckets < 1 || c.buckets > 10'000'000)
    return {errc::invalid_argument,
            "lgreco: buckets = " + std::to_string(c.buckets) + ", accepted [1, 10^7]"};
  return {};
}

// One DP answer: a candidate index per module, its total bytes and error, and the budget.
struct lgreco_solution {
  std::vector<std::size_t> choice;
  double bytes = 0;
  double error = 0;
  double budget = 0;
};

// Multiple-choice knapsack: choose one candidate c_ℓ per module minimising Σ bytes[ℓ][c_ℓ]
// subject to Σ errors[ℓ][c_ℓ] <= budget, with errors discretised into `buckets` buckets.
// Requires: bytes and errors have the same shape; every module has >= 1 candidate; errors >= 0
// (non-finite = not allowed). `fallback` (optional): a choice returned instead when it is within
// the budget and cheaper than the DP's.
// Ensures: result.error <= budget (strictly checked); errc::invalid_argument if no choice fits.
// Cost: O(L·C·D) time, O(L·D) memory.
inline result<lgreco_solution> lgreco_solve(const std::vector<std::vector<double>>& bytes,
                                            const std::vector<std::vector<double>>& errors,
                                            double budget, std::size_t buckets,
                                            std::span<const std::size_t> fallback = {}) {
  const std::size_t L = bytes.size();
  if (errors.size() != L) return {errc::mismatch, "lgreco_solve: bytes and errors differ in size"};
  for (std::size_t l = 0; l < L; ++l)
    if (bytes[l].empty() || bytes[l].size() != errors[l].size() || bytes[l].size() > 65535)
      return {errc::mismatch, "lgreco_solve: module " + std::to_string(l) +
                                  " has no candidates or mismatched tables"};
  if (!(budget >= 0) || buckets < 1)
    return {errc::invalid_argument, "lgreco_solve: budget must be >= 0 and buckets >= 1"};
  const double bucket = budget / static_cast<double>(buckets);
  constexpr std::uint32_t none = std::numeric_limits<std::uint32_t>::max();
  auto cost = [&](double e) -> std::uint32_t {  // buckets an error takes; none if not allowed
    if (!(e >= 0) || !std::isfinite(e) || e > budget) return none;
    if (e == 0) return 0;
    if (bucket <= 0) return none;
    const double c = std::floor(e / bucket) + 1.0;
    return c > static_cast<double>(buckets) ? none : static_cast<std::uint32_t>(c);
  };
  const std::size_t D = buckets;
  constexpr double inf = std::numeric_limits<double>::infinity();
  std::vector<double> dp(D + 1, 0.0), next(D + 1);
  std::vector<std::uint16_t> pick(L * (D + 1));
  std::vector<std::uint32_t> ec;
  for (std::size_t l = 0; l < L; ++l) {
    ec.resize(errors[l].size());
    for (std::size_t c = 0; c < ec.size(); ++c) ec[c] = cost(errors[l][c]);
    std::fill(next.begin(), next.end(), inf);
    for (std::size_t c = 0; c < ec.size(); ++c) {
      if (ec[c] == none) continue;
      const double s = bytes[l][c];
      for (std::size_t b = ec[c]; b <= D; ++b) {
        const double v = dp[b - ec[c]] + s;
        if (v < next[b]) {
          next[b] = v;
          pick[l * (D + 1) + b] = static_cast<std::uint16_t>(c);
        }
      }
    }
    dp.swap(next);
  }
  lgreco_solution sol;
  sol.budget = budget;
  auto finish = [&](std::vector<std::size_t> choice) {
    lgreco_solution s{std::move(choice), 0, 0, budget};
    for (std::size_t l = 0; l < L; ++l) {
      s.bytes += bytes[l][s.choice[l]];
      s.error += errors[l][s.choice[l]];
    }
    return s;
  };
  bool have = L == 0 || dp[D] < inf;
  if (have) {
    std::vector<std::size_t> choice(L);
    std::size_t b = D;
    for (std::size_t l = L; l-- > 0;) {
      choice[l] = pick[l * (D + 1) + b];
      b -= ec.size() ? cost(errors[l][choice[l]]) : 0;
    }
    sol = finish(std::move(choice));
    if (!(sol.error <= budget)) have = false;  // cannot happen: Σe < Σê·bucket <= budget
  }
  if (fallback.size() == L && L > 0) {
    bool valid = true;
    for (std::size_t l = 0; l < L; ++l) valid = valid && fallback[l] < bytes[l].size();
    if (valid) {
      auto f = finish(std::vector<std::size_t>(fallback.begin(), fallback.end()));
      if (f.error <= budget && (!have || f.bytes < sol.bytes)) {
        sol = std::move(f);
        have = true;
      }
    }
  }
  if (!have)
    return {errc::invalid_argument,
            "lgreco_solve: no choice of levels fits the error budget " + std::to_string(budget)};
  return sol;
}

namespace detail {
template <class C>
std::size_t level_bytes(const C& c, matrix_shape s, const typename C::level_type& l) {
  if constexpr (MultiRoundCompressor<C>)
    return c.wire_bytes(s, l);
  else
    return c.wire_bytes(s.size(), l);
}
template <class C>
double level_error(C& c, matrix_shape s, const typename C::level_type& l, slice<const float> g) {
  if constexpr (MultiRoundCompressor<C>)
    return c.error(s, l, g);
  else
    return c.error(l, g);
}
}  // namespace detail

// lgreco<C>: the stateful controller. One per trainer; modules are indexed 0..L−1 in the order
// of `shapes` (vectors are (1, n) views). Per round: observe(m, g̃_m) for each module (g̃ the
// error-feedback-corrected pseudo-gradient), then end_round(); use level(m) for the next send.
// All workers must see the same levels: run it on one worker and broadcast levels(), or feed
// every worker the same (averaged) pseudo-gradients.
template <class C>
requires Compressor<C> || MultiRoundCompressor<C>
class lgreco {
 public:
  using level_type = typename C::level_type;

  // Requires: validate(cfg); candidates non-empty; codec outlives the controller.
  // Ensures: every module starts at default_level.
  lgreco(C& codec, lgreco_config cfg, std::vector<matrix_shape> shapes,
         std::vector<level_type> candidates, level_type default_level)
      : codec_(&codec),
        cfg_(cfg),
        shapes_(std::move(shapes)),
        candidates_(std::move(candidates)),
        default_(default_level),
        levels_(shapes_.size(), default_level),
        acc_(shapes_.size()) {}

  std::size_t modules() const noexcept { return shapes_.size(); }
  const level_type& level(std::size_t m) const { return levels_.at(m); }
  std::span<const level_type> levels() const noexcept { return levels_; }
  std::size_t round() const noexcept { return round_; }
  // Whether this round's pseudo-gradients are accumulated (the last A rounds of a period).
  bool accumulating() const noexcept {
    return round_ % cfg_.period >= cfg_.period - std::min(cfg_.window, cfg_.period);
  }
  // The last adjustment's solution (empty before the first).
  const lgreco_solution& last() const noexcept { return last_; }

  // G_m += (δ/A)·(g + e) when accumulating(): the error-feedback-corrected gradient, with e the
  // module's residual *before* this round's error_feedback::encode. Requires: equal sizes.
  status observe(std::size_t m, slice<const float> g, slice<const float> residual) {
    if (residual.size() != g.size())
      return {errc::mismatch, "lgreco: residual and gradient differ in size"};
    return observe_impl(m, g, residual.data());
  }
  // G_m += (δ/A)·g when accumulating(). Requires: m < modules(); g.size() == shapes[m].size().
  status observe(std::size_t m, slice<const float> g) { return observe_impl(m, g, nullptr); }

 private:
  status observe_impl(std::size_t m, slice<const float> g, const float* residual) {
    if (m >= shapes_.size())
      return {errc::invalid_argument, "lgreco: module " + std::to_string(m) + " out of range"};
    if (g.size() != shapes_[m].size())
      return {errc::mismatch, "lgreco: module " + std::to_string(m) + " span of " +
                                  std::to_string(g.size()) + " elements, shape has " +
                                  std::to_string(shapes_[m].size())};
    if (!accumulating()) return {};
    auto& a = acc_[m];
    if (a.size() != g.size()) a.resize(g.size());  // zeros
    const float w = static_cast<float>(cfg_.scale / static_cast<double>(cfg_.window));
    if (residual)
      for (std::size_t i = 0; i < g.size(); ++i)
        a[i] += w * formula::ef_accumulate(g[i], residual[i]);
    else
      for (std::size_t i = 0; i < g.size(); ++i) a[i] += w * g[i];
    return {};
  }

 public:
  // Ends a round. When a period completes, solves the knapsack from the accumulators, sets
  // the levels and clears the accumulators. Ensures: returns true iff it re-solved; the new
  // levels' total error <= α·Σ e(default) on the accumulated gradients.
  result<bool> end_round() {
    if (auto s = validate(cfg_); !s) return s.error();
    ++round_;
    if (round_ % cfg_.period != 0) return false;
    const std::size_t L = shapes_.size();
    std::vector<std::vector<double>> bytes(L), errors(L);
    std::vector<std::size_t> fallback(L, candidates_.size());
    double base = 0;
    for (std::size_t m = 0; m < L; ++m) {
      if (acc_[m].size() != shapes_[m].size()) acc_[m].resize(shapes_[m].size());
      const slice<const float> g = acc_[m].view();
      const double e0 = detail::level_error(*codec_, shapes_[m], default_, g);
      if (!std::isfinite(e0))
        return paco::error{
            errc::invalid_argument,
            "lgreco: the default level is not valid for module " + std::to_string(m)};
      base += e0;
      for (std::size_t c = 0; c < candidates_.size(); ++c) {
        bytes[m].push_back(
            static_cast<double>(detail::level_bytes(*codec_, shapes_[m], candidates_[c])));
        errors[m].push_back(detail::level_error(*codec_, shapes_[m], candidates_[c], g));
        if (candidates_[c] == default_) fallback[m] = c;
      }
    }
    auto sol = lgreco_solve(bytes, errors, cfg_.alpha * base, cfg_.buckets, fallback);
    if (!sol) return sol.error();
    for (std::size_t m = 0; m < L; ++m) {
      levels_[m] = candidates_[sol->choice[m]];
      std::fill(acc_[m].begin(), acc_[m].end(), 0.0f);
    }
    last_ = std::move(sol).value();
    return true;
  }

 private:
  C* codec_;
  lgreco_config cfg_;
  std::vector<matrix_shape> shapes_;
  std::vector<level_type> candidates_;
  level_type default_;
  std::vector<level_type> levels_;
  std::vector<buffer<float>> acc_;
  lgreco_solution last_;
  std::size_t round_ = 0;
};

}  // namespace paco::compress
