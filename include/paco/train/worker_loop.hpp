#pragma once
// worker_loop: the round loop of one path worker against a store that other workers share and
// that may be slow, restarted or behind: what a worker process of a DiPaCo run (paco_train's
// worker role) does, in the library.
//
//   for each round until the path's modules reach `rounds`:
//     pull      every module of the path, hash-checked; while the modules sit at different
//               rounds (after a restart one module's round can close before another's) pull
//               again every pull_retry, up to pull_tries times since their rounds last moved
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
// Overlapped rules (worker_loop_options::sync: co2, eager, naive_delayed; train/sync.hpp), the
// same rules round_loop runs over an all-reduce, here through the store with no change to its
// protocol. A round's sync runs on a background thread (the flight: push Δ_r, wait until round r
// closed, fetch the global modules G_{r+1} = the store's outer step on round r's mean) while the
// next round's inner steps run from the worker's live θ; at the end of round r:
//
//     join      the flight of round r−1 (a late refusal of its push: on_refused)
//     on_round  (round r−1 closed: the caller checkpoints θ and θ_start as trained, not landed)
//     measure   Δ_r = θ_start − θ (encoded, with codecs)
//     land      θ ← G_r − σ_l·Δ_r per level (G_r: what the flight fetched), θ_start ← θ
//     fly       push Δ_r for round r, wait, fetch, in the background; train round r+1
//
// The first round lands on the modules it pulled (nothing in flight); after the last push the
// worker waits for its flight and takes the global modules. A resumed worker (o.completed ≥ 0,
// its θ and θ_start a checkpoint's: round completed+1 trained, not landed) fetches G itself and
// lands as above if round completed+1 is still open; if it closed while the worker was down (with
// the pending push or without it, which cannot be known) the pending Δ is dropped, as a late
// push is, and the worker starts afresh from G. A flight in progress when a round's steps fail
// is waited for (at most its deadlines) before the error returns. σ is the rule's own share:
// 1 for co2 (each worker goes on from its own progress; the late mean replaces it), 1/k_l for eager
// (k_l: the workers training level l's module, worker_loop_options::sharing), 0 for naive_delayed
// (restart from G_r, which lacks the worker's round r). With outer SGD at rate 1 on the store this
// is round_loop's co2 / eager / naive_delayed (the all-reduce form applies its outer optimizer to
// the worker's own Δ too, so with momentum the two forms differ; docs/02_dipaco.md).
//
// Streaming DiLoCo through the store (sync = streaming{τ, α}): the fragments are the path's
// modules, level l's synced in slot l of every cycle of H inner steps (c = H/L steps a slot, L
// levels; every worker of a module syncs it in the same slot). Slot l sends Δ_l = θ_start,l − θ_l
// for its module's round on a background thread, trains τ more steps (τ < c), then waits for
// that round to close and lands the store's new module G_l: θ_start,l ← G_l,
// θ_l ← α·θ_l + (1 − α)·G_l. The first cycle sends nothing; after the last, every level sends at
// once and θ ← G, so each module is synced `rounds` times — train::round_loop's streaming rule
// with the store's outer step. A cycle reports the round its syncs closed (on_round), with the
// loss of the cycle that trained their Δ; its own is pending (worker_round::pending_loss). A
// checkpoint taken then has nothing in flight. Each level resumes on its own (a path's modules
// sit at different rounds between their slots): a level whose module still sits at round
// completed+1 sends the checkpoint's Δ_l in its slot; one whose round closed while the worker
// was down drops that Δ_l and starts afresh from G_l, as every level of a fresh start does (it
// sends nothing in its first cycle). A train budget is refused (it would break the schedule);
// one fragment with τ = 0 and α = 0 is blocking.
//
// Resume is the caller's part: restore the worker's arena planes and its inner step
// (inner_config::start_step) from its checkpoint before calling; the store says the round. A
// store whose modules are behind the round the checkpoint completed (its own checkpoint is older
// than the worker's: restored from a backup, or reset by a store started anew) is an error at
// the first pull (worker_loop_options::completed), never a silent replay of trained rounds.

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
#include "paco/train/path_worker.hpp"
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
};

