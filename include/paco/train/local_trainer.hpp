#pragma once
// local_trainer: a whole DiLoCo, flat-MoE or DiPaCo run in one process, configured by an
// aggregate. It owns the store (store::local_store over the plan's module table, every module
// started from θ0), the workers (train::local_run: one path_worker per plan worker, living as
// long as the run, so a re-routing keeps their inner state) and the round loop in phases:
// before phase i > 0 a reshard callback sees every path's parameters and gives the workers new
// shards (a discriminative re-routing: train/routing.hpp).
//
//   DiLoCo P=4      path_plan of module_grid<1>::experts({1}) with 4 workers per path
//   flat MoE P=4    module_grid<1>::experts({4}), one worker per path
//   DiPaCo 2×2      module_grid<2>::experts({2, 2}), one worker per path
//
//   auto t = train::local_trainer<nn::gpt, optim::adamw, outer::nesterov>::make(
//       model, plan, theta0, shards, optim::adamw{.lr = 1e-3f}, {.inner = icfg, .rounds = 20});
//   (*t)->run(reshard, on_round);  auto thetas = (*t)->path_thetas();
//
// train_paths (below) is make + run + what a finished run hands back (trained_paths: every
// path's parameters, the bytes a worker pushed, the learning curve), for callers that need
// nothing else of the trainer.
//
// Seams (named for the work that builds on this layer): the round of one worker is
// train::local_run::round_of (pull → inner_loop → push → wait) — CO2's overlapped outer sync
// replaces its wait with the next round's inner steps; a streaming-DiLoCo fragment is a subset
// of the plan's modules synchronised on its own schedule (path_plan::module_table per
// fragment); local-loss chunks live inside the inner step (train::inner_loop::step).

#include <functional>
#include <memory>
#include <span>
#include <vector>

#include "paco/outer/delta.hpp"
#include "paco/path/path_plan.hpp"
#include "paco/train/dipaco_local.hpp"
#include "paco/train/inner_loop.hpp"
#include "paco/train/learning_curve.hpp"

namespace paco::train {

// What a finished run hands back.
struct trained_paths {
  std::vector<std::vector<float>> theta;  // every path's parameters after the final outer step
  double bytes_per_worker = 0;            // fp32 bytes one worker (of path 0) pushed
  std::vector<double> curve;              // window_means of the round losses
};

template <class OuterOpt>
struct local_trainer_config {
  inner_config inner{};                     // every worker's inner loop (steps = H per round)
  OuterOpt outer{};                         // every module's outer optimizer, unless…
  std::vector<OuterOpt> outer_per_level{};  // … one per level of the plan (empty: `outer`)
  outer::delta_options delta{};             // how a module combines the pushes of a round
  int rounds = 1;                           // outer rounds in all
  std::vector<int> phases;  // phase ends (ascending, the last == rounds); empty: one phase
  std::uint64_t seed = 1;   // worker w samples its shard with seed + w
  // The workers' pushes: fp32 (identity, the default) or encoded by this compression, which the
  // store decodes (store::local_store::set_compression over the plan's module spans).
  store::compression compression{};
};

template <train::Model Model, optim::InnerOptimizer InnerOpt, outer::OuterOptimizer OuterOpt>
class local_trainer {
 public:
  using workers_t = train::local_run<Model, InnerOpt, OuterOpt>;
  // New shards, one per worker, before phase `phase` (≥ 1), from every path's parameters.
  using reshard_fn = std::function<std::vector<io::token_stream>(
      int phase, const std::vector<std::vector<float>>& path_thetas)>;

  // Requires: model outlives the trainer. shards: one per plan worker, each longer than ctx.
  // Errors: invalid_argument for a wrong shard count, θ0 size or phase list; set_compression's
  // (a compression the store cannot decode); local_run's.
  static result<std::unique_ptr<local_trainer>> make(const Model& model, path::path_plan plan,
                                                     std::span<const float> theta0,
                                                     std::vector<io::token_stream> shards,
                                                     InnerOpt inner_opt,
                                                     local_trainer_config<OuterOpt> cfg) {
    if (int(shards.size()) != plan.workers())
      return error(errc::invalid_argument, "local_trainer: " + std::to_string(shards.size()) +
                                               " shards for " + std::to_string(plan.workers()) +
                                               " workers");
    if (theta0.size() != model.layout().total())
      return error(errc::invalid_argument, "local_trainer: θ0 is not a plane of the model");
    if (cfg.rounds < 1) return error(errc::invalid_argument, "local_trainer: rounds must be ≥ 1");
    if (!cfg.outer_per_level.empty() && int(cfg.outer_per_level.size()) != plan.levels())
      return error(errc::invalid_argument,
                   "local_trainer: " + std::to_string(cfg.outer_per_level.size()) +
                       " outer optimizers for " + std::to_string(plan.levels()) + " levels");
    if (cfg.phases.empty()) cfg.phases = {cfg.rounds};
    bool ascending = cfg.phases.front() >= 1 && cfg.phases.back() == cfg.rounds;
    for (std::size_t i = 1; i < cfg.phases.size(); ++i)
      ascending &= cfg.phases[i] > cfg.phases[i - 1];
    if (!ascending)
      return error(errc::invalid_argument,
                   "local_trainer: phase ends must ascend from ≥ 1 and end at round " +
                       std::to_string(cfg.rounds));
    std::unique_ptr<local_trainer> t(
        new local_trainer(model, std::move(plan), theta0, std::move(shards), cfg));
    if (cfg.compression.spec.kind != compress::codec_kind::identity)
      if (auto s = t->store_.set_compression(cfg.compression, model, t->plan_.module_spans()); !s)
        return s.error();
    std::vector<train::worker_spec> ws;
    for (int w = 0; w < t->plan_.workers(); ++w)
      ws.push_back({&t->shards_[std::size_t(w)], cfg.seed + std::uint64_t(w)});
    auto run = workers_t::make(t->store_, model, t->plan_, ws, inner_opt, cfg.inner);
    if (!run) return run.error();
    t->run_ = std::make_unique<workers_t>(std::move(*run));
    return t;
  }

