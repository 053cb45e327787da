#pragma once
// stage_plan: a BlockModel cut into K contiguous stages, as path_plan cuts one into levels.
// Stage k runs blocks [first[k], first[k+1]); stage 0 also runs the embedding, stage K−1 the
// final norm and the head. Because a BlockModel lays its parts out in that order, each stage's
// parameters are one contiguous span of every plane (param_span): what it owns, steps and sends.
//
//   auto plan = pipeline::stage_plan::equal(model.blocks(), 2).value_or_throw();  // 2 + 2 of 4
//   auto [b, e] = pipeline::param_span(model, plan, 1);  // blocks 2, 3, ln_f, head

#include <cstddef>
#include <string>
#include <utility>
#include <vector>

#include "paco/core/error.hpp"
#include "paco/nn/concepts.hpp"

namespace paco::pipeline {

struct stage_plan {
  std::vector<int> first;  // K + 1 block indices: 0 = first[0] < … < first[K] = blocks

  int stages() const noexcept { return first.empty() ? 0 : int(first.size()) - 1; }
  int begin_block(int k) const { return first[std::size_t(k)]; }
  int end_block(int k) const { return first[std::size_t(k) + 1]; }

  // Ensures: ok iff the plan cuts `blocks` blocks into ≥ 1 stages of ≥ 1 block each, covering
  // them in order; the error names `field`.
  status validate(int blocks, const std::string& field = "pipeline.split") const {
    auto bad = [&](const std::string& why) {
      return status(errc::invalid_argument, field + ": " + why);
    };
    if (first.size() < 2) return bad("a plan needs at least one stage");
    if (first.front() != 0) return bad("the first stage must start at block 0");
    if (first.back() != blocks)
      return bad("the stages cover blocks 0.." + std::to_string(first.back() - 1) +
                 ", the model has " + std::to_string(blocks) + " (a split must cover the model)");
    for (std::size_t k = 1; k < first.size(); ++k)
      if (first[k] <= first[k - 1])
        return bad("stage " + std::to_string(k - 1) + " would hold no block (boundaries must " +
                   "increase)");
    return {};
  }

  // K stages of blocks/K blocks (the first blocks % K one more).
  // Ensures: a valid plan, or invalid_argument naming pipeline.stages.
  static result<stage_plan> equal(int blocks, int K) {
    if (K < 1)
      return paco::error(errc::invalid_argument,
                         "pipeline.stages: must be >= 1, got " + std::to_string(K));
    if (K > blocks)
      return paco::error(errc::invalid_argument,
                         "pipeline.stages: " + std::to_string(K) +
                             " stages need at least as many blocks, the model "
                             "has " +
                             std::to_string(blocks));
    stage_plan p;
    p.first.push_back(0);
    for (int k = 0; k < K; ++k) p.first.push_back(p.first.back() + blocks / K + (k < blocks % K));
    return p;
  }

  // The stages that start at the given interior boundaries (e.g. {1} on 4 blocks: 1 + 3).
  // Ensures: a valid plan, or the error of validate().
  static result<stage_plan> at(const std::vector<int>& cuts, int blocks) {
    stage_plan p;
    p.first.push_back(0);
    for (int c : cuts) p.first.push_back(c);
    p.first.push_back(blocks);
    if (auto s = p.validate(blocks); !s) return s.error();
    return p;
  }
};

// The elements [begin, end) of a parameter plane that stage k of `plan` owns: stage 0 from the
// plane's start (the embedding), the last stage to its end (final norm, head, padding).
// Requires: plan valid for model.blocks(), 0 ≤ k < plan.stages().
template <nn::BlockModel M>
std::pair<std::size_t, std::size_t> param_span(const M& model, const stage_plan& plan, int k) {
  const std::size_t b = k == 0 ? 0 : model.off(M::block_name(plan.begin_block(k)));
  const std::size_t e =
      k + 1 == plan.stages() ? model.layout().total() : model.off(M::block_name(plan.end_block(k)));
  return {b, e};
}

}  // namespace paco::pipeline