namespace detail {
// One inner step of w, then (throttle − 1) times its duration asleep (experiments: a worker
// `throttle` times slower); its loss.
template <class W>
double throttled_step(W& w, double throttle) {
  using clock = std::chrono::steady_clock;
  const auto s0 = clock::now();
  const double loss = w.train(1);
  if (throttle > 1)
    std::this_thread::sleep_for(
        std::chrono::duration_cast<clock::duration>((clock::now() - s0) * (throttle - 1)));
  return loss;
}

// A round's inner steps under o's budget and throttle; their mean loss. Errors: unsupported for
// a budget or throttle on a worker that cannot train step by step.
template <class W>
result<double> train_round_steps(W& w, const worker_loop_options& o) {
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
      sum += throttled_step(w, o.throttle);
      ++steps;
      if (o.train_budget > clock::duration::zero() && clock::now() - t0 >= o.train_budget) break;
    }
    return sum / steps;
  } else {
    return error(errc::unsupported,
                 "a train budget or throttle needs a worker that trains step by step (the host "
                 "path_worker)");
  }
}

// train_round_steps, with an error thrown by the worker's steps (a device worker's failed call, a
// pipeline stage's lost neighbour) returned as the round's error.
template <class W>
result<double> train_round(W& w, const worker_loop_options& o) {
  try {
    return train_round_steps(w, o);
  } catch (const error_exception& e) {
    return e.err;
  }
}

