// Different outer optimizers per level. DiPaCo 1×4: level 0 (embedding + block 0) is shared by
// 4 paths, level 1 (block 1 + norm + head) has 4 experts, each trained by one path. The shared
// level takes DiLoCo's outer Nesterov step (lr 0.7, momentum 0.9) on the averaged
// pseudo-gradient; an expert, whose only pusher is its own path, can instead simply take that
// path's parameters (outer SGD with lr 1: θ ← θ − Δ = θ_end). outer::one_of holds either type,
// so one store runs both. Both settings train from the same start on the same shards; each is
// scored on the validation documents.
//   example_outer_per_level [rounds = 20]
#include <cstdio>
#include <cstdlib>

#include <paco/paco.hpp>

using namespace paco;
using outer_t = outer::one_of<outer::nesterov, outer::sgd>;

int main(int argc, char** argv) try {
  const int rounds = argc > 1 ? std::atoi(argv[1]) : 20, ctx = 64, prefix = 32;
  const auto brown = io::load_corpus("brown", "").value_or_throw();
  const nn::gpt model({.ctx = ctx, .d = 64, .layers = 2, .heads = 4});
  arena<host> theta0(model.layout());
  model.init(theta0, 1);
  const auto plan = path::path_plan::make(path::module_grid<2>::experts({1, 4}),
                                          *path::split_gpt_levels(model.layout(), 2, 2))
                        .value_or_throw();

  // Shards and validation routing: k-means (4 clusters) on the initial model's prefix features.
  const auto docs = route::scored_docs::of(brown.subset(io::split::train), prefix);
  const auto val = route::scored_docs::of(brown.subset(io::split::validation), prefix);
  const float* th0 = theta0.get(plane::param).data();
  const auto features = route::prefix_features(model, th0, docs.sequences(), prefix);
  const auto kmeans = route::kmeans_router::fit(features, int(docs.size()), model.width(), {.k = 4})
                          .value_or_throw();
  const auto val_paths = route::route_rows(
      kmeans, route::prefix_features(model, th0, val.sequences(), prefix), model.width());

  const outer_t nesterov = outer::nesterov{.lr = 0.7f, .momentum = 0.9f};
  const outer_t take_path = outer::sgd{.lr = 1.0f};
  for (const auto& [name, per_level] :
       {std::pair{"Nesterov on both levels", std::vector{nesterov, nesterov}},
        std::pair{"Nesterov shared, experts take their path", std::vector{nesterov, take_path}}}) {
    auto shards = train::shards_of({.train = docs.sequences()},
                                   route::rank_rows(kmeans, features, model.width(), 1), 4);
    auto t =
        train::local_trainer<nn::gpt, optim::adamw, outer_t>::make(
            model, plan, theta0.get(plane::param), std::move(shards), optim::adamw{.lr = 1e-3f},
            {.inner = {.batch = 8, .ctx = ctx, .steps = 50},
             .outer_per_level = per_level,
             .rounds = rounds})
            .value_or_throw();
    t->run().throw_if_error();
    const auto thetas = t->path_thetas();
    const auto paths = route::theta_pointers(thetas);
    auto ws = model.make_workspace({8, ctx});
    const auto n = route::routed_nll(model, paths, val.spans, val_paths,
                                     *route::sliding_window::make(ctx), ws);
    std::printf("%-42s validation %.4f bits/byte after %d rounds\n", name, n.bits_per_token(),
                rounds);
  }
} catch (const std::exception& e) {
  std::fprintf(stderr, "example_outer_per_level: %s\n", e.what());
  return 1;
}
