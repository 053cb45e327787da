#pragma once
// co2_replica: one rank of DiLoCo over an all-reduce whose communication is fully overlapped
// with computation. Round t's mean Δ is all-reduced in the background while round t+1's inner
// steps run, and is applied one round late — by one of three rules (x_t: the rank's anchor,
// the θ its round t started from; Δ_t = x_t − θ after the H inner steps; k ranks):
//
// overlap_rule::co2 — CO2 (Sun et al., ICLR 2024) as its authors' code runs it, made
// deterministic. fairscale-CO2 (commit 55aaca5, gossip/co2.py) never defers a worker's own
// progress: each worker goes on from its live parameters while a background thread averages
// them, and the averaged result reaches the worker late. Its deterministic form here: the
// rank's own fresh Δ is applied in full, and the late mean replaces the rank's own stale Δ,
//   x_{t+1} = OuterOpt(x_t, Δ_t + mean Δ_{t−1} − Δ_{t−1})           (Δ_{−1} = mean Δ_{−1} = 0)
//   finish(): x_{T+1} = OuterOpt(x_T, mean Δ_{T−1} − Δ_{T−1})
// so with outer SGD at rate η, θ = x_0 − η(Σ_{s<t} mean Δ_s + Δ_t): the rank carries on from
// its own parameters (with one rank, outer SGD at lr 1 and no momentum it is plain continuous
// training) and the average lands one round late as a correction. This is a reconstruction of
// the code's behaviour, not the paper's Algorithm 1 (ALGORITHMS.md §2.1): the paper's
// staleness-gap penalty and outer-momentum clipping come with outer::co2 (the released code
// applies no penalty: gap_penalty = 1). The replicas differ by their own last Δ by design.
//
// overlap_rule::eager — eager updates (Kale, Douillard, Donchev 2025; ALGORITHMS.md §6.3): the
// rank's own fresh Δ stands in for its share (1/k) of the mean until the true mean arrives,
//   x_{t+1} = OuterOpt(x_t, mean Δ_{t−1} + (Δ_t − Δ_{t−1}) / k)
//   finish(): x_{T+1} = OuterOpt(x_T, mean Δ_{T−1} − Δ_{T−1} / k)
// so with outer SGD θ = x_0 − η(Σ_{s<t} mean Δ_s + Δ_t / k). The replicas differ slightly by
// design; with k = 1 it is DiLoCo (and the co2 rule).
//
// overlap_rule::naive_delayed — the naïve one-step-delayed update, Kale et al.'s baseline
// (arXiv 2502.12996, Algorithm 2), kept for the ablation. paco called it CO2 until 2026-11-26;
// it is not what CO2's code does. Every rank restarts from a global model that lacks its own
// last round, and the mean measured from x_{t−1} is applied on x_t:
//   x_{t+1} = OuterOpt(x_t, mean Δ_{t−1})     (round 0: x_1 = x_0)
//   finish(): x_{T+1} = OuterOpt(x_T, mean Δ_{T−1}), hash check
// The replicas stay bit-identical (every x_{t+1} is hash-checked by the next all-reduce). With
// one rank, outer SGD at lr 1 and no momentum it is NOT continuous training: each round's
// progress is replayed one round late on top of the next round's start.
//
// A round costs max(inner steps, all-reduce) instead of their sum. Any OuterOptimizer works;
// outer::co2 is CO2's (momentum with the staleness-gap penalty and momentum clipping). The mean
// goes through the same code as diloco_round (train::detail::mean_delta: the fp32 ring, or a
// codec with error feedback). overlap() says how much of the communication the inner steps hid.
//
//   train::co2_replica<net::asio_tcp, nn::gpt, optim::adamw, outer::co2> r(
//       tcp, worker, outer::co2{.momentum = 0.2f, .clip = outer::co2::clip_mode::element},
//       std::nullopt, train::overlap_rule::co2);
//   r.run(rounds, std::chrono::minutes(5));
//   r.finish(std::chrono::minutes(5));   // the worker's param plane now holds x_{T+1}
//
// The transport is used by a background thread while an all-reduce is in flight: from the end
// of run()'s first round until finish() returns, nothing else may use it (MPI: the serialized
// thread level net::mpi asks for suffices). Memory beyond DiLoCo's: two n-float buffers
// (co2, eager: three).

#include <chrono>
#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <vector>

