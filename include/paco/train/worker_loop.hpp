#pragma once
// worker_loop: one path worker against a store that other workers share and that may be slow,
// restarted or behind: what a worker process of a DiPaCo run (paco_train's worker role) does,
// in the library. run_worker runs the one round body (train/round_body.hpp) over the store
// (train/store_exchange.hpp) under any sync rule (worker_loop_options::sync, train/sync.hpp):
//
//   blocking       each round: H inner steps (train::inner_loop: the worker's optimizer state
//                  carries on), or as many as fit in train_budget or, paced by measurement, in
//                  the store's push pace of its modules (pace_measured; its push then weighs the
//                  share of H it trained); push Δ of every module; wait until every module's round
//                  closed (or round_deadline passed); take the store's new modules G
//   co2, eager,    the round's push, wait and fetch fly on a background thread while the next
//   naive_delayed  round trains from the live θ; at the end of round r the flight of round r−1
//                  lands: θ ← G_r − σ_l·Δ_r per level, θ_start ← θ (σ_l: the exchange's), and
//                  round r flies; the first round lands on the modules pulled; after the last
//                  push the worker waits for its flight and takes G
//   co2_snapshot   the round's push, wait and fetch fly while τ more steps train; then θ,
//                  θ_start ← G (the steps since the push dropped), and the round goes on
//   streaming      the path's modules as fragments, level l's synced in slot l of every cycle of
//                  H inner steps (c = H/L steps a slot; every worker of a module syncs it in the
//                  same slot): Δ_l flies, τ more steps, G_l lands (θ_start,l ← G_l,
//                  θ_l ← α·θ_l + (1 − α)·G_l); the first cycle sends nothing; after the last,
//                  every level sends at once and θ ← G, so each module is synced `rounds` times
//
// A whole path is pulled again every pull_retry while its modules sit at different rounds (after
// a restart one module's round can close before another's), up to pull_tries times since their
// rounds last moved. A push refused because its round closed without it (the worker was late:
// errc::mismatch) is not an error — on_refused is told, its Δ is dropped, G lands all the same
// and the worker goes on, as DiLoCo's dropout robustness intends. A throttled worker
// (experiments) sleeps to run `throttle` times slower.
//
// Reports (on_round), each with the seconds since the last and the part of them not training:
//   blocking       every round whose push was accepted and closed
//   co2, …         every round once its flight landed (co2_snapshot too), before it is
//                  applied: the caller checkpoints θ and θ_start as trained, not landed, with the
//                  loss of the round trained since (worker_round::pending_loss)
//   streaming      every cycle whose syncs landed, at its end (nothing in flight), with the loss
//                  of the cycle that trained their Δ; its own is pending; and the last sends
// An error on_round returns (a checkpoint that could not be written) ends the loop with it: a
// worker that cannot save its state must not train on as if it had.
//
// Resume is the caller's part: restore the worker's arena planes and its inner step
// (inner_config::start_step) from its checkpoint before calling, and say the round it completed
// (worker_loop_options::completed); the store says the round. Under a rule that keeps Δ unsynced
// between rounds, a fragment whose modules still sit at round completed + 1 sends the
// checkpoint's Δ first (a one-round-late rule lands it on the G it fetched); one whose round
// closed while the worker was down drops it and starts afresh from G (store_exchange::begin).
// A store whose modules are behind the round the checkpoint completed (its own checkpoint is
// older than the worker's: restored from a backup, or reset by a store started anew) is an error
// at the first pull, never a silent replay of trained rounds. A flight in progress when a
// round's steps fail is waited for (at most its deadlines) before the error returns.
//
// With outer SGD at rate 1 on the store the rules are round_loop's (the all-reduce form applies
// its outer optimizer to the worker's own Δ too, so with momentum the two forms differ;
// docs/02_dipaco.md). The worker is any PathWorker, its replica on the host
// (train::path_worker) or on a device (kernels::path_worker_cuda), under every rule alike.

#include <algorithm>
#include <chrono>
#include <functional>
#include <string>
#include <thread>
#include <vector>

#include "paco/core/error.hpp"
#include "paco/store/concepts.hpp"
#include "paco/train/concepts.hpp"
#include "paco/train/paced_learner.hpp"
#include "paco/train/path_worker.hpp"
#include "paco/train/round_body.hpp"
#include "paco/train/store_exchange.hpp"
#include "paco/train/sync.hpp"

