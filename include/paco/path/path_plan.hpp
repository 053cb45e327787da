#pragma once
// path_plan: a grid laid over a model. It joins a module_grid (which modules each path takes)
// with a level map (which span of the model's arena each level owns) and a number of workers
// per path, and answers every question the store, the workers, the tools and the evaluation
// ask: module → level and span, path → modules, P(l,e), worker → path, the store's module
// table. Nothing else keeps per-module or per-path arrays.
//
//   auto plan = path::path_plan::make(path::module_grid<2>::experts({2, 2}),
//                                     *path::split_gpt_levels(model.layout(), 4, 2));
//   store(plan->module_table(), ...);  for (int m : plan->path_modules(p)) plan->span_of(m);
//
// Any number of levels: from a module_grid<L> (levels fixed at compile time), or from run-time
// level specs (make_runtime, e.g. a config's grid = [2, 2, 4]; up to max_levels).

#include <array>
#include <cstddef>
#include <span>
#include <string>
#include <utility>
#include <vector>

#include "paco/core/error.hpp"
#include "paco/path/level_map.hpp"
#include "paco/path/module_grid.hpp"

namespace paco::path {

class path_plan {
 public:
  // The most levels make_runtime accepts (each count instantiates one module_grid<L>).
  static constexpr std::size_t max_levels = 8;

  // Requires (checked): levels.size() == L, workers_per_path ≥ 1.
  template <std::size_t L>
  static result<path_plan> make(const module_grid<L>& g, std::vector<level_span> levels,
                                int workers_per_path = 1) {
    if (levels.size() != L)
      return error(errc::invalid_argument, "path_plan: a " + g.describe() + " grid has " +
                                               std::to_string(L) + " levels, the level map " +
                                               std::to_string(levels.size()));
    if (workers_per_path < 1)
      return error(errc::invalid_argument, "path_plan: workers_per_path must be ≥ 1");
    path_plan p;
    p.levels_ = std::move(levels);
    p.workers_per_path_ = workers_per_path;
    p.describe_ = g.describe();
    for (int i = 0; i < g.paths(); ++i) {
      const auto m = g.modules_of(i);
      p.path_modules_.emplace_back(m.begin(), m.end());
      const auto e = g.path_at(i).expert;
      p.path_experts_.emplace_back(e.begin(), e.end());
    }
    for (int id = 0; id < g.module_count(); ++id) {
      const auto [l, e] = g.module_at(id);
      p.module_level_.push_back(int(l));
      p.module_expert_.push_back(e);
      p.paths_through_.push_back(g.paths_through(l, e));
    }
    return p;
  }

  // The grid of `spec` (one entry per level, 1 ≤ size ≤ max_levels). Errors: a count out of
  // range, module_grid's (a level with < 1 expert), make's.
  static result<path_plan> make_runtime(const std::vector<level_spec>& spec,
                                        std::vector<level_span> levels, int workers_per_path = 1) {
    if (spec.empty() || spec.size() > max_levels)
      return error(errc::invalid_argument, "path_plan: a grid needs 1 to " +
                                               std::to_string(max_levels) + " levels, not " +
                                               std::to_string(spec.size()));
    try {
      return dispatch<1>(spec, std::move(levels), workers_per_path);
    } catch (const error_exception& e) {
      return e.err;
    }
  }
  // The grid of K_l experts per level (none path-specific).
  static result<path_plan> make_runtime(const std::vector<int>& experts,
                                        std::vector<level_span> levels, int workers_per_path = 1) {
    std::vector<level_spec> s;
    for (int k : experts) s.push_back({.experts = k});
    return make_runtime(s, std::move(levels), workers_per_path);
  }

  int levels() const noexcept { return int(levels_.size()); }
  int paths() const noexcept { return int(path_modules_.size()); }
  int modules() const noexcept { return int(module_level_.size()); }
  int workers_per_path() const noexcept { return workers_per_path_; }
  int workers() const noexcept { return paths() * workers_per_path_; }

  // The span of level l in the model's arena.
  const level_span& level(int l) const { return levels_[std::size_t(l)]; }
  const std::vector<level_span>& level_spans() const noexcept { return levels_; }

