#pragma once
// dipaco_local: a whole DiLoCo / DiPaCo run in one process, one thread per worker over a
// local_store. DiLoCo is the grid 1×1 with k workers on path 0; a flat MoE is one level of P
// experts; DiPaCo is any grid with one (or more) workers per path.
//
//   auto plan = path::path_plan::make(grid, levels, workers_per_path);
//   store::local_store<outer::nesterov> store(plan->module_table(), outer_opt);
//   train::init_modules(store, *plan, theta0);
//   auto run = train::local_run<Model, InnerOpt, OuterOpt>::make(store, model, *plan, specs, ...);

#include <functional>
#include <memory>
#include <thread>
#include <vector>

#include "paco/outer/concepts.hpp"
#include "paco/path/path_plan.hpp"
#include "paco/store/local_store.hpp"
#include "paco/train/path_worker.hpp"
#include "paco/train/round_body.hpp"
#include "paco/train/store_exchange.hpp"
#include "paco/train/sync.hpp"

namespace paco::train {

// A worker of a local run: its shard and its sampler's seed. Worker w trains the plan's path
// plan.path_of_worker(w).
struct worker_spec {
  const io::token_stream* shard = nullptr;
  std::uint64_t seed = 1;
};

struct round_report {
  long round = 0;
  std::vector<double> worker_loss;  // mean inner loss of each worker in this round
  // The workers' mean: Σ worker_loss[w] / workers, added in worker order (0 with no workers).
  double mean_loss() const {
    double l = 0;
    for (double x : worker_loss) l += x / double(worker_loss.size());
    return l;
  }
};

// Sets every module from θ0 (a full plane of the model's arena): module m takes its span.
template <class OuterOpt>
void init_modules(store::local_store<OuterOpt>& store, const path::path_plan& plan,
                  const float* theta0) {
  for (int m = 0; m < plan.modules(); ++m) {
    const auto& sp = plan.span_of(m);
    store.store().set(m, std::span<const float>(theta0 + sp.offset, sp.size));
  }
}

// local_run: the workers of a DiLoCo / DiPaCo run as threads of one process over a local_store.
// The workers live as long as the run: between calls of run() their shards may change
// (set_shards, a re-routing) and each keeps its inner optimizer state (moments, step count), its
// sampler's random stream and its error-feedback residual — as the paper's workers do.
//
// Each worker runs the round every path worker runs (train/round_body.hpp over a
// store_exchange), under the sync rule set_sync chose (blocking by default): the same round a
// worker process runs against the store service, so every rule runs in process too.
//
// A worker whose push is refused because its round already closed without it (a waiter's
// deadline passed: it was late) is left out of that round, as the store service leaves it out,
// and goes on with the next round; left_out() counts such rounds.
template <train::Model Model, optim::InnerOptimizer InnerOpt, outer::OuterOptimizer OuterOpt>
class local_run {
 public:
  using worker = path_worker<Model, InnerOpt>;

  // One path_worker per spec (worker w on the plan's path_of_worker(w)), with codecs of the
  // store's compression when it is encoded (error-feedback residuals and L-GreCo state start
  // afresh). Errors: invalid_argument unless there is one spec per worker of the plan, each
  // with a shard; make_codecs', set_codecs'.
  static result<local_run> make(store::local_store<OuterOpt>& store, const Model& model,
                                const path::path_plan& plan,
                                const std::vector<worker_spec>& workers, InnerOpt inner,
                                train::inner_config cfg) {
    if (int(workers.size()) != plan.workers())
      return error(errc::invalid_argument, "local_run: " + std::to_string(workers.size()) +
                                               " worker specs for a plan of " +
                                               std::to_string(plan.workers()) + " workers");
    local_run r(store);
    for (std::size_t i = 0; i < workers.size(); ++i) {
      if (!workers[i].shard)
        return error(errc::invalid_argument,
                     "local_run: worker " + std::to_string(i) + " has no shard");
      const int p = plan.path_of_worker(int(i));
      auto lv = plan.path_spans(p);
      r.ws_.push_back(std::make_unique<worker>(int(i), model, lv, plan.path_modules(p), inner, cfg,
                                               *workers[i].shard, workers[i].seed));
      if (store.encoded()) {
        auto codecs = store::make_codecs(store.compress_config(), model, lv);
        if (!codecs) return codecs.error();
        if (auto s = r.ws_.back()->set_codecs(std::move(*codecs)); !s) return s.error();
      }
    }
    return r;
  }

  std::size_t size() const noexcept { return ws_.size(); }
  worker& at(std::size_t i) { return *ws_[i]; }
  const worker& at(std::size_t i) const { return *ws_[i]; }
  // Rounds in which a worker's push came after its round had closed (summed over workers).
  long left_out() const noexcept { return left_out_; }

  // Worker i trains on shards[i] from its next inner step (path_worker::set_shard).
  // Requires: shards.size() == size(); each outlives its use and is longer than ctx (throws).
  void set_shards(const std::vector<const io::token_stream*>& shards) {
    PACO_ASSERT(shards.size() == ws_.size(), "one shard per worker");
    for (std::size_t i = 0; i < ws_.size(); ++i) ws_[i]->set_shard(*shards[i]);
  }

