#pragma once
// store_exchange: the module store as the round body's Exchange (train/round_body.hpp), so that
// a path worker runs the same round under every sync rule (train/sync.hpp) through the store
// DiPaCo runs on as a DiLoCo rank runs it over the all-reduce. The fragments are the path's
// modules: one fragment of every level (blocking, co2, co2_snapshot, eager, naive_delayed) or one
// per level (streaming, level l's module synced in slot l of every cycle of H inner steps). For
// fragment p:
//
//   measure(p)              Δ of its levels' modules into the worker's buffers, encoded with
//                           their codecs (prepare_level)
//   launch(p, deadline)     a flight (a background thread; with lag 0 at land() on the caller's):
//                           push Δ for the modules' round, wait until that round closed (by
//                           deadline), fetch the modules G the store's outer step made of it
//                           (hash-checked; a whole path is fetched again every pull_retry while
//                           its modules sit at different rounds, worker_loop_options)
//   land()                  joins it; a push refused because its round closed without it (the
//                           worker was late: errc::mismatch) is no error — on_refused is told, the
//                           Δ is dropped and G lands all the same
//   apply(p, landed, fresh) per level l of p: g_l ← B_l − σ_l·Δ_l (B: G if landed, else the
//                           worker's θ_start; σ_l the rule's own share, 0 without fresh),
//                           θ_start,l ← g_l, θ_l ← α·θ_l + (1 − α)·g_l
//   done()                  the path's modules reached worker_loop_options::rounds
//
// The store already took the outer step, so apply never runs an outer optimizer: with outer SGD
// at rate 1 this is the all-reduce's rule (round_loop); with momentum the two forms differ (the
// all-reduce also steps its own fresh Δ; docs/02_dipaco.md). σ_l is 1 for co2 (each worker goes
// on from its own progress; the late mean replaces it: a delay-corrected merge), 1/k_l for
// eager (k_l: the workers sharing level l's module, worker_loop_options::sharing), 0 otherwise.
//
// Threads: between launch and land the flight uses the store and the worker's buffers
// (path_buffers: send, send_level, fetch, fetch_level); the caller trains meanwhile.

#include <algorithm>
#include <chrono>
#include <functional>
#include <future>
#include <string>
#include <thread>
#include <vector>

#include "paco/core/error.hpp"
#include "paco/store/concepts.hpp"
#include "paco/train/concepts.hpp"
#include "paco/train/round_body.hpp"
#include "paco/train/sync.hpp"

