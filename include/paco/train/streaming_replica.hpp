#pragma once
// streaming_replica: one rank of Streaming DiLoCo (Douillard et al. 2025; ALGORITHMS.md §6.1)
// over an all-reduce. The parameters are cut into P fragments (train/fragments.hpp); each is
// synced every H inner steps, the fragments staggered by c = H/P steps, so one fragment's
// all-reduce is on the wire at a time (each moves only the fragment's bytes; a round moves as many
// as DiLoCo's). A sync may run behind τ further inner steps (overlap), and the fragment's new
// global value is mixed into the local one with α:
//
//   g ← θ (the anchor plane holds g, the global copy of every fragment); per-fragment outer state
//   at inner step t (1, 2, …): fragment p = (t/c) mod P sends when c | t and t ≥ H + p·c:
//       Δ_p = g_p − θ_p;  launch the all-reduce of Δ_p (and of hash(g)) in the background
//   at step t + τ:  wait;  g_p ← OuterOpt_p(g_p, mean Δ_p);  θ_p ← α·θ_p + (1 − α)·g_p
//   finish(): the sync in flight lands, then every fragment with steps since its last send is
//       synced at once, and θ ← g: the outer parameters, the same on every rank (hash-checked)
//
// The anchor is g_p (as torchft and MaxText do); the receive is at t + τ (the algorithm, not the
// prose). With P = 1, τ = 0, α = 0 it is DiLoCo with H inner steps a round (bit-identical to
// diloco_replica); α = 1 leaves θ to train alone while g evolves. The mean goes through the same
// code as diloco_round (fp32 ring, or a codec per fragment with error feedback: the paper sends
// 4-bit floats; fragment_codecs makes any of paco's). Replicas keep bit-identical g: every
// launch checks the hash of g.
//
//   auto frags = *train::gpt_fragments(model.layout(), layers, 2, train::fragment_order::strided);
//   train::streaming_replica<net::asio_tcp, nn::gpt, optim::adamw, outer::nesterov> r(
//       tcp, worker, outer::nesterov{}, frags, {.sync_every = 60, .overlap = 5, .alpha = 0.5f});
//   r.run(rounds * 60, std::chrono::minutes(5));
//   r.finish(std::chrono::minutes(5));   // the param plane holds the outer parameters g
//
// The transport is used by a background thread while a sync is in flight: nothing else may use
// it between run() and finish(). Memory beyond DiLoCo's: the outer state of each fragment, and
// two buffers of the largest fragment (and, with error feedback, a residual per fragment).

#include <algorithm>
#include <chrono>
#include <cmath>
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
#include "paco/train/fragments.hpp"
#include "paco/train/mean_in_flight.hpp"
#include "paco/train/path_worker.hpp"

namespace paco::train {

struct streaming_config {
  int sync_every = 100;  // H: inner steps between two syncs of one fragment
  int overlap = 0;       // τ: inner steps a sync runs behind before it is applied
  float alpha = 0.0f;  // θ_p ← α·θ_p + (1 − α)·g_p on receipt (0: take the global value)