  // The sync rule of the runs from now on (train/sync.hpp): blocking (the default), co2, eager,
  // naive_delayed, or streaming (the path's levels as its fragments). Checked by run().
  void set_sync(sync_choice rule) { sync_ = std::move(rule); }
  const sync_choice& sync() const noexcept { return sync_; }

  // Runs `rounds` rounds from the store's current modules, one thread per worker: each takes
  // its path's modules, then trains H inner steps a round and syncs on the rule's schedule
  // (blocking: push, wait for the round's close — at round_deadline with what arrived — and take
  // the new modules). A rule that keeps a sync in flight between rounds lands it at the end of
  // the run (so a run cut into phases is the same run only under blocking). on_round (optional)
  // after each round, with each worker's mean loss of its H steps.
  // Errors: the rule's (invalid_argument naming it: streaming's H, τ, α against the levels);
  // the first worker error other than a late push.
  status run(int rounds, const std::function<void(const round_report&)>& on_round = {},
             std::chrono::steady_clock::duration round_deadline = std::chrono::hours(1)) {
    if (rounds <= 0 || ws_.empty()) return {};
    using exchange = store_exchange<worker, store::local_store<OuterOpt>>;
    using body = round_body<exchange, worker>;
    const bool per_level = sync_.get_if<streaming>() != nullptr;
    const std::size_t n = ws_.size();
    std::vector<worker_loop_options> opts(n);
    std::vector<std::unique_ptr<exchange>> xs;
    std::vector<std::unique_ptr<body>> bodies;
    for (std::size_t i = 0; i < n; ++i) {
      worker& w = *ws_[i];
      auto& o = opts[i];
      o.round_deadline = round_deadline;
      o.sync = sync_;
      for (int m : w.modules()) o.sharing.push_back(store_->store().info(m).paths_through);
      const std::size_t levels = w.modules().size();
      auto plan = detail::store_plan(sync_, levels, w.steps_per_round());
      if (!plan) return plan.error();
      auto share = detail::own_shares(o, levels, w.steps_per_round());
      if (!share) return share.error();
      xs.push_back(std::make_unique<exchange>(w, *store_, o, std::move(*share), per_level, *plan));
      if (auto s = xs.back()->begin(); !s) return s;
      o.rounds = xs.back()->round() + rounds;
      bodies.push_back(std::make_unique<body>(*xs.back(), w, *plan, per_level ? levels : 1));
    }
    const long start = xs[0]->round();
    std::vector<status> errs(n);
    // Every worker's part at once (they wait for each other's pushes), one thread each.
    const auto together = [&](const auto& part) -> status {
      std::vector<std::thread> th;
      for (std::size_t i = 0; i < n; ++i)
        th.emplace_back([&, i] {
          try {
            errs[i] = part(i);
          } catch (const error_exception& e) {
            errs[i] = e.err;
          }
        });
      for (auto& t : th) t.join();
      for (auto& e : errs)
        if (!e) return e;
      return {};
    };
    round_report rep;
    rep.worker_loss.assign(n, 0.0);
    for (int r = 0; r < rounds; ++r) {
      if (auto s = together([&](std::size_t i) {
            return bodies[i]->run(1, round_deadline, {},
                                  [&, i](const round_end& e) { rep.worker_loss[i] = e.loss; });
          });
          !s)
        return s;
      rep.round = start + r;
      if (on_round) on_round(rep);
    }
    const auto finished = together([&](std::size_t i) -> status {
      if (auto s = bodies[i]->finish(round_deadline); !s) return s;
      xs[i]->end();
      return {};
    });
    for (auto& x : xs) left_out_ += x->refused();
    return finished;
  }

 private:
  explicit local_run(store::local_store<OuterOpt>& store) : store_(&store) {}

  store::local_store<OuterOpt>* store_;
  std::vector<std::unique_ptr<worker>> ws_;
  sync_choice sync_ = blocking{};
  long left_out_ = 0;
};

// One local_run of `rounds` rounds from the store's current modules (after init_modules, or
// after an earlier run: a run can be continued, but its workers start with fresh inner state —
// use local_run itself to keep it across phases). Errors: local_run's.
template <class Model, class InnerOpt, class OuterOpt>
status run_local(store::local_store<OuterOpt>& store, const Model& model,
                 const path::path_plan& plan, const std::vector<worker_spec>& workers,
                 InnerOpt inner, train::inner_config cfg, int rounds,
                 const std::function<void(const round_report&)>& on_round = {},
                 std::chrono::steady_clock::duration round_deadline = std::chrono::hours(1)) {
  auto run = local_run<Model, InnerOpt, OuterOpt>::make(store, model, plan, workers, inner, cfg);
  if (!run) return run.error();
  return run->run(rounds, on_round, round_deadline);
}

// Path p's current global parameters, written into θ (a full plane of the model's arena; the
// parts no module covers are left as they are).
template <class OuterOpt>
void assemble_path(const store::local_store<OuterOpt>& store, const path::path_plan& plan, int p,
                   float* theta) {
  plan.assemble(p, theta, [&](int m, std::span<float> dst) { store.pull(m, dst); });
}

}  // namespace paco::train
