// train/local_trainer.hpp: the trainer is the store + local_run + phases written out by hand.
#include <catch2/catch.hpp>

#include "paco/nn/gpt.hpp"
#include "paco/optim/optim.hpp"
#include "paco/outer/outer.hpp"
#include "paco/testing/token_streams.hpp"
#include "paco/train/local_trainer.hpp"

using namespace paco;

namespace {
io::token_stream stream(std::uint64_t seed) {
  return testing::synthetic_stream(seed, 3000, 5, 4);
}
std::vector<float> init_params(const nn::gpt& model) {  // init(seed 3)'s parameters
  arena<host> a(model.layout());
  model.init(a, 3);
  return {a.get(plane::param).begin(), a.get(plane::param).end()};
}
}  // namespace

TEST_CASE("local_trainer: a DiPaCo 2x2 run with a re-routing equals the run built by hand",
          "[train][local_trainer]") {
  nn::gpt model({.vocab = 64, .ctx = 16, .d = 16, .layers = 2, .heads = 2});
  const auto theta0 = init_params(model);
  const auto plan = *path::path_plan::make(path::module_grid<2>::experts({2, 2}),
                                           *path::split_gpt_levels(model.layout(), 2, 2));
  std::vector<io::token_stream> first{stream(1), stream(2), stream(3), stream(4)};
  std::vector<io::token_stream> second{stream(5), stream(6), stream(7), stream(8)};
  const train::inner_config icfg{
      .batch = 2,
      .ctx = 16,
      .steps = 3,
      .grad_clip = 1.0f,
      .schedule = {.lr = 1e-2f, .min_lr = 1e-3f, .warmup = 1, .total = 15}};
  const optim::adamw inner{.lr = 1e-2f};
  const outer::delta_options dopt{.weight_by_shard = true};

  using trainer_t = train::local_trainer<nn::gpt, optim::adamw, outer::nesterov>;
  auto t =
      trainer_t::make(model, plan, theta0, first, inner,
                      {.inner = icfg, .delta = dopt, .rounds = 5, .phases = {2, 5}, .seed = 40});
  REQUIRE(t.ok());
  int reshards = 0, rounds_seen = 0;
  std::vector<std::vector<float>> at_reshard;
  REQUIRE((*t)->run(
                  [&](int phase, const std::vector<std::vector<float>>& th) {
                    ++reshards;
                    REQUIRE(phase == 1);
                    at_reshard = th;
                    return second;
                  },
                  [&](const train::round_report&) { ++rounds_seen; })
              .ok());
  REQUIRE(reshards == 1);
  REQUIRE(rounds_seen == 5);
  REQUIRE((*t)->rounds_done() == 5);
  REQUIRE((*t)->fp32_bytes_per_worker() ==
          5.0 * double(plan.level(0).size + plan.level(1).size) * 4.0);

  // By hand: store, modules from θ0, local_run, two phases with set_shards in between.
  store::local_store<outer::nesterov> store(plan.module_table(), outer::nesterov{}, dopt);
  train::init_modules(store, plan, theta0.data());
  std::vector<train::worker_spec> ws;
  for (int w = 0; w < 4; ++w) ws.push_back({&first[std::size_t(w)], 40u + std::uint64_t(w)});
  auto run = train::local_run<nn::gpt, optim::adamw, outer::nesterov>::make(store, model, plan, ws,
                                                                            inner, icfg);
  REQUIRE(run.ok());
  REQUIRE(run->run(2).ok());
  std::vector<std::vector<float>> mid(4, theta0);
  for (int p = 0; p < 4; ++p) train::assemble_path(store, plan, p, mid[std::size_t(p)].data());
  REQUIRE(mid == at_reshard);  // reshard saw every path's parameters after round 2
  run->set_shards({&second[0], &second[1], &second[2], &second[3]});
  REQUIRE(run->run(3).ok());
  const auto got = (*t)->path_thetas();
  for (int p = 0; p < 4; ++p) {
    std::vector<float> want(theta0);
    train::assemble_path(store, plan, p, want.data());
    REQUIRE(got[std::size_t(p)] == want);  // bit-identical
  }
}

