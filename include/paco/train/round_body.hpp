#pragma once
// round_body: the one round of every sync rule (train/sync.hpp), whatever carries the group's
// mean. A round is H inner steps of a learner, run in stretches between the rule's sends and
// landings (the schedule sync.hpp spells out); the plane work and the carrying of a fragment's
// Δ through the group are an Exchange's:
//
//   train::round_loop      the all-reduce (round_planes + mean_in_flight over a transport)
//   train::store_exchange  the module store (push Δ, wait for the round's close, fetch G)
//
//   train::round_body<X, L> body(exchange, learner, plan, fragments, H);
//   body.run(rounds, deadline, before_round, on_round);
//   body.finish(deadline);  // lands what is in flight; syncs every fragment trained since
//
// An Exchange, for fragment p of the rule's P:
//   measure(p)                 fresh ← Δ_p = g_p − θ_p (the exchange's buffer)
//   launch(p, deadline, now)   carries fresh Δ_p through the group (a flight: on a background
//                              thread, or at land() on the caller's when `now`); every step of it
//                              by deadline from now
//   in_flight()                a flight was launched and not landed
//   land(bytes)                waits for the flight (bytes += this member's bytes of it); its
//                              error, if any
//   apply(p, landed, fresh)    the rule's landing of fragment p: what came back (landed) or
//                              nothing, with σ·fresh (fresh), into g_p and then θ_p ← α·θ_p +
//                              (1 − α)·g_p (sync_plan)
//   clear_fresh()              fresh ← 0 (a one-round-late rule's last landing)
//   settle()                   the work so far has happened (a device stream drained)
//   done()                     the group says the run is over (the store: the path's modules
//                              reached the last round; the all-reduce: never)
// A landing after which done() holds stops the body: a one-round-late rule then takes what
// came back without its fresh Δ (which is dropped, as a late push is), and finish() syncs
// nothing more.

#include <algorithm>
#include <chrono>
#include <concepts>
#include <cstddef>
#include <functional>
#include <type_traits>
#include <utility>
#include <vector>

#include "paco/core/arena.hpp"
#include "paco/core/backend.hpp"
#include "paco/core/error.hpp"
#include "paco/train/sync.hpp"

namespace paco::train {

namespace detail {
template <class A>
struct arena_backend {};
template <Backend B>
struct arena_backend<arena<B>> {
  using type = B;
};
}  // namespace detail

// The backend of a learner's arena.
template <class L>
using learner_backend =
    typename detail::arena_backend<std::remove_cvref_t<decltype(std::declval<L&>().state())>>::type;

// What the round body trains: n inner steps at a time (their mean loss returned), H a round.
template <class L>
concept InnerSteps = requires(L& l, const L& cl, int n) {
  { l.train(n) } -> std::convertible_to<double>;
  { cl.steps_per_round() } -> std::convertible_to<int>;
};

// What the all-reduce's round loop trains: inner steps over an arena on a backend (θ in
// plane::param; the loop keeps g in plane::anchor). Models: train::path_worker (host),
// kernels::learner_cuda (device).
template <class L>
concept Learner = InnerSteps<L> && requires {
  typename learner_backend<L>;
};

// What the round body asks of a round's plane work (see the file comment). Models:
// detail::allreduce_exchange (train/round_loop.hpp), store_exchange (train/store_exchange.hpp).
// clang-format off
template <class X>
concept Exchange = requires(X& x, const X& cx, int p, bool b, std::size_t& bytes,
                            std::chrono::steady_clock::duration d) {
  x.measure(p);
  x.launch(p, d, b);
  { cx.in_flight() } -> std::convertible_to<bool>;
  { x.land(bytes) } -> std::same_as<status>;
  x.apply(p, b, b);
  x.clear_fresh();
  x.settle();
  { cx.done() } -> std::convertible_to<bool>;
};
// clang-format on

// One landed sync.
struct sync_record {
  int fragment = 0;
  long sent_at = 0;            // the loop's inner step its Δ was measured at
  long applied_at = 0;         // the inner step its mean was applied at
  std::size_t bytes_sent = 0;  // this member's bytes on the wire for it, hash check included
};

// The end of a round, for run()'s callback.
struct round_end {
  long round = 0;              // 0, 1, … since the loop began (or since the checkpoint)
  double loss = 0;             // the mean inner loss of its H steps
  std::size_t bytes_sent = 0;  // this member's bytes of the syncs that landed in it
};

template <Exchange X, InnerSteps L>
class round_body {
 public:
  // Before round `done` (0, 1, …) begins; may add to the round's bytes. An error stops the run.
  using before_round = std::function<status(long done, std::size_t& bytes)>;

