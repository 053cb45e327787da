#pragma once
// path_early_stopping: DiPaCo's per-path early stopping (ALGORITHMS.md §3, "per-path early
// stopping on a held-out slice of each shard"). Each observe() — e.g. every few rounds, from a
// trainer's on_round — scores every path's parameters on that path's own held-out slice (the
// held-out tails of the documents in its shard, train/routing.hpp) with the one scorer, and keeps
// a path's parameters when they score better than any before. A run then reports each path's
// best parameters, not its last: a path on a small shard stops before it overfits while the
// others train on.
//
//   train::path_early_stopping stop(model, train::held_out_slices(docs, sets, P), rule);
//   trainer->run(reshard, [&](const train::round_report& r) {
//     if ((r.round + 1) % 5 == 0) stop.observe(r.round, trainer->path_thetas());
//   });
//   const auto& thetas = stop.best_thetas();

#include <limits>
#include <vector>

#include "paco/core/error.hpp"
#include "paco/route/evaluate.hpp"
#include "paco/route/scored_docs.hpp"
#include "paco/train/concepts.hpp"
#include "paco/train/routing.hpp"

namespace paco::train {

// The held-out slice of each of `paths` paths: the tails (≥ 2 tokens, each scored from its second
// token, as discriminative_reroute scores them) of the documents whose set contains the path.
// Requires: sets.size() == docs.size(), entries in [0, paths).
inline std::vector<std::vector<route::scored_span>> held_out_slices(
    const routed_docs& docs, const std::vector<std::vector<int>>& sets, int paths) {
  PACO_ASSERT(sets.size() == docs.size(), "one path set per document");
  std::vector<std::vector<route::scored_span>> s(static_cast<std::size_t>(paths));
  const auto tails = route::after_prefix(docs.tail, 0);  // the tails of ≥ 2 tokens, whole
  for (std::size_t j = 0; j < tails.spans.size(); ++j)
    for (int p : sets[tails.doc[j]]) {
      PACO_ASSERT(p >= 0 && p < paths, "a path outside the grid");
      s[std::size_t(p)].push_back(tails.spans[j]);
    }
  return s;
}

template <LanguageModel M>
class path_early_stopping {
 public:
  // slices[p]: path p's held-out spans. Requires: model and the spans' tokens outlive this;
  // every slice non-empty (checked: throws error_exception naming the path); batch ≥ 1.
  path_early_stopping(const M& model, std::vector<std::vector<route::scored_span>> slices,
                      route::sliding_window rule, int batch = 16)
      : model_(&model),
        slices_(std::move(slices)),
        rule_(rule),
        ws_(model.make_workspace({batch, rule.T})),
        best_(slices_.size()),
        best_round_(slices_.size(), -1),
        best_bits_(slices_.size(), std::numeric_limits<double>::infinity()) {
    for (std::size_t p = 0; p < slices_.size(); ++p)
      if (slices_[p].empty())
        throw error_exception({errc::invalid_argument, "path_early_stopping: path " +
                                                           std::to_string(p) +
                                                           " has no held-out text to stop on"});
  }

  int paths() const noexcept { return int(slices_.size()); }

  // Scores each path's θ on its slice and keeps it where it beats the path's best (ties keep the
  // earlier). Returns each path's bits per token now.
  // Requires: thetas.size() == paths(), each a full plane of the model.
  std::vector<double> observe(long round, const std::vector<std::vector<float>>& thetas) {
    PACO_ASSERT(int(thetas.size()) == paths(), "one θ per path");
    std::vector<double> bits(slices_.size());
    for (std::size_t p = 0; p < slices_.size(); ++p) {
      const std::vector<const float*> one{thetas[p].data()};
      bits[p] = route::assigned_nll(*model_, one, {slices_[p]}, rule_, ws_).bits_per_token();
      if (bits[p] < best_bits_[p]) {
        best_bits_[p] = bits[p];
        best_round_[p] = round;
        best_[p] = thetas[p];
      }
    }
    return bits;
  }

  // Each path's best parameters so far (empty for a path never observed).
  const std::vector<std::vector<float>>& best_thetas() const noexcept { return best_; }
  // The round of path p's best (−1: never observed) and its bits per token (+∞: never observed).
  long best_round(int p) const { return best_round_.at(std::size_t(p)); }
  double best_bits(int p) const { return best_bits_.at(std::size_t(p)); }

 private:
  const M* model_;
  std::vector<std::vector<route::scored_span>> slices_;
  route::sliding_window rule_;
  typename M::workspace ws_;
  std::vector<std::vector<float>> best_;
  std::vector<long> best_round_;
  std::vector<double> best_bits_;
};

}  // namespace paco::train