TEST_CASE("local_trainer: a wrong shard count, θ0 or phase list is an error naming it",
          "[train][local_trainer]") {
  nn::gpt model({.vocab = 64, .ctx = 16, .d = 16, .layers = 2, .heads = 2});
  arena<host> a0(model.layout());
  const std::vector<float> theta0(a0.get(plane::param).begin(), a0.get(plane::param).end());
  const auto plan = *path::path_plan::make(path::module_grid<1>::experts({1}),
                                           *path::split_gpt_levels(model.layout(), 2, 1), 2);
  using trainer_t = train::local_trainer<nn::gpt, optim::adamw, outer::nesterov>;
  const train::inner_config icfg{.batch = 2, .ctx = 16, .steps = 2};
  auto one = trainer_t::make(model, plan, theta0, {stream(1)}, {}, {.inner = icfg, .rounds = 2});
  REQUIRE(!one.ok());
  REQUIRE(one.error().message.find("1 shards for 2 workers") != std::string::npos);
  auto short_theta = trainer_t::make(model, plan, std::span(theta0).first(10),
                                     {stream(1), stream(2)}, {}, {.inner = icfg, .rounds = 2});
  REQUIRE(!short_theta.ok());
  auto phases = trainer_t::make(model, plan, theta0, {stream(1), stream(2)}, {},
                                {.inner = icfg, .rounds = 4, .phases = {3, 2, 4}});
  REQUIRE(!phases.ok());
  REQUIRE(phases.error().message.find("phase") != std::string::npos);
  auto ok = trainer_t::make(model, plan, theta0, {stream(1), stream(2)}, {},
                            {.inner = icfg, .rounds = 2});
  REQUIRE(ok.ok());
  // A reshard giving the wrong number of shards stops the run with an error.
  auto bad = trainer_t::make(model, plan, theta0, {stream(1), stream(2)}, {},
                             {.inner = icfg, .rounds = 2, .phases = {1, 2}});
  REQUIRE(bad.ok());
  auto s = (*bad)->run([&](int, const std::vector<std::vector<float>>&) {
    return std::vector<io::token_stream>{stream(3)};
  });
  REQUIRE(!s.ok());
  REQUIRE(s.error().message.find("1 shards for 2 workers") != std::string::npos);
}

TEST_CASE("local_trainer: one outer optimizer per level", "[train][local_trainer]") {
  nn::gpt model({.vocab = 64, .ctx = 16, .d = 16, .layers = 2, .heads = 2});
  arena<host> a0(model.layout());
  model.init(a0, 4);
  const std::vector<float> theta0(a0.get(plane::param).begin(), a0.get(plane::param).end());
  const auto plan = *path::path_plan::make(path::module_grid<2>::experts({2, 2}),
                                           *path::split_gpt_levels(model.layout(), 2, 2));
  REQUIRE(plan.per_level(std::vector<int>{7, 9}) == std::vector<int>{7, 7, 9, 9});
  using trainer_t = train::local_trainer<nn::gpt, optim::adamw, outer::sgd>;
  const train::inner_config icfg{.batch = 2, .ctx = 16, .steps = 2};
  // Level 0 frozen (outer lr 0), level 1 plain averaging (FedAvg: outer sgd lr 1).
  auto t = trainer_t::make(model, plan, theta0, {stream(1), stream(2), stream(3), stream(4)}, {},
                           {.inner = icfg,
                            .outer_per_level = {outer::sgd{.lr = 0.0f}, outer::sgd{.lr = 1.0f}},
                            .rounds = 2});
  REQUIRE(t.ok());
  REQUIRE((*t)->store().store().outer_optimizer(1).lr == 0.0f);
  REQUIRE((*t)->store().store().outer_optimizer(3).lr == 1.0f);
  REQUIRE((*t)->run().ok());
  const auto th = (*t)->path_thetas();
  const auto& l0 = plan.level(0);
  const auto& l1 = plan.level(1);
  for (int p = 0; p < 4; ++p) {
    const auto& x = th[std::size_t(p)];
    REQUIRE(std::equal(x.begin() + std::ptrdiff_t(l0.offset),
                       x.begin() + std::ptrdiff_t(l0.offset + l0.size),
                       theta0.begin() + std::ptrdiff_t(l0.offset)));
    REQUIRE(!std::equal(x.begin() + std::ptrdiff_t(l1.offset),
                        x.begin() + std::ptrdiff_t(l1.offset + l1.size),
                        theta0.begin() + std::ptrdiff_t(l1.offset)));
  }
  auto wrong = trainer_t::make(model, plan, theta0, {stream(1), stream(2), stream(3), stream(4)},
                               {}, {.inner = icfg, .outer_per_level = {outer::sgd{}}, .rounds = 2});
  REQUIRE(!wrong.ok());
  REQUIRE(wrong.error().message.find("1 outer optimizers for 2 levels") != std::string::npos);
}