#include "paco/collectives/counted.hpp"
#include "paco/compress/module_codec.hpp"
#include "paco/core/hash.hpp"
#include "paco/net/concepts.hpp"
#include "paco/outer/concepts.hpp"
#include "paco/train/diloco_allreduce.hpp"
#include "paco/train/mean_in_flight.hpp"
#include "paco/train/path_worker.hpp"

namespace paco::train {

// How the mean Δ that arrives one round late is applied (see the file comment).
enum class overlap_rule { co2, eager, naive_delayed };

// "co2" | "eager" | "naive_delayed". Errors: invalid_argument naming the accepted values (and,
// for "delayed", what became of it).
inline result<overlap_rule> parse_overlap_rule(const std::string& s) {
  if (s == "co2") return overlap_rule::co2;
  if (s == "eager") return overlap_rule::eager;
  if (s == "naive_delayed") return overlap_rule::naive_delayed;
  if (s == "delayed")
    return paco::error{errc::invalid_argument,
                       "overlap rule: 'delayed' is now 'naive_delayed' (Kale et al.'s naive "
                       "one-step-delayed baseline, which is not CO2); CO2 as its authors' code "
                       "runs it is 'co2'"};
  return paco::error{errc::invalid_argument,
                     "overlap rule: '" + s + "' is not one of co2, eager, naive_delayed"};
}

template <net::Transport T, class Model, class InnerOpt, outer::OuterOptimizer O>
class co2_replica {
 public:
  // Requires: t, w outlive the replica; w's arena holds this rank's θ (the same on every rank);
  // codec, when given, is train::diloco_codec of the same compression on every rank.
  co2_replica(T& t, train::path_worker<Model, InnerOpt>& w, O outer,
              std::optional<compress::module_codec> codec = std::nullopt,
              overlap_rule rule = overlap_rule::co2)
      : t_(&t),
        w_(&w),
        outer_(outer),
        codec_(std::move(codec)),
        rule_(rule),
        n_(w.state().get(plane::param).size()),
        state_(outer.state_size(n_), 0.0f),
        delta_(n_),
        mean_(n_),
        own_(rule == overlap_rule::naive_delayed ? 0 : n_) {
    PACO_ASSERT(!codec_ || codec_->size() == n_, "the codec covers the whole parameter plane");
    if (codec_ && codec_->error_feedback()) residual_ = w.state().get(plane::residual);
    w.state().get(plane::anchor);
  }
  co2_replica(const co2_replica&) = delete;
  co2_replica& operator=(const co2_replica&) = delete;
  // An all-reduce still in flight is waited for (flight_ is the last member destroyed first).

  // n rounds; every all-reduce must end within round_deadline of its launch (it overlaps the
  // next round's inner steps, so the deadline covers both). on_round(round, bytes) after each,
  // with the bytes this rank sent in the all-reduce that completed during the round (round 0:
  // none). Ensures on ok: the param plane holds x_n; the last round's all-reduce is in flight
  // (finish() applies it). Errors: the all-reduce's (timeout, peer_lost …), mismatch if the
  // replicas diverged; after an error the replica cannot go on (its rounds are out of step).
  status run(int n, std::chrono::steady_clock::duration round_deadline,
             const std::function<void(long, std::size_t)>& on_round = {}) {
    using clock = std::chrono::steady_clock;
    auto& a = w_->state();
    const auto th = a.get(plane::param), an = a.get(plane::anchor);
    for (int round = 0; round < n; ++round) {
      std::copy(th.begin(), th.end(), an.begin());  // x_t
      const auto t0 = clock::now();
      w_->train();
      overlap_.inner_s += seconds(clock::now() - t0);
      std::vector<float> delta(n_);
      for (std::size_t i = 0; i < n_; ++i) delta[i] = an[i] - th[i];
      std::size_t sent = 0;
      std::copy(an.begin(), an.end(), th.begin());
      const bool arrived = flight_.in_flight();
      if (arrived) {  // mean_ = mean Δ_{t−1}
        if (auto s = flight_.land(traffic_, overlap_, &sent); !s) return s;
      } else {
        std::fill(mean_.begin(), mean_.end(), 0.0f);
      }
      if (rule_ != overlap_rule::naive_delayed) {
        // co2: x_{t+1} = OuterOpt(x_t, mean Δ_{t−1} + (Δ_t − Δ_{t−1}))
        // eager: x_{t+1} = OuterOpt(x_t, mean Δ_{t−1} + (Δ_t − Δ_{t−1}) / k)
        const float share = own_share();
        for (std::size_t i = 0; i < n_; ++i) mean_[i] += (delta[i] - own_[i]) * share;
        std::copy(delta.begin(), delta.end(), own_.begin());
        outer_.step(std::span<float>(th.data(), n_), std::span<const float>(mean_), state_);
      } else if (arrived) {  // x_{t+1} = OuterOpt(x_t, mean Δ_{t−1}); round 0: x_1 = x_0
        outer_.step(std::span<float>(th.data(), n_), std::span<const float>(mean_), state_);
      }
      delta_ = std::move(delta);
      launch(hash64(th.data(), th.size_bytes()), round_deadline);
      ++done_;
      if (on_round) on_round(done_ - 1, sent);
    }
    return {};
  }