  // Requires: x and l outlive the body; plan is the rule's for `fragments` fragments and H =
  // l.steps_per_round() (sync.hpp: its checks passed).
  round_body(X& x, L& l, const sync_plan& plan, std::size_t fragments)
      : x_(&x), l_(&l), plan_(plan), p_(long(fragments)), h_(l.steps_per_round()) {
    last_sent_.assign(fragments, 0);
    pending_.assign(fragments, 0);
  }

  // n rounds of H inner steps, sending and landing fragments on the rule's schedule, each sync
  // within deadline of its send; before(done) ahead of each, on_round after each. Stops early
  // once the exchange is done(). Errors: the exchange's, before's; a learner's or an exchange's
  // error_exception propagates (the caller's to catch).
  status run(int n, std::chrono::steady_clock::duration deadline, const before_round& before = {},
             const std::function<void(const round_end&)>& on_round = {}) {
    using clock = std::chrono::steady_clock;
    for (int r = 0; r < n && !stopped_; ++r) {
      const long end = step_ + h_;
      double loss = 0;
      std::size_t bytes = 0;
      if (before)
        if (auto s = before(done_, bytes); !s) return s;
      while (step_ < end) {
        long next = std::min(end, next_send());
        if (x_->in_flight() && !plan_.next_round()) next = std::min(next, apply_at_);
        const auto t0 = clock::now();
        loss += l_->train(int(next - step_)) * double(next - step_);
        inner_s_ += std::chrono::duration<double>(clock::now() - t0).count();
        step_ = next;
        if (step_ == end && trained)
          if (auto s = trained(done_, loss / double(h_)); !s) return s;
        if (x_->in_flight() && !plan_.next_round() && step_ == apply_at_)
          if (auto s = land_and_apply(false, bytes); !s) return s;
        if (!stopped_ && sends_now())
          if (auto s = send(int((step_ / c()) % p_), deadline, bytes); !s) return s;
      }
      ++done_;
      x_->settle();
      if (on_round) on_round({done_ - 1, loss / double(h_), bytes});
    }
    return {};
  }

  // Lands the sync in flight (a one-round-late one with no fresh Δ: u = mean Δ − σ·own Δ) and,
  // unless the exchange is done, syncs every fragment trained since its last send at once.
  // Ensures on ok: nothing in flight; g holds the outer parameters (the exchange's end() then
  // sets θ ← g). Errors: as run's.
  status finish(std::chrono::steady_clock::duration deadline) {
    std::size_t bytes = 0;
    if (x_->in_flight())
      if (auto s = land_and_apply(plan_.next_round(), bytes); !s) return s;
    if (stopped_) return {};
    for (long p = 0; p < p_; ++p)
      if (last_sent_[std::size_t(p)] < step_) {
        x_->measure(int(p));
        launch(int(p), deadline);
        if (auto s = land_and_apply(false, bytes); !s) return s;
      }
    return {};
  }

  // A resumed member whose fragments `pending` hold Δ trained before it stopped and not yet
  // synced (a store worker's checkpoint): fragment 0's is sent now, fragment p's at step p·c of
  // the first round; the others are sent from the second round on, as in a fresh run. Requires:
  // no round run yet. Errors: as run's.
  status start_pending(const std::vector<char>& pending,
                       std::chrono::steady_clock::duration deadline) {
    PACO_ASSERT(pending.size() == pending_.size() && step_ == 0, "start_pending before any round");
    pending_ = pending;
    for (std::size_t p = 0; p < pending_.size(); ++p)
      if (pending_[p]) last_sent_[p] = -1;
    std::size_t bytes = 0;
    if (pending_[0]) return send(0, deadline, bytes);
    return {};
  }

