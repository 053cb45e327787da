#pragma once
// dipaco_local: a whole DiLoCo / DiPaCo run in one process, one thread per worker over a
// local_store. DiLoCo is the grid 1×1 with k workers on path 0; a flat MoE is one level of P
// experts; DiPaCo is any grid with one (or more) workers per path.
//
//   auto run = dipaco_local<Model, InnerOpt, OuterOpt>(model, grid_modules, levels, workers, ...)

#include <functional>
#include <memory>
#include <thread>
#include <vector>

#include "paco/path/module_grid.hpp"
#include "paco/sync/local_store.hpp"
#include "paco/sync/path_worker.hpp"

namespace paco::sync {

// A worker: which path it trains (its module id per level) and on which shard.
struct worker_spec {
  std::vector<int> modules;         // store module id per level
  const io::token_stream* shard = nullptr;
  std::uint64_t seed = 1;
};

// The module table of a grid for the given workers: module (l, e) has the size of level l's span
// and expects one push per worker whose path goes through it.
template <std::size_t L>
std::vector<path::module_info> grid_modules(const path::module_grid<L>& g,
                                            const std::vector<path::level_span>& levels,
                                            const std::vector<worker_spec>& workers) {
  std::vector<path::module_info> m(g.module_count());
  for (int id = 0; id < g.module_count(); ++id) {
    auto [l, e] = g.module_at(id);
    m[id] = {id, levels[l].size, 0};
  }
  for (auto& w : workers)
    for (int id : w.modules) ++m[id].paths_through;
  return m;
}

// Module ids of path i of grid g, one per level.
template <std::size_t L>
std::vector<int> path_modules(const path::module_grid<L>& g, int i) {
  auto a = g.modules_of(i);
  return {a.begin(), a.end()};
}

struct round_report {
  long round = 0;
  std::vector<double> worker_loss;  // mean inner loss of each worker in this round
};

// Sets every module from θ0: module m takes the span of its level (module_level[m]).
template <class OuterOpt>
void init_modules(local_store<OuterOpt>& store, const std::vector<path::level_span>& levels,
                  const std::vector<int>& module_level, const float* theta0) {
  for (int m = 0; m < store.store().module_count(); ++m) {
    const auto& sp = levels[module_level[m]];
    store.store().set(m, std::span<const float>(theta0 + sp.offset, sp.size));
  }
}

// Runs `rounds` synchronous rounds with one thread per worker from the store's current modules
// (after init_modules, or after an earlier run_local: a run can be continued, e.g. on new
// shards). After store.set_compression(c, …) every worker encodes its pushes with codecs of c
// (error-feedback residuals and L-GreCo state start afresh with each call). on_round
// (optional) is called after each round. Errors from any worker are returned (the first one).
template <class Model, class InnerOpt, class OuterOpt>
status run_local(local_store<OuterOpt>& store, const Model& model,
                 const std::vector<path::level_span>& levels, const std::vector<int>& module_level,
                 const std::vector<worker_spec>& workers, InnerOpt inner, inner_config cfg,
                 int rounds, const std::function<void(const round_report&)>& on_round = {},
                 std::chrono::steady_clock::duration round_deadline = std::chrono::hours(1)) {
  std::vector<std::unique_ptr<path_worker<Model, InnerOpt>>> ws;
  for (std::size_t i = 0; i < workers.size(); ++i) {
    std::vector<path::level_span> lv;
    for (int m : workers[i].modules) lv.push_back(levels[module_level[m]]);
    ws.push_back(std::make_unique<path_worker<Model, InnerOpt>>(
        int(i), model, lv, workers[i].modules, inner, cfg, *workers[i].shard, workers[i].seed));
    if (store.encoded()) {
      auto codecs = make_codecs(store.compress_config(), model, lv);
      if (!codecs) return codecs.error();
      if (auto s = ws.back()->set_codecs(std::move(*codecs)); !s) return s;
    }
  }
  std::vector<status> errs(ws.size());
  for (int r = 0; r < rounds; ++r) {
    std::vector<std::thread> th;
    for (std::size_t i = 0; i < ws.size(); ++i)
      th.emplace_back([&, i] { errs[i] = ws[i]->run_round(store, round_deadline); });
    for (auto& t : th) t.join();
    for (auto& e : errs)
      if (!e) return e;
    round_report rep{store.store().round(0) - 1, {}};
    for (auto& w : ws) rep.worker_loss.push_back(w->last_loss());
    if (on_round) on_round(rep);
  }
  return {};
}

// Copies path `modules`' current global parameters into θ (a full arena plane).
template <class OuterOpt>
void assemble_path(const local_store<OuterOpt>& store, const std::vector<path::level_span>& levels,
                   const std::vector<int>& module_level, const std::vector<int>& modules,
                   float* theta) {
  for (int m : modules) {
    const auto& sp = levels[module_level[m]];
    store.pull(m, std::span<float>(theta + sp.offset, sp.size));
  }
}

}  // namespace paco::sync