// `n` inner steps of w under o's throttle (no budget); the sum of their losses.
template <class W>
double train_steps(W& w, int n, const worker_loop_options& o) {
  if (n <= 0) return 0;
  if (o.throttle <= 1) return w.train(n) * n;
  double sum = 0;
  for (int i = 0; i < n; ++i) sum += throttled_step(w, o.throttle);
  return sum;
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
  return retry_while_rounds_differ(o, [&] { return w.pull(store); });
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

// Fetches w's path into its buffer (retry_while_rounds_differ).
template <class W, store::ModuleStore Store>
status fetch_path(W& w, Store& store, const worker_loop_options& o) {
  return retry_while_rounds_differ(o, [&] { return w.fetch(store); });
}

// The overlapped round loop (see the file comment). Requires: share has one σ per level.
template <class W, store::ModuleStore Store>
requires OverlappingPathWorker<W, Store> status
run_overlapped(W& w, Store& store, const worker_loop_options& o, const std::vector<float>& share,
               const std::function<status(const worker_round&)>& on_round,
               const std::function<void(const error&)>& on_refused) {
  using clock = std::chrono::steady_clock;
  const auto secs = [](clock::duration d) { return std::chrono::duration<double>(d).count(); };
  const std::vector<float> none(share.size(), 0.0f);
  // What runs behind the inner steps: the push of round `sent`, the wait for its close, the fetch
  // of the next global modules.
  struct flown {
    status pushed, after;
  };
  const auto fly = [&w, &store, &o](long sent) {
    flown f{w.send(store), {}};
    if (!f.pushed && f.pushed.error().code != errc::mismatch) return f;
    const auto until = clock::now() + o.round_deadline;
    for (int m : w.modules())
      if (f.after = store.wait_closed(m, sent, until); !f.after) return f;
    f.after = fetch_path(w, store, o);
    return f;
  };
  // Where the global modules of the next landing come from: the modules pulled at the start
  // (nothing was in flight: the anchor), or what the flight fetched.
  bool from_anchor = true;
  // A resumed worker's θ and θ_start are its checkpoint's: round completed+1 trained, not landed.
  bool trained = o.completed >= 0;
  if (trained) {
    if (auto s = fetch_path(w, store, o); !s) return s;
    if (w.round() <= o.completed) return store_behind(w.round(), o.completed);
    from_anchor = false;
    if (w.round() > o.completed + 1 || w.round() >= o.rounds) {
      // The round of the pending Δ closed while the worker was down, with its push or without
      // it (which cannot be known): the Δ is dropped, as a late push is, never pushed into a
      // later round. The worker starts afresh from the global modules.
      w.take_fetched();
      w.land(none);
      if (w.round() >= o.rounds) return {};
      trained = false;
      from_anchor = true;
    }
  } else {
    if (auto s = pull_path(w, store, o); !s) return s;
    if (w.round() >= o.rounds) return {};
  }
  std::future<flown> flight;
  long sent = -1;
  double sent_loss = 0;
  double loss = o.resumed_loss;  // the loss of the round trained last, not yet landed
  double train_s = 0;            // its training time
  auto last = clock::now();
  // Joins the flight and reports the round it closed (on_round).
  const auto land_flight = [&]() -> status {
    const flown f = flight.get();
    if (!f.pushed) {
      if (f.pushed.error().code != errc::mismatch) return f.pushed;
      if (on_refused) on_refused(f.pushed.error());
    }
    if (!f.after) return f.after;
    const auto now = clock::now();
    const double seconds = secs(now - last);
    const worker_round r{sent, sent_loss, seconds, std::max(0.0, seconds - train_s), loss};
    last = now;
    train_s = 0;
    return on_round ? on_round(r) : status{};
  };
  for (;;) {
    if (!trained) {
      const auto t0 = clock::now();
      auto l = train_round(w, o);
      if (!l) return l.error();
      loss = *l;
      train_s = secs(clock::now() - t0);
    }
    trained = false;
    if (flight.valid())
      if (auto s = land_flight(); !s) return s;
    if (auto s = w.prepare(); !s) return s;
    if (from_anchor)
      w.restart_from_anchor();  // the modules pulled at the start: nothing was in flight
    else
      w.take_fetched();
    from_anchor = false;
    if (w.round() >= o.rounds) return {};  // θ = the global modules
    w.land(share);
    sent = w.round();
    sent_loss = loss;
    flight = std::async(std::launch::async, fly, sent);
    if (sent + 1 >= o.rounds) {  // the last round: nothing more to train
      if (auto s = land_flight(); !s) return s;
      w.take_fetched();
      w.land(none);  // θ_start ← θ = the global modules
      return {};
    }
  }
}

// Streaming DiLoCo through the store (see the file comment); plan: the streaming rule's, for the
// path's levels as fragments and w's H.
template <class W, store::ModuleStore Store>
requires StreamingPathWorker<W, Store> status
run_streaming(W& w, Store& store, const worker_loop_options& o, const sync_plan& plan,
              const std::function<status(const worker_round&)>& on_round,
              const std::function<void(const error&)>& on_refused) {
  using clock = std::chrono::steady_clock;
  const auto secs = [](clock::duration d) { return std::chrono::duration<double>(d).count(); };
  const std::size_t levels = w.modules().size();
  const int h = w.steps_per_round(), c = h / int(levels), tau = plan.lag;
  // next[l]: the round of level l's next send (the round of its module in the store); skip[l]:
  // the next cycle does not send level l (its θ_start,l was just fetched: nothing trained).
  std::vector<long> next(levels);
  std::vector<char> skip(levels, 1);
  const auto lowest = [&] { return *std::min_element(next.begin(), next.end()); };
  // Each level on its own (under streaming a path's modules sit at different rounds between
  // their slots): a resumed worker keeps its checkpoint's θ_l and θ_start,l (taken at the end of
  // a cycle, nothing in flight) where the module still sits at round completed+1 and sends them in
  // its slot; a level whose round closed while it was down (with its push or without it) drops
  // that Δ and starts afresh from G_l, as does every level of a fresh start.
  for (std::size_t l = 0; l < levels; ++l) {
    auto r = w.fetch_level(store, l);
    if (!r) return r.error();
    if (o.completed >= 0 && *r <= o.completed) return store_behind(*r, o.completed);
    next[l] = *r;
    skip[l] = o.completed < 0 || *r != o.completed + 1;
    if (skip[l]) w.mix_level(l, 0.0f);  // θ_l, θ_start,l ← G_l
  }
  if (lowest() >= o.rounds) return {};
  // What runs behind τ inner steps: level l's push for `round`, the wait for its close, the
  // fetch of its module.
  struct flown {
    status pushed, after;
    long round = -1;
  };
  const auto fly = [&w, &store, &o](std::size_t l, long round) {
    flown f{w.send_level(store, l, round), {}};
    if (!f.pushed && f.pushed.error().code != errc::mismatch) return f;
    f.after = store.wait_closed(w.modules()[l], round, clock::now() + o.round_deadline);
    if (!f.after) return f;
    auto got = w.fetch_level(store, l);
    if (!got)
      f.after = got.error();
    else
      f.round = *got;
    return f;
  };
  // Joins level l's flight and lands it: θ_start,l ← G_l, θ_l ← α·θ_l + (1 − α)·G_l.
  const auto land = [&](std::future<flown>& flight, std::size_t l, float alpha) -> status {
    const flown f = flight.get();
    if (!f.pushed) {
      if (f.pushed.error().code != errc::mismatch) return f.pushed;
      if (on_refused) on_refused(f.pushed.error());
    }
    if (!f.after) return f.after;
    w.mix_level(l, alpha);
    next[l] = f.round;
    return {};
  };
  auto last = clock::now();
  double train_s = 0;
  // The loss of the cycle trained last: the one whose Δ the next sends carry.
  double trained_loss = o.resumed_loss;
  const auto report = [&](long round, double loss, double pending) -> status {
    const auto now = clock::now();
    const double seconds = secs(now - last);
    const worker_round r{round, loss, seconds, std::max(0.0, seconds - train_s), pending};
    last = now;
    train_s = 0;
    return on_round ? on_round(r) : status{};
  };
  for (;;) {
    // The last sends are due once every level left has trained since its last landing.
    bool last_sends = lowest() + 1 >= o.rounds;
    for (std::size_t l = 0; l < levels; ++l)
      if (next[l] < o.rounds && skip[l]) last_sends = false;
    if (last_sends) {
      // Every level trained since its last landing, at once; θ ← G (a level whose module already
      // reached the end, its late pushes refused, takes it too).
      for (std::size_t l = 0; l < levels; ++l) {
        if (next[l] >= o.rounds) {
          if (auto r = w.fetch_level(store, l); !r) return r.error();
          w.mix_level(l, 0.0f);
          continue;
        }
        if (auto s = w.prepare_level(l); !s) return s;
        auto flight = std::async(std::launch::async, fly, l, next[l]);
        if (auto s = land(flight, l, 0.0f); !s) return s;
      }
      return report(o.rounds - 1, trained_loss, 0);
    }
    // One cycle of H inner steps: slot l (c steps) sends level l first (unless skipped) and
    // lands it τ steps later.
    double loss = 0;
    bool sent = false;
    for (std::size_t l = 0; l < levels; ++l) {
      int left = c;
      if (!skip[l] && next[l] < o.rounds) {
        if (auto s = w.prepare_level(l); !s) return s;
        auto flight = std::async(std::launch::async, fly, l, next[l]);
        const auto t0 = clock::now();
        loss += train_steps(w, tau, o);  // (a throw waits for the flight: ~future)
        train_s += secs(clock::now() - t0);
        left -= tau;
        if (auto s = land(flight, l, plan.alpha); !s) return s;
        sent = true;
      }
      const auto t0 = clock::now();
      loss += train_steps(w, left, o);
      train_s += secs(clock::now() - t0);
    }
    loss /= h;
    std::fill(skip.begin(), skip.end(), 0);
    // Every level's sync of this cycle landed, its round closed: reported with the loss of the
    // cycle that trained it; this cycle's is pending (a checkpoint taken now holds its steps).
    if (sent)
      if (auto s = report(lowest() - 1, trained_loss, loss); !s) return s;
    trained_loss = loss;
  }
}
}  // namespace detail