  // Module m: its level, its expert index within the level, its span (its level's span), and
  // P(l,e): how many paths go through it.
  int level_of(int m) const { return module_level_[std::size_t(m)]; }
  int expert_of(int m) const { return module_expert_[std::size_t(m)]; }
  const level_span& span_of(int m) const { return levels_[std::size_t(level_of(m))]; }
  int paths_through(int m) const { return paths_through_[std::size_t(m)]; }
  // Every module's span, in module order (the store's decoders, set_compression).
  std::vector<level_span> module_spans() const {
    std::vector<level_span> s;
    for (int m = 0; m < modules(); ++m) s.push_back(span_of(m));
    return s;
  }

  // Path p's module ids, one per level (level 0 first), and their spans.
  const std::vector<int>& path_modules(int p) const { return path_modules_[std::size_t(p)]; }
  std::vector<level_span> path_spans(int p) const {
    std::vector<level_span> s;
    for (int m : path_modules(p)) s.push_back(span_of(m));
    return s;
  }
  // Path p's expert at each level, and as "(e_0,e_1,…)".
  const std::vector<int>& path_experts(int p) const { return path_experts_[std::size_t(p)]; }
  std::string path_name(int p) const {
    std::string s = "(";
    for (std::size_t l = 0; l < path_experts_[std::size_t(p)].size(); ++l)
      s += (l ? "," : "") + std::to_string(path_experts_[std::size_t(p)][l]);
    return s + ")";
  }
  // "2x2", "1xP", …
  const std::string& describe() const noexcept { return describe_; }
  // Parameters of the whole grid for a model of `model_params`: every module once, so each
  // level's span once per expert. Requires: the levels lie within the model's parameters.
  // Ensures: model_params + Σ_l (experts at l − 1) · level(l).size.
  std::size_t grid_params(std::size_t model_params) const {
    for (int m = 0; m < modules(); ++m) model_params += span_of(m).size;
    for (auto& l : levels_) model_params -= l.size;
    return model_params;
  }

  // Workers 0 … workers()−1; worker w trains path w / workers_per_path().
  int path_of_worker(int w) const { return w / workers_per_path_; }
  const std::vector<int>& worker_modules(int w) const { return path_modules(path_of_worker(w)); }

  // The store's module table: module m has its level's size and expects one push per worker
  // whose path goes through it (P(l,e) × workers per path).
  std::vector<module_info> module_table() const {
    std::vector<module_info> t;
    for (int m = 0; m < modules(); ++m)
      t.push_back({m, span_of(m).size, paths_through(m) * workers_per_path_});
    return t;
  }

  // One value per module from one per level (e.g. an outer optimizer per level for
  // outer::per_module). Requires: by_level.size() == levels() (checked: throws error_exception).
  template <class T>
  std::vector<T> per_level(const std::vector<T>& by_level) const {
    if (int(by_level.size()) != levels())
      throw error_exception(
          {errc::invalid_argument, "path_plan: " + std::to_string(by_level.size()) +
                                       " values for " + std::to_string(levels()) + " levels"});
    std::vector<T> r;
    for (int m = 0; m < modules(); ++m) r.push_back(by_level[std::size_t(level_of(m))]);
    return r;
  }

  // Fills path p's parameters θ (a full plane of the model's arena): get(m, span) copies module
  // m into its span, for every module of the path (e.g. a store's pull).
  template <class Get>
  void assemble(int p, float* theta, Get&& get) const {
    for (int m : path_modules(p)) {
      const auto& sp = span_of(m);
      get(m, std::span<float>(theta + sp.offset, sp.size));
    }
  }

 private:
  template <std::size_t L>
  static result<path_plan> dispatch(const std::vector<level_spec>& spec,
                                    std::vector<level_span> levels, int wpp) {
    if constexpr (L > max_levels) {
      return error(errc::invalid_argument, "path_plan: too many levels");
    } else {
      if (spec.size() != L) return dispatch<L + 1>(spec, std::move(levels), wpp);
      std::array<level_spec, L> a{};
      for (std::size_t l = 0; l < L; ++l) a[l] = spec[l];
      return make(module_grid<L>(a), std::move(levels), wpp);
    }
  }

  std::vector<level_span> levels_;
  std::vector<std::vector<int>> path_modules_, path_experts_;
  std::vector<int> module_level_, module_expert_, paths_through_;
  int workers_per_path_ = 1;
  std::string describe_;
};

}  // namespace paco::path