  // Errors: invalid_argument unless H ≥ 1 is a multiple of the number of fragments P,
  // 0 ≤ τ < H/P (one sync in flight at a time), and 0 ≤ α ≤ 1.
  status validate(std::size_t fragments) const {
    const long p = long(fragments);
    if (p < 1) return {errc::invalid_argument, "streaming: no fragments"};
    if (sync_every < 1 || sync_every % p != 0)
      return {errc::invalid_argument, "streaming: sync_every (H = " + std::to_string(sync_every) +
                                          ") must be a positive multiple of the " +
                                          std::to_string(p) + " fragments"};
    if (overlap < 0 || overlap >= sync_every / p)
      return {errc::invalid_argument,
              "streaming: overlap (τ = " + std::to_string(overlap) +
                  ") must be in [0, H/P = " + std::to_string(sync_every / p) + ")"};
    if (!(alpha >= 0 && alpha <= 1))
      return {errc::invalid_argument, "streaming: alpha must be in [0, 1]"};
    return {};
  }
};

// One landed sync, for run()'s callback.
struct fragment_sync {
  int fragment = 0;
  long sent_at = 0;            // the inner step the fragment's Δ was taken at
  long applied_at = 0;         // the inner step its mean was applied at (sent_at + τ)
  std::size_t bytes_sent = 0;  // this rank's bytes on the wire for it, hash check included
};

template <net::Transport T, class Model, class InnerOpt, outer::OuterOptimizer O>
class streaming_replica {
 public:
  // Requires: t, w outlive the replica; w's arena holds this rank's θ (the same on every rank);
  // every rank passes the same fragments, config and codecs (codecs: empty for fp32, else
  // fragment_codecs of the same compression, one per fragment). A bad config or fragments are
  // reported by run().
  streaming_replica(T& t, train::path_worker<Model, InnerOpt>& w, O outer,
                    std::vector<fragment> frags, streaming_config cfg,
                    std::vector<compress::module_codec> codecs = {})
      : t_(&t),
        w_(&w),
        outer_(outer),
        frags_(std::move(frags)),
        cfg_(cfg),
        codecs_(std::move(codecs)) {
    std::size_t largest = 0;
    for (std::size_t p = 0; p < frags_.size(); ++p) {
      const std::size_t n = frags_[p].size();
      state_.emplace_back(outer_.state_size(n), 0.0f);
      const bool feedback = p < codecs_.size() && codecs_[p].error_feedback();
      residual_.emplace_back(feedback ? n : 0, 0.0f);  // a codec count off is run()'s error
      largest = std::max(largest, n);
    }
    delta_.resize(largest);
    mean_.resize(largest);
    scratch_.resize(largest);
    last_sent_.assign(frags_.size(), 0);
    auto& a = w.state();
    const auto th = a.get(plane::param), g = a.get(plane::anchor);
    std::copy(th.begin(), th.end(), g.begin());
  }
  streaming_replica(const streaming_replica&) = delete;
  streaming_replica& operator=(const streaming_replica&) = delete;

  // n more inner steps, syncing fragments on their schedule; every sync must land within
  // deadline of its launch. on_sync after each landed sync. Ensures on ok: step() grew by n; a
  // sync may be in flight (finish() lands it). Errors: the config's or fragments' (nothing run),
  // the all-reduce's (timeout, peer_lost …), mismatch if the replicas' g diverged; after an
  // error the replica cannot go on.
  status run(long n, std::chrono::steady_clock::duration deadline,
             const std::function<void(const fragment_sync&)>& on_sync = {}) {
    if (auto s = check(); !s) return s;
    using clock = std::chrono::steady_clock;
    const long c = cfg_.sync_every / long(frags_.size());
    for (long k = 0; k < n; ++k) {
      const auto t0 = clock::now();
      w_->train(1);
      overlap_.inner_s += seconds(clock::now() - t0);
      ++step_;
      if (flight_.in_flight() && step_ == apply_at_)
        if (auto s = land_and_apply(on_sync); !s) return s;
      const long j = step_ / c;
      if (step_ % c == 0 && j >= long(frags_.size())) {
        const int p = int(j % long(frags_.size()));
        if (flight_.in_flight())  // unreachable when τ < c; kept so a sync is never dropped
          if (auto s = land_and_apply(on_sync); !s) return s;
        launch(p, deadline);
        if (cfg_.overlap == 0)
          if (auto s = land_and_apply(on_sync); !s) return s;
      }
    }
    return {};
  }

  // Lands the sync in flight, syncs every fragment trained since its last send (in fragment
  // order, each at once), sets θ ← g and checks that every rank holds the same g. Ensures on
  // ok: the param and anchor planes hold the outer parameters; nothing is in flight. Errors:
  // as run's.
  status finish(std::chrono::steady_clock::duration deadline) {
    if (auto s = check(); !s) return s;
    if (flight_.in_flight())
      if (auto s = land_and_apply({}); !s) return s;
    for (std::size_t p = 0; p < frags_.size(); ++p)
      if (last_sent_[p] < step_) {
        launch(int(p), deadline);
        if (auto s = land_and_apply({}); !s) return s;
      }
    auto& a = w_->state();
    const auto th = a.get(plane::param), g = a.get(plane::anchor);
    std::copy(g.begin(), g.end(), th.begin());
    return detail::check_identical_within(*t_, hash64(g.data(), g.size_bytes()), deadline,
                                          "Streaming DiLoCo", traffic_);
  }

  long step() const noexcept { return step_; }
  bool in_flight() const noexcept { return flight_.in_flight(); }
  const train::diloco_traffic& traffic() const noexcept { return traffic_; }  // rounds = syncs
  const overlap_stats& overlap() const noexcept { return overlap_; }
  const std::vector<fragment>& fragments() const noexcept { return frags_; }

 private:
  static double seconds(std::chrono::steady_clock::duration d) {
    return std::chrono::duration<double>(d).count();
  }