  // Called when a round's H steps are trained, before the sends due at its end (round, its mean
  // loss): a store worker reports a cycle there, with nothing of it in flight. An error stops
  // the run.
  std::function<status(long round, double loss)> trained;

  // A resumed run: `done` rounds behind it (a checkpoint's), nothing in flight.
  void resume_at(long done) {
    done_ = done;
    step_ = done * h_;
    std::fill(last_sent_.begin(), last_sent_.end(), step_);
  }

  long rounds_done() const noexcept { return done_; }
  long step() const noexcept { return step_; }  // inner steps run by this body
  bool stopped() const noexcept { return stopped_; }
  double inner_seconds() const noexcept { return inner_s_; }
  const std::vector<sync_record>& syncs() const noexcept { return syncs_; }

 private:
  long c() const { return h_ / p_; }
  // Whether a fragment is sent at the current step (c | s, s ≥ H; or pending in the first round).
  bool sends_now() const {
    if (step_ % c() != 0) return false;
    const long k = step_ / c();
    return k >= p_ || (k < p_ && pending_[std::size_t(k)]);
  }
  // The first step after the current one at which a fragment is sent.
  long next_send() const {
    for (long k = step_ / c() + 1; k < p_; ++k)
      if (pending_[std::size_t(k)]) return k * c();
    return std::max(step_ / c() + 1, p_) * c();
  }

  // A send of fragment p: a one-round-late rule lands its last sync first; Δ_p is measured; the
  // landing is applied with the fresh Δ (the first round: σ·Δ alone); then Δ_p is launched (and
  // landed at once with lag 0). (The landing comes before the measure: a store's flight reads
  // the buffers a measure writes.)
  status send(int p, std::chrono::steady_clock::duration deadline, std::size_t& bytes) {
    pending_[std::size_t(p)] = 0;
    if (plan_.next_round()) {
      const bool landed = x_->in_flight();
      if (landed)
        if (auto s = land(bytes); !s) return s;
      x_->measure(p);
      if (landed && x_->done()) {  // the run is over: what came back, the fresh Δ dropped
        x_->clear_fresh();
        x_->apply(flying_, true, true);
        stopped_ = true;
        return {};
      }
      x_->apply(landed ? flying_ : p, landed, true);
    } else {
      if (x_->in_flight())  // unreachable with lag < c; a sync is never dropped
        if (auto s = land_and_apply(false, bytes); !s) return s;
      x_->measure(p);
    }
    launch(p, deadline);
    if (!plan_.next_round() && plan_.lag == 0) return land_and_apply(false, bytes);
    return {};
  }

  void launch(int p, std::chrono::steady_clock::duration deadline) {
    last_sent_[std::size_t(p)] = step_;
    flying_ = p;
    apply_at_ = step_ + plan_.lag;
    x_->launch(p, deadline, plan_.lag == 0 && !plan_.next_round());
  }

  status land(std::size_t& bytes) {
    std::size_t sent = 0;
    if (auto s = x_->land(sent); !s) return s;
    bytes += sent;
    syncs_.push_back({flying_, last_sent_[std::size_t(flying_)], step_, sent});
    return {};
  }
  // Lands the flight and applies it; fresh_zero: a one-round-late rule's finish (Δ^fresh = 0).
  status land_and_apply(bool fresh_zero, std::size_t& bytes) {
    if (auto s = land(bytes); !s) return s;
    if (fresh_zero) x_->clear_fresh();
    x_->apply(flying_, true, fresh_zero);
    if (x_->done()) stopped_ = true;
    return {};
  }

  X* x_;
  L* l_;
  sync_plan plan_;
  long p_, h_;
  std::vector<long> last_sent_;  // the step each fragment was last sent at (−1: pending)
  std::vector<char> pending_;    // fragments whose first send is due in the first round
  std::vector<sync_record> syncs_;
  int flying_ = 0;
  long apply_at_ = 0;
  long step_ = 0;
  long done_ = 0;
  double inner_s_ = 0;
  bool stopped_ = false;
};

}  // namespace paco::train
