#pragma once
// module_store: the global copy of every module of a grid, and its outer optimisation.
// Each module m keeps θ_m, its outer-optimizer state, a round number and the hash of θ_m.
// Paths push their pseudo-gradient Δ_m = θ_start,m − θ_end,m for a round with a shard weight;
// when the round closes (all expected paths pushed, or the caller decides the deadline passed)
// the store combines what arrived (outer/delta.hpp), applies the outer optimizer, advances the
// round and re-hashes θ_m. A late push for a closed round is refused (errc::mismatch), so a
// slow or dead path is left out of that round, as in DiLoCo's dropout robustness — unless late
// work is merged (merge_late(s_max)): a push whose base round (the round of the θ it trained
// from) is s ≤ s_max rounds behind the open round joins the open round with its weight times
// 1/(1+s) (a staleness discount), and only pushes further behind are refused. Each path's
// pushes to a module carry increasing base rounds (a repeat is refused, never counted twice).
// A push that was accepted stays in its round even if its path dies before the round closes
// (valid work).
// Every value of a push is checked before it is used: the round, the size, every element of Δ
// and the shard weight (finite, > 0, at most max_push_weight).
//
// Thread-safe: pushes and pulls from several threads are serialised per module.

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <deque>
#include <map>
#include <mutex>
#include <span>
#include <string>
#include <utility>
#include <vector>

#include "paco/core/buffer.hpp"
#include "paco/core/error.hpp"
#include "paco/core/hash.hpp"
#include "paco/outer/delta.hpp"
#include "paco/outer/per_module.hpp"
#include "paco/path/module_grid.hpp"

namespace paco::store {

// The largest shard weight a push may carry (a weight is a shard's token count; 10^15 tokens is
// far beyond any shard, so a larger value is a corrupt or hostile frame).
inline constexpr double max_push_weight = 1e15;

// A module as the store sees it: id, size and pushes expected per round (path/module_grid.hpp).
using path::module_info;

// Round outcome of one module.
struct round_summary {
  int module = 0;
  long round = 0;   // the round that closed
  int arrived = 0;  // pushes combined
  int expected = 0;
  double delta_norm = 0;     // ‖combined Δ‖₂
  std::uint64_t hash = 0;    // hash of θ after the outer step
  double open_s = 0;         // seconds the round was open (set by a server that times rounds)
  bool by_deadline = false;  // closed by its deadline rather than by every contributor
  bool by_quorum = false;    // closed by a quorum and its grace window (store/server.hpp)
  int late_merged = 0;       // of `arrived`, pushes from an earlier base round (merge_late)
};

// The weight factor of a push s rounds late (merge_late): 1/(1+s).
inline double staleness_weight(long s) {
  return 1.0 / (1.0 + double(s));
}

template <class OuterOpt>
class module_store {
 public:
  // Every module with the same outer optimizer.
  module_store(std::vector<module_info> modules, OuterOpt opt, outer::delta_options delta = {})
      : module_store(modules,
                     outer::per_module<OuterOpt>(std::vector<OuterOpt>(modules.size(), opt)),
                     delta) {}
  // Module m with opts.opts[m]. Requires: one optimizer per module (checked: throws
  // error_exception).
  module_store(std::vector<module_info> modules, outer::per_module<OuterOpt> opts,
               outer::delta_options delta = {})
      : opts_(std::move(opts.opts)), delta_(delta) {
    if (opts_.size() != modules.size())
      throw error_exception(
          {errc::invalid_argument, "module_store: " + std::to_string(opts_.size()) +
                                       " outer optimizers for " + std::to_string(modules.size()) +
                                       " modules"});
    for (auto& m : modules) {
      PACO_ASSERT(m.id == int(slots_.size()), "module ids must be 0, 1, ... in order");
      slots_.emplace_back(m, opts_[slots_.size()].state_size(m.size));
    }
  }
  module_store(module_store&&) = delete;

  // Pushes up to max_staleness rounds behind a module's open round join it, weighted by
  // staleness_weight (0, the default: every late push is refused, the protocol before late
  // merging). Requires: max_staleness ≥ 0; called before any push.
  void merge_late(int max_staleness) {
    PACO_ASSERT(max_staleness >= 0, "merge_late: max_staleness must be >= 0");
    max_staleness_ = max_staleness;
  }
  int max_staleness() const noexcept { return max_staleness_; }