  status check() const {
    if (auto s = cfg_.validate(frags_.size()); !s) return s;
    if (auto s = check_fragments(w_->state().layout(), frags_); !s) return s;
    if (!codecs_.empty() && codecs_.size() != frags_.size())
      return {errc::invalid_argument, "streaming: one codec per fragment, or none"};
    for (std::size_t p = 0; p < codecs_.size(); ++p)
      if (codecs_[p].size() != frags_[p].size())
        return {errc::invalid_argument,
                "streaming: codec " + std::to_string(p) + " does not match its fragment's size"};
    return {};
  }

  // Copies fragment p of plane `from` into out (its spans end to end), or back with `into`.
  void gather(int p, std::span<const float> from, std::vector<float>& out) const {
    std::size_t at = 0;
    for (auto& s : frags_[std::size_t(p)].spans) {
      std::copy_n(from.begin() + std::ptrdiff_t(s.offset), s.size,
                  out.begin() + std::ptrdiff_t(at));
      at += s.size;
    }
  }
  void scatter(int p, const std::vector<float>& in, std::span<float> into) const {
    std::size_t at = 0;
    for (auto& s : frags_[std::size_t(p)].spans) {
      std::copy_n(in.begin() + std::ptrdiff_t(at), s.size, into.begin() + std::ptrdiff_t(s.offset));
      at += s.size;
    }
  }

  // Δ_p = g_p − θ_p into delta_; its mean into mean_ and the check of g's hash, in the
  // background. Only the task touches the transport, the codec, the residual, delta_ and mean_
  // until land_and_apply().
  void launch(int p, std::chrono::steady_clock::duration deadline) {
    auto& a = w_->state();
    const auto th = a.get(plane::param), g = a.get(plane::anchor);
    const std::size_t n = frags_[std::size_t(p)].size();
    std::size_t at = 0;
    for (auto& s : frags_[std::size_t(p)].spans)
      for (std::size_t i = s.offset; i < s.offset + s.size; ++i) delta_[at++] = g[i] - th[i];
    last_sent_[std::size_t(p)] = step_;
    flying_ = p;
    apply_at_ = step_ + cfg_.overlap;
    auto& res = residual_[std::size_t(p)];
    flight_.launch(*t_, codecs_.empty() ? nullptr : &codecs_[std::size_t(p)],
                   slice<const float>(delta_.data(), n), slice<float>(res.data(), res.size()),
                   slice<float>(mean_.data(), n), hash64(g.data(), g.size_bytes()),
                   "Streaming DiLoCo", deadline);
  }

  // Waits for the flight, then g_p ← OuterOpt_p(g_p, mean) and θ_p ← α·θ_p + (1 − α)·g_p.
  status land_and_apply(const std::function<void(const fragment_sync&)>& on_sync) {
    std::size_t sent = 0;
    if (auto s = flight_.land(traffic_, overlap_, &sent); !s) return s;
    const int p = flying_;
    const std::size_t n = frags_[std::size_t(p)].size();
    auto& a = w_->state();
    const auto th = a.get(plane::param), g = a.get(plane::anchor);
    gather(p, g, scratch_);
    outer_.step(std::span<float>(scratch_.data(), n), std::span<const float>(mean_.data(), n),
                state_[std::size_t(p)]);
    scatter(p, scratch_, g);
    const float al = cfg_.alpha;
    for (auto& s : frags_[std::size_t(p)].spans)
      for (std::size_t i = s.offset; i < s.offset + s.size; ++i)
        th[i] = al == 0.0f ? g[i] : al == 1.0f ? th[i] : al * th[i] + (1.0f - al) * g[i];
    if (on_sync) on_sync({p, last_sent_[std::size_t(p)], step_, sent});
    return {};
  }

  T* t_;
  train::path_worker<Model, InnerOpt>* w_;
  O outer_;
  std::vector<fragment> frags_;
  streaming_config cfg_;
  std::vector<compress::module_codec> codecs_;
  std::vector<std::vector<float>> state_;     // the outer state of each fragment
  std::vector<std::vector<float>> residual_;  // error feedback of each fragment (or empty)
  std::vector<float> delta_, mean_;           // the flight's: Δ_p and its mean
  std::vector<float> scratch_;                // g_p laid end to end for the outer step
  std::vector<long> last_sent_;               // the step each fragment last sent at
  int flying_ = 0;
  long apply_at_ = 0;
  long step_ = 0;
  train::diloco_traffic traffic_;
  overlap_stats overlap_;
  mean_in_flight<T> flight_;  // last: destroyed first, waiting for a flight still running
};

}  // namespace paco::train
