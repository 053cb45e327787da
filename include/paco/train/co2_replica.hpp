#pragma once
// co2_replica: one rank of CO2 (Sun et al., ICLR 2024; ALGORITHMS.md §2) — DiLoCo over an
// all-reduce whose communication is fully overlapped with computation. Round t's mean Δ is
// all-reduced in the background while round t+1's inner steps run, and is applied one round
// late:
//
//   round t:  θ = x_t (the anchor plane);  H inner steps → Δ_t = x_t − θ
//             wait for the all-reduce of Δ_{t−1} (launched at the end of round t−1)
//             x_{t+1} = OuterOpt(x_t, mean Δ_{t−1})     (round 0: x_1 = x_0)
//             launch the all-reduce of Δ_t and of hash(x_{t+1}), return to the inner steps
//   finish(): wait for the last all-reduce, x_{T+1} = OuterOpt(x_T, mean Δ_{T−1}), hash check
//
// A round costs max(inner steps, all-reduce) instead of their sum. Any OuterOptimizer works;
// outer::co2 is the paper's (momentum with the staleness-gap penalty and momentum clipping).
// The mean goes through the same code as diloco_round (train::detail::mean_delta: the fp32
// ring, or a codec with error feedback), so replicas stay bit-identical, and the hash of every
// x_{t+1} is checked by the next all-reduce. overlap() says how much of the communication the
// inner steps hid.
//
//   train::co2_replica<net::asio_tcp, nn::gpt, optim::adamw, outer::co2> r(
//       tcp, worker, outer::co2{.momentum = 0.2f, .clip = outer::co2::clip_mode::element});
//   r.run(rounds, std::chrono::minutes(5));
//   r.finish(std::chrono::minutes(5));   // the worker's param plane now holds x_{T+1}
//
// The transport is used by a background thread while an all-reduce is in flight: from the end
// of run()'s first round until finish() returns, nothing else may use it (MPI: the serialized
// thread level net::mpi asks for suffices). Memory beyond DiLoCo's: two n-float buffers.

#include <chrono>
#include <cstdint>
#include <functional>
#include <future>
#include <optional>
#include <vector>

#include "paco/collectives/counted.hpp"
#include "paco/compress/module_codec.hpp"
#include "paco/core/hash.hpp"
#include "paco/net/concepts.hpp"
#include "paco/outer/concepts.hpp"
#include "paco/train/diloco_allreduce.hpp"
#include "paco/train/path_worker.hpp"

namespace paco::train {

// Where a CO2 rank's time went, summed over its rounds (seconds).
struct co2_overlap {
  double inner_s = 0;  // the inner steps
  double comm_s = 0;   // the all-reduces, in the background (mean Δ and hash check)
  double wait_s = 0;   // the rank waited for an all-reduce: the communication the inner steps
                       // did not hide (finish()'s wait included)
  // The fraction of communication time hidden behind the inner steps, 1 when nothing was sent.
  double hidden() const { return comm_s > 0 ? 1.0 - std::min(wait_s, comm_s) / comm_s : 1.0; }
};

template <net::Transport T, class Model, class InnerOpt, outer::OuterOptimizer O>
class co2_replica {
 public:
  // Requires: t, w outlive the replica; w's arena holds this rank's θ (the same on every rank);
  // codec, when given, is train::diloco_codec of the same compression on every rank.
  co2_replica(T& t, train::path_worker<Model, InnerOpt>& w, O outer,
              std::optional<compress::module_codec> codec = std::nullopt)
      : t_(&t),
        w_(&w),
        outer_(outer),
        codec_(std::move(codec)),
        n_(w.state().get(plane::param).size()),
        state_(outer.state_size(n_), 0.0f),
        delta_(n_),
        mean_(n_) {
    PACO_ASSERT(!codec_ || codec_->size() == n_, "the codec covers the whole parameter plane");
    if (codec_ && codec_->error_feedback()) residual_ = w.state().get(plane::residual);
    w.state().get(plane::anchor);
  }
  co2_replica(const co2_replica&) = delete;
  co2_replica& operator=(const co2_replica&) = delete;
  // Waits for an all-reduce still in flight (it holds references to this object).
  ~co2_replica() {
    if (flight_.valid()) flight_.wait();
  }

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
    for (int k = 0; k < n; ++k) {
      std::copy(th.begin(), th.end(), an.begin());  // x_t
      const auto t0 = clock::now();
      w_->train();
      overlap_.inner_s += seconds(clock::now() - t0);
      std::vector<float> delta(n_);
      for (std::size_t i = 0; i < n_; ++i) delta[i] = an[i] - th[i];
      std::size_t sent = 0;
      std::copy(an.begin(), an.end(), th.begin());
      if (flight_.valid()) {  // x_{t+1} = OuterOpt(x_t, mean Δ_{t−1})
        if (auto s = land(sent); !s) return s;
        outer_.step(std::span<float>(th.data(), n_), std::span<const float>(mean_), state_);
      }
      delta_ = std::move(delta);
      launch(hash64(th.data(), th.size_bytes()), round_deadline);
      ++done_;
      if (on_round) on_round(done_ - 1, sent);
    }
    return {};
  }