namespace paco::train {

struct worker_loop_options {
  long rounds = 1;  // the run ends when the path's modules reach this round
  std::chrono::steady_clock::duration round_deadline = std::chrono::seconds(60);
  std::chrono::steady_clock::duration pull_retry = std::chrono::milliseconds(100);
  int pull_tries = 50;  // pulls of a path whose modules sit at the same different rounds, then
                        // an error
  long completed = -1;  // the last round this worker completed (its checkpoint's; −1: none)
  // Workers of different speeds: a worker trains at most this long a round (zero: no budget)
  // and pushes what it trained, weighted by the share of H it reached
  // (path_worker::push_weight), so a slow worker neither holds its partners' rounds nor is left
  // out of them. Needs a worker that trains step by step (train(1)).
  std::chrono::steady_clock::duration train_budget{};
  // Experiments: after each inner step the worker sleeps (throttle − 1) times as long as the
  // step took, so it runs `throttle` times slower (≥ 1).
  double throttle = 1;
  // The sync rule: blocking, an overlapped one (co2, eager, naive_delayed), or streaming (the
  // path's modules as fragments; see above).
  sync_choice sync = blocking{};
  // Per level of the path, how many workers train its module (eager's σ = 1/k; needed by eager).
  std::vector<int> sharing;
  // An overlapped or streaming worker resumed from a checkpoint: the mean loss of the round
  // (cycle) it had trained and not synced (worker_round::pending_loss of the round it
  // completed), to report with it.
  double resumed_loss = 0;
  // Blocking rule: the worker takes H inner steps for every round of the run, so that its step
  // count stays (completed + 1)·H. A round its modules closed without it (while it was down, or
  // by deadline) is trained all the same on the modules pulled, its Δ dropped as a late push's,
  // and reported (worker_round::pushed = false); after the last round closed without it, it
  // trains the rounds it still owes. The
  // stages of a path cut across processes need this: each feeds or waits for its neighbours'
  // activations of every step (train/stage_worker.hpp).
  bool lockstep = false;
  // Rounds that close on a quorum (store/server.hpp), blocking rule: the path's modules may sit
  // at different rounds (one closed without this worker while another waited for it); the
  // worker takes them as they are and pushes each with its own round as its base
  // (path_buffers::accept_mixed_rounds), and the store merges a late one (merge_late).
  bool mixed_rounds = false;
  // Paced by measurement (no train_budget): a worker whose last round trained longer than the
  // slowest push pace among its path's modules as the store reports it
  // (store::PacedModuleStore: how long after a round opens the modules' faster workers push)
  // trains its next round within pace_factor × that pace, so it finishes with its partners;
  // one at the pace (it sets it) and every worker before the store knows a pace take H steps.
  bool pace_measured = false;
  double pace_factor = 1.05;
};

// θ, θ_start ← the modules of w's last whole-path fetch, on every level; the next push weighs the
// steps trained from here. Throws a device worker's error_exception.
template <PathWorker W>
void take_fetched(W& w) {
  for (std::size_t l = 0; l < w.buffers().levels().size(); ++l) w.land_level(l, true, 0.0f, 0.0f);
  w.weigh_from_here();
}

// Pulls w's path: every module fetched into its buffers (hash-checked, all at one round), then
// taken (take_fetched). Errors: path_buffers::fetch's; a device worker's failed call.
template <PathWorker W, store::ModuleStore Store>
status pull(W& w, Store& store) {
  if (auto s = w.buffers().fetch(store); !s) return s;
  try {
    take_fetched(w);
  } catch (const error_exception& e) {
    return e.err;
  }
  return {};
}

// Pushes Δ = θ_start − θ of every module of w's path for the round pulled last (prepare_level of
// each, then the buffers' send): every module is tried even if one push fails (e.g. its round
// closed without us); the first error is returned. With error feedback, the part of Δ a payload
// did not carry stays in the residual even if the store refuses it. Errors besides: a codec's.
template <PathWorker W, store::ModuleStore Store>
status push(W& w, Store& store) {
  for (std::size_t l = 0; l < w.buffers().levels().size(); ++l)
    if (auto s = w.prepare_level(l); !s) return s;
  return w.buffers().send(store);
}

// Waits until every module of w's path closed the round w pulled it at, by `until`. Errors: the
// store's (timeout, peer_lost …).
template <PathWorker W, store::ModuleStore Store>
status wait_round(W& w, Store& store, std::chrono::steady_clock::time_point until) {
  const auto& buf = w.buffers();
  for (std::size_t l = 0; l < buf.modules().size(); ++l)
    if (auto s = store.wait_closed(buf.modules()[l], buf.level_round(l), until); !s) return s;
  return {};
}

// One synchronous round of w with nothing around it (tests, a single worker): pull, H inner
// steps, push, wait_round within round_deadline of the push. Errors: the pull's, the push's (a
// late one included), the wait's, a device worker's failed CUDA call.
template <PathWorker W, store::ModuleStore Store>
status sync_round(W& w, Store& store, std::chrono::steady_clock::duration round_deadline) {
  if (auto s = train::pull(w, store); !s) return s;
  try {
    w.train(w.steps_per_round());
  } catch (const error_exception& e) {
    return e.err;
  }
  if (auto s = train::push(w, store); !s) return s;
  return wait_round(w, store, std::chrono::steady_clock::now() + round_deadline);
}

namespace detail {
// get() (a pull or a fetch of a whole path), again every o.pull_retry while it fails with
// mismatch (the path's modules sit at different rounds, as after a store restart), up to
// o.pull_tries times counted from the last change in the store's answer: while the rounds it
// names move (a module closing its rounds towards the others', one per round deadline at worst)
// the worker waits on, however far apart they started. Errors: the last try's.
template <class Get>
status retry_while_rounds_differ(const worker_loop_options& o, Get get) {
  // (The rounds only rise and stop at o.rounds, so the answer changes a bounded number of times.)
  status got;
  std::string last;
  for (int same = 0; same < std::max(1, o.pull_tries);) {
    got = get();
    if (got.ok() || got.error().code != errc::mismatch) break;
    if (got.error().message != last) same = 0, last = got.error().message;
    ++same;
    std::this_thread::sleep_for(o.pull_retry);
  }
  return got;
}

// Pulls w's path into θ and θ_start (retry_while_rounds_differ).
template <class W, store::ModuleStore Store>
status pull_path(W& w, Store& store, const worker_loop_options& o) {
  return retry_while_rounds_differ(o, [&] { return train::pull(w, store); });
}

// The error of a store behind the worker's checkpoint (its round ≤ the one completed).
inline status store_behind(long at, long completed) {
  return {errc::mismatch,
          "the store holds this path at round " + std::to_string(at) +
              " but this worker's checkpoint completed round " + std::to_string(completed) +
              ": the store's state is older than the worker's (restored from an older "
              "checkpoint, or started anew without --resume); resume the store from its "
              "latest checkpoint"};
}

// σ per level of w's path under an overlapped rule (plan(k_l) for level l). Errors: the rule's;
// invalid_argument when it depends on k and o.sharing does not give one k ≥ 1 per level.
inline result<std::vector<float>> own_shares(const worker_loop_options& o, std::size_t levels,
                                             int h) {
  std::vector<float> share(levels);
  const bool per_k = o.sync.get_if<eager>() != nullptr;
  if (per_k && o.sharing.size() != levels)
    return error(errc::invalid_argument,
                 o.sync.name() +
                     " through the store needs the workers sharing each level's "
                     "module (worker_loop_options::sharing): " +
                     std::to_string(o.sharing.size()) + " given for " + std::to_string(levels) +
                     " levels");
  for (std::size_t l = 0; l < levels; ++l) {
    auto p = o.sync.plan(per_k ? o.sharing[l] : 1, 1, h);
    if (!p) return p.error();
    share[l] = p->own_share;
  }
  return share;
}

// The plan of o.sync through the store: one fragment per level for streaming (levels of them),
// else one of the whole path; H the worker's. Errors: the rule's (streaming's naming the
// fragments as the path's modules).
inline result<sync_plan> store_plan(const sync_choice& rule, std::size_t levels, int h) {
  const bool per_level = rule.get_if<streaming>() != nullptr;
  auto plan = rule.plan(1, per_level ? levels : 1, h);
  if (!plan && per_level)
    return error(errc::invalid_argument,
                 plan.error().message +
                     " (through the store the fragments are the path's modules, one per level)");
  return plan;
}

// Fetches w's path into its buffer (retry_while_rounds_differ).
template <class W, store::ModuleStore Store>
status fetch_path(W& w, Store& store, const worker_loop_options& o) {
  return retry_while_rounds_differ(o, [&] { return w.buffers().fetch(store); });
}

}  // namespace detail

template <PathWorker W, store::ModuleStore Store>
class store_exchange {
 public:
  // Requires: w, store and o outlive the exchange; share holds σ_l per level (own_shares);
  // plan: the rule's; per_level: one fragment per level (streaming), else one of the whole path.
  store_exchange(W& w, Store& store, const worker_loop_options& o, std::vector<float> share,
                 bool per_level, const sync_plan& plan,
                 std::function<void(const error&)> on_refused = {})
      : w_(&w),
        store_(&store),
        o_(&o),
        share_(std::move(share)),
        per_level_(per_level),
        next_round_(plan.next_round()),
        alpha_(plan.alpha),
        on_refused_(std::move(on_refused)),
        next_(w.buffers().modules().size(), 0) {}
  store_exchange(const store_exchange&) = delete;
  store_exchange& operator=(const store_exchange&) = delete;

