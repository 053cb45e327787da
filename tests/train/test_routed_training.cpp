// train_paths (train/local_trainer.hpp) and train/routed_training.hpp: each equals the run
// written out by hand with local_trainer and discriminative_reroute.
#include <catch2/catch.hpp>

#include "paco/nn/gpt.hpp"
#include "paco/optim/optim.hpp"
#include "paco/outer/outer.hpp"
#include "paco/testing/token_streams.hpp"
#include "paco/train/routed_training.hpp"

using namespace paco;

namespace {
using trainer_t = train::local_trainer<nn::gpt, optim::adamw, outer::nesterov>;
const train::inner_config routed_icfg{
    .batch = 2,
    .ctx = 16,
    .steps = 2,
    .grad_clip = 1.0f,
    .schedule = {.lr = 1e-2f, .min_lr = 1e-3f, .warmup = 1, .total = 12}};
const optim::adamw inner{.lr = 1e-2f};
const nn::gpt_config model_cfg{.vocab = 64, .ctx = 16, .d = 16, .layers = 2, .heads = 2};
std::vector<float> routed_init_params(const nn::gpt& model) {
  arena<host> a(model.layout());
  model.init(a, 3);
  return {a.get(plane::param).begin(), a.get(plane::param).end()};
}
}  // namespace

TEST_CASE("round_report::mean_loss: the workers' mean, added in order", "[train][routed]") {
  REQUIRE(train::round_report{0, {1.0, 2.0, 4.0}}.mean_loss() == 1.0 / 3 + 2.0 / 3 + 4.0 / 3);
  REQUIRE(train::round_report{}.mean_loss() == 0.0);
}

TEST_CASE("train_paths: local_trainer's thetas, bytes and windowed round losses",
          "[train][routed]") {
  const nn::gpt model(model_cfg);
  const auto theta0 = routed_init_params(model);
  const auto plan = *path::path_plan::make_runtime(
      std::vector<int>{2}, *path::split_gpt_levels(model.layout(), 2, 1), 2);
  std::vector<io::token_stream> shards;
  for (std::uint64_t i = 0; i < 4; ++i) shards.push_back(testing::synthetic_stream(i, 2000, 5, 4));
  const train::local_trainer_config<outer::nesterov> cfg{
      .inner = routed_icfg, .rounds = 6, .seed = 7};
  int seen = 0;
  auto t = train::train_paths(
      model, plan, theta0, shards, inner, cfg, {}, [&](const train::round_report&) { ++seen; }, 2);
  REQUIRE(t.ok());
  REQUIRE(seen == 6);
  auto h = trainer_t::make(model, plan, theta0, shards, inner, cfg);
  REQUIRE(h.ok());
  REQUIRE((*h)->run().ok());
  REQUIRE((*h)->round_losses().size() == 6);
  REQUIRE(t->theta == (*h)->path_thetas());
  REQUIRE(t->bytes_per_worker == (*h)->fp32_bytes_per_worker());
  REQUIRE(t->curve == train::window_means((*h)->round_losses(), 2));
  REQUIRE(t->curve.size() == 3);
}

