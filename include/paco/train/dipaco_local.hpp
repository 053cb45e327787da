#pragma once
// dipaco_local: a whole DiLoCo / DiPaCo run in one process, one thread per worker over a
// local_store. DiLoCo is the grid 1×1 with k workers on path 0; a flat MoE is one level of P
// experts; DiPaCo is any grid with one (or more) workers per path.
//
//   auto plan = path::path_plan::make(grid, levels, workers_per_path);
//   store::local_store<outer::nesterov> store(plan->module_table(), outer_opt);
//   train::init_modules(store, *plan, theta0);
//   auto run = train::local_run<Model, InnerOpt, OuterOpt>::make(store, model, *plan, specs, ...);

#include <barrier>
#include <functional>
#include <memory>
#include <thread>
#include <vector>

#include "paco/outer/concepts.hpp"
#include "paco/path/path_plan.hpp"
#include "paco/store/local_store.hpp"
#include "paco/train/path_worker.hpp"
#include "paco/train/worker_loop.hpp"

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

  // Runs `rounds` synchronous rounds, one thread per worker: pull (every worker pulls the same
  // round before any pushes), H inner steps, push, wait (closing at round_deadline with what
  // arrived). on_round (optional) after each round.
  // Errors: the first worker error other than a late push.
  status run(int rounds, const std::function<void(const round_report&)>& on_round = {},
             std::chrono::steady_clock::duration round_deadline = std::chrono::hours(1)) {
    std::vector<status> errs(ws_.size());
    std::vector<int> late(ws_.size(), 0);
    for (int r = 0; r < rounds; ++r) {
      std::barrier pulled(std::ptrdiff_t(ws_.size()));  // every worker pulls before any pushes
      std::vector<std::thread> th;
      for (std::size_t i = 0; i < ws_.size(); ++i)
        th.emplace_back([&, i] { errs[i] = round_of(*ws_[i], pulled, round_deadline, late[i]); });
      for (auto& t : th) t.join();
      for (auto& e : errs)
        if (!e) return e;
      round_report rep{store_->store().round(0) - 1, {}};
      for (auto& w : ws_) rep.worker_loss.push_back(w->last_loss());
      if (on_round) on_round(rep);
    }
    for (int n : late) left_out_ += n;
    return {};
  }

 private:
  explicit local_run(store::local_store<OuterOpt>& store) : store_(&store) {}

  // One round of one worker. A push refused because the module's round had already closed is
  // counted in `late`, not returned.
  status round_of(worker& w, std::barrier<>& pulled, std::chrono::steady_clock::duration deadline,
                  int& late) {
    auto got = w.pull(*store_);
    pulled.arrive_and_wait();
    if (!got) return got;
    w.train();
    if (auto s = w.push(*store_); !s) {
      bool closed = true;  // every refusal is explained by a round that closed without us
      for (int m : w.modules()) closed &= store_->store().round(m) > w.round();
      if (!closed) return s;
      ++late;
      return {};
    }
    return wait_round(w, *store_, std::chrono::steady_clock::now() + deadline);
  }

  store::local_store<OuterOpt>* store_;
  std::vector<std::unique_ptr<worker>> ws_;
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