  // Takes the path's modules from the store: θ, θ_start ← G (one level at a time with one
  // fragment per level, whose modules may sit at different rounds). Errors: the pull's or
  // fetch's (mismatch when a whole path's modules stayed at different rounds for every try).
  //
  // A worker resumed from its checkpoint (completed ≥ 0: the round it completed; its θ and
  // θ_start the checkpoint's) under a rule that keeps Δ unsynced between rounds (one-round-late
  // rules, streaming): a fragment whose modules still sit at round completed + 1 holds that
  // round's Δ, to send first (pending(); a one-round-late rule lands it on the G fetched here);
  // one whose round closed while the worker was down drops it (with its push or without it,
  // which cannot be known) and starts afresh from G. Errors besides: mismatch when the store
  // is behind the checkpoint (store_behind).
  status begin(long completed = -1) {
    pending_.assign(frags(), 0);
    w_->buffers().accept_mixed_rounds(o_->mixed_rounds && !per_level_);
    if (!per_level_ && (completed < 0 || !next_round_)) {
      if (auto s = detail::pull_path(*w_, *store_, *o_); !s) return s;
      std::fill(next_.begin(), next_.end(), w_->buffers().round());
      if (completed >= 0 && w_->buffers().round() <= completed)
        return detail::store_behind(w_->buffers().round(), completed);
      return {};
    }
    if (!per_level_) {  // a one-round-late rule resumed: θ, θ_start as trained
      if (auto s = detail::fetch_path(*w_, *store_, *o_); !s) return s;
      std::fill(next_.begin(), next_.end(), w_->buffers().round());
      if (w_->buffers().round() <= completed)
        return detail::store_behind(w_->buffers().round(), completed);
      if (w_->buffers().round() == completed + 1 && w_->buffers().round() < o_->rounds) {
        pending_[0] = 1;
        prefetched_ = true;
        return {};
      }
      take_fetched(*w_);
      return {};
    }
    for (std::size_t l = 0; l < next_.size(); ++l) {
      auto r = w_->buffers().fetch_level(*store_, l);
      if (!r) return r.error();
      if (completed >= 0 && *r <= completed) return detail::store_behind(*r, completed);
      next_[l] = *r;
      pending_[l] = completed >= 0 && *r == completed + 1;
      if (!pending_[l]) w_->land_level(l, true, 0.0f, 0.0f);  // θ_l, θ_start,l ← G_l
    }
    return {};
  }
  // Per fragment, whether it holds a resumed worker's Δ to send first (round_body::start_pending).
  const std::vector<char>& pending() const noexcept { return pending_; }