TEST_CASE("local_trainer: outer optimizers of different types per level (outer::one_of)",
          "[train][local_trainer]") {
  nn::gpt model({.vocab = 64, .ctx = 16, .d = 16, .layers = 2, .heads = 2});
  arena<host> a0(model.layout());
  model.init(a0, 5);
  const std::vector<float> theta0(a0.get(plane::param).begin(), a0.get(plane::param).end());
  const auto plan = *path::path_plan::make(path::module_grid<2>::experts({1, 2}),
                                           *path::split_gpt_levels(model.layout(), 2, 2));
  using outer_t = outer::one_of<outer::nesterov, outer::sgd>;
  const train::inner_config icfg{.batch = 2, .ctx = 16, .steps = 3};
  // One round: every level's update depends only on the workers' first round, so each level of
  // the mixed run must equal that level of the run that uses its optimizer everywhere.
  auto run = [&](std::vector<outer_t> per_level) {
    auto t = train::local_trainer<nn::gpt, optim::adamw, outer_t>::make(
        model, plan, theta0, {stream(1), stream(2)}, {},
        {.inner = icfg, .outer_per_level = std::move(per_level), .rounds = 1});
    REQUIRE(t.ok());
    REQUIRE((*t)->run().ok());
    return (*t)->path_thetas();
  };
  const outer_t nesterov = outer::nesterov{.lr = 0.7f, .momentum = 0.9f};
  const outer_t fedavg = outer::sgd{.lr = 1.0f};
  REQUIRE(nesterov.state_size(10) == 10);
  REQUIRE(fedavg.state_size(10) == 0);
  REQUIRE(fedavg.get_if<outer::sgd>()->lr == 1.0f);
  REQUIRE(!outer_t(outer::sgd{.lr = -1.0f}).validate().ok());
  const auto mixed = run({nesterov, fedavg});
  const auto all_nesterov = run({nesterov, nesterov});
  const auto all_fedavg = run({fedavg, fedavg});
  auto same_level = [&](const std::vector<float>& x, const std::vector<float>& y, int l) {
    const auto& s = plan.level(l);
    return std::equal(x.begin() + std::ptrdiff_t(s.offset),
                      x.begin() + std::ptrdiff_t(s.offset + s.size),
                      y.begin() + std::ptrdiff_t(s.offset));
  };
  for (std::size_t p = 0; p < 2; ++p) {
    REQUIRE(same_level(mixed[p], all_nesterov[p], 0));
    REQUIRE(same_level(mixed[p], all_fedavg[p], 1));
    REQUIRE(!same_level(mixed[p], all_nesterov[p], 1));
  }
}

TEST_CASE("local_trainer: compressed pushes equal the store with set_compression run by hand",
          "[train][local_trainer]") {
  nn::gpt model({.vocab = 64, .ctx = 16, .d = 16, .layers = 1, .heads = 2});
  const auto theta0 = init_params(model);
  const auto levels = *path::split_gpt_levels(model.layout(), 1, 1);
  const auto plan = *path::path_plan::make(path::module_grid<1>::experts({1}), levels, 2);
  std::vector<io::token_stream> shards{stream(1), stream(2)};
  const train::inner_config icfg{.batch = 2, .ctx = 16, .steps = 2};
  const optim::adamw inner{.lr = 1e-2f};
  const store::compression int8{.spec = *compress::parse_compress_spec("int8")};
  using trainer_t = train::local_trainer<nn::gpt, optim::adamw, outer::nesterov>;
  auto t = trainer_t::make(model, plan, theta0, shards, inner,
                           {.inner = icfg, .rounds = 3, .seed = 9, .compression = int8});
  REQUIRE(t.ok());
  REQUIRE((*t)->store().encoded());
  REQUIRE((*t)->run().ok());

  store::local_store<outer::nesterov> store(plan.module_table(), outer::nesterov{}, {});
  train::init_modules(store, plan, theta0.data());
  REQUIRE(store.set_compression(int8, model, {levels[0]}).ok());
  const std::vector<train::worker_spec> ws{{&shards[0], 9}, {&shards[1], 10}};
  REQUIRE(train::run_local(store, model, plan, ws, inner, icfg, 3).ok());
  std::vector<float> want(theta0);
  train::assemble_path(store, plan, 0, want.data());
  REQUIRE((*t)->path_thetas()[0] == want);  // bit-identical
  for (int w = 0; w < 2; ++w) {
    REQUIRE((*t)->store().bytes_sent(w) == store.bytes_sent(w));
    REQUIRE(store.bytes_sent(w) < 3 * 4 * levels[0].size);  // int8: fewer bytes than fp32
  }
  // A compression the store cannot decode is make's error.
  const store::compression powersgd{.spec = *compress::parse_compress_spec("powersgd:2")};
  REQUIRE(!trainer_t::make(model, plan, theta0, shards, inner,
                           {.inner = icfg, .rounds = 1, .compression = powersgd})
               .ok());
}