namespace paco::train {

// A completed round of the worker.
struct worker_round {
  long round = 0;   // the round it trained
  double loss = 0;  // mean inner loss over its H steps
  // Since the previous report (the first: since the loop began): pull, train (and throttle),
  // push, wait — under every rule the time between two rounds, so that rules compare.
  double seconds = 0;
  double sync_s = 0;  // of which not training: the time the worker spent on the sync
  // Overlapped rules: the mean loss of the round trained since, not yet landed (a checkpoint
  // taken now holds it; worker_loop_options::resumed_loss gives it back).
  double pending_loss = 0;
  // false: a lockstep round its modules closed without this worker (trained, Δ dropped).
  bool pushed = true;
};

// Runs w against store until the path's modules reach o.rounds, under o.sync (see the file
// comment). on_round after every round the rule reports; on_refused with the store's refusal of
// a late push (optional).
// Returns: ok when the run is over for this path; the store's or the pull's error otherwise
// (mismatch when the modules stayed at different rounds for every try, or when the store is
// behind o.completed); on_round's error; an error_exception thrown by the worker's steps (a
// device worker's failed call, a pipeline stage's lost neighbour); unsupported for lockstep
// under another rule than blocking, for streaming with a train budget; invalid_argument for
// streaming's τ, α or an H that the levels do not divide.
template <PathWorker W, store::ModuleStore Store>
status run_worker(W& w, Store& store, const worker_loop_options& o,
                  const std::function<status(const worker_round&)>& on_round = {},
                  const std::function<void(const error&)>& on_refused = {}) {
  using clock = std::chrono::steady_clock;
  if (o.lockstep && !o.sync.get_if<blocking>())
    return {errc::unsupported,
            "worker_loop_options::lockstep runs the blocking rule only, not " + o.sync.name()};
  const bool per_level = o.sync.get_if<streaming>() != nullptr;
  const std::size_t levels = w.buffers().modules().size();
  const int h = w.steps_per_round();
  auto plan = detail::store_plan(o.sync, levels, h);
  if (!plan) return plan.error();
  if (per_level && (o.train_budget > clock::duration::zero() || o.pace_measured))
    return {errc::unsupported,
            "streaming through the store keeps every worker on one schedule of staggered "
            "syncs: a train budget would cut it (use co2, eager or blocking)"};
  if (o.pace_measured && !store::PacedModuleStore<Store>)
    return {errc::unsupported,
            "worker_loop_options::pace_measured: this store reports no push pace "
            "(store::PacedModuleStore: the store service's client, local_store)"};
  auto share = detail::own_shares(o, levels, h);
  if (!share) return share.error();
  using exchange = store_exchange<W, Store>;
  paced_learner<W> l(w, o.train_budget, o.throttle);
  exchange x(w, store, o, std::move(*share), per_level, *plan, on_refused);
  round_body<exchange, paced_learner<W>> body(x, l, *plan, per_level ? levels : 1);

  auto last = clock::now();
  // Paced by measurement: the next round's budget from the slowest pace of the path's modules,
  // for a worker that trained longer than that pace (one at the pace sets it: no budget).
  const auto pace = [&](double trained_s) {
    if constexpr (store::PacedModuleStore<Store>) {
      double slowest = 0;
      for (int m : w.buffers().modules()) slowest = std::max(slowest, store.push_time_s(m));
      l.set_budget(slowest > 0 && trained_s > slowest
                       ? std::chrono::duration_cast<clock::duration>(
                             std::chrono::duration<double>(slowest * o.pace_factor))
                       : clock::duration::zero());
    }
  };
  const auto report = [&](worker_round r) -> status {
    const auto now = clock::now();
    const double trained_s = l.take_train_seconds();
    r.seconds = std::chrono::duration<double>(now - last).count();
    r.sync_s = std::max(0.0, r.seconds - trained_s);
    last = now;
    if (o.pace_measured) pace(trained_s);
    return on_round ? on_round(r) : status{};
  };
  // The loss of the round (cycle) whose Δ flies or waits to be sent.
  double flying_loss = o.resumed_loss;
  long landed = 0;  // flights landed before this cycle (streaming)
  std::function<void(const round_end&)> ended;
  // A whole-path rule whose sync lands after the round's end (one round late, or τ steps late):
  // its rounds are reported as they land.
  const bool lands_later = !per_level && (plan->next_round() || plan->lag > 0);
  if (lands_later) {
    x.on_landed = [&](long round, bool) {
      return report({.round = round, .loss = flying_loss, .pending_loss = l.last_loss()});
    };
    ended = [&](const round_end&) { flying_loss = l.last_loss(); };
  } else if (per_level) {
    body.trained = [&](long, double loss) -> status {
      const double sent = std::exchange(flying_loss, loss);
      if (x.landed() == std::exchange(landed, x.landed())) return {};
      return report({.round = x.round() - 1, .loss = sent, .pending_loss = loss});
    };
  }
  status reported;  // blocking: on_round's error of the round that just ended
  if (!lands_later && !per_level)
    ended = [&](const round_end&) {
      if (!x.last_refused()) reported = report({.round = x.last_round(), .loss = l.last_loss()});
    };

  try {
    if (auto s = x.begin(o.completed); !s) return s;
    if (!o.lockstep && x.done()) return {};  // θ = the global modules
    if (auto s = body.start_pending(x.pending(), o.round_deadline); !s) return s;
    long stepped = o.completed;  // lockstep: the last round whose inner steps were taken
    for (;;) {
      if (o.lockstep && stepped + 1 < std::min(x.round(), o.rounds)) {
        // Rounds closed without this worker: their steps on the modules pulled, nothing
        // pushed, each reported (pushed = false); then the store is asked again (it may have
        // closed another meanwhile).
        for (const long to = std::min(x.round(), o.rounds); stepped + 1 < to;) {
          l.train(h);
          ++stepped;
          if (auto s = report({.round = stepped, .loss = l.last_loss(), .pushed = false}); !s)
            return s;
        }
        if (x.round() < o.rounds)
          if (auto s = x.begin(); !s) return s;
        continue;
      }
      if (x.done() || body.stopped() || x.finish_due()) break;
      stepped = x.round();
      if (auto s = body.run(1, o.round_deadline, {}, ended); !s) return s;
      if (!reported) return reported;
      x.round_ran();
    }
    if (auto s = body.finish(o.round_deadline); !s) return s;
    if (lands_later || per_level) x.end();  // (blocking: θ = G since its last landing)
    if (per_level) return report({.round = o.rounds - 1, .loss = flying_loss});
    return {};
  } catch (const error_exception& e) {  // (a flight in progress was waited for: ~exchange)
    return e.err;
  }
}

}  // namespace paco::train