  // Whether the syncs due next are the run's last, for round_body::finish to send at once
  // (blocking ends by done()): a whole path's flight (one round or τ steps late) carries the last
  // round, to land at once rather than after more steps the run would drop; with one
  // fragment per level, the level sent at the end of the round just run (fragment 0, slot 0 of
  // the next cycle) carried its last round and every other level is at its last — or, before any
  // round ran, every level is at its last and holds a resumed Δ (or reached the end).
  bool finish_due() const {
    if (!per_level_) return in_flight() && flying_round_ + 1 >= o_->rounds;
    for (std::size_t l = 0; l < next_.size(); ++l) {
      const long r = !fresh_start_ && l == 0 ? sent_round_ : next_[l];
      if (r + 1 < o_->rounds) return false;
      if (fresh_start_ && !pending_[l] && next_[l] < o_->rounds) return false;
    }
    return true;
  }
  // Marks the first round as run (finish_due no longer waits for levels taken fresh at begin).
  void round_ran() noexcept { fresh_start_ = false; }

  // Called when a flight landed, before anything of it is applied: the round it carried and
  // whether its push was refused. An error it returns is land()'s.
  std::function<status(long round, bool refused)> on_landed;

  // The round of the path's modules (one fragment per level: the lowest).
  long round() const { return *std::min_element(next_.begin(), next_.end()); }
  // Pushes this worker's store refused since the exchange began (late ones: their Δ dropped).
  long refused() const noexcept { return refused_; }