  int module_count() const noexcept { return int(slots_.size()); }
  const module_info& info(int m) const { return slots_.at(m).info; }
  const OuterOpt& outer_optimizer(int m = 0) const { return opts_.at(std::size_t(m)); }

  // Sets θ_m (e.g. from an initial model). Requires: src has info(m).size elements.
  void set(int m, std::span<const float> src) {
    auto& s = slot(m);
    std::lock_guard lk(s.mu);
    PACO_ASSERT(src.size() == s.info.size, "module size mismatch");
    std::copy(src.begin(), src.end(), s.theta.data());
    s.hash = hash64(s.theta.data(), s.theta.size() * sizeof(float));
  }

  // Copies θ_m into dst; returns (round, hash) of what was copied.
  std::pair<long, std::uint64_t> pull(int m, std::span<float> dst) const {
    auto& s = slot(m);
    std::lock_guard lk(s.mu);
    PACO_ASSERT(dst.size() == s.info.size, "module size mismatch");
    std::copy(s.theta.begin(), s.theta.end(), dst.begin());
    return {s.round, s.hash};
  }
  long round(int m) const {
    auto& s = slot(m);
    std::lock_guard lk(s.mu);
    return s.round;
  }
  std::uint64_t hash(int m) const {
    auto& s = slot(m);
    std::lock_guard lk(s.mu);
    return s.hash;
  }

  // Adds path `path`'s Δ_m trained from base round `round` with shard weight w to the open
  // round (times staleness_weight(s) when s = open − round > 0 rounds late, s ≤ max_staleness).
  // Errors: invalid_argument for a module id out of range, a wrong size, a non-finite Δ, or a
  // weight that is not finite, not > 0 or above max_push_weight (never applied); mismatch if
  // the round is ahead of the open round, or more than max_staleness behind it, or the path
  // already pushed this base round or a later one.
  status push(int m, int path, long round, std::span<const float> delta, double w) {
    if (m < 0 || m >= module_count())
      return {errc::invalid_argument, "push to module " + std::to_string(m) + " of a store of " +
                                          std::to_string(module_count()) + " modules"};
    if (!(std::isfinite(w) && w > 0 && w <= max_push_weight))
      return {errc::invalid_argument,
              "push from path " + std::to_string(path) + " to module " + std::to_string(m) +
                  " with shard weight " + std::to_string(w) +
                  " (must be finite, > 0 and <= " + std::to_string(max_push_weight) + ")"};
    auto& s = slot(m);
    std::lock_guard lk(s.mu);
    // (Compared before subtracting: a hostile frame's round may be any long.)
    if (round > s.round || round < s.round - max_staleness_)
      return {
          errc::mismatch,
          "push for round " + std::to_string(round) + " of module " + std::to_string(m) +
              " whose open round is " + std::to_string(s.round) +
              (round < s.round && max_staleness_ > 0
                   ? " (more than max_staleness " + std::to_string(max_staleness_) + " rounds late)"
                   : std::string())};
    const long late = s.round - round;
    if (delta.size() != s.info.size)
      return {errc::invalid_argument, "push of " + std::to_string(delta.size()) +
                                          " elements to module " + std::to_string(m) + " of " +
                                          std::to_string(s.info.size)};
    if (auto last = s.last_base.find(path); last != s.last_base.end() && last->second >= round)
      return {errc::mismatch, "path " + std::to_string(path) + " already pushed round " +
                                  std::to_string(last->second) + " of module " + std::to_string(m)};
    for (float v : delta)
      if (!std::isfinite(v))
        return {errc::invalid_argument, "non-finite pseudo-gradient from path " +
                                            std::to_string(path) + " for module " +
                                            std::to_string(m)};
    auto& d = s.pushed[{path, round}];
    d.weight = (delta_.weight_by_shard ? w : 1.0) * (late > 0 ? staleness_weight(late) : 1.0);
    d.delta.assign(delta.begin(), delta.end());
    s.last_base[path] = round;
    if (late == 0) ++s.on_time;
    return {};
  }

