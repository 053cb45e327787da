// A DiPaCo grid of three levels over a model of one's own (not nn::gpt): a block_lm whose block,
// composed from nn modules in my_block.hpp, runs two attention sublayers per MLP sublayer (the
// same model trains as store + worker processes in examples/three_levels_job). Its three blocks
// are laid over the grid
//   level 0  embedding + block 0   1 module shared by every path
//   level 1  block 1               2 experts
//   level 2  block 2 + norm + head path-specific: one module per path
// so P = 2 paths, 1 + 2 + 2 = 5 modules. Documents go to paths by k-means on the initial
// model's prefix features; each path trains on its shard; shared modules average every round.
//   example_three_levels [rounds = 20]
#include <array>
#include <cstdio>
#include <cstdlib>

#include <paco/paco.hpp>

#include "my_block.hpp"

using namespace paco;
int main(int argc, char** argv) try {
  const int rounds = argc > 1 ? std::atoi(argv[1]) : 20, ctx = 64, prefix = 32;
  const auto brown = io::load_corpus("brown", "").value_or_throw();
  using model_t = nn::block_lm<my_block>;
  static_assert(train::LanguageModel<model_t>);
  const model_t model({.vocab = 256, .ctx = ctx, .d = 64}, make_my_block(64, 4), 3);
  arena<host> theta0(model.layout());
  model.init(theta0, 1);

  const std::array<path::level_spec, 3> levels{
      {{.experts = 1}, {.experts = 2}, {.path_specific = true}}};
  const auto plan = path::path_plan::make(path::module_grid<3>(levels),
                                          *path::split_gpt_levels(model.layout(), 3, 3))
                        .value_or_throw();
  std::printf("grid %s: %d paths, %d modules, %.2fM parameters per path\n", plan.describe().c_str(),
              plan.paths(), plan.modules(), model.param_count() / 1e6);

  // Route the training and validation documents by k-means on prefix features.
  const auto train_docs = route::scored_docs::of(brown.subset(io::split::train), prefix);
  const auto val = route::scored_docs::of(brown.subset(io::split::validation), prefix);
  const float* th0 = theta0.get(plane::param).data();
  const auto f_train = route::prefix_features(model, th0, train_docs.sequences(), prefix);
  const auto f_val = route::prefix_features(model, th0, val.sequences(), prefix);
  const auto router =
      route::kmeans_router::fit(f_train, int(train_docs.size()), model.width(), {.k = plan.paths()})
          .value_or_throw();
  auto shards = train::shards_of({.train = train_docs.sequences()},
                                 route::rank_rows(router, f_train, model.width(), 1), plan.paths());

  auto dipaco =
      train::local_trainer<model_t, optim::adamw, outer::nesterov>::make(
          model, plan, theta0.get(plane::param), std::move(shards), optim::adamw{.lr = 1e-3f},
          {.inner = {.batch = 8, .ctx = ctx, .steps = 50}, .rounds = rounds})
          .value_or_throw();
  dipaco
      ->run({},
            [&](const train::round_report& r) {
              std::printf("round %3ld  inner loss per path:", r.round + 1);
              for (double l : r.worker_loss) std::printf(" %.3f", l);
              std::printf("\n");
            })
      .throw_if_error();

  // Every validation document scored after its prefix by the path the router sends it to.
  const auto thetas = dipaco->path_thetas();
  const auto paths = route::theta_pointers(thetas);
  auto ws = model.make_workspace({8, ctx});
  const auto n =
      route::routed_nll(model, paths, val.spans, route::route_rows(router, f_val, model.width()),
                        *route::sliding_window::make(ctx), ws);
  std::printf("validation, routed: %.4f bits/byte over %zu documents\n", n.bits_per_token(),
              val.size());
} catch (const std::exception& e) {
  std::fprintf(stderr, "example_three_levels: %s\n", e.what());
  return 1;
}