  // Trains every phase: phase 0 on the shards given to make, phase i > 0 on reshard(i, …)'s.
  // on_round (optional) after every round. Errors: the workers' (a late push is not one),
  // invalid_argument if reshard returns the wrong number of shards.
  // Ensures: round_losses() gained one entry per round run.
  status run(const reshard_fn& reshard = {},
             const std::function<void(const train::round_report&)>& on_round = {}) {
    const auto record = [&](const train::round_report& rr) {
      round_loss_.push_back(rr.mean_loss());
      if (on_round) on_round(rr);
    };
    for (std::size_t i = 0; i < cfg_.phases.size(); ++i) {
      if (i > 0 && reshard) {
        auto next = reshard(int(i), path_thetas());
        if (next.size() != shards_.size())
          return {errc::invalid_argument, "local_trainer: reshard gave " +
                                              std::to_string(next.size()) + " shards for " +
                                              std::to_string(shards_.size()) + " workers"};
        std::vector<const io::token_stream*> p;
        for (auto& s : next) p.push_back(&s);
        run_->set_shards(p);
        shards_ = std::move(next);  // the elements (and the workers' pointers) stay in place
      }
      if (auto s = run_->run(cfg_.phases[i] - done_, record); !s) return s;
      done_ = cfg_.phases[i];
    }
    return {};
  }

  // Every path's full parameters after the last outer step (θ0 where no module covers).
  std::vector<std::vector<float>> path_thetas() const {
    std::vector<std::vector<float>> th(std::size_t(plan_.paths()), theta0_);
    for (int p = 0; p < plan_.paths(); ++p)
      train::assemble_path(store_, plan_, p, th[std::size_t(p)].data());
    return th;
  }

  // fp32 bytes one worker of path p pushes over the run (Δ of each of its modules per round).
  double fp32_bytes_per_worker(int p = 0) const {
    std::size_t per_round = 0;
    for (int m : plan_.path_modules(p)) per_round += plan_.span_of(m).size;
    return double(cfg_.rounds) * double(per_round) * sizeof(float);
  }

  const path::path_plan& plan() const noexcept { return plan_; }
  store::local_store<OuterOpt>& store() noexcept { return store_; }
  workers_t& workers() noexcept { return *run_; }
  const std::vector<io::token_stream>& shards() const noexcept { return shards_; }
  int rounds_done() const noexcept { return done_; }
  // The workers' mean inner loss of every round run (round_report::mean_loss).
  const std::vector<double>& round_losses() const noexcept { return round_loss_; }
  // What the run hands back so far: every path's θ, the bytes one worker of path 0 pushed over
  // the configured rounds, and window_means of the round losses over `curve_every` rounds.
  trained_paths results(int curve_every = 10) const {
    return {path_thetas(), fp32_bytes_per_worker(), window_means(round_loss_, curve_every)};
  }

 private:
  local_trainer(const Model&, path::path_plan plan, std::span<const float> theta0,
                std::vector<io::token_stream> shards, local_trainer_config<OuterOpt> cfg)
      : plan_(std::move(plan)),
        theta0_(theta0.begin(), theta0.end()),
        shards_(std::move(shards)),
        cfg_(std::move(cfg)),
        store_(plan_.module_table(),
               outer::per_module<OuterOpt>(
                   cfg_.outer_per_level.empty()
                       ? std::vector<OuterOpt>(std::size_t(plan_.modules()), cfg_.outer)
                       : plan_.per_level(cfg_.outer_per_level)),
               cfg_.delta) {
    train::init_modules(store_, plan_, theta0_.data());
  }

  path::path_plan plan_;
  std::vector<float> theta0_;
  std::vector<io::token_stream> shards_;  // one per worker; the workers point into it
  local_trainer_config<OuterOpt> cfg_;
  store::local_store<OuterOpt> store_;
  std::unique_ptr<workers_t> run_;
  int done_ = 0;
  std::vector<double> round_loss_;
};

// A whole run: local_trainer::make, run(reshard, on_round), then every path's θ, the bytes and
// the learning curve (the workers' mean inner loss averaged over every `curve_every` rounds).
// Requires: make's; curve_every ≥ 1. Errors: make's and run's.
template <train::Model Model, optim::InnerOptimizer InnerOpt, outer::OuterOptimizer OuterOpt>
result<trained_paths> train_paths(
    const Model& model, path::path_plan plan, std::span<const float> theta0,
    std::vector<io::token_stream> shards, InnerOpt inner_opt, local_trainer_config<OuterOpt> cfg,
    const typename local_trainer<Model, InnerOpt, OuterOpt>::reshard_fn& reshard = {},
    const std::function<void(const train::round_report&)>& on_round = {}, int curve_every = 10) {
  auto t = local_trainer<Model, InnerOpt, OuterOpt>::make(model, std::move(plan), theta0,
                                                          std::move(shards), inner_opt, cfg);
  if (!t) return t.error();
  if (auto s = (*t)->run(reshard, on_round); !s) return s.error();
  return (*t)->results(curve_every);
}

}  // namespace paco::train