  // Waits for the all-reduce in flight and applies its outer step, then (naive_delayed) checks
  // the replicas hold the same θ. Ensures on ok: the param plane and the anchor hold x_{T+1}, every
  // round's Δ applied; nothing is in flight (run() may go on, from there, as from x_0). No-op
  // when nothing is in flight. Errors: as run's.
  status finish(std::chrono::steady_clock::duration deadline) {
    if (!flight_.in_flight()) return {};
    if (auto s = flight_.land(traffic_, overlap_); !s) return s;
    auto& a = w_->state();
    const auto th = a.get(plane::param), an = a.get(plane::anchor);
    if (rule_ != overlap_rule::naive_delayed) {  // the own Δ_{T−1} (share) swapped for the mean
      const float share = own_share();
      for (std::size_t i = 0; i < n_; ++i) mean_[i] -= own_[i] * share;
      std::fill(own_.begin(), own_.end(), 0.0f);
    }
    outer_.step(std::span<float>(th.data(), n_), std::span<const float>(mean_), state_);
    std::copy(th.begin(), th.end(), an.begin());
    if (rule_ != overlap_rule::naive_delayed) return {};  // the replicas differ by design
    return detail::check_identical_within(*t_, hash64(th.data(), th.size_bytes()), deadline,
                                          "naive delayed", traffic_);
  }

  bool in_flight() const noexcept { return flight_.in_flight(); }
  const train::diloco_traffic& traffic() const noexcept { return traffic_; }
  const overlap_stats& overlap() const noexcept { return overlap_; }
  long rounds_done() const noexcept { return done_; }
  overlap_rule rule() const noexcept { return rule_; }
  std::span<const float> outer_state() const noexcept { return state_; }

 private:
  static double seconds(std::chrono::steady_clock::duration d) {
    return std::chrono::duration<double>(d).count();
  }
  // How much of its own Δ a rank applies before the mean holding it arrives: all of it (co2),
  // its share 1/k (eager).
  float own_share() const { return rule_ == overlap_rule::co2 ? 1.0f : 1.0f / float(t_->size()); }

  // The all-reduce of delta_ into mean_ and (naive_delayed) the check of x_{t+1}'s hash, in the
  // background: the transport, the codec, the residual, delta_ and mean_ are the flight's
  // until it lands.
  void launch(std::uint64_t hash_next, std::chrono::steady_clock::duration deadline) {
    flight_.launch(*t_, codec_ ? &*codec_ : nullptr, slice<const float>(delta_.data(), n_),
                   residual_, slice<float>(mean_.data(), n_),
                   rule_ == overlap_rule::naive_delayed ? std::optional<std::uint64_t>(hash_next)
                                                        : std::nullopt,
                   "overlapped DiLoCo", deadline);
  }

  T* t_;
  train::path_worker<Model, InnerOpt>* w_;
  O outer_;
  std::optional<compress::module_codec> codec_;
  overlap_rule rule_;
  std::size_t n_;
  std::vector<float> state_;
  std::vector<float> delta_;  // Δ_t, read by the flight
  std::vector<float> mean_;   // mean Δ_t, written by the flight
  std::vector<float> own_;    // co2, eager: this rank's Δ_{t−1}, in the mean in flight
  slice<float> residual_{};   // error feedback (plane::residual), used by the flight only
  train::diloco_traffic traffic_;
  overlap_stats overlap_;
  long done_ = 0;
  mean_in_flight<T> flight_;  // last: destroyed first, waiting for a flight still running
};

}  // namespace paco::train
