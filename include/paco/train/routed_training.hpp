#pragma once
// routed_training: DiPaCo's routed training of a grid (DiPaCo §2.3–2.4, ALGORITHMS.md) as one
// call. Every document starts on its initial set of paths (e.g. the top n of a k-means router:
// overlapping shards) for the first third of the rounds; then, `reroutes` times evenly spaced
// over the rest (reroute_phases), a discriminative re-routing (discriminative_reroute) labels
// each document by the path that best predicts its held-out tail, fits a logistic router on the
// prefix features and gives every document its top n paths under it. The workers keep their
// inner state across re-routings (local_trainer's phases). With early_stop_every > 0 each path
// reports its best parameters of the last phase on its own held-out tails (DiPaCo's per-path
// early stopping), not its last.
//
//   auto r = train::train_routed(model, plan, theta0, docs, km_top, optim::adamw{.lr = 1e-3f},
//                                {.trainer = cfg, .reroutes = 4, .rule = rule}, ws);
//   r->router.route(features_of_a_new_document);

#include <cstddef>
#include <cstdio>
#include <functional>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "paco/core/error.hpp"
#include "paco/path/path_plan.hpp"
#include "paco/route/logistic.hpp"
#include "paco/train/early_stopping.hpp"
#include "paco/train/local_trainer.hpp"
#include "paco/train/routing.hpp"

namespace paco::train {

template <class OuterOpt>
struct routed_training_config {
  local_trainer_config<OuterOpt> trainer{};  // its phases are set here from rounds and reroutes
  int reroutes = 4;                          // discriminative re-routings after the first third
  reroute_options reroute{};                 // overlap n of the re-routed shards, the router fit
  route::sliding_window rule{};              // the scorer that labels the tails
  // > 0: per-path early stopping (train/early_stopping.hpp) in the last phase, on the held-out
  // tails of each path's last shard, every `early_stop_every` rounds and at the last; each path
  // then reports its best parameters. 0: every path's parameters after the final outer step.
  int early_stop_every = 0;
};

struct routed_paths {
  trained_paths trained;                  // with early stopping: each path's best θ
  route::logistic_router router;          // the last re-routing's
  std::vector<std::size_t> shard_tokens;  // per path: tokens of its last shard
  // With early stopping, per path: the round of its best θ and its held-out bits per token.
  std::vector<long> best_round;
  std::vector<double> best_bits;
};

// With early stopping, writes one line to `out`: "<name>: early stopping kept each path's
// parameters of round (held-out bpb):" and each path's best round (from 1) and bits/byte.
inline void print_early_stopping(std::FILE* out, const std::string& name, const routed_paths& r) {
  if (r.best_round.empty()) return;
  std::fprintf(
      out, "%s: early stopping kept each path's parameters of round (held-out bpb):", name.c_str());
  for (std::size_t p = 0; p < r.best_round.size(); ++p)
    std::fprintf(out, " %ld (%.4f)", r.best_round[p] + 1, r.best_bits[p]);
  std::fprintf(out, "\n");
}

// Called after re-routing `phase` (1 … reroutes), which the run reaches at round `round`, with
// the re-routing and the shards the workers take from there on.
using reroute_report = std::function<void(int phase, int round, const rerouting&,
                                          const std::vector<io::token_stream>& shards)>;

// Requires: plan has one worker per path; docs.size() == initial.size(), every initial set
// non-empty and in [0, plan.paths()), its first entry the document's path so far; docs carries
// its prefix features; ws made for {B, cfg.rule.T}; local_trainer::make's.
// Errors: reroute_phases' (too many re-routings for the rounds), make's, run's,
// discriminative_reroute's; invalid_argument for early_stop_every < 0 or a path whose last shard
// holds no held-out tail to stop on.
template <train::LanguageModel M, optim::InnerOptimizer InnerOpt, outer::OuterOptimizer OuterOpt>
result<routed_paths> train_routed(
    const M& model, path::path_plan plan, std::span<const float> theta0, const routed_docs& docs,
    const std::vector<std::vector<int>>& initial, InnerOpt inner_opt,
    routed_training_config<OuterOpt> cfg, typename M::workspace& ws,
    const reroute_report& on_reroute = {},
    const std::function<void(const train::round_report&)>& on_round = {}) {
  if (plan.workers_per_path() != 1)
    return error(errc::invalid_argument, "train_routed: one worker per path");
  if (cfg.early_stop_every < 0)
    return error(errc::invalid_argument, "train_routed: early_stop_every must be ≥ 0");
  const int paths = plan.paths();
  auto phases = reroute_phases(cfg.trainer.rounds, cfg.reroutes);
  if (!phases) return phases.error();
  cfg.trainer.phases = *phases;
  routed_paths r;
  std::vector<int> previous(docs.size());
  for (std::size_t i = 0; i < docs.size(); ++i) previous[i] = initial[i][0];
  std::optional<path_early_stopping<M>> stop;  // made at the last re-routing
  auto reshard = [&](int q, const std::vector<std::vector<float>>& th) {
    auto rr = discriminative_reroute(model, route::theta_pointers(th), docs, previous, cfg.rule, ws,
                                     cfg.reroute);
    if (!rr) throw error_exception(rr.error());
    for (std::size_t i = 0; i < docs.size(); ++i) previous[i] = rr->sets[i][0];
    auto s = shards_of(docs, rr->sets, paths);
    r.shard_tokens.clear();
    for (auto& x : s) r.shard_tokens.push_back(x.ids.size());
    if (on_reroute) on_reroute(q, (*phases)[std::size_t(q) - 1], *rr, s);
    if (q == cfg.reroutes && cfg.early_stop_every > 0)  // the last phase: stop on its shards
      stop.emplace(model, held_out_slices(docs, rr->sets, paths), cfg.rule, ws.d.B);
    r.router = std::move(rr->router);
    return s;
  };
  const long last_start = (*phases)[phases->size() - 2];  // rounds before the last phase
  try {
    auto t = local_trainer<M, InnerOpt, OuterOpt>::make(
        model, std::move(plan), theta0, shards_of(docs, initial, paths), inner_opt, cfg.trainer);
    if (!t) return t.error();
    auto observe = [&](const train::round_report& rr) {
      if (on_round) on_round(rr);
      const long in_last = rr.round + 1 - last_start;
      if (stop && in_last > 0 &&
          (in_last % cfg.early_stop_every == 0 || rr.round + 1 == cfg.trainer.rounds))
        stop->observe(rr.round, (*t)->path_thetas());
    };
    if (auto s = (*t)->run(reshard, observe); !s) return s.error();
    r.trained = (*t)->results();
  } catch (const error_exception& e) {
    return e.err;
  }
  if (stop) {
    r.trained.theta = stop->best_thetas();
    for (int p = 0; p < paths; ++p) {
      r.best_round.push_back(stop->best_round(p));
      r.best_bits.push_back(stop->best_bits(p));
    }
  }
  return r;
}

}  // namespace paco::train
