#pragma once
// worker_loop: the round loop of one path worker against a store that other workers share and
// that may be slow, restarted or behind: what a worker process of a DiPaCo run (paco_train's
// worker role) does, in the library.
//
//   for each round until the path's modules reach `rounds`:
//     pull      every module of the path, hash-checked; while the modules sit at different
//               rounds (after a restart one module's round can close before another's) pull
//               again every pull_retry, up to pull_tries times
//     train     H inner steps (train::inner_loop: the worker's optimizer state carries on), or
//               as many as fit in train_budget (its push then weighs the share of H it
//               trained); a throttled worker (experiments) sleeps to run `throttle` times slower
//     push      Δ of every module; a push refused because its round closed without it (the
//               worker was late: errc::mismatch) is not an error — on_refused is told and the
//               worker goes on with the next round, as DiLoCo's dropout robustness intends
//     wait      until every module's round closed (or round_deadline passed)
//     on_round  (a completed round: the caller checkpoints the worker and logs); an error it
//               returns (a checkpoint that could not be written) ends the loop with that error:
//               a worker that cannot save its state must not train on as if it had
//
// Resume is the caller's part: restore the worker's arena planes and its inner step
// (inner_config::start_step) from its checkpoint before calling; the store says the round. A
// store whose modules are behind the round the checkpoint completed (its own checkpoint is older
// than the worker's: restored from a backup, or reset by a store started anew) is an error at
// the first pull (worker_loop_options::completed), never a silent replay of trained rounds.

#include <chrono>
#include <functional>
#include <thread>

#include "paco/core/error.hpp"
#include "paco/store/concepts.hpp"
#include "paco/train/concepts.hpp"
#include "paco/train/path_worker.hpp"

namespace paco::train {

struct worker_loop_options {
  long rounds = 1;  // the run ends when the path's modules reach this round
  std::chrono::steady_clock::duration round_deadline = std::chrono::seconds(60);
  std::chrono::steady_clock::duration pull_retry = std::chrono::milliseconds(100);
  int pull_tries = 50;  // pulls of a path whose modules sit at different rounds, then an error
  long completed = -1;  // the last round this worker completed (its checkpoint's; −1: none)
  // Workers of different speeds: a worker trains at most this long a round (zero: no budget)
  // and pushes what it trained, weighted by the share of H it reached
  // (path_worker::push_weight), so a slow worker neither holds its partners' rounds nor is left
  // out of them. Needs a worker that trains step by step (train(1)).
  std::chrono::steady_clock::duration train_budget{};
  // Experiments: after each inner step the worker sleeps (throttle − 1) times as long as the
  // step took, so it runs `throttle` times slower (≥ 1).
  double throttle = 1;
};

namespace detail {
// A round's inner steps under o's budget and throttle; their mean loss. Errors: unsupported for
// a budget or throttle on a worker that cannot train step by step.
template <class W>
result<double> train_round(W& w, const worker_loop_options& o) {
  using clock = std::chrono::steady_clock;
  const bool stepwise = o.train_budget > clock::duration::zero() || o.throttle > 1;
  if (!stepwise) return w.train();
  if constexpr (requires(const W& cw) {
                  w.train(1);
                  { cw.steps_per_round() } -> std::convertible_to<int>;
                }) {
    const auto t0 = clock::now();
    const int h = w.steps_per_round();
    double sum = 0;
    int steps = 0;
    while (steps < h) {
      const auto s0 = clock::now();
      sum += w.train(1);
      ++steps;
      if (o.throttle > 1)
        std::this_thread::sleep_for(
            std::chrono::duration_cast<clock::duration>((clock::now() - s0) * (o.throttle - 1)));
      if (o.train_budget > clock::duration::zero() && clock::now() - t0 >= o.train_budget) break;
    }
    return sum / steps;
  } else {
    return error(errc::unsupported,
                 "a train budget or throttle needs a worker that trains step by step (the host "
                 "path_worker)");
  }
}
}  // namespace detail

// Waits until every module of w's path closed the round w pulled last, by `until`. Errors: the
// store's (timeout, peer_lost …).
template <class W, store::ModuleStore Store>
requires PathWorker<W, Store> status wait_round(W& w, Store& store,
                                                std::chrono::steady_clock::time_point until) {
  for (int m : w.modules())
    if (auto s = store.wait_closed(m, w.round(), until); !s) return s;
  return {};
}

// One synchronous round of w with nothing around it (tests, a single worker): pull, H inner
// steps, push, wait_round within round_deadline of the push. Errors: the pull's, the push's (a
// late one included), the wait's, a device worker's failed CUDA call.
template <class W, store::ModuleStore Store>
requires PathWorker<W, Store> status
sync_round(W& w, Store& store, std::chrono::steady_clock::duration round_deadline) {
  if (auto s = w.pull(store); !s) return s;
  try {
    w.train();
  } catch (const error_exception& e) {
    return e.err;
  }
  if (auto s = w.push(store); !s) return s;
  return wait_round(w, store, std::chrono::steady_clock::now() + round_deadline);
}

// A completed round of the worker.
struct worker_round {
  long round = 0;      // the round it trained
  double loss = 0;     // mean inner loss over its H steps
  double seconds = 0;  // train (and throttle) + push + wait
  double sync_s = 0;   // of which push + wait: the time the worker spent on the sync
};

// Runs w against store until the path's modules reach o.rounds. on_round after every round whose
// push was accepted and closed; on_refused with the store's refusal of a late push (optional).
// Returns: ok when the run is over for this path; the store's or the pull's error otherwise
// (mismatch when the modules stayed at different rounds for every try, or when the store is
// behind o.completed); on_round's error.
// W is any PathWorker: train::path_worker, or kernels::path_worker_cuda on a GPU.
template <class W, store::ModuleStore Store>
requires PathWorker<W, Store> status
run_worker(W& w, Store& store, const worker_loop_options& o,
           const std::function<status(const worker_round&)>& on_round = {},
           const std::function<void(const error&)>& on_refused = {}) {
  using clock = std::chrono::steady_clock;
  for (bool first = true;; first = false) {
    status pulled;
    for (int tries = 0; tries < std::max(1, o.pull_tries); ++tries) {
      pulled = w.pull(store);
      if (pulled.ok() || pulled.error().code != errc::mismatch) break;
      std::this_thread::sleep_for(o.pull_retry);
    }
    if (!pulled) return pulled;
    if (first && w.round() <= o.completed)
      return {errc::mismatch,
              "the store holds this path at round " + std::to_string(w.round()) +
                  " but this worker's checkpoint completed round " + std::to_string(o.completed) +
                  ": the store's state is older than the worker's (restored from an older "
                  "checkpoint, or started anew without --resume); resume the store from its "
                  "latest checkpoint"};
    if (w.round() >= o.rounds) return {};
    const auto t0 = clock::now();
    auto trained = detail::train_round(w, o);
    if (!trained) return trained.error();
    const double loss = *trained;
    const auto t_sync = clock::now();
    if (auto s = w.push(store); !s) {
      if (s.error().code != errc::mismatch) return s;
      if (on_refused) on_refused(s.error());
      continue;
    }
    if (auto s = wait_round(w, store, clock::now() + o.round_deadline); !s) return s;
    const auto now = clock::now();
    if (on_round)
      if (auto s = on_round({w.round(), loss, std::chrono::duration<double>(now - t0).count(),
                             std::chrono::duration<double>(now - t_sync).count()});
          !s)
        return s;
  }
}

}  // namespace paco::train
