#pragma once
// The Router concept: sends a document, given its feature vector (route/features.hpp: D
// floats), to one of k() paths. RankingRouter adds rank(x, n): the n best paths, best first, as
// routed training needs for top-n overlapping shards. Fitting is not part of the concept (an
// unsupervised router fits on features alone, a discriminative one on features and labels).
// Opt in with `using router_tag = void;`. Models: kmeans_router, logistic_router (ranking),
// product_kmeans_router (routing only).

#include <concepts>
#include <vector>

namespace paco::route {

template <class R>
concept Router = requires(const R& r, const float* x) {
  typename R::router_tag;
  { r.k() } -> std::convertible_to<int>;
  { r.route(x) } -> std::convertible_to<int>;
};

template <class R>
concept RankingRouter = Router<R> && requires(const R& r, const float* x, int n) {
  { r.rank(x, n) } -> std::same_as<std::vector<int>>;
};

}  // namespace paco::route
