// The training layer's concepts: every model opts in and satisfies its concept (the
// static_asserts beside each model), archetypes are enough for the code that uses them, and
// types that lack the tag or a member are refused. Includes the umbrella paco/paco.hpp.
#include <catch2/catch.hpp>

#include "../net/world.hpp"
#include "paco/paco.hpp"  // the umbrella header compiles on its own
#include "paco/testing/archetypes.hpp"
#include "paco/testing/token_streams.hpp"

using namespace paco;

namespace {
// Structurally a router, but it did not opt in.
struct untagged_router {
  int k() const { return 2; }
  int route(const float*) const { return 0; }
};
// Opted in, but no wait_closed.
struct store_without_wait {
  using module_store_tag = void;
  result<store::pulled> pull(int, std::span<float>) { return store::pulled{}; }
  status push(int, int, long, std::span<const float>, double) { return {}; }
};
// An optimizer without validate().
struct optimizer_without_validate {
  using inner_optimizer_tag = void;
  void step(arena<host>&, long, float) const {}
};
// Structurally a sync rule, but it did not opt in.
struct untagged_sync {
  std::string name() const { return "untagged"; }
  result<train::sync_plan> plan(int, std::size_t, int) const { return train::sync_plan{}; }
};
// A sync rule whose plan cannot fail: plan() must say why a rule does not fit.
struct sync_with_bare_plan {
  using sync_tag = void;
  std::string name() const { return "bare"; }
  train::sync_plan plan(int, std::size_t, int) const { return {}; }
};

// Structurally an outer optimizer, but it did not opt in.
struct untagged_outer {
  std::size_t state_size(std::size_t) const { return 0; }
  void step(std::span<float>, std::span<const float>, std::span<float>) const {}
  status validate() const { return {}; }
};
// Opted in, but no validate().
struct outer_without_validate {
  using outer_optimizer_tag = void;
  std::size_t state_size(std::size_t) const { return 0; }
  void step(std::span<float>, std::span<const float>, std::span<float>) const {}
};
// A path worker that cannot measure its Δ, and one without the opt-in tag.
struct worker_without_prepare {
  using path_worker_tag = void;
  train::path_buffers& buffers();
  double train(int);
  int steps_per_round() const;
  void land_level(std::size_t, bool, float, float);
  void weigh_from_here();
};
struct worker_without_tag {
  train::path_buffers& buffers();
  double train(int);
  int steps_per_round() const;
  status prepare_level(std::size_t);
  void land_level(std::size_t, bool, float, float);
  void weigh_from_here();
};
// A model without loss().
struct model_without_loss {
  using model_tag = void;
  struct workspace {
    nn::dims d;
  };
  const param_layout& layout() const;
  std::size_t param_count() const;
  std::vector<named_tensor> tensors() const;
  void init(arena<host>&, std::uint64_t) const;
  workspace make_workspace(nn::dims) const;
  double forward_backward(const float*, float*, const std::int32_t*, const std::int32_t*,
                          workspace&, float) const;
};
}  // namespace

static_assert(!route::Router<untagged_router>);
static_assert(!store::ModuleStore<store_without_wait>);
static_assert(!optim::InnerOptimizer<optimizer_without_validate>);
static_assert(!outer::OuterOptimizer<untagged_outer>);
static_assert(!outer::OuterOptimizer<outer_without_validate>);
static_assert(!train::Sync<untagged_sync>);
static_assert(!train::Sync<sync_with_bare_plan>);
static_assert(!train::Sync<int>);
static_assert(!train::Model<model_without_loss>);
static_assert(!train::PathWorker<worker_without_prepare>);
static_assert(!train::PathWorker<worker_without_tag>);
static_assert(train::PathWorker<train::path_worker<nn::gpt, optim::adamw>>);
static_assert(!train::Model<nn::linear>);  // a Module is not a trainable Model
static_assert(store::EncodedModuleStore<store::client<net::inproc>>);
static_assert(store::EncodedModuleStore<store::local_store<outer::sgd>>);
static_assert(route::RankingRouter<route::kmeans_router>);
static_assert(outer::OuterOptimizer<outer::one_of<outer::nesterov, outer::sgd>>);
template <class T>
constexpr bool one_of_accepts = requires {
  typename outer::one_of<T>;
};
static_assert(one_of_accepts<outer::sgd> && !one_of_accepts<int>);  // int is no outer optimizer
static_assert(!route::RankingRouter<route::product_kmeans_router>);

TEST_CASE("archetypes are enough for the inner loop and a path worker's round",
          "[train][concepts]") {
  testing::model_archetype model;
  const auto shard = testing::synthetic_stream(1, 200, 3, 2);
  arena<host> a(model.layout());
  train::inner_loop<testing::model_archetype, testing::inner_optimizer_archetype> loop(
      model, {.batch = 2, .ctx = 8}, shard, 1);
  REQUIRE(loop.run(a, {}, 3) == 0.0);
  REQUIRE(loop.step_count() == 3);

  path::level_span all{0, model.layout().total(), {"w"}};
  train::path_worker<testing::model_archetype, testing::inner_optimizer_archetype> w(
      0, model, {all}, {0}, {}, {.batch = 2, .ctx = 8, .steps = 2}, shard, 1);
  testing::module_store_archetype store;
  REQUIRE(train::sync_round(w, store, std::chrono::seconds(1)).ok());
  REQUIRE(w.inner_step() == 2);
}