  void measure(int p) {
    fresh_zero_ = false;
    for_levels(p, [&](std::size_t l) {
      if (auto s = w_->prepare_level(l); !s) throw error_exception(s.error());
    });
  }
  void launch(int p, std::chrono::steady_clock::duration deadline, bool now) {
    flying_ = p;
    const long round = per_level_ ? next_[std::size_t(p)] : w_->buffers().round();
    flying_round_ = round;
    if (p == 0) sent_round_ = round;
    flight_ = std::async(now ? std::launch::deferred : std::launch::async,
                         [this, p, round, deadline] { return fly(p, round, deadline); });
  }
  bool in_flight() const noexcept { return flight_.valid(); }
  status land(std::size_t&) {
    const flown f = flight_.get();
    if (!f.pushed) {
      if (f.pushed.error().code != errc::mismatch) return f.pushed;
      ++refused_;
      if (on_refused_) on_refused_(f.pushed.error());
    }
    if (!f.after) return f.after;
    if (per_level_)
      next_[std::size_t(flying_)] = f.round;
    else
      std::fill(next_.begin(), next_.end(), w_->buffers().round());
    last_refused_ = !f.pushed;
    ++landed_;
    if (on_landed) return on_landed(flying_round_, last_refused_);
    return {};
  }
  // Whether the push of the flight that landed last was refused (late); the round it carried.
  bool last_refused() const noexcept { return last_refused_; }
  long last_round() const noexcept { return flying_round_; }
  // Flights landed since the exchange began.
  long landed() const noexcept { return landed_; }
  void apply(int p, bool landed, bool fresh) {
    const bool with = fresh && !fresh_zero_;
    const bool from_fetched = landed || prefetched_;  // a resumed worker's first landing
    prefetched_ = false;
    for_levels(p, [&](std::size_t l) {
      w_->land_level(l, from_fetched, with ? share_[l] : 0.0f, alpha_);
    });
    if (!per_level_) w_->weigh_from_here();
  }
  void clear_fresh() { fresh_zero_ = true; }
  void settle() {}
  bool done() const { return round() >= o_->rounds; }
  // θ ← θ_start (= G once finish() landed everything) on every level.
  void end() {
    for (std::size_t l = 0; l < next_.size(); ++l) w_->land_level(l, false, 0.0f, 0.0f);
  }

 private:
  struct flown {
    status pushed, after;
    long round = -1;  // the fetched module's (one fragment per level)
  };
  std::size_t frags() const { return per_level_ ? next_.size() : 1; }
  template <class F>
  void for_levels(int p, F f) const {
    if (per_level_)
      f(std::size_t(p));
    else
      for (std::size_t l = 0; l < next_.size(); ++l) f(l);
  }
  // The flight: push, wait for the round's close, fetch. A level whose module already reached
  // the last round (its late pushes refused) only fetches.
  flown fly(int p, long round, std::chrono::steady_clock::duration deadline) {
    flown f;
    if (!per_level_ || round < o_->rounds) {
      const auto& buf = w_->buffers();
      f.pushed = per_level_ ? buf.send_level(*store_, std::size_t(p), round) : buf.send(*store_);
      if (!f.pushed && f.pushed.error().code != errc::mismatch) return f;
      const auto until = std::chrono::steady_clock::now() + deadline;
      for_levels(p, [&](std::size_t l) {
        // (With mixed rounds a module may have reached the run's last round: nothing to wait for.)
        const long r = per_level_ ? round : buf.level_round(l);
        if (f.after && (per_level_ || r < o_->rounds))
          f.after = store_->wait_closed(buf.modules()[l], r, until);
      });
      if (!f.after) return f;
    }
    if (!per_level_) {
      f.after = detail::fetch_path(*w_, *store_, *o_);
      return f;
    }
    auto got = w_->buffers().fetch_level(*store_, std::size_t(p));
    if (!got)
      f.after = got.error();
    else
      f.round = *got;
    return f;
  }

  W* w_;
  Store* store_;
  const worker_loop_options* o_;
  std::vector<float> share_;
  bool per_level_;
  bool next_round_;  // the rule lands one round late
  float alpha_;
  std::function<void(const error&)> on_refused_;
  std::vector<long> next_;     // per level, the round of its module (its next push's)
  std::vector<char> pending_;  // per fragment: a resumed worker's Δ to send first
  int flying_ = 0;
  long flying_round_ = 0;
  long sent_round_ = 0;  // the round fragment 0 carried last
  long refused_ = 0;
  long landed_ = 0;
  bool fresh_zero_ = false;
  bool prefetched_ = false;  // the first landing is on the G fetched at begin
  bool fresh_start_ = true;  // no round run yet
  bool last_refused_ = false;
  std::future<flown> flight_;  // last: destroyed first, waiting for a flight still running
};

}  // namespace paco::train