TEST_CASE("train_routed: the first third on the initial sets, then discriminative re-routings",
          "[train][routed]") {
  const nn::gpt model(model_cfg);
  const auto theta0 = routed_init_params(model);
  // A flat MoE of two paths, each document on both (overlap 2: no shard is ever empty).
  const auto plan = *path::path_plan::make_runtime(std::vector<int>{2},
                                                   *path::split_gpt_levels(model.layout(), 2, 1));
  // Eight documents of two kinds (strides 7 and 3), a feature that tells them apart.
  std::vector<io::token_stream> text;
  train::routed_docs docs;
  std::vector<float> feat;
  for (std::uint64_t i = 0; i < 8; ++i) {
    text.push_back(testing::synthetic_stream(100 + i, 400, i < 4 ? 7 : 3, 2));
    feat.push_back(i < 4 ? 1.0f : -1.0f);
  }
  for (auto& s : text) {
    docs.train.push_back(std::span<const std::int32_t>(s.ids).first(300));
    docs.tail.push_back(std::span<const std::int32_t>(s.ids).subspan(300));
  }
  docs.features = feat;
  docs.dim = 1;
  const std::vector<std::vector<int>> initial{{0, 1}, {1, 0}, {0, 1}, {1, 0},
                                              {0, 1}, {1, 0}, {0, 1}, {1, 0}};
  const auto rule = *route::sliding_window::make(16);
  auto ws = model.make_workspace({4, 16});
  train::routed_training_config<outer::nesterov> cfg{.trainer = {.inner = routed_icfg,
                                                                 .delta = {.weight_by_shard = true},
                                                                 .rounds = 6,
                                                                 .seed = 40},
                                                     .reroutes = 2,
                                                     .reroute = {.overlap = 2},
                                                     .rule = rule};
  std::vector<int> rounds_at;
  std::vector<std::vector<std::vector<int>>> sets_seen;
  auto r = train::train_routed(
      model, plan, theta0, docs, initial, inner, cfg, ws,
      [&](int q, int round, const train::rerouting& rr, const std::vector<io::token_stream>& s) {
        REQUIRE(q == int(rounds_at.size()) + 1);
        REQUIRE(s.size() == 2);
        rounds_at.push_back(round);
        sets_seen.push_back(rr.sets);
      });
  INFO((r.ok() ? std::string() : r.error().what()));
  REQUIRE(r.ok());
  REQUIRE(rounds_at == std::vector<int>{2, 4});  // reroute_phases(6, 2) = {2, 4, 6}

  // By hand: local_trainer over the same phases, re-sharding with discriminative_reroute.
  auto tcfg = cfg.trainer;
  tcfg.phases = {2, 4, 6};
  auto h = trainer_t::make(model, plan, theta0, train::shards_of(docs, initial, 2), inner, tcfg);
  REQUIRE(h.ok());
  std::vector<int> previous{0, 1, 0, 1, 0, 1, 0, 1};
  route::logistic_router last;
  std::vector<std::size_t> tokens;
  int q_seen = 0;
  std::vector<std::vector<std::vector<float>>> thetas_at;  // every path's θ after each round
  REQUIRE((*h)->run(
                  [&](int q, const std::vector<std::vector<float>>& th) {
                    auto rr = train::discriminative_reroute(model, route::theta_pointers(th), docs,
                                                            previous, rule, ws, {.overlap = 2});
                    REQUIRE(rr.ok());
                    REQUIRE(rr->sets == sets_seen[std::size_t(q) - 1]);
                    ++q_seen;
                    for (std::size_t i = 0; i < 8; ++i) previous[i] = rr->sets[i][0];
                    auto s = train::shards_of(docs, rr->sets, 2);
                    tokens.clear();
                    for (auto& x : s) tokens.push_back(x.ids.size());
                    last = std::move(rr->router);
                    return s;
                  },
                  [&](const train::round_report&) { thetas_at.push_back((*h)->path_thetas()); })
              .ok());
  REQUIRE(q_seen == 2);
  REQUIRE(r->trained.theta == (*h)->path_thetas());
  REQUIRE(r->trained.bytes_per_worker == (*h)->fp32_bytes_per_worker());
  REQUIRE(r->shard_tokens == tokens);
  for (float x : {1.0f, -1.0f}) REQUIRE(r->router.rank(&x, 2) == last.rank(&x, 2));
  REQUIRE(r->best_round.empty());

  // Per-path early stopping in the last phase (rounds 4 and 5, 0-based): each path reports the
  // better of its two θ on the held-out tails of its last shard; training is unchanged.
  auto stop_cfg = cfg;
  stop_cfg.early_stop_every = 1;
  auto es = train::train_routed(model, plan, theta0, docs, initial, inner, stop_cfg, ws);
  REQUIRE(es.ok());
  const auto slices = train::held_out_slices(docs, sets_seen[1], 2);
  auto ws2 = model.make_workspace({4, 16});
  for (std::size_t p = 0; p < 2; ++p) {
    double bits[2];
    for (int k = 0; k < 2; ++k) {
      const std::vector<const float*> one{thetas_at[std::size_t(4 + k)][p].data()};
      bits[k] = route::assigned_nll(model, one, {slices[p]}, rule, ws2).bits_per_token();
    }
    const int k = bits[1] < bits[0] ? 1 : 0;
    REQUIRE(es->best_round[p] == 4 + k);
    REQUIRE(es->best_bits[p] == bits[k]);
    REQUIRE(es->trained.theta[p] == thetas_at[std::size_t(4 + k)][p]);
  }
  stop_cfg.early_stop_every = -1;
  REQUIRE(!train::train_routed(model, plan, theta0, docs, initial, inner, stop_cfg, ws).ok());

  SECTION("too many re-routings for the rounds, or more than one worker per path") {
    cfg.reroutes = 5;
    REQUIRE(!train::train_routed(model, plan, theta0, docs, initial, inner, cfg, ws).ok());
    cfg.reroutes = 2;
    const auto two = *path::path_plan::make_runtime(
        std::vector<int>{2}, *path::split_gpt_levels(model.layout(), 2, 1), 2);
    REQUIRE(!train::train_routed(model, two, theta0, docs, initial, inner, cfg, ws).ok());
  }
}
