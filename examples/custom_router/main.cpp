// A router of one's own plugged into DiPaCo: random-hyperplane (LSH) routing. Each of b
// hyperplanes through the training features' mean gives one bit of the path index, so
// documents whose prefix features fall on the same side of every hyperplane share a path;
// rank() orders paths by how far x is on each bit's side, for top-n overlapping shards.
// It models route::RankingRouter, so the library's shards, trainers and routed evaluation
// take it as they take k-means or the logistic router. Grid: DiPaCo 2×2, top-2 shards.
//   example_custom_router [rounds = 20]
#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <numeric>

#include <paco/paco.hpp>

using namespace paco;

class hyperplane_router {
 public:
  using router_tag = void;  // opts into route::Router
  // b hyperplanes with normals drawn from `seed`, through the mean of the n rows of x (n × dim).
  hyperplane_router(const std::vector<float>& x, int n, int dim, int b, std::uint64_t seed)
      : dim_(dim), bits_(b), mean_(dim), normal_(b * dim) {
    for (int i = 0; i < n; ++i)
      for (int c = 0; c < dim; ++c) mean_[c] += x[i * dim + c] / float(n);
    rng r(seed);
    for (auto& w : normal_) w = r.normal();
  }
  int k() const { return 1 << bits_; }
  int route(const float* x) const { return rank(x, 1)[0]; }
  // Paths by score Σ_j ±margin_j (+ where path p's bit j is set), best first.
  std::vector<int> rank(const float* x, int n) const {
    std::vector<double> margin(bits_, 0.0), score(k(), 0.0);
    for (int j = 0; j < bits_; ++j)
      for (int c = 0; c < dim_; ++c) margin[j] += normal_[j * dim_ + c] * (x[c] - mean_[c]);
    for (int p = 0; p < k(); ++p)
      for (int j = 0; j < bits_; ++j) score[p] += (p >> j & 1) ? margin[j] : -margin[j];
    std::vector<int> order(score.size());
    std::iota(order.begin(), order.end(), 0);
    std::stable_sort(order.begin(), order.end(), [&](int a, int b) { return score[a] > score[b]; });
    order.resize(n);
    return order;
  }

 private:
  int dim_, bits_;
  std::vector<float> mean_, normal_;
};
static_assert(route::RankingRouter<hyperplane_router>);

int main(int argc, char** argv) try {
  const int rounds = argc > 1 ? std::atoi(argv[1]) : 20, ctx = 64, prefix = 32;
  const auto brown = io::load_corpus("brown", "").value_or_throw();
  const nn::gpt model({.ctx = ctx, .d = 64, .layers = 2, .heads = 4});
  arena<host> theta0(model.layout());
  model.init(theta0, 1);

  // The router reads the initial model's prefix features; 2 bits: 4 paths, top-2 shards.
  const auto train_docs = route::scored_docs::of(brown.subset(io::split::train), prefix);
  const auto val = route::scored_docs::of(brown.subset(io::split::validation), prefix);
  const auto f_train = route::prefix_features(model, theta0.get(plane::param).data(),
                                              train_docs.sequences(), prefix);
  const auto f_val =
      route::prefix_features(model, theta0.get(plane::param).data(), val.sequences(), prefix);
  const hyperplane_router router(f_train, int(train_docs.size()), model.width(), 2, 7);
  auto shards = train::shards_of({.train = train_docs.sequences()},
                                 route::rank_rows(router, f_train, model.width(), 2), router.k());
  for (int p = 0; p < router.k(); ++p)
    std::printf("path %d: %.2f MB of training text\n", p, shards[std::size_t(p)].ids.size() / 1e6);

  const auto plan = path::path_plan::make(path::module_grid<2>::experts({2, 2}),
                                          *path::split_gpt_levels(model.layout(), 2, 2))
                        .value_or_throw();
  auto dipaco =
      train::local_trainer<nn::gpt, optim::adamw, outer::nesterov>::make(
          model, plan, theta0.get(plane::param), std::move(shards), optim::adamw{.lr = 1e-3f},
          {.inner = {.batch = 8, .ctx = ctx, .steps = 50}, .rounds = rounds})
          .value_or_throw();
  dipaco->run().throw_if_error();

  // Validation documents routed by the same router; and, for reference, all by path 0.
  const auto thetas = dipaco->path_thetas();
  const auto paths = route::theta_pointers(thetas);
  auto ws = model.make_workspace({8, ctx});
  const auto rule = *route::sliding_window::make(ctx);
  const auto routed = route::route_rows(router, f_val, model.width());
  const auto n = route::routed_nll(model, paths, val.spans, routed, rule, ws);
  const auto one =
      route::routed_nll(model, paths, val.spans, std::vector<int>(val.size(), 0), rule, ws);
  std::printf("validation after %d rounds: routed %.4f bits/byte; every document on path 0 %.4f\n",
              rounds, n.bits_per_token(), one.bits_per_token());
} catch (const std::exception& e) {
  std::fprintf(stderr, "example_custom_router: %s\n", e.what());
  return 1;
}
