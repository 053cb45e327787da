#pragma once
// path_stages: a DiPaCo path cut into pipeline stages at level boundaries (local-loss DiPaCo).
// Stage k holds levels [first_level[k], first_level[k+1]): whole modules, so each stage pulls
// and pushes its own modules' Δ and the module store is unchanged. `plan` is the same cut in
// blocks, for the stage_runner.
//
//   auto ps = pipeline::path_stages::make(model, plan.path_spans(p), 2).value_or_throw();
//   ps.levels_of(1);  // {1} on a 2-level grid: stage 1 trains level 1's module

#include <string>
#include <vector>

#include "paco/core/error.hpp"
#include "paco/nn/concepts.hpp"
#include "paco/path/level_map.hpp"
#include "paco/pipeline/stage_plan.hpp"

namespace paco::pipeline {

struct path_stages {
  std::vector<int> first_level;  // K + 1 level indices: 0 = first_level[0] < … < first_level[K] = L
  stage_plan plan;               // the same cut in blocks

  int stages() const noexcept { return plan.stages(); }
  // The levels stage k holds, in order.
  std::vector<int> levels_of(int k) const {
    std::vector<int> l;
    for (int i = first_level[std::size_t(k)]; i < first_level[std::size_t(k) + 1]; ++i)
      l.push_back(i);
    return l;
  }

  // K stages over a path whose levels are `levels` (path_plan::path_spans): equal runs of levels
  // (the first L % K one level more), or cut before the levels in `cuts` (K − 1 increasing level
  // indices). Errors (invalid_argument naming pipeline.stages or pipeline.split): K < 1 or more
  // stages than levels; cuts that are not K − 1 increasing levels inside (0, L); a level that
  // does not start at a block (a stage must hold whole blocks).
  template <nn::BlockModel M>
  static result<path_stages> make(const M& model, const std::vector<path::level_span>& levels,
                                  int K, const std::vector<int>& cuts = {}) {
    const int L = int(levels.size());
    auto bad = [](const std::string& f, const std::string& why) {
      return paco::error(errc::invalid_argument, "pipeline." + f + ": " + why);
    };
    if (K < 1 || K > L)
      return bad("stages", "a path of " + std::to_string(L) + " levels is cut into 1.." +
                               std::to_string(L) + " stages (each holds whole levels: its " +
                               "modules), not " + std::to_string(K));
    path_stages s;
    s.first_level.push_back(0);
    if (cuts.empty()) {
      for (int k = 0; k < K; ++k)
        s.first_level.push_back(s.first_level.back() + L / K + (k < L % K));
    } else {
      if (int(cuts.size()) != K - 1)
        return bad("split", std::to_string(cuts.size()) + " cuts for " + std::to_string(K) +
                                " stages (a local-loss DiPaCo split names the first level of "
                                "stages 1 … K−1)");
      for (int c : cuts) {
        if (c <= s.first_level.back() || c >= L)
          return bad("split", "level cuts must increase inside 1.." + std::to_string(L - 1) +
                                  ", got " + std::to_string(c) + " after " +
                                  std::to_string(s.first_level.back()));
        s.first_level.push_back(c);
      }
      s.first_level.push_back(L);
    }
    // Each stage boundary in blocks: the block whose parameters start where the level's do.
    s.plan.first.push_back(0);
    for (int k = 1; k < K; ++k) {
      const std::size_t at = levels[std::size_t(s.first_level[std::size_t(k)])].offset;
      int found = -1;
      for (int b = 1; b < model.blocks() && found < 0; ++b)
        if (model.off(M::block_name(b)) == at) found = b;
      if (found < 0)
        return bad("split", "level " + std::to_string(s.first_level[std::size_t(k)]) +
                                " does not start at a block, so no stage can begin there");
      s.plan.first.push_back(found);
    }
    s.plan.first.push_back(model.blocks());
    if (auto st = s.plan.validate(model.blocks()); !st) return st.error();
    return s;
  }
};

}  // namespace paco::pipeline
