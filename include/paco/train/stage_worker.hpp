#pragma once
// stage_worker: one stage of a DiPaCo path cut across processes at its level boundaries:
// local-loss DiPaCo (Laskin et al.'s local losses inside a path: each stage trains on its own
// auxiliary head, activations flow forward only), or the path as a GPipe / 1F1B pipeline. It is a
// train::path_worker whose levels are the stage's (pipeline::path_stages) and whose loop is the
// stage's (pipeline::stage_loop): it pulls and pushes its own modules' Δ, so the module store —
// and the round loop that drives a path_worker (run_worker) — is unchanged; the store sees each
// stage as a worker of its own (its id) pushing one Δ per module of its levels.
//
//   auto ps = pipeline::path_stages::make(model, plan.path_spans(p), K).value_or_throw();
//   auto w = train::make_stage_worker(id, model, plan, p, ps, net, opts, adamw, icfg, shard, seed);
//   train::run_worker(*w, store, lo);  w->loop().close();  // every stage of the path closes
//
// Every stage of a path samples the same batches (the same shard and seed: only activations
// cross between stages), so the stages of one path must be given the same shard, seed and H.
// The stages' rounds close at different times (each waits for its own modules' partners), so
// pipeline_options::timeout must cover a round's close as well as a step: a stage that pulled
// early waits that long for its neighbour's first activation of the round.

#include <cstdint>
#include <memory>
#include <vector>

#include "paco/optim/adamw.hpp"
#include "paco/path/path_plan.hpp"
#include "paco/pipeline/path_stages.hpp"
#include "paco/pipeline/stage_loop.hpp"
#include "paco/train/path_worker.hpp"

namespace paco::train {

template <nn::BlockModel M, net::Transport T>
using stage_worker = path_worker<M, optim::adamw, pipeline::stage_loop<M, T>>;

// Stage net.rank() of path p of plan, cut as ps says, with store id `id`. cfg: batch, ctx, H
// (steps) and the learning-rate schedule over the stage's steps; its threads are not used (a
// stage runs on one core). Requires (checked: throws error_exception): ps cut for this path,
// ps.stages() == net.size(), cfg.start_step == 0 (a stage does not resume), and what
// stage_loop requires.
template <nn::BlockModel M, net::Transport T>
std::unique_ptr<stage_worker<M, T>> make_stage_worker(
    int id, const M& model, const path::path_plan& plan, int p, const pipeline::path_stages& ps,
    T& net, const pipeline::pipeline_options& o, const optim::adamw& opt, const inner_config& cfg,
    const io::token_stream& shard, std::uint64_t seed) {
  if (ps.first_level.empty() || ps.first_level.back() != plan.levels())
    throw error_exception({errc::invalid_argument,
                           "make_stage_worker: the stages cut " +
                               std::to_string(ps.first_level.empty() ? 0 : ps.first_level.back()) +
                               " levels, the grid has " + std::to_string(plan.levels())});
  if (ps.stages() != net.size())
    throw error_exception(
        {errc::invalid_argument, "make_stage_worker: the path is cut into " +
                                     std::to_string(ps.stages()) + " stages, the transport has " +
                                     std::to_string(net.size()) + " ranks (one stage per rank)"});
  if (cfg.start_step != 0)
    throw error_exception(
        {errc::unsupported, "make_stage_worker: a pipeline stage starts at step 0"});
  const int k = net.rank();
  std::vector<path::level_span> levels;
  std::vector<int> modules;
  for (int l : ps.levels_of(k)) {
    levels.push_back(plan.level(l));
    modules.push_back(plan.path_modules(p)[std::size_t(l)]);
  }
  pipeline::stage_loop<M, T> loop(model, ps.plan, o, cfg.batch, cfg.ctx, cfg.schedule, net, shard,
                                  seed);
  return std::make_unique<stage_worker<M, T>>(id, model, std::move(levels), std::move(modules), opt,
                                              cfg, std::move(loop), double(shard.ids.size()));
}

}  // namespace paco::train