  // Pushes in module m's open round, late ones merged into it included.
  int pushed(int m) const {
    auto& s = slot(m);
    std::lock_guard lk(s.mu);
    return int(s.pushed.size());
  }
  // Pushes in module m's open round from that round's own base (on time).
  int pushed_on_time(int m) const {
    auto& s = slot(m);
    std::lock_guard lk(s.mu);
    return s.on_time;
  }
  bool complete(int m) const { return pushed_on_time(m) >= info(m).paths_through; }
  // Whether path (or worker) `path` pushed to module m's open round from its base.
  bool has_pushed(int m, int path) const {
    auto& s = slot(m);
    std::lock_guard lk(s.mu);
    return s.pushed.count({path, s.round}) > 0;
  }

  // Closes module m's open round: Δ = s·Σ w_i Δ_i / Σ w_i over what arrived, θ ← OuterOpt(θ, Δ).
  // The sum runs in ascending (path, base round) order whatever order the pushes arrived in, so
  // the result is bit-identical across transports and timings. With no push the round still
  // advances and θ is unchanged (every path was lost).
  round_summary close(int m) {
    auto& s = slot(m);
    std::lock_guard lk(s.mu);
    round_summary r{m, s.round, int(s.pushed.size()), s.info.paths_through, 0, 0};
    r.late_merged = int(s.pushed.size()) - s.on_time;
    if (!s.pushed.empty()) {
      std::vector<double> w;
      for (auto& [p, d] : s.pushed) w.push_back(d.weight);
      const auto coeff = outer::delta_coefficients(
          w, s.info.paths_through, {.weight_by_shard = true, .rescale = delta_.rescale});
      std::fill(s.acc.begin(), s.acc.end(), 0.0f);
      std::size_t i = 0;
      for (auto& [p, d] : s.pushed) {
        const float c = float(coeff[i++]);
        for (std::size_t k = 0; k < d.delta.size(); ++k) s.acc[k] += c * d.delta[k];
      }
      double nn = 0;
      for (float v : s.acc) nn += double(v) * v;
      r.delta_norm = std::sqrt(nn);
      opts_[std::size_t(m)].step(std::span<float>(s.theta.data(), s.theta.size()),
                                 std::span<const float>(s.acc.data(), s.acc.size()),
                                 std::span<float>(s.state.data(), s.state.size()));
    }
    s.pushed.clear();
    s.on_time = 0;
    ++s.round;
    s.hash = hash64(s.theta.data(), s.theta.size() * sizeof(float));
    r.hash = s.hash;
    return r;
  }

  // Whole-module state for checkpoints: θ, outer state, round.
  struct snapshot {
    std::vector<float> theta, state;
    long round = 0;
  };
  snapshot save(int m) const {
    auto& s = slot(m);
    std::lock_guard lk(s.mu);
    return {{s.theta.begin(), s.theta.end()}, {s.state.begin(), s.state.end()}, s.round};
  }
  status restore(int m, const snapshot& snap) {
    auto& s = slot(m);
    std::lock_guard lk(s.mu);
    if (snap.theta.size() != s.theta.size() || snap.state.size() != s.state.size())
      return {errc::mismatch, "snapshot of module " + std::to_string(m) + " has the wrong size"};
    std::copy(snap.theta.begin(), snap.theta.end(), s.theta.data());
    std::copy(snap.state.begin(), snap.state.end(), s.state.data());
    s.round = snap.round;
    s.pushed.clear();
    s.last_base.clear();
    s.on_time = 0;
    s.hash = hash64(s.theta.data(), s.theta.size() * sizeof(float));
    return {};
  }

 private:
  struct slot_t {
    slot_t(module_info i, std::size_t state_n)
        : info(i),
          theta(i.size),
          acc(i.size),
          state(state_n),
          hash(hash64(theta.data(), theta.size() * sizeof(float))) {}
    module_info info;
    buffer<float> theta, acc, state;
    std::uint64_t hash = 0;
    long round = 0;
    struct contribution {
      double weight = 0;
      std::vector<float> delta;
    };
    // By (path (or worker) id, base round): combined in that order.
    std::map<std::pair<int, long>, contribution> pushed;
    int on_time = 0;                // of `pushed`, from the open round's base
    std::map<int, long> last_base;  // per path, the base round of its last accepted push
    mutable std::mutex mu;
  };
  slot_t& slot(int m) { return slots_.at(std::size_t(m)); }
  const slot_t& slot(int m) const { return slots_.at(std::size_t(m)); }

  std::vector<OuterOpt> opts_;  // one per module
  outer::delta_options delta_;
  int max_staleness_ = 0;
  std::deque<slot_t> slots_;
};

}  // namespace paco::store
