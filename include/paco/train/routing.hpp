#pragma once
// routing: how DiPaCo's routed training assigns training documents to paths (ALGORITHMS.md,
// DiPaCo §2.3–2.4), as library functions every trainer, tool and benchmark shares:
//
//   shards_of            each path's shard from each document's set of paths (top-n sets give
//                        DiPaCo's overlapping shards)
//   reroute_phases       the schedule: the first third of the rounds on the initial (k-means)
//                        shards, then n re-routings evenly spaced over the rest
//   discriminative_reroute
//                        one re-routing: label every document by the path that scores its
//                        held-out tail best (route/evaluate.hpp's one scorer), fit a logistic
//                        router on the documents' prefix features, give every document its
//                        top-n paths under the new router
//
// A document's tail is held out of its training tokens, so the label measures how well a path
// generalises to the document, not how well it memorised it.

#include <cstdint>
#include <cstdio>
#include <span>
#include <string>
#include <vector>

#include "paco/core/error.hpp"
#include "paco/io/batches.hpp"
#include "paco/route/assign.hpp"
#include "paco/route/concepts.hpp"
#include "paco/route/evaluate.hpp"
#include "paco/route/logistic.hpp"
#include "paco/route/scored_docs.hpp"
#include "paco/train/concepts.hpp"

namespace paco::train {

// Training documents as routed training sees them.
struct routed_docs {
  std::vector<std::span<const std::int32_t>> train;  // tokens that go into the shards
  std::vector<std::span<const std::int32_t>> tail;   // held out; < 2 tokens: no label
  std::span<const float> features;                   // prefix features, row i = document i
  int dim = 0;                                       // features per document
  std::size_t size() const noexcept { return train.size(); }
  const float* feature(std::size_t i) const { return features.data() + i * std::size_t(dim); }
};

// The shard of each of `paths` paths: path k's concatenates (as separate documents) the training
// tokens of every document whose set contains k. Requires: sets.size() == docs.size(), every
// entry in [0, paths).
inline std::vector<io::token_stream> shards_of(const routed_docs& docs,
                                               const std::vector<std::vector<int>>& sets,
                                               int paths) {
  PACO_ASSERT(sets.size() == docs.size(), "one path set per document");
  std::vector<io::token_stream> s(static_cast<std::size_t>(paths));
  for (std::size_t i = 0; i < docs.size(); ++i)
    for (int k : sets[i]) {
      PACO_ASSERT(k >= 0 && k < paths, "a path outside the grid");
      auto& st = s[std::size_t(k)];
      st.doc_start.push_back(st.ids.size());
      st.ids.insert(st.ids.end(), docs.train[i].begin(), docs.train[i].end());
    }
  return s;
}

// Every document's top-n paths under a ranking router, on its prefix features (n = 1: the
// router's path; n > 1: DiPaCo's overlapping shards). Requires: docs carries features of
// router's dimension; n ≥ 1. Ensures: out[i] == router.rank(docs.feature(i), n).
template <route::RankingRouter R>
std::vector<std::vector<int>> top_sets(const R& router, const routed_docs& docs, int n) {
  return route::rank_rows(router, docs.features, docs.dim, n);
}

// Phase ends of a routed run of `rounds` rounds: phase 0 ends at rounds / 3 (the initial
// shards), then `reroutes` phases end evenly spaced up to `rounds`. Errors: invalid_argument
// unless 3 ≤ rounds and 1 ≤ reroutes ≤ rounds − rounds / 3 (every phase at least one round).
inline result<std::vector<int>> reroute_phases(int rounds, int reroutes) {
  if (rounds < 3 || reroutes < 1 || reroutes > rounds - rounds / 3)
    return error(errc::invalid_argument,
                 "reroute_phases: " + std::to_string(reroutes) + " re-routings need 1 to " +
                     std::to_string(std::max(0, rounds - rounds / 3)) + " (the rounds after the " +
                     "first third of " + std::to_string(rounds) + ", at least 3)");
  const int first = rounds / 3;
  std::vector<int> ends{first};
  for (int q = 0; q < reroutes; ++q) ends.push_back(first + (rounds - first) * (q + 1) / reroutes);
  return ends;
}

struct reroute_options {
  int overlap = 2;  // every document goes to its top-n paths (DiPaCo's overlapping shards)
  route::logistic_options router{};  // k is set to the number of paths
};

struct rerouting {
  route::logistic_router router;
  std::vector<int> labels;             // per document: the path that scores its tail best
  std::vector<std::vector<int>> sets;  // per document: its top-n paths under the new router
  int moved = 0;                       // documents whose first path differs from `previous`
};

// Writes one line to `out`: "<name>: re-routing <phase> at round <round>: <moved> of <documents>
// training documents changed path; shards (MB):" and each shard's tokens in millions.
inline void print_rerouting(std::FILE* out, const std::string& name, int phase, int round,
                            const rerouting& r, std::size_t documents,
                            const std::vector<io::token_stream>& shards) {
  std::fprintf(out,
               "%s: re-routing %d at round %d: %d of %zu training documents changed path; "
               "shards (MB):",
               name.c_str(), phase, round, r.moved, documents);
  for (auto& x : shards) std::fprintf(out, " %.2f", x.ids.size() / 1e6);
  std::fprintf(out, "\n");
}

// One discriminative re-routing. thetas[p]: path p's full parameters. previous[i]: document i's
// path so far (kept as its label when its tail is too short to score). Errors: the router's fit
// (e.g. every label one path is fine; no documents is not).
// Requires: previous.size() == docs.size(); 1 ≤ overlap ≤ thetas.size().
template <train::LanguageModel M>
result<rerouting> discriminative_reroute(const M& model, std::span<const float* const> thetas,
                                         const routed_docs& docs, const std::vector<int>& previous,
                                         const route::sliding_window& rule,
                                         typename M::workspace& ws, reroute_options o = {}) {
  PACO_ASSERT(previous.size() == docs.size(), "one previous path per document");
  const int paths = int(thetas.size());
  if (o.overlap < 1 || o.overlap > paths)
    return error(errc::invalid_argument, "discriminative_reroute: overlap " +
                                             std::to_string(o.overlap) + " outside [1, " +
                                             std::to_string(paths) + "]");
  const auto tails = route::after_prefix(docs.tail, 0);  // the tails of ≥ 2 tokens, whole
  rerouting r;
  r.labels = previous;
  const auto best = route::best_paths(route::per_path_nll(model, thetas, tails.spans, rule, ws));
  for (std::size_t j = 0; j < tails.spans.size(); ++j) r.labels[tails.doc[j]] = best[j];
  auto ro = o.router;
  ro.k = paths;
  const std::vector<float> x(docs.features.begin(), docs.features.end());
  auto fit = route::logistic_router::fit(x, int(docs.size()), docs.dim, r.labels, ro);
  if (!fit) return fit.error();
  r.router = std::move(*fit);
  r.sets = top_sets(r.router, docs, o.overlap);
  for (std::size_t i = 0; i < docs.size(); ++i) r.moved += r.sets[i][0] != previous[i];
  return r;
}

}  // namespace paco::train