  // Waits for the all-reduce in flight and applies its outer step, then checks the replicas
  // hold the same θ. Ensures on ok: the param plane and the anchor hold x_{T+1}, every round's
  // Δ applied; nothing is in flight (run() may go on, from there). No-op when nothing is in
  // flight. Errors: as run's.
  status finish(std::chrono::steady_clock::duration deadline) {
    if (!flight_.valid()) return {};
    std::size_t sent = 0;
    if (auto s = land(sent); !s) return s;
    auto& a = w_->state();
    const auto th = a.get(plane::param), an = a.get(plane::anchor);
    outer_.step(std::span<float>(th.data(), n_), std::span<const float>(mean_), state_);
    std::copy(th.begin(), th.end(), an.begin());
    collectives::counted<T> ct(*t_);
    collectives::collective_options co;
    co.until = net::after(deadline);
    auto s = detail::check_identical(ct, hash64(th.data(), th.size_bytes()), co, "CO2");
    traffic_.bytes_sent += ct.bytes();
    return s;
  }

  bool in_flight() const noexcept { return flight_.valid(); }
  const train::diloco_traffic& traffic() const noexcept { return traffic_; }
  const co2_overlap& overlap() const noexcept { return overlap_; }
  long rounds_done() const noexcept { return done_; }
  std::span<const float> outer_state() const noexcept { return state_; }

 private:
  struct landed {
    status s;
    std::size_t sent = 0, payload = 0;
    double seconds = 0;
  };

  static double seconds(std::chrono::steady_clock::duration d) {
    return std::chrono::duration<double>(d).count();
  }

  // The all-reduce of delta_ into mean_ and the check of x_{t+1}'s hash, in the background.
  // Only the task touches the transport, the codec, the residual, delta_ and mean_ until land().
  void launch(std::uint64_t hash_next, std::chrono::steady_clock::duration deadline) {
    collectives::collective_options co;
    co.until = net::after(deadline);
    flight_ = std::async(std::launch::async, [this, co, hash_next]() -> landed {
      const auto t0 = std::chrono::steady_clock::now();
      landed r;
      collectives::counted<T> ct(*t_);
      r.s =
          detail::mean_delta(ct, codec_ ? &*codec_ : nullptr, slice<const float>(delta_.data(), n_),
                             residual_, slice<float>(mean_.data(), n_), co, r.payload);
      if (r.s) r.s = detail::check_identical(ct, hash_next, co, "CO2");
      r.sent = ct.bytes();
      r.seconds = seconds(std::chrono::steady_clock::now() - t0);
      return r;
    });
  }

  // Waits for the flight; books its traffic and time. Ensures on ok: mean_ holds the mean Δ.
  status land(std::size_t& sent) {
    const auto t0 = std::chrono::steady_clock::now();
    landed r = flight_.get();
    overlap_.wait_s += seconds(std::chrono::steady_clock::now() - t0);
    overlap_.comm_s += r.seconds;
    traffic_.bytes_sent += r.sent;
    traffic_.payload_bytes += r.payload;
    ++traffic_.rounds;
    sent = r.sent;
    return r.s;
  }

  T* t_;
  train::path_worker<Model, InnerOpt>* w_;
  O outer_;
  std::optional<compress::module_codec> codec_;
  std::size_t n_;
  std::vector<float> state_;
  std::vector<float> delta_;  // Δ_t, read by the flight
  std::vector<float> mean_;   // mean Δ_t, written by the flight
  slice<float> residual_{};   // error feedback (plane::residual), used by the flight only
  std::future<landed> flight_;
  train::diloco_traffic traffic_;
  co2_overlap overlap_;
  long done_ = 0;
};

}  // namespace paco::train