// Runs w against store until the path's modules reach o.rounds, under o.sync. on_round after
// every round whose push was accepted and closed (overlapped rules: every round once it closed;
// streaming: every cycle whose syncs closed); on_refused with the store's refusal of a late push
// (optional).
// Returns: ok when the run is over for this path; the store's or the pull's error otherwise
// (mismatch when the modules stayed at different rounds for every try, or when the store is
// behind o.completed); on_round's error; unsupported for lockstep under another rule than
// blocking, for an overlapped rule with a worker that is
// not an OverlappingPathWorker, for streaming with one that is not a StreamingPathWorker or with
// a train budget; invalid_argument for streaming's τ, α or an H that the levels do not divide.
// W is any PathWorker: train::path_worker, or kernels::path_worker_cuda on a GPU.
template <class W, store::ModuleStore Store>
requires PathWorker<W, Store> status
run_worker(W& w, Store& store, const worker_loop_options& o,
           const std::function<status(const worker_round&)>& on_round = {},
           const std::function<void(const error&)>& on_refused = {}) {
  using clock = std::chrono::steady_clock;
  if (o.lockstep && !o.sync.get_if<blocking>())
    return {errc::unsupported,
            "worker_loop_options::lockstep runs the blocking rule only, not " + o.sync.name()};
  if (o.sync.get_if<streaming>()) {
    if constexpr (StreamingPathWorker<W, Store>) {
      auto plan = o.sync.plan(1, w.modules().size(), w.steps_per_round());
      if (!plan)
        return {errc::invalid_argument, plan.error().message +
                                            " (through the store the fragments are "
                                            "the path's modules, one per level)"};
      if (o.train_budget > clock::duration::zero())
        return {errc::unsupported,
                "streaming through the store keeps every worker on one schedule of staggered "
                "syncs: a train budget would cut it (use co2, eager or blocking)"};
      try {  // a worker's failed step (a device call, a pipeline stage's lost neighbour)
        return detail::run_streaming(w, store, o, *plan, on_round, on_refused);
      } catch (const error_exception& e) {  // (its flight, if any, was waited for: ~future)
        return e.err;
      }
    } else {
      return {errc::unsupported, o.sync.name() +
                                     " through the store needs a worker that syncs one module "
                                     "at a time (the host path_worker)"};
    }
  }
  // The rule's shape (H does not matter to the one-fragment rules).
  constexpr int any_h = 1 << 20;
  auto plan = o.sync.plan(1, 1, any_h);
  if (!plan) return plan.error();
  if (plan->next_round()) {
    if constexpr (OverlappingPathWorker<W, Store>) {
      auto share = detail::own_shares(o, w.modules().size(), any_h);
      if (!share) return share.error();
      return detail::run_overlapped(w, store, o, *share, on_round, on_refused);
    } else {
      return {errc::unsupported, o.sync.name() +
                                     " through the store needs a worker whose push can overlap "
                                     "its inner steps (the host path_worker)"};
    }
  }
  const auto secs = [](clock::duration d) { return std::chrono::duration<double>(d).count(); };
  auto last = clock::now();
  double train_s = 0;          // training time since the last report (a refused round's included)
  long stepped = o.completed;  // the last round whose inner steps this worker took
  for (bool first = true;; first = false) {
    if (auto s = detail::pull_path(w, store, o); !s) return s;
    if (first && w.round() <= o.completed) return detail::store_behind(w.round(), o.completed);
    if (o.lockstep && stepped + 1 < std::min(w.round(), o.rounds)) {
      // Rounds closed without this worker: their steps on the modules pulled, nothing pushed,
      // each reported (pushed = false); then the store is asked again (it may have closed
      // another meanwhile).
      for (const long to = std::min(w.round(), o.rounds); stepped + 1 < to;) {
        const auto t0 = clock::now();
        auto t = detail::train_round(w, o);
        if (!t) return t.error();
        ++stepped;
        const auto now = clock::now();
        train_s += secs(now - t0);
        const double seconds = secs(now - last), sync_s = seconds - train_s;
        last = now;
        train_s = 0;
        if (on_round)
          if (auto s = on_round({.round = stepped,
                                 .loss = *t,
                                 .seconds = seconds,
                                 .sync_s = sync_s,
                                 .pushed = false});
              !s)
            return s;
      }
      if (w.round() < o.rounds) continue;
    }
    if (w.round() >= o.rounds) return {};
    const auto t0 = clock::now();
    auto trained = detail::train_round(w, o);
    if (!trained) return trained.error();
    const double loss = *trained;
    train_s += secs(clock::now() - t0);
    stepped = w.round();
    if (auto s = w.push(store); !s) {
      if (s.error().code != errc::mismatch) return s;
      if (on_refused) on_refused(s.error());
      continue;
    }
    if (auto s = wait_round(w, store, clock::now() + o.round_deadline); !s) return s;
    const auto now = clock::now();
    const double seconds = secs(now - last), sync_s = seconds - train_s;
    last = now;
    train_s = 0;
    if (on_round)
      if (auto s = on_round({w.round(), loss, seconds, sync_s}); !s) return s;
  }
}

}  // namespace paco::train