TEST_CASE("archetypes are enough for the round loop: every sync rule", "[train][concepts]") {
  using worker_t = train::path_worker<testing::model_archetype, testing::inner_optimizer_archetype>;
  using outer_t = testing::outer_optimizer_archetype;
  testing::model_archetype model;
  const auto shard = testing::synthetic_stream(1, 200, 3, 2);
  const path::level_span all{0, model.layout().total(), {"w"}};
  std::vector<status> errs(2);
  testing::inproc_world::run(2, [&](net::inproc& t) {
    worker_t w(t.rank(), model, {all}, {0}, {}, {.batch = 2, .ctx = 8, .steps = 2}, shard, 1);
    status s;
    for (const char* rule : {"blocking", "streaming", "co2", "eager", "naive_delayed"}) {
      train::round_loop<net::inproc, worker_t, outer_t> loop(t, w, {}, *train::parse_sync(rule));
      if (s) s = loop.run(2, std::chrono::seconds(10));
      if (s) s = loop.finish(std::chrono::seconds(10));
    }
    train::round_loop<net::inproc, worker_t, outer_t, testing::sync_archetype> arch(t, w, {});
    if (s) s = arch.run(1, std::chrono::seconds(10));
    errs[std::size_t(t.rank())] = s;
  });
  for (auto& e : errs) REQUIRE(e.ok());
}

TEST_CASE("the path-worker archetype is enough for the round loop", "[train][concepts]") {
  testing::path_worker_archetype w(4);
  testing::module_store_archetype store;
  int rounds = 0;
  // The archetype store closes each round it is waited for.
  REQUIRE(train::run_worker(w, store, {.rounds = 3}, [&](const train::worker_round&) {
            ++rounds;
            return status{};
          }).ok());
  REQUIRE(rounds == 3);
  REQUIRE(w.buffers().round() == 3);
  // It is enough for every rule: the overlapped ones (one round late) and streaming report every
  // round once and end at the last.
  for (train::sync_choice rule :
       {train::sync_choice(train::co2{}), train::sync_choice(train::eager{}),
        train::sync_choice(train::naive_delayed{}), train::sync_choice(train::streaming{}),
        train::sync_choice(train::co2_snapshot{})}) {
    INFO(rule.name());
    testing::path_worker_archetype w2(4);
    store.round = 0;
    std::vector<long> seen;
    REQUIRE(train::run_worker(w2, store, {.rounds = 3, .sync = rule, .sharing = {1}},
                              [&](const train::worker_round& r) {
                                seen.push_back(r.round);
                                return status{};
                              })
                .ok());
    REQUIRE(seen == std::vector<long>{0, 1, 2});
    REQUIRE(w2.buffers().round() == 3);
  }
}

TEST_CASE("the outer-optimizer archetype is enough for a store's rounds", "[train][concepts]") {
  store::local_store<testing::outer_optimizer_archetype> store({{0, 3, 1}}, {});
  const std::vector<float> theta0{1, 2, 3}, delta{0.5f, 0.5f, 0.5f};
  store.store().set(0, theta0);
  REQUIRE(store.push(0, 0, 0, delta, 1.0).ok());
  REQUIRE(store.wait_closed(0, 0, std::chrono::steady_clock::now()).ok());
  std::vector<float> theta(3);
  const auto p = store.pull(0, theta);
  REQUIRE(p.ok());
  REQUIRE(p.value().round == 1);
  REQUIRE(theta == theta0);  // the archetype leaves θ as it is
}

TEST_CASE("the language-model archetype is enough for routing features and the one scorer",
          "[train][concepts]") {
  testing::language_model_archetype model;
  const std::vector<float> theta(model.layout().total(), 0.0f);
  const std::vector<std::int32_t> doc{0, 1, 1, 0, 1, 0, 0, 1, 1, 1};
  // Uniform logits over 2 symbols: every target costs ln 2 nats, whichever path scores it.
  auto rule = *route::sliding_window::make(4, 2);
  auto ws = model.make_workspace({2, 4});
  const std::vector<const float*> paths{theta.data(), theta.data()};
  const std::vector<route::scored_span> spans{{doc, 3, doc.size()}};
  const auto n = route::routed_nll(model, paths, spans, {1}, rule, ws);
  REQUIRE(n.tokens == doc.size() - 3);
  REQUIRE(n.nats == Approx(double(n.tokens) * std::log(2.0)));
  const auto f = route::prefix_features(model, theta.data(), {doc}, 4, 2);
  REQUIRE(f.size() == std::size_t(model.width()));
}
