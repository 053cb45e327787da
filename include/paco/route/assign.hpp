#pragma once
// Routing many documents at once: each row of a feature matrix (n × dim, row-major, e.g. from
// route::prefix_features) through any Router — to build shards (train::shards_of) or to route
// evaluation documents (route::routed_nll).
//
//   auto sets = route::rank_rows(router, features, D, 2);   // top-2 overlapping shards
//   auto shards = train::shards_of(docs, sets, router.k());

#include <cstddef>
#include <span>
#include <vector>

#include "paco/core/error.hpp"
#include "paco/route/concepts.hpp"

namespace paco::route {

// out[i] = r.route(row i). Requires: dim ≥ 1, features.size() a multiple of dim.
template <Router R>
std::vector<int> route_rows(const R& r, std::span<const float> features, int dim) {
  PACO_ASSERT(dim >= 1 && features.size() % std::size_t(dim) == 0, "rows of dim features");
  std::vector<int> out;
  for (std::size_t i = 0; i < features.size(); i += std::size_t(dim))
    out.push_back(r.route(features.data() + i));
  return out;
}

// out[i] = row i's n best paths, best first (r.rank). Requires: as route_rows, 1 ≤ n ≤ r.k().
template <RankingRouter R>
std::vector<std::vector<int>> rank_rows(const R& r, std::span<const float> features, int dim,
                                        int n) {
  PACO_ASSERT(dim >= 1 && features.size() % std::size_t(dim) == 0, "rows of dim features");
  std::vector<std::vector<int>> out;
  for (std::size_t i = 0; i < features.size(); i += std::size_t(dim))
    out.push_back(r.rank(features.data() + i, n));
  return out;
}

}  // namespace paco::route
